"""The cache's Pods, claims, slices and Nodes kept packed (extender.state.packing): what is read back is
what was stored."""

from __future__ import annotations

import copy
import sys
from functools import partial
from typing import Any

import dra_objects as o
import pytest

from allocator import FeatureGates
from extender.state import packing
from extender.state.cache import ClusterCache
from extender.state.packing import PackedClaim, PackedNode, PackedStore
from extender.state.podtransform import slim_pod


def bound_pod(name: str) -> dict[str, Any]:
    pod = o.pod(name, [f"{name}-gpu"])
    owner = {"kind": "Job", "name": "train", "uid": "u-1", "controller": True}
    pod["metadata"].update(resourceVersion="7", labels={"app": "train"}, ownerReferences=[owner])
    pod["spec"]["nodeName"] = "node-1"
    pod["status"] = {"phase": "Running", "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "x"}]}
    return pod


@pytest.mark.parametrize("obj", [
    bound_pod("p"),
    o.pod("pending", ["c"]),
    {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bare", "namespace": "default", "uid": "u"}},
    # Sections that are not objects, and empty ones, are kept as they are.
    {"kind": "Pod", "metadata": {"name": "odd", "uid": "u"}, "spec": ["not", "an", "object"], "status": None},
    {"kind": "Pod", "metadata": {}, "spec": {}, "status": {}, "extra": {"nested": {"kept": True}}},
    # Keys that would break generated code if they were written unquoted.
    {"kind": "Pod", "metadata": {"a'b\"c": 1, "}, p[0]": 2, "\n\\": 3, "__import__('os')": 4}},
    # Keys that are not strings (a YAML snapshot can have them): rebuilt without generated code.
    {"kind": "Pod", 7: "seven", "metadata": {1: "one", None: "none"}, "spec": {True: [1]}},
])
def test_an_object_reads_back_equal_with_its_values_themselves(obj: dict[str, Any]) -> None:
    store = PackedStore()
    store["k"] = obj
    read = store["k"]
    assert read == obj and list(read) == list(obj)
    for key, value in obj.items():
        if key in packing.SECTIONS and type(value) is dict:
            assert read[key] is not value and list(read[key]) == list(value)
            assert all(read[key][name] is item for name, item in value.items())
        else:
            assert read[key] is value
        assert store["k"].get(key) == value
    assert store["k"].get("absent") is None and store.get("absent") is None


def test_only_layouts_of_string_keys_rebuild_through_generated_code() -> None:
    store = PackedStore()
    store["str"] = bound_pod("p")
    store["int"] = {"kind": "Pod", "metadata": {1: "one"}}
    assert not isinstance(store._packed["str"][0].rebuild, partial)
    assert isinstance(store._packed["int"][0].rebuild, partial)


def test_a_read_is_a_copy_and_changing_it_changes_nothing_stored() -> None:
    store = PackedStore()
    store["k"] = bound_pod("p")
    read = store["k"]
    read["spec"]["nodeName"] = "elsewhere"
    read["metadata"] = {}
    assert store["k"] == bound_pod("p")
    assert store.get("k") is not store.get("k")


def test_the_mapping_protocol() -> None:
    store = PackedStore()
    assert len(store) == 0 and "a" not in store and store.get("a") is None and store.get("a", 1) == 1
    store["a"], store["b"] = o.pod("a", ["c"]), o.pod("b", ["c"])
    assert len(store) == 2 and "a" in store and list(store) == ["a", "b"]
    assert dict(store.items()) == {"a": o.pod("a", ["c"]), "b": o.pod("b", ["c"])}
    del store["a"]
    assert list(store) == ["b"] and store.get("a") is None
    with pytest.raises(KeyError):
        store["a"]
    with pytest.raises(KeyError):
        del store["a"]


def test_pods_of_one_shape_share_their_layout_and_take_less_than_dicts() -> None:
    store = PackedStore()
    pods = [bound_pod(f"p{index}") for index in range(3)]
    for index, pod in enumerate(pods):
        store[str(index)] = pod
    packed = [store._packed[str(index)] for index in range(3)]
    assert packed[0][0] is packed[1][0] is packed[2][0]
    as_dicts = sum(sys.getsizeof(part) for part in (pods[0], *(pods[0][key] for key in packing.SECTIONS)))
    assert sys.getsizeof(packed[0]) < as_dicts / 2


def test_the_layout_table_is_bounded_and_what_is_stored_stays(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(packing, "MAX_LAYOUTS", 2)
    store = PackedStore()
    shapes = [{"kind": "Pod", "metadata": {"name": f"p{i}", f"field{i}": i}} for i in range(5)]
    for index, obj in enumerate(shapes):
        store[str(index)] = obj
    assert len(store._layouts) <= 2
    assert [store[str(index)] for index in range(5)] == shapes


def test_the_cache_reads_its_pods_back_as_they_were_stored() -> None:
    cache = ClusterCache(FeatureGates())
    pod = slim_pod(bound_pod("p"))   # what the cache keeps of a Pod
    cache.apply("Pod", "ADDED", copy.deepcopy(pod))
    stored = cache.pod("default", "p")
    assert stored == pod and cache.pod_by_uid(pod["metadata"]["uid"]) == pod
    assert cache.valid_objects("Pod") == [pod] and cache.raw("Pod", "default/p") == pod
    assert cache.objects() == [pod] == cache.objects("Pod") and cache.objects("ResourceClaim") == []
    # A read changed in place changes nothing stored (the cache never does this itself).
    stored["spec"]["nodeName"] = "elsewhere"
    assert cache.pod("default", "p") == pod
    # The same version again, equal: skipped; a new version: taken.
    cache.apply("Pod", "MODIFIED", copy.deepcopy(pod))
    newer = copy.deepcopy(pod)
    newer["metadata"]["resourceVersion"] = "8"
    newer["status"]["phase"] = "Succeeded"
    cache.apply("Pod", "MODIFIED", copy.deepcopy(newer))
    assert cache.pod("default", "p") == newer
    cache.apply("Pod", "DELETED", newer)
    assert cache.pod("default", "p") is None and cache.pod_by_uid(pod["metadata"]["uid"]) is None


def devices_store() -> PackedStore:
    return PackedStore(listed=frozenset({("spec", "devices")}))


def test_a_slice_reads_back_equal_with_its_devices_packed_one_by_one() -> None:
    store = devices_store()
    slice_ = o.gpu_slice("node-1", 3)
    slice_["spec"]["devices"][1]["taints"] = [{"key": "k", "effect": "NoExecute"}]   # another device shape
    store["s"] = slice_
    packed = store._packed["s"]
    devices = next(value for value in packed if type(value) is tuple)
    assert len(devices) == 3 and devices[0][0] is devices[2][0] is not devices[1][0]
    read = store["s"]
    assert read == slice_ and list(read["spec"]) == list(slice_["spec"])
    for got, device in zip(read["spec"]["devices"], slice_["spec"]["devices"], strict=True):
        assert type(got) is dict and got is not device and list(got) == list(device)
        assert all(got[key] is value for key, value in device.items())
    read["spec"]["devices"][0]["name"] = "changed"
    assert store["s"] == slice_ and store["s"]["spec"]["devices"] is not store["s"]["spec"]["devices"]


@pytest.mark.parametrize("devices", [[], ["not", "objects"], [{"name": "a"}, 7], None, {"name": "a"}])
def test_a_list_not_made_of_objects_only_is_kept_as_it_is(devices: Any) -> None:
    store = devices_store()
    slice_ = {"kind": "ResourceSlice", "metadata": {"name": "s"}, "spec": {"driver": "d", "devices": devices}}
    store["s"] = slice_
    assert store["s"] == slice_ and store["s"]["spec"]["devices"] is devices


def test_listed_items_with_keys_that_are_not_strings_rebuild_without_generated_code() -> None:
    store = devices_store()
    slice_ = {"kind": "ResourceSlice", "metadata": {1: "one"},
              "spec": {"devices": [{"name": "a", 2: "two"}, {"name": "b"}]}}
    store["s"] = slice_
    assert store["s"] == slice_
    assert isinstance(store._packed["s"][0].rebuild, partial)
    items = store._packed["s"][-1]
    assert isinstance(items[0][0].rebuild, partial) and not isinstance(items[1][0].rebuild, partial)
    # Only the lists named are packed: a pod store keeps a devices list as it is.
    plain = PackedStore()
    plain["s"] = slice_
    assert plain._packed["s"][-1] is slice_["spec"]["devices"]


def test_a_packed_slice_takes_under_half_of_its_dicts() -> None:
    store = devices_store()
    slice_ = o.gpu_slice("node-1", 8)
    store["s"] = slice_
    spec = slice_["spec"]
    containers = [slice_, slice_["metadata"], spec, spec["devices"], *spec["devices"]]
    packed = store._packed["s"]
    devices = next(value for value in packed if type(value) is tuple)
    assert sum(map(sys.getsizeof, (packed, devices, *devices))) < sum(map(sys.getsizeof, containers)) / 2


def test_the_cache_stores_slices_packed_and_reads_them_back() -> None:
    cache = ClusterCache(FeatureGates())
    slice_ = o.gpu_slice("node-1", 2)
    cache.apply("ResourceSlice", "ADDED", copy.deepcopy(slice_))
    assert cache.raw("ResourceSlice", "node-1-gpu") == slice_ == cache.objects("ResourceSlice")[0]
    assert isinstance(cache._objects["ResourceSlice"], PackedStore)
    [parsed] = cache.inventory.slices()
    assert [device.name for device in parsed.devices] == ["gpu-0", "gpu-1"]
    cache.apply("ResourceSlice", "DELETED", slice_)
    assert cache.raw("ResourceSlice", "node-1-gpu") is None and not list(cache.inventory.slices())


def test_the_cache_keeps_claims_packed_and_reads_what_hot_paths_need_from_the_parse() -> None:
    cache = ClusterCache(FeatureGates())
    cache.apply("Pod", "ADDED", o.pod("p", ["c"]))
    uid = cache.pod("default", "p")["metadata"]["uid"]   # type: ignore[index]
    claim = o.allocate(o.claim("c"), "node-1", ["gpu-0"], [{"resource": "pods", "name": "p", "uid": uid}])
    claim["metadata"]["resourceVersion"] = "5"
    cache.apply("ResourceClaim", "ADDED", copy.deepcopy(claim))
    parsed = cache.claim("default", "c")
    assert isinstance(parsed, PackedClaim) and type(parsed._packed) is tuple
    assert parsed.raw == claim and parsed.raw is not parsed.raw   # a copy on every read
    assert cache.raw("ResourceClaim", "default/c") == claim and cache.objects("ResourceClaim") == [claim]
    assert parsed.spec is parsed.raw["spec"]   # kept whole: its identity reuses its parse
    assert parsed.reserved_uids == (uid,) and parsed.resource_version == "5"
    assert parsed.allocation == claim["status"]["allocation"]
    assert cache.claim_version("default", "c") == "5" and cache.claim_version("default", "other") is None
    # reservedFor's entries are packed one by one, metadata and status flattened.
    stored = cache._objects["ResourceClaim"]._packed["default/c"]   # type: ignore[attr-defined]
    assert not any(type(value) is dict and value is claim["metadata"] for value in stored)
    # A new version at the same spec takes the parse; an invalid one drops the claim but keeps its version.
    newer = copy.deepcopy(claim)
    newer["metadata"]["resourceVersion"] = "6"
    newer["status"].pop("reservedFor")
    cache.apply("ResourceClaim", "MODIFIED", newer)
    again = cache.claim("default", "c")
    assert again is not None and again.requests is parsed.requests and again.reserved_uids == ()
    broken = copy.deepcopy(newer)
    broken["metadata"]["resourceVersion"] = "7"
    broken["spec"]["devices"]["requests"] = "not a list"
    cache.apply("ResourceClaim", "MODIFIED", broken)
    assert cache.claim("default", "c") is None and cache.claim_version("default", "c") == "7"


def test_a_packed_claim_takes_under_half_of_its_dicts() -> None:
    store = PackedStore(listed=frozenset({("status", "reservedFor")}), sections=packing.CLAIM_SECTIONS)
    claim = o.allocate(o.claim("c"), "node-1", ["gpu-0"], [{"resource": "pods", "name": "p", "uid": "u"}])
    store["c"] = claim
    packed = store._packed["c"]
    reserved = next(value for value in packed if type(value) is tuple)
    status = claim["status"]
    flattened = [claim, claim["metadata"], status, status["reservedFor"], *status["reservedFor"]]
    assert sum(map(sys.getsizeof, (packed, reserved, *reserved))) < sum(map(sys.getsizeof, flattened)) / 2
    assert store["c"] == claim and store["c"]["spec"] is claim["spec"]


def test_lists_can_be_packed_only_in_flattened_sections() -> None:
    with pytest.raises(ValueError, match="only lists in the sections"):
        PackedStore(listed=frozenset({("spec", "devices")}), sections=packing.CLAIM_SECTIONS)
    with pytest.raises(ValueError, match="only lists that are listed"):
        PackedStore(shared=frozenset({("spec", "devices")}))


def test_equal_packed_lists_of_plain_values_are_one_tuple_and_others_their_own() -> None:
    store = PackedStore(listed=frozenset({("spec", "resourceClaims"), ("status", "resourceClaimStatuses")}),
                        shared=frozenset({("spec", "resourceClaims")}))
    refs = [{"name": "gpu", "resourceClaimTemplateName": "train-gpu"}]
    for name in ("a", "b"):
        pod = o.pod(name, [])
        pod["spec"]["resourceClaims"] = refs   # what the sharer makes of a workload's references
        pod["status"] = {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": f"{name}-gpu-x1"}]}
        store[name] = pod
    a, b = store._packed["a"], store._packed["b"]
    shared = [value for value in a if type(value) is tuple and value in b]
    assert len(shared) == 1 and any(value is shared[0] for value in b)   # the references: one tuple
    assert store["b"]["status"]["resourceClaimStatuses"] == [{"name": "gpu", "resourceClaimName": "b-gpu-x1"}]
    assert store["a"]["spec"]["resourceClaims"] == refs
    # Devices hold objects: no table entry, each slice its own tuple.
    slices = devices_store()
    slices["s"] = o.gpu_slice("node-1", 2)
    assert slices["s"] == o.gpu_slice("node-1", 2) and not slices._lists


def test_the_shared_lists_table_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(packing, "MAX_SHARED_LISTS", 2)
    store = PackedStore(listed=frozenset({("status", "resourceClaimStatuses")}),
                        shared=frozenset({("status", "resourceClaimStatuses")}))
    pods = []
    for index in range(5):
        pod = o.pod(f"p{index}", [])
        pod["status"] = {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": f"c{index}"}]}
        store[str(index)] = pod
        pods.append(pod)
    assert len(store._lists) <= 2 and [store[str(index)] for index in range(5)] == pods


def test_lists_equal_as_python_values_but_not_as_json_stay_apart() -> None:
    store = PackedStore(listed=frozenset({("spec", "items")}), shared=frozenset({("spec", "items")}))
    store["int"] = {"spec": {"items": [{"value": 1}]}}
    store["bool"] = {"spec": {"items": [{"value": True}]}}
    assert store["bool"]["spec"]["items"][0]["value"] is True
    assert store["int"]["spec"]["items"][0]["value"] == 1
    assert not store._lists


def test_objects_taken_now_are_read_later_as_they_were() -> None:
    cache = ClusterCache(FeatureGates())
    cache.apply("Pod", "ADDED", o.pod("p", ["c"]))
    cache.apply("ResourceClaim", "ADDED", o.claim("c"))
    cache.apply("ResourceSlice", "ADDED", o.gpu_slice("node-1", 2))
    cache.apply("DeviceClass", "ADDED", o.device_class())
    before = cache.objects()
    read = cache.objects_taken()
    newer = o.claim("c")
    newer["metadata"]["resourceVersion"] = "9"
    cache.apply("ResourceClaim", "MODIFIED", newer)
    cache.apply("Pod", "DELETED", o.pod("p", ["c"]))
    cache.apply("ResourceClaim", "ADDED", o.claim("d"))
    assert len(before) == 4 and list(read()) == before   # what was stored when taken, in the same order
    assert cache.objects("ResourceClaim") == [newer, o.claim("d")] != list(read())


def test_the_cache_keeps_nodes_packed_and_filters_read_the_parse() -> None:
    cache = ClusterCache(FeatureGates())
    node = o.node("node-1", {"zone": "a"})
    node["spec"] = {"unschedulable": True}
    node["status"] = {"allocatable": {"cpu": "8", "example.com/gpu": "4"}, "declaredFeatures": ["F"]}
    cache.apply("Node", "ADDED", copy.deepcopy(node))
    parsed = cache.node("node-1")
    assert isinstance(parsed, PackedNode) and type(parsed._packed) is tuple
    assert parsed.raw == node and parsed.raw is not parsed.raw   # a copy on every read
    assert cache.raw("Node", "node-1") == node and cache.objects("Node") == [node]
    assert parsed.allocatable == node["status"]["allocatable"] and parsed.labels == node["metadata"]["labels"]
    assert parsed.declares("F") and parsed.name == "node-1"
    stored = cache._objects["Node"]._packed["node-1"]   # type: ignore[attr-defined]
    assert sys.getsizeof(stored) < sys.getsizeof(node) + sys.getsizeof(node["metadata"])
    newer = copy.deepcopy(node)
    newer["metadata"].update(resourceVersion="2", labels={"zone": "b"})
    cache.apply("Node", "MODIFIED", newer)
    again = cache.node("node-1")
    assert again is not None and again.labels == {"zone": "b"} and again.raw == newer
    cache.apply("Node", "DELETED", newer)
    assert cache.node("node-1") is None and cache.raw("Node", "node-1") is None
