"""Which devices a node can see, grouped in resource pools, and in which order the search visits them."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from allocator.errors import AllocationError
from allocator.features import FeatureGates
from allocator.model import BLOCKING_TAINT_EFFECTS, Device, DeviceTaintRule, Node, ResourceSlice
from allocator.nodes import NodeSelectorError, node_matches
from allocator.quantity import Quantity

COMPLETE, INCOMPLETE, INVALID = "complete", "incomplete", "invalid"

DeviceKey = tuple[str, str, str]  # (driver, pool, device)

# What most pools have none of, shared by all of them: a view is built per node, and an empty dict and
# list each were 120 bytes of every node's view (2.4 MB at 20,000 nodes).
_NO_COUNTER_SETS: Mapping[str, dict[str, Quantity]] = MappingProxyType({})


class DeviceEntry:
    """One device as seen from one node: everything the search needs, precomputed."""

    __slots__ = (
        "blocking_taints",
        "device",
        "equivalence",
        "index",
        "key",
        "node_ok",
        "pool",
        "slice",
        "taints",
    )

    def __init__(
        self,
        pool: Pool,
        slice_: ResourceSlice,
        device: Device,
        *,
        node_ok: bool,
        taints: tuple[dict[str, Any], ...],
    ) -> None:
        self.pool = pool
        self.slice = slice_
        self.device = device
        self.key: DeviceKey = (slice_.driver, slice_.pool, device.name)
        self.node_ok = node_ok
        self.taints = taints
        self.blocking_taints = tuple(t for t in taints if t.get("effect") in BLOCKING_TAINT_EFFECTS)
        self.index = -1  # position in NodePools.candidates
        self.equivalence: object = None


class Pool:
    __slots__ = (
        "counter_sets",
        "device_count",
        "devices_not_targeting",
        "driver",
        "entries",
        "generation",
        "groups_ignored",
        "has_binding_conditions",
        "name",
        "reason",
        "status",
    )

    def __init__(self, driver: str, name: str, generation: int) -> None:
        self.driver = driver
        self.name = name
        self.generation = generation
        self.status = COMPLETE
        self.reason = ""
        self.entries: list[DeviceEntry] = []
        self.counter_sets: Mapping[str, dict[str, Quantity]] = _NO_COUNTER_SETS
        self.devices_not_targeting: tuple[Device, ...] = ()
        self.has_binding_conditions = False
        self.device_count = 0  # devices visible from the node, also for incomplete and invalid pools
        # Devices of slices ignored because they declare compatibility groups with the gate off.
        self.groups_ignored = 0

    @property
    def pool_id(self) -> str:
        return f"{self.driver}/{self.name}"

    def all_devices(self) -> Iterable[Device]:
        for entry in self.entries:
            yield entry.device
        yield from self.devices_not_targeting


class NodePools:
    """The pools of one node in search order; ``candidates`` holds the devices of usable pools in order."""

    __slots__ = ("candidate_keys", "candidates", "checks", "has_invalid", "pool_ids", "pools")

    def __init__(self, pools: list[Pool]) -> None:
        self.pools = pools
        self.pool_ids: tuple[tuple[str, str], ...] = tuple((p.driver, p.name) for p in pools)
        # Per-candidate selection results, filled in as the claims are prepared (see preparation.py); None
        # until the first claim is, as most views are never searched between two changes of their pools.
        self.checks: dict[tuple[Any, ...], tuple[list[Any], list[Any]]] | None = None
        complete = [p for p in pools if p.status == COMPLETE]
        # A node with one usable pool (the usual case) has that pool's list as its candidates: neither
        # list changes once the view is built.
        self.candidates: list[DeviceEntry] = (
            complete[0].entries if len(complete) == 1 else [e for p in complete for e in p.entries])
        for index, entry in enumerate(self.candidates):
            entry.index = index
        self.candidate_keys = tuple(entry.key for entry in self.candidates)
        self.has_invalid = any(p.status == INVALID for p in pools)


def _partitionable_ok(slice_: ResourceSlice, features: FeatureGates) -> bool:
    """False for a slice using partitionable-device fields while that gate is off (it is skipped)."""
    return features.enabled("DRAPartitionableDevices") or (
        slice_.per_device_node_selection is None and not slice_.shared_counters_set
    )


def _slice_relevant(slice_: ResourceSlice, node: Node, features: FeatureGates) -> bool:
    if not _partitionable_ok(slice_, features):
        return False
    if slice_.counter_sets and features.stable_variant:
        # Upstream's stable variant takes slices with shared counters for every node (1.37.1), so their
        # pool is seen, perhaps incomplete or invalid, even when none of its devices is on the node.
        return True
    # Otherwise they follow the same node selection as any other slice: one that does not target the
    # node leaves the pool incomplete here, and completing the pool fetches it.
    try:
        if slice_.node_name or slice_.all_nodes or slice_.node_selector is not None:
            return node_matches(node, node_name=slice_.node_name, all_nodes=slice_.all_nodes,
                                node_selector=slice_.node_selector)
        if slice_.per_device_node_selection:
            for device in slice_.devices:
                try:
                    if node_matches(node, node_name=device.node_name, all_nodes=device.all_nodes,
                                    node_selector=device.node_selector):
                        return True
                except NodeSelectorError as exc:
                    raise AllocationError(
                        f"gather pool information: failed to perform node selection for device {device.name} "
                        f"in slice {slice_.name}: {exc}"
                    ) from None
    except NodeSelectorError as exc:
        raise AllocationError(
            f"gather pool information: failed to perform node selection for slice {slice_.name}: {exc}"
        ) from None
    return False  # no node selection field we know of


def _counts_for_node(slice_: ResourceSlice, node: Node, features: FeatureGates) -> bool:
    try:
        return _slice_relevant(slice_, node, features)
    except AllocationError:
        return False  # upstream skips such a slice before node selection: no error either


def effective_taints(
    slice_: ResourceSlice, device: Device, rules: Sequence[DeviceTaintRule]
) -> tuple[dict[str, Any], ...]:
    """The device's own taints plus those of matching DeviceTaintRules (as the slice tracker patches them)."""
    matching = tuple(r.taint for r in rules if r.matches(slice_.driver, slice_.pool, device.name))
    return device.taints + matching if matching else device.taints


def gather_pools(
    node: Node,
    features: FeatureGates,
    slices: Iterable[ResourceSlice],
    slices_of_pool: Callable[[str, str], Iterable[ResourceSlice]],
    taint_rules: Sequence[DeviceTaintRule],
) -> NodePools:
    """Pools visible from ``node``. ``slices`` are the candidate slices (node-local plus shared);
    ``slices_of_pool(driver, pool)`` returns every slice of a pool, for completeness checks."""
    kept: dict[tuple[str, str], list[ResourceSlice]] = {}
    # DRADeviceCompatibilityGroups off: we cannot check co-allocation against the groups, so a slice
    # that declares them is ignored (as upstream); its pool is then incomplete and none of it is used.
    groups_off = not features.enabled("DRADeviceCompatibilityGroups")
    ignored: dict[tuple[str, str], int] = {}
    for slice_ in sorted(slices, key=lambda s: s.name):
        if groups_off and slice_.uses_compatibility_groups:
            if _counts_for_node(slice_, node, features):  # only to tell why its pool is incomplete
                pool_key = (slice_.driver, slice_.pool)
                ignored[pool_key] = ignored.get(pool_key, 0) + len(slice_.devices)
            continue
        if not _slice_relevant(slice_, node, features):
            continue
        pool_key = (slice_.driver, slice_.pool)
        current = kept.get(pool_key)
        if current is None or slice_.pool_generation > current[0].pool_generation:
            kept[pool_key] = [slice_]
        elif slice_.pool_generation == current[0].pool_generation:
            current.append(slice_)

    pools: list[Pool] = []
    for (driver, pool_name), pool_slices in kept.items():
        generation = pool_slices[0].pool_generation
        expected = pool_slices[0].resource_slice_count
        not_targeting: list[ResourceSlice] = []
        pool = Pool(driver, pool_name, generation)
        pool.device_count = sum(len(s.devices) for s in pool_slices)
        pool.groups_ignored = ignored.get((driver, pool_name), 0)
        if len(pool_slices) != expected:
            everything = list(slices_of_pool(driver, pool_name))
            if any(s.pool_generation > generation for s in everything):
                continue  # obsolete: the driver is publishing a newer generation, ignore the pool entirely
            same_generation = [
                s
                for s in everything
                if s.pool_generation == generation and not (groups_off and s.uses_compatibility_groups)
            ]
            if len(same_generation) != expected:
                pool.status = INCOMPLETE
                pool.reason = f"{len(same_generation)} of {expected} slices published"
                pools.append(pool)
                continue
            kept_names = {s.name for s in pool_slices}
            not_targeting = sorted(
                (s for s in same_generation if s.name not in kept_names), key=lambda s: s.name
            )
        _build_pool(pool, pool_slices, not_targeting, node, features, taint_rules)
        pools.append(pool)

    pools.sort(key=lambda p: (p.has_binding_conditions, p.driver, p.name))
    _assign_equivalence(pools)
    return NodePools(pools)


def _build_pool(
    pool: Pool,
    slices: list[ResourceSlice],
    not_targeting: list[ResourceSlice],
    node: Node,
    features: FeatureGates,
    taint_rules: Sequence[DeviceTaintRule],
) -> None:
    partitionable = features.enabled("DRAPartitionableDevices")
    use_rules = features.enabled("DRADeviceTaintRules") and taint_rules
    device_slices = [s for s in slices if not (partitionable and s.shared_counters_set)]
    seen: set[str] = set()
    for slice_ in device_slices:
        per_device = bool(slice_.per_device_node_selection)
        for device in slice_.devices:
            if device.name in seen:
                _invalidate(pool, f"duplicate device name {device.name}")
                return
            seen.add(device.name)
            node_ok = True
            if per_device:
                try:
                    node_ok = node_matches(node, node_name=device.node_name, all_nodes=device.all_nodes,
                                           node_selector=device.node_selector)
                except NodeSelectorError as exc:
                    raise AllocationError(
                        f"gather pool information: failed to perform node selection for device {device.name} "
                        f"in slice {slice_.name}: {exc}"
                    ) from None
            taints = effective_taints(slice_, device, taint_rules) if use_rules else device.taints
            pool.entries.append(DeviceEntry(pool, slice_, device, node_ok=node_ok, taints=taints))
            if device.binding_conditions:
                pool.has_binding_conditions = True
    pool.devices_not_targeting = tuple(
        d for s in not_targeting if not (partitionable and s.shared_counters_set) for d in s.devices
    )
    if not partitionable:
        return
    counter_sets: dict[str, dict[str, Quantity]] = {}
    for slice_ in (*slices, *not_targeting):  # counters may live in a slice that targets other nodes
        for set_name, counters in slice_.counter_sets:
            if set_name in counter_sets:
                _invalidate(pool, f"duplicate counter set name {set_name}")
                return
            counter_sets[set_name] = counters
    if counter_sets:
        pool.counter_sets = counter_sets
    for device in pool.all_devices():
        for set_name, counters in device.consumes_counters:
            counter_set = pool.counter_sets.get(set_name)
            if counter_set is None:
                _invalidate(pool, f"counter set {set_name} not found")
                return
            for counter in counters:
                if counter not in counter_set:
                    _invalidate(pool, f"counter {counter} not found in counter set {set_name}")
                    return


def _invalidate(pool: Pool, reason: str) -> None:
    pool.status = INVALID
    pool.reason = reason
    pool.entries = []
    pool.devices_not_targeting = ()
    pool.counter_sets = _NO_COUNTER_SETS


def _assign_equivalence(pools: list[Pool]) -> None:
    """Give devices that no check can tell apart the same equivalence token (used to prune the search).

    Devices allowing multiple allocations keep a unique token: their remaining capacity differs per device.
    """
    tokens: dict[tuple[Any, ...], int] = {}
    for pool in pools:
        for entry in pool.entries:
            if entry.device.allow_multiple_allocations:
                entry.equivalence = ("unique", entry.key)
                continue
            signature = (
                pool.driver,
                pool.name,
                entry.device.signature,
                entry.node_ok,
                repr(entry.taints) if entry.taints is not entry.device.taints else None,
                entry.slice.skip_node_operations,  # slice-wide, so not in the device's signature
            )
            entry.equivalence = tokens.setdefault(signature, len(tokens))
