"""Headroom: how many more copies of a set of claims (one pod's) the allocator places on a node, and the
free devices left that the claims could have used by kind but cannot.

The copies are placed as the scheduler would place that many pods arriving one after another: each
is the allocator's own first solution against the devices in use, the earlier copies' included. That
is not always the most that could fit (a different choice for an early copy can leave room for one
more), but it is what scheduling them now would do.

A device left free after the last copy is *stranded* for the claims when some request's class and
selectors accept it but it cannot be used: it carries a taint the request does not tolerate
(`taint`), its shared counters are used up (`counters`), too little capacity is left (`capacity`),
the node does not support its node operations (`node operations`), it shares no compatibility group
with devices in use (`compatibility groups`), or, usable on its own, too few such devices are left
(`too few`) or they cannot satisfy the claims' constraints together (`constraint`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from allocator.errors import AllocationError
from allocator.likeness import Likeness, node_devices
from allocator.model import Node, ResourceClaim
from allocator.outcome import AllocationOutcome, Rejection
from allocator.pools import COMPLETE, NodePools
from allocator.reasons import Explanation
from allocator.search import Allocator

# Rejections that say the device is not of the claims' kind at all: not stranded, just not wanted.
_NOT_WANTED = frozenset({Rejection.CLASS_SELECTOR, Rejection.REQUEST_SELECTOR, Rejection.NODE,
                         Rejection.BINDING_CONDITIONS, Rejection.IN_USE})
TOO_FEW = "too few"
CONSTRAINT = "constraint"
# Copies placed on one node at most: a claim that takes no device exclusively (admin access, shares of
# a device with room for many) could otherwise be placed forever.
MAX_COPIES = 1_000


@dataclass(frozen=True)
class Stranded:
    driver: str
    pool: str
    device: str
    reason: str


@dataclass
class NodeHeadroom:
    node: str
    count: int
    stranded: list[Stranded] = field(default_factory=list)
    capped: bool = False  # MAX_COPIES reached: more may fit
    error: str = ""       # the search failed with an error (a selector's CEL runtime error, ...)


def fill(allocator: Allocator, node: Node, claims: Sequence[ResourceClaim], *, prefix: str,
         limit: int = MAX_COPIES) -> NodeHeadroom:
    """Place copies of `claims` on `node` until they no longer fit. Each copy's devices are recorded in
    `allocator.allocated` (under uids starting with `prefix`), so a later call sees them in use: the
    caller passes a state of its own."""
    result = NodeHeadroom(node.name, 0)
    outcome: AllocationOutcome | None = None
    while result.count < limit:
        try:
            outcome = allocator.allocate(node, claims)
        except AllocationError as error:
            result.error = str(error)
            return result
        if not outcome.success:
            break
        for index, (claim, allocation) in enumerate(zip(claims, outcome.allocations, strict=True)):
            allocator.allocated.add_raw_allocation(f"{prefix}{result.count}/{index}", claim.key, allocation)
        result.count += 1
    else:
        result.capped = True
        return result
    if outcome is not None and not outcome.success:
        result.stranded = stranded(outcome, claims)
    return result


def stranded(failed: AllocationOutcome, claims: Sequence[ResourceClaim]) -> list[Stranded]:
    """The free devices of a failed search's node that some request wants by kind but cannot use."""
    explanation = failed.explanation
    if not isinstance(explanation, Explanation):
        return []
    checks = explanation.checks
    found: list[Stranded] = []
    usable: list[tuple[str, str, str]] = []
    needed = sum(min(rd.num_devices for rd in rds) for claim in explanation.requests for rds in claim)
    for entry in explanation.pools.candidates:
        best: Rejection | str | None = "unwanted"
        for claim_requests in explanation.requests:
            for rds in claim_requests:
                for rd in rds:
                    why = checks.rejection(rd, entry)
                    if why is None:
                        best = None
                        break
                    if why not in _NOT_WANTED and best == "unwanted":
                        best = why
                if best is None:
                    break
            if best is None:
                break
        driver, pool, device = entry.key
        if best is None:
            usable.append(entry.key)
        elif best != "unwanted":
            found.append(Stranded(driver, pool, device, str(best)))
    constrained = any(explanation.constraints)
    reason = CONSTRAINT if constrained and len(usable) >= needed else TOO_FEW
    found.extend(Stranded(*key, reason) for key in usable)
    found.sort(key=lambda s: (s.driver, s.pool, s.device))
    return found


def local_likeness(node_name: str, pools: NodePools) -> Likeness | None:
    """`allocator.likeness` for headroom, which also takes pools with shared counters: when every device
    of every pool the node sees is the node's own, what the counters have left follows from which of
    those devices are in use, so two nodes equal here, with the same devices in use, fill alike."""
    drivers = [pool.driver for pool in pools.pools]
    if not pools.pools or len(set(drivers)) != len(drivers):
        return None
    parts: list[object] = []
    for pool in pools.pools:
        if pool.status != COMPLETE or pool.devices_not_targeting or not pool.entries:
            return None
        devices = node_devices(node_name, pool)
        if devices is None:
            return None
        counters = tuple(sorted((name, tuple(sorted((k, str(v)) for k, v in amounts.items())))
                                for name, amounts in pool.counter_sets.items()))
        parts.append((pool.driver, pool.has_binding_conditions, tuple(devices), counters))
    return tuple(parts)
