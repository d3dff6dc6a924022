"""The structured allocator: depth-first search over claims, requests and device slots.

Semantics follow upstream's incubating/experimental allocator (first solution in pool/slice/device order
wins, combinations within a request, firstAvailable with backtracking across claims). Deliberate fixes of
known upstream bugs are marked where they are implemented.
"""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Sequence
from typing import Any

from allocator import capacity as cap
from allocator import cel
from allocator.constraints import Constraint, DistinctAttribute, MatchAttribute, lookup_attribute
from allocator.errors import AllocationError, AllocationTimeout, NodeAllocationError
from allocator.features import FeatureGates
from allocator.inventory import Inventory
from allocator.model import DeviceClass, ExactRequest, Node, ResourceClaim, claim_ref
from allocator.outcome import AllocationOutcome
from allocator.pools import INCOMPLETE, INVALID, DeviceEntry, NodePools, Pool
from allocator.quantity import Quantity
from allocator.reasons import explain
from allocator.result import build_allocation
from allocator.state import AllocatedState
from allocator.taints import untolerated

MAX_RESULTS_PER_CLAIM = 32  # AllocationResultsMaxSize
FAIL, OK, MAX_SIZE = 0, 1, 2
# Upstream (1.37) compiles selectors in the allocator with the environment for stored expressions,
# which declares every device field whatever the feature gates (allowMultipleAllocations, list-type
# attributes and includes()); only validation of new objects follows the gates.
STORED_EXPRESSIONS = cel.CompileOptions(consumable_capacity=True, list_type_attributes=True)
SHARED = 2  # eligibility of a shareable device: depends on what is allocated in this attempt
_DEADLINE_CHECK_INTERVAL = 64
_MAX_SHARED_CHECKS = 256  # per node view


class _Hopeless(Exception):
    """A claim cannot be satisfied whatever earlier claims choose: the whole search fails."""

    def __init__(self, claim_index: int) -> None:
        super().__init__(claim_index)
        self.claim_index = claim_index


class RequestData:
    """One ``exactly`` request or one subrequest, prepared for the search."""

    __slots__ = (
        "admin",
        "all_devices",
        "base_name",
        "capacity_requests",
        "class_programs",
        "device_class",
        "eligible",
        "error_mask",
        "full_name",
        "mask",
        "name",
        "num_devices",
        "parent_name",
        "request",
        "request_programs",
        "selectable",
        "sub_name",
        "tolerations",
    )

    def __init__(
        self, request: ExactRequest, parent_name: str | None, device_class: DeviceClass, admin: bool
    ) -> None:
        self.request = request
        self.name = request.name
        self.parent_name = parent_name
        self.base_name = parent_name if parent_name is not None else request.name
        self.sub_name = request.name if parent_name is not None else None
        self.full_name = f"{parent_name}/{request.name}" if parent_name is not None else request.name
        self.device_class = device_class
        self.admin = admin
        self.tolerations = request.tolerations
        self.capacity_requests = request.capacity_requests
        self.num_devices = 0
        self.all_devices: list[DeviceEntry] | None = None
        self.class_programs: list[Any] | None = None  # compiled lazily, like upstream (no devices: no error)
        self.request_programs: list[Any] | None = None
        self.selectable: list[bool | None] = []
        # Per candidate: 0 not eligible, 1 eligible, SHARED eligible if its remaining capacity fits.
        self.eligible: list[int | None] = []
        self.mask: int | None = None  # candidates that may be selectable (pruning only)
        self.error_mask = 0  # candidates whose check is a hard error (set with mask)


class Chosen:
    """A device tentatively allocated to a request."""

    __slots__ = ("consumed", "counted", "entry", "multiple", "request", "share_id")

    def __init__(self, entry: DeviceEntry, request: RequestData, multiple: bool) -> None:
        self.entry = entry
        self.request = request
        self.multiple = multiple
        self.counted = False  # counters were consumed for it
        self.share_id: str | None = None
        self.consumed: dict[str, Quantity] | None = None


class Allocator:
    """Allocates claims on one node at a time. Cheap to create; reusable for many nodes and calls.

    ``prune`` enables search pruning that never changes which solution is found, but makes step counts
    differ from upstream's in searches that backtrack; pass ``prune=False`` to compare step counts.
    """

    def __init__(
        self,
        inventory: Inventory,
        allocated: AllocatedState,
        features: FeatureGates | None = None,
        *,
        deadline_s: float = 10.0,
        prune: bool = True,
    ) -> None:
        self.inventory = inventory
        self.allocated = allocated
        self.features = features or FeatureGates()
        self.deadline_s = deadline_s
        self.prune = prune
        gates = self.features
        consumable = gates.enabled("DRAConsumableCapacity")
        binding_and_status = gates.binding_and_status
        list_attributes = gates.enabled("DRAListTypeAttributes")
        fractional = gates.enabled("DRAFractionalCapacityRange")
        self._switches = (
            gates.enabled("DRAAdminAccess"),
            gates.enabled("DRAPrioritizedList"),
            gates.enabled("DRAPartitionableDevices"),
            gates.enabled("DRADeviceTaints"),
            consumable,
            binding_and_status,
            list_attributes,
            # Upstream's "stable" variant (chosen when none of these is on) has no distinctAttribute.
            consumable or binding_and_status or list_attributes or fractional,
            fractional,
        )

    def allocate(self, node: Node, claims: Sequence[ResourceClaim]) -> AllocationOutcome:
        pools = self.inventory.node_pools(node, self.features)
        return _Search(self, node, pools, list(claims)).run()


class _Search:
    """State of one allocate() call."""

    def __init__(
        self, allocator: Allocator, node: Node, pools: NodePools, claims: list[ResourceClaim]
    ) -> None:
        self.inventory = allocator.inventory
        self.allocated = allocator.allocated
        self.prune = allocator.prune
        self.deadline = time.monotonic() + allocator.deadline_s
        self.node = node
        self.pools = pools
        self.candidates = pools.candidates
        self.claims = claims
        (
            self.admin_gate,
            self.prioritized,
            self.partitionable,
            self.taints_on,
            self.consumable,
            self.binding_and_status,
            self.list_attributes,
            self.distinct_supported,
            self.fractional,
        ) = allocator._switches
        self.steps = 0
        self.backtracked = False
        # Per claim, per request: the RequestData list (one entry, or one per firstAvailable subrequest).
        self.requests: list[list[list[RequestData]]] = []
        self.first_available: list[list[bool]] = []
        self.selected_sub: list[list[int]] = []
        self.constraints: list[list[Constraint]] = []
        self.results: list[list[Chosen]] = [[] for _ in claims]
        # device key -> claim indices it is being allocated to in this attempt (exclusive use)
        self.allocating: dict[tuple[str, str, str], list[int]] = {}
        self.allocating_mask = 0
        self.allocating_capacity: dict[tuple[str, str, str], dict[str, Quantity]] = {}
        self.allocating_shares: dict[tuple[str, str, str], int] = {}
        self.available_counters: dict[tuple[str, str], dict[str, dict[str, Quantity]]] = {}
        self.consumed_counters: dict[tuple[str, str], dict[str, dict[str, Quantity]]] = {}
        self._options_key = STORED_EXPRESSIONS
        self._switch_key = allocator._switches
        self._allocated_mask: int | None = None
        self._groups: dict[str, dict[tuple[str, Any], int]] = {}
        self._checked_alone: set[int] = set()
        self._no_shortcuts: set[int] = set()  # claims the bounds below must not cut short

    # --- entry point ----------------------------------------------------------------------------------
    def run(self) -> AllocationOutcome:
        self._prepare()
        # A path holds at most the result limit of devices per claim (a larger count is refused first).
        depth = len(self.claims) + sum(
            2 + min(MAX_RESULTS_PER_CLAIM, max(rd.num_devices for rd in rds))
            for claim in self.requests
            for rds in claim
        )
        if 2 * depth + 200 > sys.getrecursionlimit():
            sys.setrecursionlimit(2 * depth + 1000)  # two frames per search step along the current path
        try:
            status = self._step(0, 0, 0, 0, False, 0)
        except _Hopeless:
            status = FAIL
            self._abandon_attempt()
        if status == OK:
            allocations = [
                build_allocation(
                    claim,
                    self.results[ci],
                    [rds[self.selected_sub[ci][ri]] for ri, rds in enumerate(self.requests[ci])],
                    self.node.name,
                    self.binding_and_status,
                )
                for ci, claim in enumerate(self.claims)
            ]
            ranks = [
                {
                    rds[0].parent_name or "": self.selected_sub[ci][ri]
                    for ri, rds in enumerate(self.requests[ci])
                    if self.first_available[ci][ri]
                }
                for ci in range(len(self.claims))
            ]
            return AllocationOutcome(True, allocations, [], self.steps, ranks)
        outcome = AllocationOutcome(False, [], lambda: explain(self), self.steps, [])
        if self.pools.has_invalid:
            # Upstream wraps this in ErrFailedAllocationOnNode: an error, but only for this node.
            raise NodeAllocationError("invalid resource pools were encountered", outcome)
        return outcome

    def _abandon_attempt(self) -> None:
        """Forget the devices tentatively chosen when the search was cut short."""
        self.allocating.clear()
        self.allocating_mask = 0
        self.allocating_capacity.clear()
        self.allocating_shares.clear()
        self.consumed_counters.clear()
        for results in self.results:
            results.clear()
        for constraints in self.constraints:
            for constraint in constraints:
                constraint.stack.clear()
                if isinstance(constraint, MatchAttribute):
                    constraint.intersections.clear()

    # --- preparation ----------------------------------------------------------------------------------
    def _prepare(self) -> None:
        for ci, claim in enumerate(self.claims):
            ref = claim_ref(claim)
            claim_requests: list[list[RequestData]] = []
            flags: list[bool] = []
            min_devices = 0
            for request in claim.requests:
                if request.first_available and not self.prioritized:
                    raise AllocationError(
                        f"claim {ref}, request {request.name}: has subrequests, but the DRAPrioritizedList "
                        "feature is disabled"
                    )
                if not self.consumable:
                    if request.exactly is not None and request.exactly.capacity_requests is not None:
                        raise AllocationError(
                            f"claim {ref}, request {request.name}: has capacity requests, but the "
                            "DRAConsumableCapacity feature is disabled"
                        )
                    for sub in request.first_available:
                        if sub.capacity_requests is not None:
                            raise AllocationError(
                                f"claim {ref}, subrequest {sub.name}: has capacity requests, but the "
                                "DRAConsumableCapacity feature is disabled"
                            )
                if request.exactly is not None:
                    rds = [self._request_data(ci, ref, request.exactly, None)]
                else:
                    rds = [self._request_data(ci, ref, sub, request.name) for sub in request.first_available]
                claim_requests.append(rds)
                flags.append(request.exactly is None)
                # Checked request by request (1.37.1), so the error names the request that overflows.
                fewest = min(rd.num_devices for rd in rds)
                if fewest > MAX_RESULTS_PER_CLAIM - min_devices:
                    raise AllocationError(
                        f"claim {ref}, request {request.name}: adding {fewest} devices exceeds the claim "
                        f"limit of {MAX_RESULTS_PER_CLAIM}, with {min_devices} already accounted for"
                    )
                min_devices += fewest
            constraints: list[Constraint] = []
            for i, constraint in enumerate(claim.constraints):
                if constraint.match_attribute:
                    constraints.append(
                        MatchAttribute(constraint.requests, constraint.match_attribute, self.list_attributes)
                    )
                elif constraint.distinct_attribute and self.distinct_supported:
                    constraints.append(
                        DistinctAttribute(
                            constraint.requests, constraint.distinct_attribute, self.list_attributes
                        )
                    )
                else:
                    raise AllocationError(
                        f"claim {ref}, constraint #{i}: empty constraint (unsupported constraint type?)"
                    )
            self.requests.append(claim_requests)
            self.first_available.append(flags)
            self.selected_sub.append([0] * len(claim_requests))
            self.constraints.append(constraints)
            if constraints and any(rd.all_devices for rds in claim_requests for rd in rds):
                # Upstream reports a constraint that rejects one of "all" devices as a hard error when
                # its search gets there: no shortcut may skip this claim's attempt.
                self._no_shortcuts.add(ci)

    def _request_data(self, ci: int, ref: str, request: ExactRequest, parent_name: str | None) -> RequestData:
        for i, selector in enumerate(request.selectors):
            if selector is None:
                raise AllocationError(
                    f"claim {ref}, request {request.name}, selector #{i}: CEL expression empty "
                    "(unsupported selector type?)"
                )
        if not self.admin_gate and request.admin_access is not None:
            raise AllocationError(
                f"claim {ref}, request {request.name}: admin access is requested, but the feature is disabled"
            )
        if not request.device_class_name:
            raise AllocationError(
                f"claim {ref}, request {request.name}: missing device class name (unsupported request type?)"
            )
        device_class = self.inventory.device_class(request.device_class_name)
        if device_class is None:
            raise AllocationError(
                f"claim {ref}, request {request.name}: could not retrieve device class "
                f"{request.device_class_name}: deviceclass.resource.k8s.io "
                f'"{request.device_class_name}" not found'
            )
        rd = RequestData(request, parent_name, device_class, self.admin_gate and bool(request.admin_access))
        capacity_key = tuple(sorted(request.capacity_requests.items())) if request.capacity_requests else None
        # Selection never changes for a node view, so requests with the same class object, selectors,
        # capacity requests and gates share per-candidate results, across allocate() calls too.
        shared_key = (device_class, request.selectors, capacity_key, self._switch_key)
        checks = self.pools.checks.get(shared_key)
        if checks is None:
            if len(self.pools.checks) >= _MAX_SHARED_CHECKS:
                self.pools.checks.clear()
            n = len(self.candidates)
            checks = self.pools.checks[shared_key] = ([None] * n, [None] * n)
        rd.selectable, rd.eligible = checks
        if request.allocation_mode == "ExactCount":
            rd.num_devices = request.count
        elif request.allocation_mode == "All":
            rd.all_devices = self._all_devices(ci, ref, rd)
            rd.num_devices = len(rd.all_devices)
        else:
            raise AllocationError(
                f"claim {ref}, request {request.name}: unsupported count mode {request.allocation_mode}"
            )
        return rd

    def _all_devices(self, ci: int, ref: str, rd: RequestData) -> list[DeviceEntry]:
        devices = []
        for pool in self.pools.pools:
            if pool.status == INCOMPLETE:
                raise AllocationError(
                    f"claim {ref}, request {rd.name}: asks for all devices, but resource pool {pool.pool_id} "
                    "is currently being updated"
                )
            if pool.status == INVALID:
                raise AllocationError(
                    f"claim {ref}, request {rd.name}: asks for all devices, but resource pool {pool.pool_id} "
                    "is currently invalid"
                )
            for entry in pool.entries:
                if not self._is_selectable(ci, rd, entry):
                    continue
                # Static capacity only (1.37.1): a matching device whose capacity is used up still
                # counts for "all", so the request fails instead of quietly taking fewer devices.
                if self.consumable and not self._capacity_fits(ci, rd, entry, in_use=False):
                    continue
                devices.append(entry)
        return devices

    # --- selection ------------------------------------------------------------------------------------
    def _compile(self, ci: int, rd: RequestData, for_class: bool) -> list[Any]:
        owner_object = rd.device_class if for_class else rd.request
        cached = owner_object.compiled.get(self._options_key)
        if cached is not None:
            return cached
        expressions = owner_object.selectors
        programs = []
        for i, expression in enumerate(expressions):
            try:
                programs.append(cel.compile(expression or "", STORED_EXPRESSIONS))
            except cel.CELError as exc:
                owner = self._selector_owner(ci, rd, for_class)
                raise AllocationError(f"{owner}: selector #{i}: CEL compile error: {exc}") from None
        owner_object.compiled[self._options_key] = programs
        return programs

    def _selector_owner(self, ci: int, rd: RequestData, for_class: bool) -> str:
        return f"class {rd.device_class.name}" if for_class else f"claim {claim_ref(self.claims[ci])}"

    def _selectors_match(self, ci: int, rd: RequestData, entry: DeviceEntry, for_class: bool) -> bool:
        programs = rd.class_programs if for_class else rd.request_programs
        if programs is None:
            programs = self._compile(ci, rd, for_class)
            if for_class:
                rd.class_programs = programs
            else:
                rd.request_programs = programs
        if not programs:
            return True
        try:
            device = entry.device.cel_device(entry.key[0])
        except ValueError as exc:  # a value the CEL input cannot represent
            raise AllocationError(
                f"{self._selector_owner(ci, rd, for_class)}: selector #0: CEL runtime error: {exc}"
            ) from None
        for i, program in enumerate(programs):
            try:
                if not program.matches(device):
                    return False
            except cel.CELError as exc:
                owner = self._selector_owner(ci, rd, for_class)
                raise AllocationError(f"{owner}: selector #{i}: CEL runtime error: {exc}") from None
        return True

    def _is_selectable(self, ci: int, rd: RequestData, entry: DeviceEntry) -> bool:
        cached = rd.selectable[entry.index]
        if cached is not None:
            return cached
        result = (
            (self.binding_and_status or not entry.device.binding_conditions)
            and self._selectors_match(ci, rd, entry, True)
            and self._selectors_match(ci, rd, entry, False)
            and entry.node_ok
        )
        rd.selectable[entry.index] = result
        return result

    def _eligible(self, ci: int, rd: RequestData, entry: DeviceEntry) -> int:
        """Everything about a candidate that does not change during the search, cached per request."""
        if not self._is_selectable(ci, rd, entry):
            result = 0
        elif not self.consumable:
            result = 1
        elif entry.device.allow_multiple_allocations:
            result = 0 if cap.undefined_requests(rd.capacity_requests, entry.device, entry.key[0]) else SHARED
        elif rd.capacity_requests is None and not entry.device.has_request_policies:
            result = 1  # an exclusive device takes its whole capacity, which always fits
        else:
            result = 1 if self._capacity_fits(ci, rd, entry) else 0
        rd.eligible[entry.index] = result
        return result

    def _capacity_fits(self, ci: int, rd: RequestData, entry: DeviceEntry, in_use: bool = True) -> bool:
        """Whether the request fits the device's capacity, minus what is allocated and being allocated
        unless ``in_use`` is off. A request the range arithmetic cannot represent is a hard error."""
        device, driver = entry.device, entry.key[0]
        if cap.undefined_requests(rd.capacity_requests, device, driver):
            return False
        multiple = device.allow_multiple_allocations
        try:
            return cap.fits(
                rd.capacity_requests,
                device,
                driver,
                multiple,
                self.allocated.capacity.get(entry.key) if in_use else None,
                self.allocating_capacity.get(entry.key) if in_use else None,
                self.fractional,
            )
        except cap.CapacityError as exc:
            raise AllocationError(
                f"claim {claim_ref(self.claims[ci])}, request {rd.full_name}: checking capacity for device "
                f"{'/'.join(entry.key)}: {exc}"
            ) from None

    # --- counters -------------------------------------------------------------------------------------
    def _pool_counters(self, pool: Pool) -> dict[str, dict[str, Quantity]]:
        # Keyed by (driver, pool): upstream keys these caches by pool name only, so two drivers with
        # equally named pools would share counters.
        pool_key = (pool.driver, pool.name)
        available = self.available_counters.get(pool_key)
        if available is None:
            available = {name: dict(counters) for name, counters in pool.counter_sets.items()}
            for device in pool.all_devices():
                if device.consumes_counters and self.allocated.is_allocated(
                    (pool.driver, pool.name, device.name)
                ):
                    for set_name, counters in device.consumes_counters:
                        for counter, value in counters.items():
                            if counter in available.get(set_name, {}):
                                available[set_name][counter] = available[set_name][counter] - value
            self.available_counters[pool_key] = available
        return available

    def _apply_counters(self, entry: DeviceEntry, sign: int) -> dict[str, dict[str, Quantity]]:
        pool_key = (entry.pool.driver, entry.pool.name)
        consumed = self.consumed_counters.setdefault(pool_key, {})
        for set_name, counters in entry.device.consumes_counters:
            totals = consumed.setdefault(set_name, {})
            for counter, value in counters.items():
                current = totals.get(counter)
                if sign > 0:
                    totals[counter] = value if current is None else current + value
                else:
                    totals[counter] = current - value  # type: ignore[operator]
        return consumed

    def _take_counters(self, entry: DeviceEntry) -> bool:
        available = self._pool_counters(entry.pool)
        consumed = self._apply_counters(entry, +1)
        for set_name, counters in available.items():
            used = consumed.get(set_name)
            if not used:
                continue
            for counter, limit in counters.items():
                amount = used.get(counter)
                if amount is not None and limit < amount:
                    self._apply_counters(entry, -1)
                    return False
        return True

    # --- one candidate --------------------------------------------------------------------------------
    def _in_use(self, entry: DeviceEntry) -> bool:
        """In use for a non-admin request: allocated, being allocated, or holding shares it cannot share."""
        key = entry.key
        if key in self.allocated.devices or self.allocating.get(key):
            return True
        return key in self.allocated.capacity and not self._shareable(entry)

    def _shareable(self, entry: DeviceEntry) -> bool:
        # Deliberate difference from upstream, which looks only at exclusive allocations: a device that
        # still holds shares (it allowed multiple allocations before, or DRAConsumableCapacity was turned
        # off) must not be handed out exclusively on top of them.
        return self.consumable and entry.device.allow_multiple_allocations

    def _allocate_device(self, ci: int, rd: RequestData, entry: DeviceEntry, must: bool) -> Chosen | None:
        device, key = entry.device, entry.key
        multiple = self.consumable and device.allow_multiple_allocations
        if rd.admin:
            if not multiple and ci in self.allocating.get(key, ()):
                return None
        elif self._in_use(entry):
            return None
        if device.consumes_counters and not self.partitionable:
            return None
        chosen = Chosen(entry, rd, multiple)
        skip_counters = multiple and (key in self.allocated.capacity or key in self.allocating_capacity)
        if device.consumes_counters and not skip_counters:
            if not self._take_counters(entry):
                return None
            chosen.counted = True
        # Upstream (issue #140436) leaked the counters taken above when a later check rejected the device;
        # every rejection below gives them back.
        if self.taints_on and entry.blocking_taints and untolerated(entry.blocking_taints, rd.tolerations):
            self._release(chosen)
            return None
        constraints = self.constraints[ci]
        for i, constraint in enumerate(constraints):
            if not constraint.add(device, key[0], rd.base_name, rd.sub_name):
                for added in reversed(constraints[:i]):
                    added.remove(rd.base_name, rd.sub_name)
                self._release(chosen)
                if must:
                    raise AllocationError(
                        f"claim {claim_ref(self.claims[ci])}, request {rd.name}: cannot add device "
                        f"{key[0]}/{key[1]}/{key[2]} because a claim constraint would not be satisfied"
                    )
                return None
        # Remaining capacity is checked after the constraints, as upstream (1.37.1) does: for "all"
        # devices a constraint failure is then the hard error even on a device that is also full.
        if multiple and not self._capacity_fits(ci, rd, entry):
            for constraint in reversed(constraints):
                constraint.remove(rd.base_name, rd.sub_name)
            self._release(chosen)
            return None
        if multiple:
            consumed = cap.consumed_capacity(rd.capacity_requests, device, key[0], self.fractional)
            chosen.consumed = consumed
            chosen.share_id = str(uuid.uuid4())
            totals = dict(self.allocating_capacity.get(key, {}))
            for name, value in consumed.items():
                totals[name] = totals[name] + value if name in totals else value
            self.allocating_capacity[key] = totals
            self.allocating_shares[key] = self.allocating_shares.get(key, 0) + 1
        else:
            users = self.allocating.get(key)
            if users is None:
                self.allocating[key] = [ci]
                self.allocating_mask |= 1 << entry.index
            else:
                users.append(ci)
        self.results[ci].append(chosen)
        return chosen

    def _release(self, chosen: Chosen) -> None:
        if chosen.counted:
            self._apply_counters(chosen.entry, -1)
            chosen.counted = False

    def _undo(self, ci: int, chosen: Chosen) -> None:
        rd, entry = chosen.request, chosen.entry
        for constraint in reversed(self.constraints[ci]):
            constraint.remove(rd.base_name, rd.sub_name)
        if chosen.multiple:
            if chosen.consumed:
                remaining = self.allocating_shares[entry.key] - 1
                if remaining:
                    totals = dict(self.allocating_capacity[entry.key])
                    for name, value in chosen.consumed.items():
                        totals[name] = totals[name] - value
                    self.allocating_capacity[entry.key] = totals
                    self.allocating_shares[entry.key] = remaining
                else:
                    del self.allocating_capacity[entry.key]
                    del self.allocating_shares[entry.key]
        else:
            users = self.allocating[entry.key]
            users.remove(ci)
            if not users:
                del self.allocating[entry.key]
                self.allocating_mask &= ~(1 << entry.index)
        # Upstream did not give back counters when undoing a shareable device (issue #140436).
        self._release(chosen)
        self.results[ci].pop()

    # --- the search -----------------------------------------------------------------------------------
    def _step(self, ci: int, ri: int, si: int, di: int, in_sub: bool, start: int) -> int:
        """Search from one position. Each turn of the loop is one step, counted like upstream's
        allocateOne invocations; moving on to the next request or claim loops instead of recursing."""
        crossed_claim = False
        while True:
            self.steps += 1
            if self.steps % _DEADLINE_CHECK_INTERVAL == 1 and time.monotonic() > self.deadline:
                raise AllocationTimeout("timed out trying to allocate devices")
            if ci >= len(self.claims):
                return OK
            claim_requests = self.requests[ci]
            entering_claim = ri == 0 and di == 0 and not in_sub
            # Upstream would retry every earlier claim before giving up, reaching their hard errors too.
            if (entering_claim and self.prune and self.backtracked and ci not in self._checked_alone
                    and ci < min(self._no_shortcuts, default=len(self.claims))):
                # Earlier claims only ever take devices away, so a claim that fails on its own always fails.
                self._checked_alone.add(ci)
                if self._hopeless_alone(ci):
                    raise _Hopeless(ci)
            if ri >= len(claim_requests):
                ci, ri, si, di, in_sub, start = ci + 1, 0, 0, 0, False, 0
                crossed_claim = True
                continue
            rds = claim_requests[ri]
            if not in_sub and self.first_available[ci][ri]:
                status = self._first_available(ci, ri, rds)
                break
            rd = rds[si]
            all_devices = rd.all_devices
            if all_devices is not None and not all_devices:
                return FAIL  # "All" needs at least one device
            if di >= rd.num_devices:
                ri, si, di, in_sub, start = ri + 1, 0, 0, False, 0
                continue
            if len(self.results[ci]) + rd.num_devices - di > MAX_RESULTS_PER_CLAIM:
                status = MAX_SIZE
                break
            if all_devices is not None:
                chosen = self._allocate_device(ci, rd, all_devices[di], True)
                if chosen is None:
                    return FAIL
                status = self._step(ci, ri, si, di + 1, in_sub, 0)
                if status != OK:
                    self._undo(ci, chosen)
                    self.backtracked = True
                break
            if self.prune:
                # Cheap bound first; the full one (selectable free devices) once the search has backtracked.
                if rd.num_devices - di > len(self.candidates) - start:
                    self._evaluate_remaining(ci, rd, start)
                    return FAIL
                if (self.backtracked and ci not in self._no_shortcuts
                        and self._hopeless(ci, ri, rd, di, start)):
                    self._evaluate_remaining(ci, rd, start)
                    return FAIL
            status = self._try_candidates(ci, ri, si, di, in_sub, start, rd)
            break
        # The result-size signal stops at a claim boundary: another choice for an earlier claim may let
        # a later claim pick a subrequest that needs fewer devices.
        return FAIL if crossed_claim and status == MAX_SIZE else status

    def _evaluate_remaining(self, ci: int, rd: RequestData, start: int) -> None:
        """Before pruning a slot that cannot be filled, check the candidates upstream's loop would still
        look at, so a failing selector is the same hard error as there (pruning must not hide it).
        The in-use test is the one _try_candidates inlines for speed."""
        eligible, allocating = rd.eligible, self.allocating
        for entry in self.candidates[start:]:
            key = entry.key
            if rd.admin:
                if ci in allocating.get(key, ()):
                    continue
            elif key in self.allocated.devices or allocating.get(key) or (
                key in self.allocated.capacity and not self._shareable(entry)
            ):
                continue
            if eligible[entry.index] is None:
                self._eligible(ci, rd, entry)

    def _first_available(self, ci: int, ri: int, rds: list[RequestData]) -> int:
        """Try the subrequests in order; MAX_SIZE only if every one of them hit the result limit."""
        all_exceeded = True
        for sub in range(len(rds)):
            status = self._step(ci, ri, sub, 0, True, 0)
            if status == MAX_SIZE:
                continue
            all_exceeded = False
            if status == OK:
                self.selected_sub[ci][ri] = sub
                return OK
        return MAX_SIZE if all_exceeded else FAIL

    def _try_candidates(
        self, ci: int, ri: int, si: int, di: int, in_sub: bool, start: int, rd: RequestData
    ) -> int:
        candidates = self.candidates
        eligible = rd.eligible
        allocated_devices = self.allocated.devices
        shares = self.allocated.capacity
        allocating = self.allocating
        admin = rd.admin
        # Devices no check can tell apart: once one failed at this slot, the others fail too.
        skip_equivalent = self.prune and not admin
        tried: set[object] = set()
        for index in range(start, len(candidates)):
            entry = candidates[index]
            key = entry.key
            if admin:
                users = allocating.get(key)
                if users and ci in users:
                    continue
            elif (
                key in allocated_devices
                or allocating.get(key)
                or (key in shares and not self._shareable(entry))
            ):
                continue
            ok = eligible[index]
            if ok is None:
                ok = self._eligible(ci, rd, entry)
            if not ok or (ok == SHARED and not self._capacity_fits(ci, rd, entry)):
                continue
            if skip_equivalent and entry.equivalence in tried:
                continue
            chosen = self._allocate_device(ci, rd, entry, False)
            if chosen is None:
                if skip_equivalent:
                    tried.add(entry.equivalence)
                continue
            status = self._step(ci, ri, si, di + 1, in_sub, index + 1)
            if status == OK:
                return OK
            self._undo(ci, chosen)
            self.backtracked = True
            if status == MAX_SIZE:
                return MAX_SIZE
            if skip_equivalent:
                tried.add(entry.equivalence)
        return FAIL

    # --- pruning --------------------------------------------------------------------------------------
    def _mask(self, ci: int, rd: RequestData) -> int:
        """Candidates that are or might be selectable. A hard error (a failing selector, a capacity
        request the range arithmetic cannot represent) counts as "might" and is noted in
        ``rd.error_mask``: the search must reach it exactly where upstream's does."""
        if rd.mask is None:
            if rd.all_devices is not None:
                rd.mask = sum(1 << e.index for e in rd.all_devices)
            else:
                mask = errors = 0
                for entry in self.candidates:
                    try:
                        self._check_hard_errors(ci, rd, entry)
                    except AllocationError:
                        errors |= 1 << entry.index
                        mask |= 1 << entry.index
                        continue
                    if self._is_selectable(ci, rd, entry):
                        mask |= 1 << entry.index
                rd.mask, rd.error_mask = mask, errors
        return rd.mask

    def _check_hard_errors(self, ci: int, rd: RequestData, entry: DeviceEntry) -> None:
        """Raise the AllocationError upstream's loop raises when it looks at this free candidate."""
        eligible = rd.eligible[entry.index]
        if eligible is None:
            eligible = self._eligible(ci, rd, entry)
        if eligible == SHARED:
            self._capacity_fits(ci, rd, entry, in_use=False)

    def _errors_stop(self, ci: int, first_request: int, free: int) -> int:
        """The first request from ``first_request`` on with a hard error on a candidate it may still
        reach (``free``; an admin request reaches devices in use too), else the number of requests.
        Pruning may only rule out the requests before it: upstream gets to that request whenever
        those can be filled, and stops there with the error."""
        requests = self.requests[ci]
        for ri in range(first_request, len(requests)):
            for rd in requests[ri]:
                if rd.all_devices is None:
                    self._mask(ci, rd)
                    if rd.error_mask & (-1 if rd.admin else free):
                        return ri
        return len(requests)

    def _free_mask(self) -> int:
        if self._allocated_mask is None:
            devices, shares = self.allocated.devices, self.allocated.capacity
            self._allocated_mask = sum(
                1 << e.index
                for e in self.candidates
                if e.key in devices or (e.key in shares and not self._shareable(e))
            )
        return ~(self._allocated_mask | self.allocating_mask)

    def _attribute_groups(self, attribute: str) -> dict[tuple[str, Any], int]:
        """Candidates by value of an attribute (as constraints look it up), as bit masks."""
        groups = self._groups.get(attribute)
        if groups is None:
            groups = {}
            for entry in self.candidates:
                value = lookup_attribute(entry.device, entry.key[0], attribute)
                if value is not None and not value.is_list:
                    key = (value.type, value.value)
                    groups[key] = groups.get(key, 0) | 1 << entry.index
            self._groups[attribute] = groups
        return groups

    def _remaining(
        self, ci: int, first_request: int, stop: int, free: int
    ) -> list[tuple[list[RequestData], int, int]]:
        """(requests to check constraints against, devices needed, candidate mask) per exclusive request
        from ``first_request`` up to ``stop``."""
        remaining = []
        for rds in self.requests[ci][first_request:stop]:
            if any(r.admin for r in rds):
                continue
            mask = 0
            for r in rds:
                mask |= self._mask(ci, r) & free
            remaining.append((rds, min(r.num_devices for r in rds), mask))
        return remaining

    def _hopeless(self, ci: int, ri: int, rd: RequestData, di: int, start: int) -> bool:
        """True if the rest of this claim cannot be satisfied from the devices still free."""
        if rd.admin:
            return False
        free = self._free_mask()
        current = ([rd], rd.num_devices - di, ((self._mask(ci, rd) & free) >> start) << start)
        stop = self._errors_stop(ci, ri + 1, free)
        return self._bounds_fail(ci, [current, *self._remaining(ci, ri + 1, stop, free)])

    def _hopeless_alone(self, ci: int) -> bool:
        """True if the claim cannot be satisfied even if no earlier claim took anything, and giving up
        the whole search skips no hard error upstream's would reach: it retries every choice of the
        earlier claims, so any error they hold counts, and this claim's up to where they may start."""
        self._free_mask()
        assert self._allocated_mask is not None
        free = ~self._allocated_mask
        remaining = self._remaining(ci, 0, self._errors_stop(ci, 0, free), free)
        if not remaining or not self._bounds_fail(ci, remaining):
            return False
        return all(self._errors_stop(j, 0, free) == len(self.requests[j]) for j in range(ci))

    def _bounds_fail(self, ci: int, remaining: list[tuple[list[RequestData], int, int]]) -> bool:
        """Necessary conditions for any solution of the remaining requests of claim ``ci``.

        The first request has enough free selectable devices (with the value a matchAttribute
        constraint has fixed, or in one value group while it is still open); all of them together have
        enough distinct devices, enough in one matchAttribute group, and enough distinct
        distinctAttribute values. The together-bounds assume exclusive use, so a shareable candidate
        disables them.
        """
        union = 0
        for _, _, mask in remaining:
            union |= mask
        exclusive = not (
            self.consumable
            and any(self.candidates[i].device.allow_multiple_allocations for i in _bits(union))
        )
        constraints = [c for c in self.constraints[ci] if not c.list_semantics]
        for constraint in constraints:
            applies = [
                all(constraint.applies(r.base_name, r.sub_name) for r in rds) for rds, _, _ in remaining
            ]
            if not any(applies):
                continue
            groups = self._attribute_groups(constraint.attribute)
            if isinstance(constraint, MatchAttribute):
                if constraint.stack:
                    first = constraint.stack[0]
                    allowed = groups.get((first.type, first.value), 0)
                    remaining = [
                        (rds, needed, mask & allowed if a else mask)
                        for (rds, needed, mask), a in zip(remaining, applies, strict=True)
                    ]
                    continue
                under = [(needed, mask) for (_, needed, mask), a in zip(remaining, applies, strict=True) if a]
                if (
                    applies[0]
                    and max(((under[0][1] & g).bit_count() for g in groups.values()), default=0)
                    < (under[0][0])
                ):
                    return True
                if exclusive:
                    total = sum(needed for needed, _ in under)
                    together = 0
                    for _, mask in under:
                        together |= mask
                    if max(((together & g).bit_count() for g in groups.values()), default=0) < total:
                        return True
            elif exclusive:
                taken = {(v.type, v.value) for v in constraint.stack}
                under = [(needed, mask) for (_, needed, mask), a in zip(remaining, applies, strict=True) if a]
                together = 0
                for _, mask in under:
                    together |= mask
                values = sum(1 for key, g in groups.items() if key not in taken and together & g)
                if values < sum(needed for needed, _ in under):
                    return True
        if remaining[0][2].bit_count() < remaining[0][1]:
            return True
        if not exclusive or len(remaining) == 1:
            return False
        union = 0
        for _, _, mask in remaining:
            union |= mask
        return union.bit_count() < sum(needed for _, needed, _ in remaining)


def _bits(mask: int) -> list[int]:
    result = []
    while mask:
        low = mask & -mask
        result.append(low.bit_length() - 1)
        mask ^= low
    return result
