"""Pool gathering: which slices count for a node, generations, completeness, validity and order."""

from __future__ import annotations

from allocator_objects import dev, inventory, slice_obj

from allocator import FeatureGates, Node

NODE = Node.named("node-1", {"region": "eu"})
GATES = FeatureGates()


def pools_of(
    *slices: dict, node: Node = NODE, gates: FeatureGates = GATES
) -> list[tuple[str, str, list[str]]]:
    view = inventory(list(slices)).node_pools(node, gates)
    return [(p.name, p.status, [e.device.name for e in p.entries]) for p in view.pools]


def region(value: str) -> dict:
    return {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "region", "operator": "In", "values": [value]}]}]
    }


def test_node_selection_fields() -> None:
    assert pools_of(
        slice_obj("local", [dev("a")], pool="p1"),
        slice_obj("other-node", [dev("b")], pool="p2", node="node-2"),
        slice_obj("everywhere", [dev("c")], pool="p3", node=None, allNodes=True),
        slice_obj("eu", [dev("d")], pool="p4", node=None, nodeSelector=region("eu")),
        slice_obj("us", [dev("e")], pool="p5", node=None, nodeSelector=region("us")),
    ) == [("p1", "complete", ["a"]), ("p3", "complete", ["c"]), ("p4", "complete", ["d"])]


def test_per_device_node_selection() -> None:
    devices = [dev("mine", nodeName="node-1"), dev("theirs", nodeName="node-2"), dev("all", allNodes=True)]
    raw = slice_obj("s", devices, pool="p", node=None, perDeviceNodeSelection=True)
    view = inventory([raw]).node_pools(NODE, GATES)
    assert [(e.device.name, e.node_ok) for e in view.candidates] == [
        ("mine", True),
        ("theirs", False),
        ("all", True),
    ]
    assert [name for name, _, _ in pools_of(raw, node=Node.named("node-3"))] == ["p"]  # "all" matches
    only_named = slice_obj("s", devices[:2], pool="p", node=None, perDeviceNodeSelection=True)
    assert pools_of(only_named, node=Node.named("node-3")) == []
    assert pools_of(raw, gates=FeatureGates({"DRAPartitionableDevices": False})) == []


def test_only_the_newest_generation_counts() -> None:
    old = slice_obj("a-old", [dev("old")], pool="p", generation=1)
    new = slice_obj("b-new", [dev("new")], pool="p", generation=2)
    assert pools_of(old, new) == [("p", "complete", ["new"])]


def test_incomplete_and_obsolete_pools() -> None:
    assert pools_of(slice_obj("s1", [dev("a")], pool="p", count=2)) == [("p", "incomplete", [])]
    # The node sees generation 1 complete-looking slices only partially, while the pool moved on.
    local = slice_obj("s1", [dev("a")], pool="p", count=2, generation=1)
    elsewhere = slice_obj("s2", [dev("b")], pool="p", node="node-2", count=1, generation=2)
    assert pools_of(local, elsewhere) == []
    # Both slices of generation 1 exist, one on another node: complete, counted for completeness only.
    peer = slice_obj("s3", [dev("c")], pool="p", node="node-2", count=2, generation=1)
    assert pools_of(local, peer) == [("p", "complete", ["a"])]


def test_invalid_pools() -> None:
    assert pools_of(slice_obj("s", [dev("a"), dev("a")], pool="p")) == [("p", "invalid", [])]
    missing_set = dev("a", consumesCounters=[{"counterSet": "nope", "counters": {"c": {"value": "1"}}}])
    (pool,) = inventory([slice_obj("s", [missing_set], pool="p")]).node_pools(NODE, GATES).pools
    assert (pool.status, pool.reason) == ("invalid", "counter set nope not found")


def test_order_pools_by_driver_and_name_binding_conditions_last_slices_by_name() -> None:
    order = pools_of(
        slice_obj("z", [dev("z1")], pool="b", count=2),
        slice_obj("y", [dev("y1")], pool="b", count=2),
        slice_obj("bc", [dev("bc1", bindingConditions=["x"], bindingFailureConditions=["y"])], pool="a-bc"),
        slice_obj("x", [dev("x1"), dev("x0")], pool="a"),
    )
    assert order == [
        ("a", "complete", ["x1", "x0"]),
        ("b", "complete", ["y1", "z1"]),
        ("a-bc", "complete", ["bc1"]),
    ]
    other_driver = slice_obj("w", [dev("w1")], pool="a", driver="aaa.example.com")
    assert [p[0] for p in pools_of(other_driver, slice_obj("x", [dev("x1")], pool="a"))] == ["a", "a"]


def test_equivalent_devices_share_a_token() -> None:
    raw = slice_obj("s", [dev("a", attrs={"m": "x"}), dev("b", attrs={"m": "x"}), dev("c", attrs={"m": "y"})])
    a, b, c = inventory([raw]).node_pools(NODE, GATES).candidates
    assert a.equivalence == b.equivalence != c.equivalence


STABLE = FeatureGates({
    "DRAConsumableCapacity": False,
    "DRADeviceBindingConditions": False,
    "DRAFractionalCapacityRange": False,
})


def test_counter_slices_for_every_node_only_under_upstreams_stable_variant() -> None:
    counters = slice_obj("counters", [], pool="p", node="node-2", count=2,
                         sharedCounters=[{"name": "cs", "counters": {"mem": {"value": "4"}}}])
    assert STABLE.stable_variant and not GATES.stable_variant
    assert pools_of(counters, gates=STABLE) == [("p", "incomplete", [])]
    assert pools_of(counters, gates=GATES) == []
