"""Incremental index of ResourceSlices, DeviceClasses and DeviceTaintRules, with per-node pool caches."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection, Iterable
from typing import Any

from allocator.features import FeatureGates
from allocator.likeness import Likeness, likeness
from allocator.model import Device, DeviceClass, DeviceTaintRule, Node, ResourceSlice
from allocator.pools import COMPLETE, INCOMPLETE, INVALID, NodePools, gather_pools

# Node views kept (about 3 KB each for a node with 8 devices). Beyond it the least recently used view
# goes, one per view built: dropping them all at once made the next filters rebuild every view.
_MAX_CACHED_NODES = 20_000

_NodeView = tuple[tuple[str, ...], FeatureGates, NodePools, Likeness | None]


class _SliceGroups:
    """Slices by a key (a node, a pool), by name. Most groups hold one slice (a node's own pool), kept
    alone: a dict for each of them was 184 bytes a node for each of the two indexes."""

    __slots__ = ("_groups",)

    def __init__(self) -> None:
        self._groups: dict[Any, ResourceSlice | dict[str, ResourceSlice]] = {}

    def add(self, key: Any, slice_: ResourceSlice) -> bool:
        """Adds `slice_` (replacing one of its name); True when the group is new."""
        found = self._groups.get(key)
        if found is None or (isinstance(found, ResourceSlice) and found.name == slice_.name):
            self._groups[key] = slice_
            return found is None
        if isinstance(found, ResourceSlice):
            self._groups[key] = {found.name: found, slice_.name: slice_}
        else:
            found[slice_.name] = slice_
        return False

    def remove(self, key: Any, name: str) -> bool:
        """Removes the slice `name` from the group; True when that leaves the group empty (and gone)."""
        found = self._groups.get(key)
        if found is None:
            return False
        if isinstance(found, ResourceSlice):
            if found.name != name:
                return False
            del self._groups[key]
            return True
        found.pop(name, None)
        if len(found) == 1:
            self._groups[key] = next(iter(found.values()))
        return False

    def members(self, key: Any) -> Collection[ResourceSlice]:
        found = self._groups.get(key)
        if found is None:
            return ()
        return (found,) if isinstance(found, ResourceSlice) else found.values()

    def keys(self) -> Iterable[Any]:
        return self._groups.keys()


class Inventory:
    """What the cluster offers. Mutations invalidate only the cached node views they can affect.

    Not safe for concurrent mutation and allocation from several threads; the extender mutates it from
    its event loop between allocations.
    """

    def __init__(self) -> None:
        self._slices: dict[str, ResourceSlice] = {}
        self._by_pool = _SliceGroups()   # (driver, pool) -> its slices
        self._by_node = _SliceGroups()   # node name -> its node-local slices
        self._shared: dict[str, ResourceSlice] = {}
        # Node-local slices with shared counters: upstream's stable variant takes them for every node.
        self._counter_slices: dict[str, ResourceSlice] = {}
        self._classes: dict[str, DeviceClass] = {}
        self._rules: dict[str, DeviceTaintRule] = {}
        self._rule_list: tuple[DeviceTaintRule, ...] = ()
        # node name -> (its labels, the feature gates, its pools, their likeness) as last computed; least
        # recently used first
        self._node_cache: OrderedDict[str, _NodeView] = OrderedDict()
        # Some cached view was built under upstream's stable variant, so it may hold other nodes'
        # counter slices: only then does a change to one reach beyond its own pool's nodes.
        self._stable_views = False
        self.max_cached_nodes = _MAX_CACHED_NODES
        # Names of the slices with a device declaring nodeAllocatableResources.
        self._node_allocatable_slices: set[str] = set()
        self.version = 0
        # describe_pools' answer per pool, kept until one of the pool's slices changes: /debug/state
        # summed every pool of a 20,000-node cluster in one event-loop step of about 150 ms.
        self._pool_summaries: dict[tuple[str, str], tuple[bool, dict[str, Any]]] = {}
        self._pool_order: list[tuple[str, str]] | None = None

    # --- slices -------------------------------------------------------------------------------------
    def upsert_slice(self, slice_: ResourceSlice) -> None:
        old = self._slices.get(slice_.name)
        if old is not None:
            self._unindex(old)
        self._slices[slice_.name] = slice_
        if any(device.node_allocatable for device in slice_.devices):
            self._node_allocatable_slices.add(slice_.name)
        pool_key = (slice_.driver, slice_.pool)
        if self._by_pool.add(pool_key, slice_):
            self._pool_order = None
        self._pool_summaries.pop(pool_key, None)
        if slice_.node_name:
            self._by_node.add(slice_.node_name, slice_)
            if slice_.counter_sets:
                self._counter_slices[slice_.name] = slice_
        else:
            self._shared[slice_.name] = slice_
        self._invalidate_for(slice_, old)

    def remove_slice(self, name: str) -> None:
        old = self._slices.pop(name, None)
        if old is not None:
            self._unindex(old)
            self._invalidate_for(old, None)

    def _unindex(self, slice_: ResourceSlice) -> None:
        self._node_allocatable_slices.discard(slice_.name)
        pool_key = (slice_.driver, slice_.pool)
        self._pool_summaries.pop(pool_key, None)
        if self._by_pool.remove(pool_key, slice_.name):
            self._pool_order = None
        if slice_.node_name:
            self._counter_slices.pop(slice_.name, None)
            self._by_node.remove(slice_.node_name, slice_.name)
        else:
            self._shared.pop(slice_.name, None)

    def _invalidate_for(self, new: ResourceSlice, old: ResourceSlice | None) -> None:
        self.version += 1
        # A slice every node may see (shared, or with counters under upstream's stable variant) affects
        # every view, and so does any slice of a pool holding one.
        if self._seen_everywhere(new) or (old is not None and self._seen_everywhere(old)):
            self._clear_views()
            return
        # A node-local slice affects the nodes of every slice in its pool (completeness is per pool),
        # and of the pool it left when an update moved it to another one.
        nodes = {new.node_name} | ({old.node_name} if old is not None else set())
        pools = {(new.driver, new.pool)} | ({(old.driver, old.pool)} if old is not None else set())
        for pool in pools:
            for s in self._by_pool.members(pool):
                if self._seen_everywhere(s):
                    self._clear_views()
                    return
                nodes.add(s.node_name)
        for name in nodes:
            self._node_cache.pop(name, None)

    def _seen_everywhere(self, slice_: ResourceSlice) -> bool:
        return not slice_.node_name or (self._stable_views and bool(slice_.counter_sets))

    def _clear_views(self) -> None:
        self._node_cache.clear()
        self._stable_views = False

    def slices(self) -> Iterable[ResourceSlice]:
        return self._slices.values()

    @property
    def has_node_allocatable_devices(self) -> bool:
        """Does any device declare nodeAllocatableResources (DRANodeAllocatableResources)?"""
        return bool(self._node_allocatable_slices)

    def devices_named(self, driver: str, pool: str, device: str) -> list[tuple[ResourceSlice, Device]]:
        """Every device of that name in the pool's slices, newest pool generation first: what an
        allocation result (driver, pool, device) can refer to."""
        slices = sorted(self._by_pool.members((driver, pool)),
                        key=lambda s: (-s.pool_generation, s.name))
        return [(slice_, entry) for slice_ in slices for entry in slice_.devices if entry.name == device]

    # --- classes and taint rules ----------------------------------------------------------------------
    def upsert_class(self, device_class: DeviceClass) -> None:
        self._classes[device_class.name] = device_class
        self.version += 1

    def remove_class(self, name: str) -> None:
        if self._classes.pop(name, None) is not None:
            self.version += 1

    def device_class(self, name: str) -> DeviceClass | None:
        return self._classes.get(name)

    def upsert_taint_rule(self, rule: DeviceTaintRule) -> None:
        self._rules[rule.name] = rule
        self._rules_changed()

    def remove_taint_rule(self, name: str) -> None:
        if self._rules.pop(name, None) is not None:
            self._rules_changed()

    def _rules_changed(self) -> None:
        self._rule_list = tuple(self._rules[name] for name in sorted(self._rules))
        self.version += 1
        self._clear_views()

    # --- per-node views -------------------------------------------------------------------------------
    def node_pools(self, node: Node, features: FeatureGates) -> NodePools:
        """The pools ``node`` can see, in search order; cached until a relevant change."""
        return self._node_view(node, features)[2]

    def node_likeness(self, node: Node, features: FeatureGates) -> tuple[NodePools, Likeness | None]:
        """The node's pools and their `likeness` (allocator/likeness.py), worked out with the view."""
        view = self._node_view(node, features)
        return view[2], view[3]

    def _node_view(self, node: Node, features: FeatureGates) -> _NodeView:
        # Keyed by name alone (hashing the labels on every lookup cost more than the rest of a filter
        # cache hit); the labels and gates are compared, by identity first, on the entry instead.
        cached = self._node_cache.get(node.name)
        if cached is not None:
            labels_key, gates = cached[0], cached[1]
            if (labels_key is node.labels_key or labels_key == node.labels_key) and (
                    gates is features or gates == features):
                self._node_cache.move_to_end(node.name)
                return cached
        candidates = list(self._by_node.members(node.name))
        candidates.extend(self._shared.values())
        if features.stable_variant:
            self._stable_views = True
            candidates.extend(s for s in self._counter_slices.values() if s.node_name != node.name)
        result = gather_pools(node, features, candidates, self._slices_of_pool, self._rule_list)
        view = self._node_cache[node.name] = (node.labels_key, features, result, likeness(node.name, result))
        self._node_cache.move_to_end(node.name)
        if len(self._node_cache) > self.max_cached_nodes:
            self._node_cache.popitem(last=False)
        return view

    def _slices_of_pool(self, driver: str, pool: str) -> Iterable[ResourceSlice]:
        return self._by_pool.members((driver, pool))

    def describe_pools(self, features: FeatureGates | None = None) -> list[dict[str, Any]]:
        """Cluster-wide pool summary (newest generation of each pool), sorted by driver and pool. The
        entries are kept between calls: read them, do not change them."""
        groups_off = not (features or FeatureGates()).enabled("DRADeviceCompatibilityGroups")
        if self._pool_order is None:
            self._pool_order = sorted(self._by_pool.keys())
        summaries = self._pool_summaries
        summary = []
        for key in self._pool_order:
            kept = summaries.get(key)
            if kept is None or kept[0] != groups_off:
                summarized = _summarize_pool(key, self._by_pool.members(key), groups_off)
                kept = summaries[key] = (groups_off, summarized)
            summary.append(kept[1])
        return summary


def _summarize_pool(key: tuple[str, str], slices: Collection[ResourceSlice],
                    groups_off: bool) -> dict[str, Any]:
    newest = max(s.pool_generation for s in slices)
    current = sorted((s for s in slices if s.pool_generation == newest), key=lambda s: s.name)
    expected = current[0].resource_slice_count
    ignored = sum(1 for s in current if groups_off and s.uses_compatibility_groups)
    status, reason = COMPLETE, ""
    if len(current) != expected:
        status, reason = INCOMPLETE, f"{len(current)} of {expected} slices published"
    elif ignored:
        status = INCOMPLETE
        reason = (
            f"{ignored} of {expected} slices declare compatibility groups, ignored while "
            "DRADeviceCompatibilityGroups is off"
        )
    else:
        reason = _pool_problem(current)
        if reason:
            status = INVALID
    return {
        "driver": key[0],
        "pool": key[1],
        "generation": newest,
        "slices": len(current),
        "devices": sum(len(s.devices) for s in current),
        "status": status,
        "reason": reason,
    }


def _pool_problem(slices: list[ResourceSlice]) -> str:
    """Why a complete pool is unusable, judged cluster-wide (per node, only node-visible slices count)."""
    counter_sets: dict[str, set[str]] = {}
    for slice_ in slices:
        for name, counters in slice_.counter_sets:
            if name in counter_sets:
                return f"duplicate counter set name {name}"
            counter_sets[name] = set(counters)
    for slice_ in slices:
        for device in slice_.devices:
            for set_name, counters in device.consumes_counters:
                if set_name not in counter_sets:
                    return f"counter set {set_name} not found"
                for counter in counters:
                    if counter not in counter_sets[set_name]:
                        return f"counter {counter} not found in counter set {set_name}"
    # Device names must be unique among slices visible from one node; node-local slices of different
    # nodes may legitimately reuse names only if they are in different pools, so check per node name.
    seen: dict[str, set[str]] = {}
    for slice_ in slices:
        names = seen.setdefault(slice_.node_name, set())
        for device in slice_.devices:
            if device.name in names:
                return f"duplicate device name {device.name}"
            names.add(device.name)
    return ""
