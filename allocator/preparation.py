"""Turn the claims of one allocate() call into what the search walks: a RequestData per request or
subrequest, and the claims' constraints. Every error a claim can have on its own is raised here."""

from __future__ import annotations

from dataclasses import dataclass, field

from allocator.checks import STORED_EXPRESSIONS, DeviceChecks, Switches
from allocator.constraints import Constraint, DistinctAttribute, MatchAttribute
from allocator.derived import DerivedAttributes, Values
from allocator.errors import AllocationError
from allocator.inventory import Inventory
from allocator.model import ExactRequest, ResourceClaim, claim_ref
from allocator.pools import INCOMPLETE, INVALID, DeviceEntry, NodePools
from allocator.requestdata import RequestData

MAX_RESULTS_PER_CLAIM = 32  # AllocationResultsMaxSize
_MAX_SHARED_CHECKS = 256  # per node view


@dataclass
class PreparedClaims:
    """Per claim: per request, its RequestData (one, or one per firstAvailable subrequest)."""

    requests: list[list[list[RequestData]]] = field(default_factory=list)
    first_available: list[list[bool]] = field(default_factory=list)  # per claim, per request
    constraints: list[list[Constraint]] = field(default_factory=list)  # per claim
    no_shortcuts: set[int] = field(default_factory=set)  # claims the search's bounds must not cut short
    derived_values: Values = field(default_factory=dict)  # derived attributes evaluated in this call


def prepare(
    claims: list[ResourceClaim],
    *,
    inventory: Inventory,
    pools: NodePools,
    checks: DeviceChecks,
    switches: Switches,
) -> PreparedClaims:
    prepared = PreparedClaims()
    for ci, claim in enumerate(claims):
        ref = claim_ref(claim)
        claim_requests: list[list[RequestData]] = []
        flags: list[bool] = []
        min_devices = 0
        context = _Context(
            inventory=inventory,
            pools=pools,
            checks=checks,
            switches=switches,
            claim_index=ci,
            ref=ref,
            derived_values=prepared.derived_values,
        )
        for request in claim.requests:
            if request.first_available and not switches.prioritized_list:
                raise AllocationError(
                    f"claim {ref}, request {request.name}: has subrequests, but the DRAPrioritizedList "
                    "feature is disabled"
                )
            if not switches.consumable:
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
                rds = [context.request_data(request.exactly, None)]
            else:
                rds = [context.request_data(sub, request.name) for sub in request.first_available]
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
                    MatchAttribute(constraint.requests, constraint.match_attribute,
                                   list_semantics=switches.list_attributes)
                )
            elif constraint.distinct_attribute and switches.distinct_attribute:
                constraints.append(
                    DistinctAttribute(
                        constraint.requests, constraint.distinct_attribute,
                        list_semantics=switches.list_attributes,
                    )
                )
            else:
                raise AllocationError(
                    f"claim {ref}, constraint #{i}: empty constraint (unsupported constraint type?)"
                )
        prepared.requests.append(claim_requests)
        prepared.first_available.append(flags)
        prepared.constraints.append(constraints)
        if constraints and any(rd.all_devices for rds in claim_requests for rd in rds):
            # Upstream reports a constraint that rejects one of "all" devices as a hard error when
            # its search gets there: no shortcut may skip this claim's attempt.
            prepared.no_shortcuts.add(ci)
        derived = {n for rds in claim_requests for rd in rds if rd.derived for n in rd.derived.names}
        if not derived.isdisjoint(c.attribute for c in constraints):
            # Upstream evaluates derived attributes (which may fail) on every device its search tries:
            # so must ours, and value groups of the device's own attribute would bound it wrongly.
            prepared.no_shortcuts.add(ci)
    return prepared


class _Context:
    """What preparing one claim's requests needs."""

    __slots__ = ("checks", "claim_index", "derived_values", "inventory", "pools", "ref", "switches")

    def __init__(
        self,
        *,
        inventory: Inventory,
        pools: NodePools,
        checks: DeviceChecks,
        switches: Switches,
        claim_index: int,
        ref: str,
        derived_values: Values,
    ) -> None:
        self.inventory = inventory
        self.derived_values = derived_values
        self.pools = pools
        self.checks = checks
        self.switches = switches
        self.claim_index = claim_index
        self.ref = ref

    def request_data(self, request: ExactRequest, parent_name: str | None) -> RequestData:
        ref, switches = self.ref, self.switches
        if request.derived_attributes and not switches.derived_attributes:
            # Refused rather than ignored: the constraints would silently compare something else.
            raise AllocationError(
                f"claim {ref}, request {request.name}: cannot handle request with derived attributes, "
                "the feature is disabled"
            )
        for i, selector in enumerate(request.selectors):
            if selector is None:
                raise AllocationError(
                    f"claim {ref}, request {request.name}, selector #{i}: CEL expression empty "
                    "(unsupported selector type?)"
                )
        if not switches.admin_access and request.admin_access is not None:
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
        rd = RequestData(
            request,
            claim_index=self.claim_index,
            claim_ref=ref,
            parent_name=parent_name,
            device_class=device_class,
            admin=switches.admin_access and bool(request.admin_access),
        )
        if request.derived_attributes:
            rd.derived = DerivedAttributes(
                request.derived_attributes, STORED_EXPRESSIONS, self.derived_values
            )
        capacity_key = tuple(sorted(request.capacity_requests.items())) if request.capacity_requests else None
        # Selection never changes for a node view, so requests with the same class object, selectors,
        # capacity requests and gates share per-candidate results, across allocate() calls too.
        shared_key = (device_class, request.selectors, capacity_key, switches)
        checks = self.pools.checks
        if checks is None:
            checks = self.pools.checks = {}
        shared = checks.get(shared_key)
        if shared is None:
            if len(checks) >= _MAX_SHARED_CHECKS:
                checks.clear()
            n = len(self.pools.candidates)
            shared = checks[shared_key] = ([None] * n, [None] * n)
        rd.selectable, rd.eligible = shared
        if request.allocation_mode == "ExactCount":
            rd.num_devices = request.count
        elif request.allocation_mode == "All":
            rd.all_devices = self._all_devices(rd)
            rd.num_devices = len(rd.all_devices)
        else:
            raise AllocationError(
                f"claim {ref}, request {request.name}: unsupported count mode {request.allocation_mode}"
            )
        return rd

    def _all_devices(self, rd: RequestData) -> list[DeviceEntry]:
        devices = []
        for pool in self.pools.pools:
            if pool.status == INCOMPLETE:
                raise AllocationError(
                    f"claim {self.ref}, request {rd.name}: asks for all devices, but resource pool "
                    f"{pool.pool_id} is currently being updated"
                )
            if pool.status == INVALID:
                raise AllocationError(
                    f"claim {self.ref}, request {rd.name}: asks for all devices, but resource pool "
                    f"{pool.pool_id} is currently invalid"
                )
            for entry in pool.entries:
                if not self.checks.selectable(rd, entry):
                    continue
                # Static capacity only (1.37.1): a matching device whose capacity is used up still
                # counts for "all", so the request fails instead of quietly taking fewer devices.
                if self.checks.consumable and not self.checks.capacity_fits(rd, entry, in_use=False):
                    continue
                devices.append(entry)
        return devices
