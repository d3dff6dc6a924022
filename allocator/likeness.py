"""When two nodes are alike for the search, and the outcome of one rewritten for the other.

A search on a node reads the node's pools (`NodePools`), the devices in use and the claims and classes;
of the node itself only its name and labels (node selection of slices and devices, and the node
selector of an allocation). For a node whose pools only that node sees, the labels play no part, and
two such nodes whose pools hold the same devices in the same order search alike: with the same
devices in use and the same claims and classes, the search takes the same devices, and only the pool
and node names of the allocation differ. `likeness` describes a node's side of that (None when the
node is not of that kind), `declared_features` and `devices_in_use` the rest, and `moved_to` rewrites
an outcome found on one node for its twin.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from allocator.model import Node
from allocator.outcome import AllocationOutcome
from allocator.pools import COMPLETE, NodePools, Pool
from allocator.state import AllocatedState

Likeness = tuple[object, ...]


def likeness(node_name: str, pools: NodePools) -> Likeness | None:
    """What a search on node `node_name` reads of its pools besides the devices in use (in
    `pools.candidates` order), without pool or node names; None when the node's outcomes cannot be moved
    to a twin. Two nodes with equal likeness and equal `declared_features` search alike.

    Only nodes whose pools they alone see: every pool complete, each slice published for this node by
    name (so labels play no part, and the allocation pins the node by name), one pool per driver (so
    pools keep their order whatever their names), no devices of the pool elsewhere and no counter sets
    (what counters have left depends on devices in use on other nodes), no device allowing multiple
    allocations (its remaining capacity is more than "in use")."""
    drivers = [pool.driver for pool in pools.pools]
    if len(set(drivers)) != len(drivers):
        return None
    parts: list[object] = []
    for pool in pools.pools:
        if pool.status != COMPLETE or pool.devices_not_targeting or pool.counter_sets:
            return None
        devices = node_devices(node_name, pool)
        if devices is None:
            return None
        parts.append((pool.driver, pool.has_binding_conditions, devices))
    return _interned(tuple(parts))


# Alike nodes have equal likenesses, and every node's view keeps its own: one tuple for all of them.
# Bounded: emptied when full, so a cluster of unique nodes cannot grow it for ever.
_LIKENESSES: dict[Likeness, Likeness] = {}
MAX_LIKENESSES = 10_000


def _interned(alike: Likeness) -> Likeness:
    found = _LIKENESSES.get(alike)
    if found is None:
        if len(_LIKENESSES) >= MAX_LIKENESSES:
            _LIKENESSES.clear()
        found = _LIKENESSES[alike] = alike
    return found


def node_devices(node_name: str, pool: Pool) -> tuple[object, ...] | None:
    """What a search reads of the pool's devices, without pool or node names; None when one of them is
    not the node's alone (published for another node, or allowing multiple allocations)."""
    devices: list[tuple[str, object, str | None, tuple[str, ...]]] = []
    for entry in pool.entries:
        device = entry.device
        if entry.slice.node_name != node_name or device.allow_multiple_allocations:
            return None
        added = None if entry.taints is device.taints else repr(entry.taints)
        # skipNodeOperations is slice-wide, so not in the device's signature.
        devices.append((device.name, device.signature, added, tuple(entry.slice.skip_node_operations)))
    return tuple(devices)


def declared_features(node: Node) -> tuple[str, ...]:
    """The node's `status.declaredFeatures`, sorted (part of what makes two nodes alike)."""
    return node.verdict_key[1]


def devices_in_use(pools: NodePools, state: AllocatedState) -> tuple[bool, ...]:
    """Which of the node's candidate devices `state` has in use: with `likeness`, all a search on the
    node reads of the node and its pools."""
    return state.allocated_flags(pools.candidate_keys)


def moved_to(outcome: AllocationOutcome, pool_ids: Sequence[tuple[str, str]], node: Node,
             pools: NodePools) -> AllocationOutcome:
    """A successful `outcome` found on a twin with pools `pool_ids`, for `node` (pools `pools`): the
    results name the node's pools and the node selector the node."""
    assert outcome.success, "only a fit is moved: a failure's reasons name the devices' users"
    return MovedOutcome(outcome, pool_ids, node.name, pools.pool_ids)


class MovedOutcome(AllocationOutcome):
    """A twin's fit, for another node. One is made for every node of a cold filter and kept in the
    filter cache, and most are never bound: their allocations are built when first read, and what
    prioritize reads of them (the pools and number of the devices taken) comes from the twin's."""

    __slots__ = ("_new_pool_ids", "_node_name", "_pool_ids", "_twin")

    def __init__(self, twin: AllocationOutcome, pool_ids: Sequence[tuple[str, str]], node_name: str,
                 new_pool_ids: Sequence[tuple[str, str]]) -> None:
        super().__init__(success=True, allocations=None, reasons=twin.reasons, steps=twin.steps,
                         subrequest_ranks=twin.subrequest_ranks)
        self._twin = twin
        self._pool_ids = pool_ids
        self._node_name = node_name
        self._new_pool_ids = new_pool_ids

    @property
    def allocations(self) -> list[dict[str, Any]]:
        if self._allocations is None:
            pool_of = self._pool_of()
            pinned = {"nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [self._node_name]}]}]}
            allocations: list[dict[str, Any]] = []
            for allocation in self._twin.allocations:
                devices = allocation["devices"]
                results = [{**result, "pool": pool_of[_pool_id(result)]} for result in devices["results"]]
                moved = {**allocation, "devices": {**devices, "results": results}}
                if "nodeSelector" in allocation:
                    moved["nodeSelector"] = pinned
                allocations.append(moved)
            self._allocations = allocations
        return self._allocations

    def result_pools(self) -> set[tuple[str, str]]:
        pool_of = self._pool_of()
        return {(driver, pool_of[driver, pool]) for driver, pool in self._twin.result_pools()}

    def result_count(self) -> int:
        return self._twin.result_count()

    def _pool_of(self) -> dict[tuple[str, str], str]:
        return {old: new[1] for old, new in zip(self._pool_ids, self._new_pool_ids, strict=True)}


def _pool_id(result: dict[str, Any]) -> tuple[str, str]:
    return result["driver"], result["pool"]
