"""The search's pruning: necessary conditions a partial assignment must meet for the rest of a claim
to be satisfiable, so hopeless branches end early. Every bound is a superset test (a device that
might be selectable counts), and a hard error upstream's search would reach stops the bounds before
it (``errors_stop``), so pruning changes how many steps a search takes, never its answer."""

from __future__ import annotations

from typing import Any, Protocol

from allocator.checks import SHARED, DeviceChecks
from allocator.constraints import Constraint, MatchAttribute, lookup_attribute
from allocator.errors import AllocationError
from allocator.pools import DeviceEntry
from allocator.requestdata import RequestData
from allocator.state import AllocatedState

# One exclusive request still to fill, for the pruning bounds: the requests to check constraints
# against (the subrequests of a firstAvailable), the devices it needs, and the candidates that may
# take it as a mask. A plain tuple, unpacked where read: the bounds build hundreds per search, and a
# NamedTuple made them measurably slower.
Remaining = tuple[list[RequestData], int, int]


class SearchState(Protocol):
    """What the bounds read of the search in progress."""

    requests: list[list[list[RequestData]]]
    candidates: list[DeviceEntry]
    checks: DeviceChecks
    allocated: AllocatedState
    consumable: bool
    constraints: list[list[Constraint]]
    allocating_mask: int


class Pruner:
    """The bounds of one search; caches what stays true while it runs (devices allocated before it,
    candidates grouped by attribute value)."""

    def __init__(self, search: SearchState) -> None:
        self._search = search
        self._allocated_mask: int | None = None
        self._groups: dict[str, dict[tuple[str, Any], int]] = {}

    def mask(self, ci: int, rd: RequestData) -> int:
        """Candidates that are or might be selectable. A hard error (a failing selector, a capacity
        request the range arithmetic cannot represent) counts as "might" and is noted in
        ``rd.error_mask``: the search must reach it exactly where upstream's does."""
        if rd.mask is None:
            if rd.all_devices is not None:
                rd.mask = sum(1 << e.index for e in rd.all_devices)
            else:
                mask = errors = 0
                for entry in self._search.candidates:
                    try:
                        self.check_hard_errors(rd, entry)
                    except AllocationError:
                        errors |= 1 << entry.index
                        mask |= 1 << entry.index
                        continue
                    if self._search.checks.selectable(rd, entry):
                        mask |= 1 << entry.index
                rd.mask, rd.error_mask = mask, errors
        return rd.mask

    def check_hard_errors(self, rd: RequestData, entry: DeviceEntry) -> None:
        """Raise the AllocationError upstream's loop raises when it looks at this free candidate."""
        eligible = rd.eligible[entry.index]
        if eligible is None:
            eligible = self._search.checks.eligible(rd, entry)
        if eligible == SHARED:
            self._search.checks.capacity_fits(rd, entry, in_use=False)

    def errors_stop(self, ci: int, first_request: int, free: int) -> int:
        """The first request from ``first_request`` on with a hard error on a candidate it may still
        reach (``free``; an admin request reaches devices in use too), else the number of requests.
        Pruning may only rule out the requests before it: upstream gets to that request whenever
        those can be filled, and stops there with the error."""
        requests = self._search.requests[ci]
        for ri in range(first_request, len(requests)):
            for rd in requests[ri]:
                if rd.all_devices is None:
                    self.mask(ci, rd)
                    if rd.error_mask & (-1 if rd.admin else free):
                        return ri
        return len(requests)

    def free_mask(self) -> int:
        if self._allocated_mask is None:
            devices, shares = self._search.allocated.devices, self._search.allocated.capacity
            self._allocated_mask = sum(
                1 << e.index
                for e in self._search.candidates
                if e.key in devices or (e.key in shares and not self._search.checks.shareable(e))
            )
        return ~(self._allocated_mask | self._search.allocating_mask)

    def attribute_groups(self, attribute: str) -> dict[tuple[str, Any], int]:
        """Candidates by value of an attribute (as constraints look it up), as bit masks."""
        groups = self._groups.get(attribute)
        if groups is None:
            groups = {}
            for entry in self._search.candidates:
                value = lookup_attribute(entry.device, entry.key[0], attribute)
                if value is not None and not value.is_list:
                    key = (value.type, value.value)
                    groups[key] = groups.get(key, 0) | 1 << entry.index
            self._groups[attribute] = groups
        return groups

    def remaining(self, ci: int, first_request: int, stop: int, free: int) -> list[Remaining]:
        """The exclusive requests of claim ``ci`` from ``first_request`` up to ``stop``."""
        remaining: list[Remaining] = []
        for rds in self._search.requests[ci][first_request:stop]:
            if any(r.admin for r in rds):
                continue
            mask = 0
            for r in rds:
                mask |= self.mask(ci, r) & free
            remaining.append((rds, min(r.num_devices for r in rds), mask))
        return remaining

    def hopeless(self, ci: int, ri: int, rd: RequestData, di: int, start: int) -> bool:
        """True if the rest of this claim cannot be satisfied from the devices still free."""
        if rd.admin:
            return False
        free = self.free_mask()
        current = ([rd], rd.num_devices - di, ((self.mask(ci, rd) & free) >> start) << start)
        stop = self.errors_stop(ci, ri + 1, free)
        return self.bounds_fail(ci, [current, *self.remaining(ci, ri + 1, stop, free)])

    def hopeless_alone(self, ci: int) -> bool:
        """True if the claim cannot be satisfied even if no earlier claim took anything, and giving up
        the whole search skips no hard error upstream's would reach: it retries every choice of the
        earlier claims, so any error they hold counts, and this claim's up to where they may start."""
        self.free_mask()
        assert self._allocated_mask is not None
        free = ~self._allocated_mask
        remaining = self.remaining(ci, 0, self.errors_stop(ci, 0, free), free)
        if not remaining or not self.bounds_fail(ci, remaining):
            return False
        return all(self.errors_stop(j, 0, free) == len(self._search.requests[j]) for j in range(ci))

    def bounds_fail(self, ci: int, remaining: list[Remaining]) -> bool:
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
            self._search.consumable
            and any(self._search.candidates[i].device.allow_multiple_allocations for i in _bits(union))
        )
        constraints = [c for c in self._search.constraints[ci] if not c.list_semantics]
        for constraint in constraints:
            applies = [
                all(constraint.applies(r.base_name, r.sub_name) for r in rds) for rds, _, _ in remaining
            ]
            if not any(applies):
                continue
            groups = self.attribute_groups(constraint.attribute)
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
                first_needed, first_mask = under[0]
                if (
                    applies[0]
                    and max(((first_mask & g).bit_count() for g in groups.values()), default=0) < first_needed
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
        _, first_needed, first_mask = remaining[0]
        if first_mask.bit_count() < first_needed:
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
