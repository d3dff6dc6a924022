"""Explain a failed allocation: per claim and request, which check rejected how many devices."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import NamedTuple

from allocator.checks import DeviceChecks
from allocator.constraints import Constraint, DistinctAttribute, lookup_attribute
from allocator.errors import AllocationError
from allocator.model import ResourceClaim, claim_ref
from allocator.outcome import Reason, Rejection
from allocator.pools import INCOMPLETE, INVALID, DeviceEntry, NodePools
from allocator.requestdata import RequestData

# How a message says why devices were turned away, in the order messages list them (devices of other
# classes are not mentioned: they were never the request's to take).
REJECTION_PHRASES = {
    Rejection.IN_USE: "in use",
    Rejection.TAINT: "tainted",
    Rejection.COUNTERS: "without enough shared counters",
    Rejection.COMPATIBILITY_GROUPS: "sharing no compatibility group with allocated devices on a counter set",
    Rejection.CAPACITY: "without enough capacity",
    Rejection.CONSTRAINT: "failing claim constraints",
    Rejection.REQUEST_SELECTOR: "rejected by request selectors",
    Rejection.NODE: "not available on this node",
    Rejection.NODE_OPERATIONS: (
        "skipping node operations without DRAOptionalNodeOperations enabled and declared by the node"
    ),
    Rejection.BINDING_CONDITIONS: "with binding conditions (feature disabled)",
    Rejection.INCOMPLETE_POOL: "in incomplete pools",
    Rejection.GROUPS_IGNORED: "in pools with compatibility groups (DRADeviceCompatibilityGroups is off)",
    Rejection.INVALID_POOL: "in invalid pools",
}


class Explanation:
    """What explaining a failed search reads, kept by its outcome until asked (a filter over many
    nodes rarely asks): the device checks, with the attempt given back, and the prepared claims."""

    __slots__ = ("checks", "claims", "constraints", "pools", "requests")

    def __init__(
        self,
        *,
        checks: DeviceChecks,
        pools: NodePools,
        claims: Sequence[ResourceClaim],
        requests: list[list[list[RequestData]]],
        constraints: list[list[Constraint]],
    ) -> None:
        self.checks = checks
        self.pools = pools
        self.claims = claims
        self.requests = requests
        self.constraints = constraints

    def __call__(self) -> list[Reason]:
        return explain(self)


class _ClaimTotal(NamedTuple):
    ref: str
    requests: list[str]
    needed: int
    usable: set[int]  # candidate indices some request of the claim could use


def _constraint_losses(constraints: list[Constraint], rd: RequestData, usable: list[DeviceEntry]) -> int:
    """Usable devices that cannot be part of the best group any applicable constraint allows."""
    worst = 0
    for constraint in constraints:
        if not constraint.applies(rd.base_name, rd.sub_name):
            continue
        values: Counter[object] = Counter()
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
    details = [f"{reason.rejected[k]} {phrase}" for k, phrase in REJECTION_PHRASES.items()
               if reason.rejected.get(k)]
    text = f"claim {claim_ref_text}: {label}: needs {reason.needed} {noun}, {reason.matching} match"
    if reason.matching == 1:
        text += "es"
    if details:
        text += f" ({', '.join(details)})"
    return text + note


def _joint(
    claims: list[str], requests: list[str], *, needed: int, usable: int, considered: int, groups: bool
) -> Reason:
    """Every request fits on its own: say how many devices the requests need together."""
    noun = "device" if needed == 1 else "devices"
    who = f"claim {claims[0]}" if len(claims) == 1 else "claims " + ", ".join(claims)
    why = ", e.g. they draw from one counter set but share no compatibility group" if groups else ""
    message = (
        f"{who}: requests {', '.join(requests)} need {needed} {noun} together, {usable} match "
        f"(or the devices that match cannot be combined{why})"
    )
    return Reason(",".join(claims), ",".join(requests), None, needed=needed, considered=considered,
                  message=message)


def explain(failed: Explanation) -> list[Reason]:
    pools, checks = failed.pools, failed.checks
    incomplete = sum(p.device_count for p in pools.pools if p.status == INCOMPLETE and not p.groups_ignored)
    # Incomplete because slices declaring compatibility groups were ignored (the gate is off).
    groups_ignored = sum(
        p.device_count + p.groups_ignored for p in pools.pools if p.status == INCOMPLETE and p.groups_ignored
    )
    invalid = sum(p.device_count for p in pools.pools if p.status == INVALID)
    considered = len(pools.candidates) + incomplete + groups_ignored + invalid
    short: list[Reason] = []
    claim_totals: list[_ClaimTotal] = []
    for ci, claim in enumerate(failed.claims):
        claim_usable: set[int] = set()
        claim_needed = 0
        for rds in failed.requests[ci]:
            claim_needed += min(rd.num_devices for rd in rds)
            for rd in rds:
                rejected: Counter[Rejection] = Counter()
                if incomplete:
                    rejected[Rejection.INCOMPLETE_POOL] = incomplete
                if groups_ignored:
                    rejected[Rejection.GROUPS_IGNORED] = groups_ignored
                if invalid:
                    rejected[Rejection.INVALID_POOL] = invalid
                in_use_by: Counter[str] = Counter()
                usable = []
                for entry in pools.candidates:
                    why = checks.rejection(rd, entry)
                    if why is None:
                        usable.append(entry)
                        continue
                    rejected[why] += 1
                    if why == Rejection.IN_USE:
                        in_use_by[checks.allocated.owner_of(*entry.key) or "?"] += 1
                claim_usable.update(e.index for e in usable)
                lost = _constraint_losses(failed.constraints[ci], rd, usable)
                if lost:
                    rejected[Rejection.CONSTRAINT] = lost
                reason = Reason(
                    claim.key,
                    rd.base_name,
                    rd.sub_name,
                    needed=rd.num_devices,
                    considered=considered,
                    rejected=dict(rejected),
                    in_use_by=dict(in_use_by),
                )
                all_empty = rd.all_devices is not None and not rd.all_devices
                if reason.matching - lost < rd.num_devices or all_empty:
                    reason.message = _message(claim_ref(claim), rd, reason)
                    short.append(reason)
        names = [r.name for r in claim.requests]
        claim_totals.append(_ClaimTotal(claim_ref(claim), names, claim_needed, claim_usable))
    if short:
        return short
    # DRADeviceCompatibilityGroups: devices that each fit may still exclude one another.
    groups = checks.compatibility is not None and any(e.device.compatibility_groups for e in pools.candidates)
    for total in claim_totals:
        if total.needed > len(total.usable):
            short.append(
                _joint([total.ref], total.requests, needed=total.needed, usable=len(total.usable),
                       considered=considered, groups=groups)
            )
    if short:
        return short
    everything: set[int] = set().union(*(total.usable for total in claim_totals))
    return [
        _joint(
            [claim_ref(c) for c in failed.claims],
            [
                f"{c.name}/{r}"
                for c, total in zip(failed.claims, claim_totals, strict=True)
                for r in total.requests
            ],
            needed=sum(total.needed for total in claim_totals),
            usable=len(everything),
            considered=considered,
            groups=groups,
        )
    ]
