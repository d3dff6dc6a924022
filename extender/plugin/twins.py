"""One search for nodes that are alike: the per-claim-shape verdict snapshot of the filter path.

Most clusters are made of many identical nodes: the same devices in node-local pools, and for a
workload's pods, the same devices in use on many of them (none, on the nodes no pod of it reached yet).
The filter cache (filtercache.py) keeps an outcome per node; a claim shape the cache has not seen yet
(or a node whose pools changed) costs an allocator search per node. Here a successful outcome is kept
per *twin key* instead: everything a search's outcome depends on besides the claims, the classes and
the node's name and pool names. A node with the same twin key as one searched already gets that
outcome with its own pool and node names put in, without a search.

The twin key of a node (`TwinVerdicts.key`), under one inventory version (which moves with every
slice, DeviceClass and DeviceTaintRule change): the allocator's `likeness` of the node's pools (their
devices in order, without pool or node names; the inventory works it out with the node's view of its
pools), which of those devices the view the search would use has in use (`devices_in_use`), and the
node's `declared_features`. Nodes whose pools are not the node's
alone (shared pools, counters, devices allowing multiple allocations, ...: see allocator/likeness.py)
have no twin key and are searched as before. A twin's outcome is rewritten for the node by
`moved_to`.

Failures are not shared: their reasons name the claims that hold the devices, which differ from node
to node. tests/extender/test_filtercache_differential.py checks that filter, prioritize and the
outcomes themselves are the same with and without this snapshot after random changes.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import NamedTuple

from allocator import (
    AllocatedState,
    AllocationOutcome,
    Likeness,
    Node,
    NodePools,
    declared_features,
    devices_in_use,
    moved_to,
)

# Twin keys kept per inventory version: a handful per claim shape on a homogeneous cluster (how many
# devices are in use on a node), more on a varied one.
MAX_TWINS = 4_096
# Likeness ids (one per distinct kind of node) and the per-node memo of them.
MAX_LIKENESSES = 20_000

PoolIds = tuple[tuple[str, str], ...]
TwinKey = tuple[int, tuple[bool, ...], tuple[str, ...]]


class Twin(NamedTuple):
    """A successful outcome and the pools it was found in."""

    outcome: AllocationOutcome
    node: str
    pool_ids: PoolIds


class _NodeMemo:
    """What the twin key of one node was made from, kept while its pools stay the same objects."""

    __slots__ = ("in_use", "in_use_key", "likeness_id", "pools")

    def __init__(self, pools: NodePools, likeness_id: int | None) -> None:
        self.pools = pools  # compared by identity
        self.likeness_id = likeness_id  # None: the node has no twins
        # The node's devices_in_use, and the filter cache's node key it was read under (None: not kept)
        self.in_use_key: tuple | None = None
        self.in_use: tuple[bool, ...] = ()


class TwinVerdicts:
    def __init__(self, *, max_twins: int = MAX_TWINS) -> None:
        self.max_twins = max_twins
        # (claims spec, twin key) -> the outcome of the first node searched with that key
        self._twins: OrderedDict[tuple[str, TwinKey], Twin] = OrderedDict()
        self._inventory_version = -1
        # likeness -> a small id, so a twin key hashes a few ints, not every device signature
        self._likeness_ids: dict[Likeness, int] = {}
        # node name -> its likeness id and the NodePools it was worked out for, and its devices in use
        self._likenesses: dict[str, _NodeMemo] = {}
        self._in_use_patterns: dict[tuple[bool, ...], tuple[bool, ...]] = {}
        self.hits = 0

    def key(self, node: Node, pools: NodePools, alike: Likeness | None, view: AllocatedState,
            inventory_version: int, node_key: tuple | None = None) -> TwinKey | None:
        """The node's twin key under `view`, or None when the node has no twins.

        `node_key`: the filter cache's key of the node, given when `view` is the one node keys
        describe (the allocated state and what is in flight, nothing changed since the key was made).
        Which devices are in use is then read once per key: a cold filter of each new claim shape
        reads it for every node, and it changes only with the node's pools' allocations."""
        if inventory_version != self._inventory_version:
            self._twins.clear()  # classes or slices changed: every outcome may have
            self._inventory_version = inventory_version
        memo = self._memo(node, pools, alike)
        if memo.likeness_id is None:
            return None
        if node_key is None:
            in_use = devices_in_use(pools, view)
        elif memo.in_use_key == node_key:
            in_use = memo.in_use
        else:
            in_use = devices_in_use(pools, view)
            if len(self._in_use_patterns) >= MAX_LIKENESSES:
                self._in_use_patterns.clear()
            # Kept for every node: one tuple per pattern (most nodes of a kind have the same one in use)
            in_use = memo.in_use = self._in_use_patterns.setdefault(in_use, in_use)
            memo.in_use_key = node_key
        return memo.likeness_id, in_use, declared_features(node)

    def _memo(self, node: Node, pools: NodePools, alike: Likeness | None) -> _NodeMemo:
        """The node's memo: its likeness id (None: no twins) is worked out again when its pools change."""
        memo = self._likenesses.get(node.name)
        if memo is None or memo.pools is not pools:
            likeness_id = None
            if alike is not None:
                if len(self._likeness_ids) >= MAX_LIKENESSES:
                    self._likeness_ids.clear()
                    self._likenesses.clear()
                likeness_id = self._likeness_ids.setdefault(alike, len(self._likeness_ids))
            if len(self._likenesses) >= MAX_LIKENESSES:
                self._likenesses.clear()
            memo = _NodeMemo(pools, likeness_id)
            self._likenesses[node.name] = memo
        return memo

    def get(self, spec: str, key: TwinKey, node: Node, pools: NodePools) -> AllocationOutcome | None:
        """The outcome for `node` of a twin searched before, with the node's names put in."""
        twin = self._twins.get((spec, key))
        if twin is None:
            return None
        self._twins.move_to_end((spec, key))
        self.hits += 1
        if twin.node == node.name and twin.pool_ids == pools.pool_ids:
            return twin.outcome
        return moved_to(twin.outcome, twin.pool_ids, node, pools)

    def put(self, spec: str, key: TwinKey, node: Node, pools: NodePools, outcome: AllocationOutcome) -> None:
        if not outcome.success:
            return  # its reasons name the claims holding the devices: not the same on a twin
        self._twins[(spec, key)] = Twin(outcome, node.name, pools.pool_ids)
        self._twins.move_to_end((spec, key))
        if len(self._twins) > self.max_twins:
            self._twins.popitem(last=False)

    def stats(self) -> dict[str, int]:
        return {"twins": len(self._twins), "twinHits": self.hits}
