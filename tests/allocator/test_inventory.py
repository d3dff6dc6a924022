"""Inventory: incremental updates, cached node views, pool descriptions."""

from __future__ import annotations

from allocator_objects import dev, inventory, slice_obj

from allocator import DeviceClass, FeatureGates, Node, ResourceSlice

GATES = FeatureGates()
NODE_1, NODE_2 = Node.named("node-1"), Node.named("node-2")


def test_node_views_are_cached_until_a_relevant_change() -> None:
    inv = inventory([slice_obj("s1", [dev("a")]), slice_obj("s2", [dev("b")], node="node-2")])
    first = inv.node_pools(NODE_1, GATES)
    other = inv.node_pools(NODE_2, GATES)
    assert inv.node_pools(NODE_1, GATES) is first
    inv.upsert_slice(ResourceSlice.from_api(slice_obj("s2", [dev("b"), dev("c")], node="node-2")))
    assert inv.node_pools(NODE_1, GATES) is first  # node-2's slice cannot change node-1's view
    assert [e.device.name for e in inv.node_pools(NODE_2, GATES).candidates] == ["b", "c"]
    assert inv.node_pools(NODE_2, GATES) is not other
    inv.upsert_slice(
        ResourceSlice.from_api(slice_obj("shared", [dev("x")], node=None, pool="p", allNodes=True))
    )
    assert [e.device.name for e in inv.node_pools(NODE_1, GATES).candidates] == ["a", "x"]


def test_remove_slice_and_features_in_cache_key() -> None:
    inv = inventory([slice_obj("s1", [dev("a")])])
    assert len(inv.node_pools(NODE_1, GATES).candidates) == 1
    inv.remove_slice("s1")
    assert inv.node_pools(NODE_1, GATES).candidates == []
    inv.remove_slice("missing")  # no error


def test_classes() -> None:
    inv = inventory([])
    assert inv.device_class("gpu") is not None
    inv.upsert_class(DeviceClass.from_api({"kind": "DeviceClass", "metadata": {"name": "nic"}}))
    assert inv.device_class("nic") is not None
    inv.remove_class("nic")
    assert inv.device_class("nic") is None


def test_describe_pools() -> None:
    inv = inventory(
        [
            slice_obj("s1", [dev("a"), dev("b")], pool="p1"),
            slice_obj("s2", [dev("c")], pool="p2", count=2),
            slice_obj("s3", [dev("d"), dev("d")], pool="p3"),
        ]
    )
    summary = {p["pool"]: (p["status"], p["devices"], p["reason"]) for p in inv.describe_pools()}
    assert summary == {
        "p1": ("complete", 2, ""),
        "p2": ("incomplete", 1, "1 of 2 slices published"),
        "p3": ("invalid", 2, "duplicate device name d"),
    }


def test_pool_descriptions_follow_every_change_to_their_pool() -> None:
    inv = inventory([slice_obj("s1", [dev("a")], pool="p1", count=2), slice_obj("s9", [dev("z")], pool="p9")])

    def described() -> dict[str, tuple[str, int, str]]:
        return {p["pool"]: (p["status"], p["devices"], p["reason"]) for p in inv.describe_pools()}

    assert described() == {"p1": ("incomplete", 1, "1 of 2 slices published"), "p9": ("complete", 1, "")}
    unchanged = inv.describe_pools()[1]
    inv.upsert_slice(ResourceSlice.from_api(slice_obj("s2", [dev("a")], pool="p1", count=2)))
    assert described()["p1"] == ("invalid", 2, "duplicate device name a")
    inv.upsert_slice(ResourceSlice.from_api(slice_obj("s2", [dev("b"), dev("c")], pool="p1", count=2)))
    assert described()["p1"] == ("complete", 3, "")
    inv.upsert_slice(ResourceSlice.from_api(slice_obj("s2", [dev("b")], pool="p0", count=1)))
    assert described() == {"p0": ("complete", 1, ""), "p1": ("incomplete", 1, "1 of 2 slices published"),
                           "p9": ("complete", 1, "")}
    assert [p["pool"] for p in inv.describe_pools()] == ["p0", "p1", "p9"]
    inv.remove_slice("s2")
    inv.remove_slice("s1")
    assert described() == {"p9": ("complete", 1, "")}
    assert inv.describe_pools()[0] is unchanged  # kept: nothing in its pool changed


def test_node_local_counter_slices_are_seen_by_their_node_only() -> None:
    # Like upstream, which splits slices by nodeName before gathering pools.
    counters = {"name": "set", "counters": {"memory": {"value": "8Gi"}}}
    uses = [{"counterSet": "set", "counters": {"memory": {"value": "8Gi"}}}]
    inv = inventory(
        [
            slice_obj("counters", [], pool="p", sharedCounters=[counters], count=2),
            slice_obj("devices", [dev("a", consumesCounters=uses)], pool="p", count=2),
        ]
    )
    (pool,) = inv.node_pools(NODE_1, GATES).pools
    assert (pool.status, [e.device.name for e in pool.entries]) == ("complete", ["a"])
    assert set(pool.counter_sets) == {"set"}
    assert inv.node_pools(NODE_2, GATES).pools == []


def test_a_slice_moving_to_another_pool_refreshes_the_nodes_of_the_pool_it_left() -> None:
    inv = inventory([
        slice_obj("s1", [dev("a")], node="node-1", pool="p", count=2),
        slice_obj("s2", [dev("b")], node="node-2", pool="p", count=2),
    ])
    assert [e.device.name for e in inv.node_pools(NODE_1, GATES).candidates] == ["a"]
    inv.upsert_slice(ResourceSlice.from_api(slice_obj("s2", [dev("b")], node="node-2", pool="q")))
    # Pool p now has one of its two slices: incomplete, so node-1 has no usable device left in it.
    assert inv.node_pools(NODE_1, GATES).candidates == []


def test_node_views_beyond_the_limit_evict_the_least_recently_used_one() -> None:
    inv = inventory([slice_obj(f"s{i}", [dev("a")], node=f"node-{i}") for i in range(4)])
    inv.max_cached_nodes = 3
    nodes = [Node.named(f"node-{i}") for i in range(4)]
    views = [inv.node_pools(node, GATES) for node in nodes[:3]]
    assert inv.node_pools(nodes[0], GATES) is views[0]  # used again: node-1's view is now the oldest
    inv.node_pools(nodes[3], GATES)
    assert inv.node_pools(nodes[0], GATES) is views[0]  # not all views dropped at once
    assert inv.node_pools(nodes[2], GATES) is views[2]
    assert inv.node_pools(nodes[1], GATES) is not views[1]


def test_a_counter_slice_changes_every_view_under_upstreams_stable_variant() -> None:
    stable = FeatureGates({"DRAConsumableCapacity": False, "DRADeviceBindingConditions": False})
    counters = {"sharedCounters": [{"name": "cs", "counters": {"mem": {"value": "4"}}}]}
    inv = inventory([slice_obj("counters", [], pool="p", node="node-2", count=2, **counters)])
    assert [p.status for p in inv.node_pools(NODE_1, stable).pools] == ["incomplete"]
    devices = slice_obj("devices", [dev("a")], pool="p", node="node-3", count=2)
    inv.upsert_slice(ResourceSlice.from_api(devices))
    assert [p.status for p in inv.node_pools(NODE_1, stable).pools] == ["complete"]
    inv.remove_slice("counters")
    assert inv.node_pools(NODE_1, stable).pools == []


def test_a_counter_slice_changes_only_its_pools_views_with_the_default_gates() -> None:
    # Partitionable devices are the common case at scale: one node's slice update must not make every
    # node rebuild its view, as it must under upstream's stable variant (above).
    counters = {"sharedCounters": [{"name": "cs", "counters": {"mem": {"value": "4"}}}]}
    inv = inventory([slice_obj("counters-1", [], pool="p1", node="node-1", **counters),
                     slice_obj("counters-2", [], pool="p2", node="node-2", **counters)])
    view_1, view_2 = inv.node_pools(NODE_1, GATES), inv.node_pools(NODE_2, GATES)
    changed = {"sharedCounters": [{"name": "cs", "counters": {"mem": {"value": "8"}}}]}
    inv.upsert_slice(ResourceSlice.from_api(slice_obj("counters-1", [], pool="p1", node="node-1", **changed)))
    assert inv.node_pools(NODE_2, GATES) is view_2
    assert inv.node_pools(NODE_1, GATES) is not view_1


def test_a_pool_and_a_node_with_several_slices_keep_each_until_it_goes() -> None:
    slices = [slice_obj(name, [dev(name + "-dev")], pool="p", count=3) for name in ("s1", "s2", "s3")]
    inv = inventory(slices)
    names = lambda: [e.device.name for e in inv.node_pools(NODE_1, GATES).candidates]  # noqa: E731
    assert names() == ["s1-dev", "s2-dev", "s3-dev"]
    inv.remove_slice("s2")
    inv.remove_slice("s3")   # one slice of three left: the pool is incomplete, the slice still known
    assert names() == [] and inv.describe_pools()[0]["slices"] == 1
    assert [s.name for s, _ in inv.devices_named("gpu.example.com", "p", "s1-dev")] == ["s1"]
    inv.upsert_slice(ResourceSlice.from_api(slice_obj("s1", [dev("again")], pool="p", count=1)))
    assert names() == ["again"]   # the one left replaced by its new version
    inv.remove_slice("s1")
    assert names() == [] and inv.describe_pools() == []


def test_a_node_with_one_pool_shares_the_empty_parts_of_its_view() -> None:
    inv = inventory([slice_obj("s1", [dev("a"), dev("b")]), slice_obj("s2", [dev("c")], node="node-2")])
    one, two = inv.node_pools(NODE_1, GATES), inv.node_pools(NODE_2, GATES)
    assert one.candidates is one.pools[0].entries and [e.index for e in one.candidates] == [0, 1]
    assert one.pools[0].counter_sets is two.pools[0].counter_sets and not one.pools[0].counter_sets
    assert one.pools[0].devices_not_targeting == () and one.checks is None
