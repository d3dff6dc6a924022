"""Explain a failed allocation: per claim and request, which check rejected how many devices."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from allocator import capacity as cap
from allocator.constraints import DistinctAttribute, lookup_attribute
from allocator.errors import AllocationError
from allocator.model import claim_ref
from allocator.outcome import Reason
from allocator.pools import INCOMPLETE, INVALID, DeviceEntry
from allocator.taints import untolerated

if TYPE_CHECKING:
    from allocator.search import RequestData, _Search

_PHRASES = {  # in the order messages list them
    "in use": "in use",
    "taint": "tainted",
    "counters": "without enough shared counters",
    "capacity": "without enough capacity",
    "constraint": "failing claim constraints",
    "request selector": "rejected by request selectors",
    "node": "not available on this node",
    "node operations": (
        "skipping node operations without DRAOptionalNodeOperations enabled and declared by the node"
    ),
    "binding conditions": "with binding conditions (feature disabled)",
    "incomplete pool": "in incomplete pools",
    "invalid pool": "in invalid pools",
}


def _counters_short(search: _Search, entry: DeviceEntry) -> bool:
    """Would the device exceed its pool's counters given only what is already allocated?"""
    if not entry.device.consumes_counters:
        return False
    if not search.partitionable:
        return True
    available = search._pool_counters(entry.pool)
    for set_name, counters in entry.device.consumes_counters:
        for counter, value in counters.items():
            if available[set_name][counter] < value:
                return True
    return False


def _selection_rejection(search: _Search, ci: int, rd: RequestData, entry: DeviceEntry) -> str | None:
    if entry.device.binding_conditions and not search.binding_and_status:
        return "binding conditions"
    try:
        if not search._selectors_match(ci, rd, entry, True):
            return "class selector"
    except AllocationError:
        return "class selector"
    try:
        if not search._selectors_match(ci, rd, entry, False):
            return "request selector"
    except AllocationError:
        return "request selector"
    if not entry.node_ok:
        return "node"
    return None


def _rejection(search: _Search, ci: int, rd: RequestData, entry: DeviceEntry) -> str | None:
    device = entry.device
    if rd.selectable[entry.index] is not True:  # the search already knows when it is selectable
        why = _selection_rejection(search, ci, rd, entry)
        if why is not None:
            return why
    if not rd.admin and search._in_use(entry):
        return "in use"
    if entry.slice.skip_node_operations and not search.skipping_usable:
        return "node operations"
    if search.taints_on and entry.blocking_taints and untolerated(entry.blocking_taints, rd.tolerations):
        return "taint"
    skip_counters = (
        search.consumable and device.allow_multiple_allocations and entry.key in search.allocated.capacity
    )
    if not skip_counters and _counters_short(search, entry):
        return "counters"
    if search.consumable and (
        cap.undefined_requests(rd.capacity_requests, device, entry.key[0])
        or not _capacity_fits(search, rd, entry)
    ):
        return "capacity"
    return None


def _capacity_fits(search: _Search, rd: RequestData, entry: DeviceEntry) -> bool:
    device = entry.device
    try:
        return cap.fits(rd.capacity_requests, device, entry.key[0], device.allow_multiple_allocations,
                        search.allocated.capacity.get(entry.key), None, search.fractional)
    except cap.CapacityError:
        return False  # the search reports it as an error; an explanation just counts the device out


def _constraint_losses(search: _Search, ci: int, rd: RequestData, usable: list[DeviceEntry]) -> int:
    """Usable devices that cannot be part of the best group any applicable constraint allows."""
    worst = 0
    for constraint in search.constraints[ci]:
        if not constraint.applies(rd.base_name, rd.sub_name):
            continue
        values = Counter()
        for entry in usable:
            try:
                value = (rd.derived.lookup(entry.device, entry.key, constraint.attribute) if rd.derived
                         else lookup_attribute(entry.device, entry.key[0], constraint.attribute))
            except AllocationError:  # a failing derived attribute: the search reports it
                value = None
            if value is not None:
                values[value] += 1
        best = len(values) if isinstance(constraint, DistinctAttribute) else max(values.values(), default=0)
        worst = max(worst, len(usable) - best)
    return worst


def _message(claim_ref_text: str, rd: RequestData, reason: Reason, note: str = "") -> str:
    label = f"request {rd.base_name}" + (f", subrequest {rd.sub_name}" if rd.sub_name else "")
    noun = "device" if reason.needed == 1 else "devices"
    details = [f"{reason.rejected[k]} {_PHRASES[k]}" for k in _PHRASES if reason.rejected.get(k)]
    text = f"claim {claim_ref_text}: {label}: needs {reason.needed} {noun}, {reason.matching} match"
    if reason.matching == 1:
        text += "es"
    if details:
        text += f" ({', '.join(details)})"
    return text + note


def _joint(claims: list[str], requests: list[str], needed: int, usable: int, considered: int) -> Reason:
    """Every request fits on its own: say how many devices the requests need together."""
    noun = "device" if needed == 1 else "devices"
    who = f"claim {claims[0]}" if len(claims) == 1 else "claims " + ", ".join(claims)
    message = (
        f"{who}: requests {', '.join(requests)} need {needed} {noun} together, {usable} match "
        "(or the devices that match cannot be combined)"
    )
    return Reason(",".join(claims), ",".join(requests), None, needed, considered, {}, {}, message)


def explain(search: _Search) -> list[Reason]:
    pools = search.pools
    incomplete = sum(p.device_count for p in pools.pools if p.status == INCOMPLETE)
    invalid = sum(p.device_count for p in pools.pools if p.status == INVALID)
    considered = len(search.candidates) + incomplete + invalid
    short: list[Reason] = []
    claim_totals: list[tuple[str, list[str], int, set[int]]] = []
    for ci, claim in enumerate(search.claims):
        claim_usable: set[int] = set()
        claim_needed = 0
        for rds in search.requests[ci]:
            claim_needed += min(rd.num_devices for rd in rds)
            for rd in rds:
                rejected: Counter[str] = Counter()
                if incomplete:
                    rejected["incomplete pool"] = incomplete
                if invalid:
                    rejected["invalid pool"] = invalid
                in_use_by: Counter[str] = Counter()
                usable = []
                for entry in search.candidates:
                    why = _rejection(search, ci, rd, entry)
                    if why is None:
                        usable.append(entry)
                        continue
                    rejected[why] += 1
                    if why == "in use":
                        in_use_by[search.allocated.owner_of(*entry.key) or "?"] += 1
                claim_usable.update(e.index for e in usable)
                lost = _constraint_losses(search, ci, rd, usable)
                if lost:
                    rejected["constraint"] = lost
                reason = Reason(
                    claim.key,
                    rd.base_name,
                    rd.sub_name,
                    rd.num_devices,
                    considered,
                    dict(rejected),
                    dict(in_use_by),
                )
                all_empty = rd.all_devices is not None and not rd.all_devices
                if reason.matching - lost < rd.num_devices or all_empty:
                    reason.message = _message(claim_ref(claim), rd, reason)
                    short.append(reason)
        names = [r.name for r in claim.requests]
        claim_totals.append((claim_ref(claim), names, claim_needed, claim_usable))
    if short:
        return short
    for name, requests, needed, usable in claim_totals:
        if needed > len(usable):
            short.append(_joint([name], requests, needed, len(usable), considered))
    if short:
        return short
    everything = set().union(*(u for *_, u in claim_totals)) if claim_totals else set()
    return [
        _joint(
            [claim_ref(c) for c in search.claims],
            [
                f"{c.name}/{r}"
                for c, (_, reqs, _, _) in zip(search.claims, claim_totals, strict=True)
                for r in reqs
            ],
            sum(n for _, _, n, _ in claim_totals),
            len(everything),
            considered,
        )
    ]
