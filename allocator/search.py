"""The structured allocator: depth-first search over claims, requests and device slots.

Semantics follow upstream's incubating/experimental allocator (first solution in pool/slice/device order
wins, combinations within a request, firstAvailable with backtracking across claims). Deliberate fixes of
known upstream bugs are marked where they are implemented. The claims are prepared in preparation.py,
each device is checked by checks.py (which the explanation of a failure, reasons.py, uses too).
"""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Sequence

from allocator import capacity as cap
from allocator.checks import SHARED, DeviceChecks, Switches
from allocator.constraints import MatchAttribute
from allocator.errors import AllocationError, AllocationTimeout, NodeAllocationError
from allocator.features import FeatureGates
from allocator.inventory import Inventory
from allocator.model import Node, ResourceClaim
from allocator.outcome import AllocationOutcome
from allocator.pools import DeviceEntry, DeviceKey, NodePools
from allocator.preparation import MAX_RESULTS_PER_CLAIM, prepare
from allocator.pruning import Pruner
from allocator.reasons import Explanation
from allocator.requestdata import Chosen, RequestData
from allocator.result import build_allocation
from allocator.state import AllocatedState

FAIL, OK, MAX_SIZE = 0, 1, 2
_DEADLINE_CHECK_INTERVAL = 64


class _Hopeless(Exception):
    """A claim cannot be satisfied whatever earlier claims choose: the whole search fails."""

    def __init__(self, claim_index: int) -> None:
        super().__init__(claim_index)
        self.claim_index = claim_index




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
        self.switches = Switches.of(self.features)

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
        self.switches = switches = allocator.switches
        self.consumable = switches.consumable
        self.checks = checks = DeviceChecks(allocator.allocated, switches, node)
        prepared = prepare(claims, inventory=self.inventory, pools=pools, checks=checks, switches=switches)
        self.requests = prepared.requests
        self.first_available = prepared.first_available
        self.constraints = prepared.constraints
        self._no_shortcuts = prepared.no_shortcuts
        self.selected_sub = [[0] * len(claim_requests) for claim_requests in self.requests]
        self.steps = 0
        self.backtracked = False
        self.results: list[list[Chosen]] = [[] for _ in claims]
        # The attempt's bookkeeping lives with the checks that read it; the search changes it.
        self.allocating = checks.allocating
        self.allocating_capacity = checks.allocating_capacity
        self.allocating_mask = 0  # devices in self.allocating, as bits of their candidate index
        self.allocating_shares: dict[DeviceKey, int] = {}
        self._checked_alone: set[int] = set()
        self.pruner = Pruner(self)

    # --- entry point ----------------------------------------------------------------------------------
    def run(self) -> AllocationOutcome:
        # A path holds at most the result limit of devices per claim (a larger count is refused first).
        depth = len(self.claims) + sum(
            2 + min(MAX_RESULTS_PER_CLAIM, max(rd.num_devices for rd in rds))
            for claim in self.requests
            for rds in claim
        )
        if 2 * depth + 200 > sys.getrecursionlimit():
            sys.setrecursionlimit(2 * depth + 1000)  # two frames per search step along the current path
        try:
            status = self._step(0, 0, 0, 0, in_sub=False, start=0)
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
                    binding_and_status=self.switches.binding_and_status,
                    skipped_operations=self.switches.optional_node_operations,
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
            return AllocationOutcome(success=True, allocations=allocations, reasons=[], steps=self.steps,
                                     subrequest_ranks=ranks)
        # The explanation keeps what it reads, not this search.
        explanation = Explanation(
            checks=self.checks,
            pools=self.pools,
            claims=self.claims,
            requests=self.requests,
            constraints=self.constraints,
        )
        outcome = AllocationOutcome(success=False, allocations=[], reasons=explanation, steps=self.steps,
                                    subrequest_ranks=[])
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
        self.checks.consumed_counters.clear()
        if self.checks.compatibility is not None:
            self.checks.compatibility.clear()
        for results in self.results:
            results.clear()
        for constraints in self.constraints:
            for constraint in constraints:
                constraint.stack.clear()
                if isinstance(constraint, MatchAttribute):
                    constraint.intersections.clear()

    # --- one candidate --------------------------------------------------------------------------------
    def _allocate_device(self, ci: int, rd: RequestData, entry: DeviceEntry, *, must: bool) -> Chosen | None:
        """Take a selectable device for the request if admission, the claim's constraints and
        capacity allow (the order of checks.py); None if not."""
        device, key = entry.device, entry.key
        chosen = Chosen(entry, rd, multiple=self.consumable and device.allow_multiple_allocations)
        if self.checks.admit(chosen) is not None:
            return None
        # Upstream (issue #140436) leaked the counters admission took when a later check rejected the
        # device; every rejection below gives them back.
        constraints = self.constraints[ci]
        lookup = rd.derived.for_device(device, key) if rd.derived is not None else None
        for i, constraint in enumerate(constraints):
            # A derived attribute that fails raises AllocationError: the whole search stops.
            if not constraint.add(device, key[0], rd.base_name, rd.sub_name, lookup):
                for added in reversed(constraints[:i]):
                    added.remove(rd.base_name, rd.sub_name)
                self.checks.release(chosen)
                if must:
                    raise AllocationError(
                        f"claim {rd.claim_ref}, request {rd.name}: cannot add device "
                        f"{key[0]}/{key[1]}/{key[2]} because a claim constraint would not be satisfied"
                    )
                return None
        # Remaining capacity is checked after the constraints, as upstream (1.37.1) does: for "all"
        # devices a constraint failure is then the hard error even on a device that is also full.
        multiple = chosen.multiple
        if multiple and not self.checks.capacity_fits(rd, entry):
            for constraint in reversed(constraints):
                constraint.remove(rd.base_name, rd.sub_name)
            self.checks.release(chosen)
            return None
        if multiple:
            consumed = cap.consumed_capacity(rd.capacity_requests, device, key[0],
                                             fractional=self.switches.fractional)
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
        self.checks.release(chosen)
        self.results[ci].pop()

    # --- the search -----------------------------------------------------------------------------------
    def _step(self, ci: int, ri: int, si: int, di: int, *, in_sub: bool, start: int) -> int:
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
                if self.pruner.hopeless_alone(ci):
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
                chosen = self._allocate_device(ci, rd, all_devices[di], must=True)
                if chosen is None:
                    return FAIL
                status = self._step(ci, ri, si, di + 1, in_sub=in_sub, start=0)
                if status != OK:
                    self._undo(ci, chosen)
                    self.backtracked = True
                break
            if self.prune and ci not in self._no_shortcuts:
                # Cheap bound first; the full one (selectable free devices) once the search has backtracked.
                if rd.num_devices - di > len(self.candidates) - start:
                    self._evaluate_remaining(ci, rd, start)
                    return FAIL
                if self.backtracked and self.pruner.hopeless(ci, ri, rd, di, start):
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
                key in self.allocated.capacity and not self.checks.shareable(entry)
            ):
                continue
            if eligible[entry.index] is None:
                self.checks.eligible(rd, entry)

    def _first_available(self, ci: int, ri: int, rds: list[RequestData]) -> int:
        """Try the subrequests in order; MAX_SIZE only if every one of them hit the result limit."""
        all_exceeded = True
        for sub in range(len(rds)):
            status = self._step(ci, ri, sub, 0, in_sub=True, start=0)
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
                or (key in shares and not self.checks.shareable(entry))
            ):
                continue
            ok = eligible[index]
            if ok is None:
                ok = self.checks.eligible(rd, entry)
            if not ok or (ok == SHARED and not self.checks.capacity_fits(rd, entry)):
                continue
            if skip_equivalent and entry.equivalence in tried:
                continue
            chosen = self._allocate_device(ci, rd, entry, must=False)
            if chosen is None:
                if skip_equivalent:
                    tried.add(entry.equivalence)
                continue
            status = self._step(ci, ri, si, di + 1, in_sub=in_sub, start=index + 1)
            if status == OK:
                return OK
            self._undo(ci, chosen)
            self.backtracked = True
            if status == MAX_SIZE:
                return MAX_SIZE
            if skip_equivalent:
                tried.add(entry.equivalence)
        return FAIL
