"""The cache stores equal parts of its objects once (extender.state.sharing), without changing what
they say."""

from __future__ import annotations

import copy
import tracemalloc
from typing import Any

import dra_objects as o
import orjson

from allocator import FeatureGates
from extender.state.cache import ClusterCache
from extender.state.sharing import ObjectSharer


def json_of(raw: dict) -> dict:
    return orjson.loads(orjson.dumps(raw))


def test_equal_device_values_of_different_slices_are_one_object_and_the_slices_say_the_same() -> None:
    cache = ClusterCache(FeatureGates())
    first, second = o.gpu_slice("node-1", 2), o.gpu_slice("node-2", 2)
    expected = [json_of(first), json_of(second)]
    cache.apply("ResourceSlice", "ADDED", first)
    cache.apply("ResourceSlice", "ADDED", second)
    stored = [cache.raw("ResourceSlice", "node-1-gpu"), cache.raw("ResourceSlice", "node-2-gpu")]
    assert [json_of(raw) for raw in stored] == expected   # type: ignore[arg-type]
    one, two = (raw["spec"]["devices"][0] for raw in stored)   # type: ignore[index]
    assert one["attributes"]["model"] is two["attributes"]["model"]
    assert one["capacity"] is two["capacity"]
    assert one["name"] is two["name"] and stored[0]["apiVersion"] is stored[1]["apiVersion"]   # type: ignore[index]
    assert cache.stats()["objects"]["ResourceSlice"] == 2 and not cache.stats()["invalid"]


def test_claims_of_one_shape_share_their_spec_and_allocations_keep_their_content() -> None:
    cache = ClusterCache(FeatureGates())
    claims = [o.claim("a"), o.claim("b")]
    o.allocate(claims[0], "node-1", ["gpu-0"])
    expected = [json_of(raw) for raw in claims]
    for raw in claims:
        cache.apply("ResourceClaim", "ADDED", raw)
    stored = [cache.raw("ResourceClaim", "default/a"), cache.raw("ResourceClaim", "default/b")]
    assert [json_of(raw) for raw in stored] == expected   # type: ignore[arg-type]
    assert stored[0]["spec"] is stored[1]["spec"]   # type: ignore[index]
    assert cache.stats()["allocatedClaims"] == 1 and not cache.stats()["invalid"]


def test_values_equal_in_python_but_not_in_json_stay_apart() -> None:
    sharer = ObjectSharer()
    values = [{"int": 1}, {"bool": True}, {"int": 1.0}, {"string": "1"}]
    shared = [sharer.value(copy.deepcopy(value)) for value in values]
    assert [orjson.dumps(value) for value in shared] == [orjson.dumps(value) for value in values]
    assert sharer.value({"int": 1}) is shared[0]


def test_the_tables_are_bounded() -> None:
    sharer = ObjectSharer(max_entries=10)
    for index in range(100):
        sharer.string(f"uuid-{index}")
        sharer.value({"string": f"uuid-{index}"})
    assert len(sharer._strings) <= 10 and len(sharer._values) <= 10
    kept = sharer.string("uuid-99")
    assert sharer.string("".join(["uuid-", "99"])) is kept


def test_a_table_entry_costs_about_its_text_not_an_encoders_buffer() -> None:
    """Unique values (device UUIDs, say) fill the tables up to their bound: an entry must cost about
    what its text does. orjson's bytes keep the ~4 KB buffer they were written into, so a key kept as
    bytes cost 4 KB an entry (70 MB more resident at 20,000 nodes)."""
    sharer = ObjectSharer()
    values = [{"uuid": f"GPU-{index:08d}", "model": "LATEST-GPU-MODEL"} for index in range(2000)]
    tracemalloc.start()
    try:
        for value in values:
            sharer.value(value)
        per_entry = tracemalloc.get_traced_memory()[0] / len(values)
    finally:
        tracemalloc.stop()
    assert per_entry < 400, f"{per_entry:.0f} bytes per shared value"


def test_values_json_cannot_encode_are_kept_as_they_are() -> None:
    odd = {"int": 2**70}
    assert ObjectSharer().value(odd) is odd


def test_a_new_version_takes_its_unchanged_spec_and_allocation_from_the_version_it_replaces() -> None:
    cache = ClusterCache(FeatureGates())
    cache._sharer = ObjectSharer(max_entries=1)   # tables that forget at once: kept parts come from `stored`
    first = o.claim("a")
    o.allocate(first, "node-1", ["gpu-0"])
    cache.apply("ResourceClaim", "ADDED", first)
    stored = cache.raw("ResourceClaim", "default/a")
    reserved = json_of(first)
    reserved["metadata"]["resourceVersion"] = "2"
    reserved["status"]["reservedFor"] = [{"resource": "pods", "name": "p", "uid": "p1"}]
    expected = json_of(reserved)
    cache.apply("ResourceClaim", "MODIFIED", reserved)
    now = cache.raw("ResourceClaim", "default/a")
    assert json_of(now) == expected   # type: ignore[arg-type]
    assert now["spec"] is stored["spec"]   # type: ignore[index]
    assert now["status"]["allocation"] is stored["status"]["allocation"]   # type: ignore[index]
    released = json_of(reserved)
    released["metadata"]["resourceVersion"] = "3"
    released["spec"]["devices"]["requests"][0]["exactly"]["count"] = 2
    o.allocate(released, "node-1", ["gpu-1"])
    expected = json_of(released)
    cache.apply("ResourceClaim", "MODIFIED", released)
    latest = cache.raw("ResourceClaim", "default/a")
    assert json_of(latest) == expected and latest["spec"] is not now["spec"]   # type: ignore[arg-type,index]
    assert cache.claim("default", "a").requests[0].exactly.count == 2   # type: ignore[union-attr]


def test_a_pod_update_that_leaves_the_spec_alone_keeps_the_stored_spec() -> None:
    cache = ClusterCache(FeatureGates())
    pod = o.pod("p", ["c"])
    cache.apply("Pod", "ADDED", copy.deepcopy(pod))
    stored = cache.raw("Pod", "default/p")
    running = copy.deepcopy(pod)
    running["metadata"]["resourceVersion"] = "2"
    running["status"] = {"phase": "Running", "podIP": "10.0.0.1"}
    cache.apply("Pod", "MODIFIED", running)
    now = cache.raw("Pod", "default/p")
    # Pods are stored packed (extender.state.packing): the spec's values are the stored ones themselves,
    # but for the claim references, packed too: a read makes their list and dicts anew.
    assert now["spec"] == stored["spec"] and now["status"] == {"phase": "Running"}   # type: ignore[index]
    assert all(now["spec"][key] is value for key, value in stored["spec"].items()   # type: ignore[index]
               if key != "resourceClaims")
    assert all(ref[key] is value for ref, before in zip(now["spec"]["resourceClaims"],   # type: ignore[index]
                                                         stored["spec"]["resourceClaims"], strict=True)   # type: ignore[index]
               for key, value in before.items())
    bound = copy.deepcopy(running)
    bound["metadata"]["resourceVersion"] = "3"
    bound["spec"]["nodeName"] = "node-1"
    cache.apply("Pod", "MODIFIED", bound)
    assert cache.raw("Pod", "default/p")["spec"]["nodeName"] == "node-1"   # type: ignore[index]


def test_a_claim_reserved_for_a_stored_pod_shares_its_name_and_uid_strings_across_pod_versions() -> None:
    cache = ClusterCache(FeatureGates())
    cache.apply("Pod", "ADDED", json_of(o.pod("pod-one", ["c"])))
    meta = cache.raw("Pod", "default/pod-one")["metadata"]   # type: ignore[index]
    consumer = {"resource": "pods", "name": "pod-one", "uid": meta["uid"]}
    cache.apply("ResourceClaim", "ADDED", json_of(o.allocate(o.claim("c"), "node-1", ["gpu-0"], [consumer])))
    reserved = cache.raw("ResourceClaim", "default/c")["status"]["reservedFor"][0]   # type: ignore[index]
    assert reserved == consumer and reserved["name"] is meta["name"] and reserved["uid"] is meta["uid"]
    bound = json_of(o.pod("pod-one", ["c"]))
    bound["metadata"]["resourceVersion"] = "2"
    bound["spec"]["nodeName"] = "node-1"
    cache.apply("Pod", "MODIFIED", bound)
    now = cache.raw("Pod", "default/pod-one")["metadata"]   # type: ignore[index]
    assert now["resourceVersion"] == "2" and now["name"] is meta["name"] and now["uid"] is meta["uid"]
    # Another pod of that name (a new uid), or a uid the cache does not know: the claim keeps its own.
    stranger = {"resource": "pods", "name": "pod-one", "uid": "not-the-pods-uid"}
    unknown = {"resource": "pods", "name": "q", "uid": "uid-q"}
    cache.apply("ResourceClaim", "ADDED",
                json_of(o.allocate(o.claim("d"), "node-1", ["gpu-1"], [stranger, unknown])))
    kept = cache.raw("ResourceClaim", "default/d")["status"]["reservedFor"]   # type: ignore[index]
    assert kept == [stranger, unknown] and kept[0]["name"] is not meta["name"]


def test_deleted_and_stale_objects_are_not_shared() -> None:
    cache = ClusterCache(FeatureGates())
    shared: list[str] = []
    original = cache._sharer.resource_claim

    def counting(raw: dict[str, Any], previous: dict[str, Any] | None = None) -> dict[str, Any]:
        shared.append(raw["metadata"]["resourceVersion"])
        return original(raw, previous)

    cache._sharer.resource_claim = counting   # type: ignore[method-assign]
    cache.apply("ResourceClaim", "ADDED", o.claim("a"))
    stale = o.claim("a")
    stale["metadata"]["resourceVersion"] = "0"
    cache.apply("ResourceClaim", "MODIFIED", stale)
    gone = o.claim("a")
    gone["metadata"]["resourceVersion"] = "5"
    cache.apply("ResourceClaim", "DELETED", gone)
    assert shared == ["1"] and cache.raw("ResourceClaim", "default/a") is None


def test_devices_of_one_model_share_their_parsed_attributes_capacity_and_signature() -> None:
    cache = ClusterCache(FeatureGates())
    cache.apply("ResourceSlice", "ADDED", o.gpu_slice("node-1", 2))
    cache.apply("ResourceSlice", "ADDED", o.gpu_slice("node-2", 2))
    first, second = sorted(cache.inventory.slices(), key=lambda slice_: slice_.pool)
    one, two = first.devices[0], second.devices[0]
    assert one.attributes is two.attributes and one.capacity is two.capacity
    assert one.signature is two.signature and one.cel_device("d") is not two.cel_device("d")
    assert one._content.cel_input[0] is two._content.cel_input[0]   # the attributes as written
    assert one.attributes is not first.devices[1].attributes   # another index: other attributes
    assert one.memo_key != two.memo_key


def test_claims_with_one_spec_share_its_parse_and_a_changed_spec_is_parsed_again() -> None:
    cache = ClusterCache(FeatureGates())
    cache.apply("ResourceClaim", "ADDED", o.claim("a"))
    cache.apply("ResourceClaim", "ADDED", o.claim("b"))
    cache.apply("ResourceClaim", "ADDED", o.claim("c", count=2))
    a, b, c = (cache.claim("default", name) for name in "abc")
    assert a is not None and b is not None and c is not None
    assert a.requests is b.requests and a.requests is not c.requests
    assert c.requests[0].exactly is not None and c.requests[0].exactly.count == 2
    cache.apply("ResourceClaim", "DELETED", o.claim("a"))
    cache.apply("ResourceClaim", "ADDED", o.claim("d"))
    d = cache.claim("default", "d")
    assert d is not None and d.requests is b.requests and d.raw["spec"] is b.raw["spec"]


def test_equal_finalizer_lists_are_one_list() -> None:
    cache = ClusterCache(FeatureGates())
    claims = [o.claim("a"), o.claim("b"), o.claim("c")]
    protection = "resource.kubernetes.io/delete-protection"
    for raw, finalizers in zip(claims, ([protection], [protection], ["other"]), strict=True):
        raw["metadata"]["finalizers"] = finalizers
        cache.apply("ResourceClaim", "ADDED", raw)
    a, b, c = (cache.raw("ResourceClaim", f"default/{name}") for name in "abc")
    assert a["metadata"]["finalizers"] is b["metadata"]["finalizers"]   # type: ignore[index]
    assert c["metadata"]["finalizers"] == ["other"]   # type: ignore[index]


def test_allocations_on_one_node_share_its_name_and_selectors_share_their_keys() -> None:
    cache = ClusterCache(FeatureGates())
    node = orjson.loads(orjson.dumps(o.node("node-1", {"kubernetes.io/hostname": "node-1"})))
    cache.apply("Node", "ADDED", node)
    claims = [o.allocate(o.claim("a"), "node-1", ["gpu-0"]), o.allocate(o.claim("b"), "node-2", ["gpu-0"])]
    claims = [orjson.loads(orjson.dumps(raw)) for raw in claims]   # fresh strings, as decoded
    expected = [json_of(raw) for raw in claims]
    for raw in claims:
        cache.apply("ResourceClaim", "ADDED", raw)
    stored = [cache.raw("ResourceClaim", "default/a"), cache.raw("ResourceClaim", "default/b")]
    assert [json_of(raw) for raw in stored] == expected   # type: ignore[arg-type]
    one, two = (raw["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]
                for raw in stored)   # type: ignore[index]
    assert one["key"] is two["key"] and one["operator"] is two["operator"]
    stored_node = cache.raw("Node", "node-1")
    assert stored_node is not None
    name = stored_node["metadata"]["name"]
    assert one["values"][0] is name and stored_node["metadata"]["labels"]["kubernetes.io/hostname"] is name


def test_a_node_keeps_what_it_says() -> None:
    sharer = ObjectSharer()
    raw = {"metadata": {"name": "n", "labels": {"a": "n", "b": "other"}}}
    assert sharer.node(copy.deepcopy(raw)) == raw
    assert sharer.node({"metadata": "not an object"}) == {"metadata": "not an object"}
    assert sharer.node({}) == {}


def test_node_selectors_pinning_one_node_are_one_object_and_others_keep_their_own_json() -> None:
    sharer = ObjectSharer(max_entries=10)

    def allocated(selector: Any) -> dict:
        raw = {"metadata": {"name": "c"}, "status": {"allocation": {"nodeSelector": selector}}}
        return sharer.resource_claim(orjson.loads(orjson.dumps(raw)))["status"]["allocation"]["nodeSelector"]

    def pinning(name: str, **extra: Any) -> dict:
        return {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [name], **extra}]}]}

    first, again, other = allocated(pinning("n1")), allocated(pinning("n1")), allocated(pinning("n2"))
    assert first is again and first == pinning("n1") and other == pinning("n2") and other is not first
    for selector in (pinning("n1", extra=1), {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}]}]}, pinning("n1") | {"x": 1}):
        kept = allocated(selector)
        assert kept == selector and kept is not first and allocated(copy.deepcopy(selector)) is kept
    for index in range(30):   # bounded like the other tables
        allocated(pinning(f"node-{index}"))
    assert len(sharer._pinned) <= 10
