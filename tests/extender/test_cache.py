"""ClusterCache: snapshot loading, incremental indexes, invalid objects, stale events."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from allocator import FeatureGates
from common.claimrefs import known_claim_names
from extender.state import cache as cache_module
from extender.state.cache import CacheError, ClusterCache

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "cluster"


def example_objects() -> list[dict]:
    files = sorted(EXAMPLES.glob("*.yaml"))
    return [obj for path in files for obj in yaml.safe_load_all(path.read_text()) if obj]


def names(objs: list[dict]) -> list[str]:
    return [obj["metadata"]["name"] for obj in objs]


@pytest.fixture
def cache() -> ClusterCache:
    return ClusterCache.from_objects(example_objects(), FeatureGates())


def claim(name: str, uid: str, *, rv: str = "1", allocation: dict | None = None) -> dict:
    obj: dict = {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "ns", "uid": uid, "resourceVersion": rv},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
    }
    if allocation is not None:
        obj["status"] = {"allocation": allocation}
    return obj


def allocation(device: str, pool: str = "node-1") -> dict:
    return {"devices": {"results": [{"request": "gpu", "driver": "gpu.example.com", "pool": pool,
                                     "device": device}]}}


def pod(name: str, uid: str, *, claims: list[dict], statuses: list[dict] | None = None,
        rv: str = "1") -> dict:
    obj: dict = {"apiVersion": "v1", "kind": "Pod",
                 "metadata": {"name": name, "namespace": "ns", "uid": uid, "resourceVersion": rv},
                 "spec": {"containers": [{"name": "c"}], "resourceClaims": claims}}
    if statuses is not None:
        obj["status"] = {"resourceClaimStatuses": statuses}
    return obj


def test_snapshot_of_the_example_cluster(cache: ClusterCache) -> None:
    assert cache.ready
    assert cache.node_names() == ["node-1", "node-2", "node-3"]
    assert cache.node("node-2") is not None and cache.node("node-2").name == "node-2"
    assert cache.node("nope") is None
    assert cache.device_class("gpu.example.com") is not None
    assert cache.raw("ResourceClaimTemplate", "default/one-gpu")["metadata"]["uid"]
    assert cache.raw("ResourceClaimTemplate", "default/two-gpus") is None
    training = cache.claim("default", "training")
    assert training is not None and training.allocation is not None
    assert cache.claim_by_uid(training.uid) is training
    assert cache.allocated.owner_of("gpu.example.com", "node-1", "gpu-0") == "default/training"
    assert cache.allocated.owner_of("gpu.example.com", "node-1", "gpu-2") is None
    worker = cache.pod("default", "worker")
    assert cache.pod_by_uid(worker["metadata"]["uid"]) == worker
    # template claim resolved through status.resourceClaimStatuses
    assert known_claim_names(worker) == ["worker-gpu-k8f2x"]
    assert known_claim_names(cache.pod("default", "inference")) == ["single-gpu"]
    stats = cache.stats()
    assert stats["objects"]["ResourceClaim"] == 8 and stats["allocatedClaims"] == 1 and stats["invalid"] == {}
    assert stats["objects"]["PodGroup"] == 1
    assert names(cache.pods_in_group("default", "train")) == [f"train-worker-{i}" for i in range(3)]


def test_objects_round_trip_through_from_objects(cache: ClusterCache) -> None:
    objects = cache.objects()
    assert len(objects) == sum(cache.stats()["objects"].values())
    assert all(obj["kind"] and obj["apiVersion"] for obj in objects)
    again = ClusterCache.from_objects(copy.deepcopy(objects), FeatureGates())
    assert again.objects() == objects


def test_snapshot_defaults_lists_and_ignored_kinds() -> None:
    bare = claim("c", "", rv="")
    del bare["metadata"]["namespace"], bare["metadata"]["uid"]
    node_list = {"apiVersion": "v1", "kind": "NodeList", "items": [{"metadata": {"name": "n1"}}]}
    cache = ClusterCache.from_objects([bare, node_list, {"apiVersion": "v1", "kind": "Namespace",
                                                         "metadata": {"name": "x"}}, None], FeatureGates())
    loaded = cache.claim("default", "c")
    assert loaded is not None and loaded.uid, "namespace defaults to 'default' and a uid is derived"
    again = ClusterCache.from_objects([bare], FeatureGates())
    assert again.claim("default", "c").uid == loaded.uid, "derived uids are stable"
    assert cache.node_names() == ["n1"]
    assert cache.stats()["ignored"] == 1


def test_allocation_changes_update_allocated_state() -> None:
    cache = ClusterCache(FeatureGates())
    cache.apply("ResourceClaim", "ADDED", claim("a", "uid-a"))
    assert cache.allocated.owner_of("gpu.example.com", "node-1", "gpu-0") is None
    cache.apply("ResourceClaim", "MODIFIED", claim("a", "uid-a", rv="2", allocation=allocation("gpu-0")))
    assert cache.allocated.owner_of("gpu.example.com", "node-1", "gpu-0") == "ns/a"
    # reservation-only change keeps the allocation counted
    reserved = claim("a", "uid-a", rv="3", allocation=allocation("gpu-0"))
    reserved["status"]["reservedFor"] = [{"resource": "pods", "name": "p", "uid": "p1"}]
    cache.apply("ResourceClaim", "MODIFIED", reserved)
    assert cache.allocated.owner_of("gpu.example.com", "node-1", "gpu-0") == "ns/a"
    cache.apply("ResourceClaim", "MODIFIED", claim("a", "uid-a", rv="4"))   # deallocated
    assert cache.allocated.owner_of("gpu.example.com", "node-1", "gpu-0") is None
    cache.apply("ResourceClaim", "MODIFIED", claim("a", "uid-a", rv="5", allocation=allocation("gpu-1")))
    cache.apply("ResourceClaim", "DELETED", claim("a", "uid-a", rv="6", allocation=allocation("gpu-1")))
    assert cache.allocated.owner_of("gpu.example.com", "node-1", "gpu-1") is None
    assert cache.claim("ns", "a") is None and cache.claim_by_uid("uid-a") is None


def test_recreated_claim_with_new_uid_replaces_the_old_one() -> None:
    cache = ClusterCache(FeatureGates())
    cache.apply("ResourceClaim", "ADDED", claim("a", "old", allocation=allocation("gpu-0")))
    cache.apply("ResourceClaim", "MODIFIED", claim("a", "new", rv="2"))
    assert cache.claim_by_uid("old") is None and cache.claim_by_uid("new") is not None
    assert cache.allocated.owner_of("gpu.example.com", "node-1", "gpu-0") is None


def test_older_resource_version_is_ignored() -> None:
    cache = ClusterCache(FeatureGates())
    cache.apply("ResourceClaim", "ADDED", claim("a", "uid-a", rv="10", allocation=allocation("gpu-0")))
    cache.apply("ResourceClaim", "MODIFIED", claim("a", "uid-a", rv="9"))
    assert cache.claim("ns", "a").allocation is not None
    assert cache.allocated.owner_of("gpu.example.com", "node-1", "gpu-0") == "ns/a"


def test_pods_follow_pod_updates() -> None:
    cache = ClusterCache(FeatureGates())
    template_ref = [{"name": "gpu", "resourceClaimTemplateName": "t"},
                    {"name": "shared", "resourceClaimName": "s"}]
    cache.apply("Pod", "ADDED", pod("p", "p1", claims=template_ref))
    assert known_claim_names(cache.pod_by_uid("p1")) == ["s"]
    cache.apply("Pod", "MODIFIED", pod("p", "p1", claims=template_ref, rv="2",
                                       statuses=[{"name": "gpu", "resourceClaimName": "p-gpu-abcde"}]))
    assert known_claim_names(cache.pod_by_uid("p1")) == ["p-gpu-abcde", "s"]
    cache.apply("Pod", "ADDED", pod("q", "q1", claims=[{"name": "shared", "resourceClaimName": "s"}]))
    assert cache.pod_by_uid("q1")["metadata"]["name"] == "q"
    cache.apply("Pod", "DELETED", pod("p", "p1", claims=template_ref, rv="3"))
    assert cache.pod("ns", "p") is None
    assert cache.pod_by_uid("q1")["metadata"]["name"] == "q"
    assert cache.pod_by_uid("p1") is None


def test_claim_names_of_pod_skips_unresolved_and_null_entries() -> None:
    p = pod("p", "p1", claims=[{"name": "a", "resourceClaimTemplateName": "t"},
                               {"name": "b", "resourceClaimTemplateName": "t"},
                               {"name": "c", "resourceClaimName": "direct"}],
            statuses=[{"name": "a", "resourceClaimName": None}])
    assert known_claim_names(p) == ["direct"]


def test_invalid_objects_are_counted_not_indexed_and_never_raise(caplog: pytest.LogCaptureFixture) -> None:
    cache = ClusterCache(FeatureGates())
    good = claim("a", "uid-a", allocation=allocation("gpu-0"))
    cache.apply("ResourceClaim", "ADDED", good)
    broken = claim("a", "uid-a", rv="2")
    broken["spec"]["devices"]["requests"] = "not a list"
    cache.apply("ResourceClaim", "MODIFIED", broken)
    assert cache.claim("ns", "a") is None, "an invalid update takes the object out of the indexes"
    assert cache.allocated.owner_of("gpu.example.com", "node-1", "gpu-0") is None
    stats = cache.stats()
    assert stats["invalid"] == {"ResourceClaim": 1}
    error = stats["invalidObjects"][0]["error"]
    assert "ns/a" in error and "spec.devices.requests" in error
    assert "ignoring invalid object" in caplog.text
    assert broken in cache.objects(), "the snapshot keeps invalid objects for offline replay"

    cache.apply("Pod", "ADDED", {"metadata": {"name": "p", "namespace": "ns"}})
    assert cache.pod("ns", "p") is None and "Pod ns/p: metadata.uid" in str(cache.stats()["invalidObjects"])
    cache.apply("Node", "ADDED", {"metadata": {}})
    cache.apply("Node", "ADDED", ["not", "a", "mapping"])  # type: ignore[arg-type]
    assert cache.stats()["unnamedInvalid"] == 2

    cache.apply("ResourceClaim", "MODIFIED", claim("a", "uid-a", rv="3", allocation=allocation("gpu-0")))
    assert cache.claim("ns", "a") is not None and cache.stats()["invalid"] == {"Pod": 1}
    assert cache.allocated.owner_of("gpu.example.com", "node-1", "gpu-0") == "ns/a"
    cache.apply("Pod", "DELETED", {"metadata": {"name": "p", "namespace": "ns"}})
    assert cache.stats()["invalid"] == {}


def test_unknown_kind_or_event_type_is_an_error() -> None:
    cache = ClusterCache(FeatureGates())
    with pytest.raises(CacheError, match="unknown kind 'Deployment'"):
        cache.apply("Deployment", "ADDED", {"metadata": {"name": "x"}})
    with pytest.raises(CacheError, match="unknown event type 'BOOKMARK'"):
        cache.apply("Node", "BOOKMARK", {"metadata": {"name": "x"}})


def test_replace_deletes_what_the_new_list_lacks_and_notifies_subscribers() -> None:
    cache = ClusterCache(FeatureGates())
    seen: list[tuple[str, str, str, bool]] = []
    cache.subscribe(lambda kind, event, new, old: seen.append(
        (kind, event, new["metadata"]["name"], old is not None)))
    cache.apply("ResourceClaim", "ADDED", claim("a", "uid-a", allocation=allocation("gpu-0")))
    cache.apply("ResourceClaim", "ADDED", claim("b", "uid-b"))
    cache.replace("ResourceClaim", [claim("b", "uid-b", rv="5"), claim("c", "uid-c", rv="6")])
    assert sorted(c.name for c in (cache.claim("ns", n) for n in "abc") if c) == ["b", "c"]
    assert cache.allocated.owner_of("gpu.example.com", "node-1", "gpu-0") is None
    assert seen == [("ResourceClaim", "ADDED", "a", False), ("ResourceClaim", "ADDED", "b", False),
                    ("ResourceClaim", "MODIFIED", "b", True), ("ResourceClaim", "ADDED", "c", False),
                    ("ResourceClaim", "DELETED", "a", True)]


def test_a_list_reads_each_objects_name_once_and_reports_unnamed_ones_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    cache = ClusterCache(FeatureGates())
    cache.apply("ResourceClaim", "ADDED", claim("b", "uid-b"))
    seen: list[tuple[str, str]] = []
    cache.subscribe(lambda kind, event, new, old: seen.append((event, new["metadata"]["name"])))
    keys: list[object] = []
    real_object_key = cache_module.object_key
    monkeypatch.setattr(cache_module, "object_key",
                        lambda raw, **kw: keys.append(raw) or real_object_key(raw, **kw))
    listed = [claim("b", "uid-b", rv="5"), {"metadata": {"namespace": "ns"}}, ["not", "a", "mapping"],
              claim("c", "uid-c")]
    cache.replace("ResourceClaim", listed)  # type: ignore[arg-type]
    # The list's objects are most of a sync's work: each one's key is worked out once, not three times.
    assert len(keys) == 3, "one key per object that is a mapping"
    assert seen == [("MODIFIED", "b"), ("ADDED", "c")]
    assert cache.stats()["unnamedInvalid"] == 2
    assert [c.name for c in (cache.claim("ns", n) for n in "bc") if c] == ["b", "c"]


def test_slices_classes_and_taint_rules_feed_the_inventory(cache: ClusterCache) -> None:
    def pools() -> set[tuple[str, str]]:
        return {(p["driver"], p["pool"]) for p in cache.inventory.describe_pools()}

    assert ("gpu.example.com", "node-1") in pools()
    for raw in cache.objects():
        if raw["kind"] == "ResourceSlice" and raw["spec"]["pool"]["name"] == "node-1":
            cache.apply("ResourceSlice", "DELETED", raw)
    assert ("gpu.example.com", "node-1") not in pools()

    rule = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule", "metadata": {"name": "r"},
            "spec": {"deviceSelector": {"driver": "gpu.example.com"},
                     "taint": {"key": "maintenance", "effect": "NoSchedule"}}}
    cache.apply("DeviceTaintRule", "ADDED", rule)
    assert [r.name for r in cache.taint_rules()] == ["r"]
    cache.apply("DeviceTaintRule", "DELETED", rule)
    assert cache.taint_rules() == []
    cache.apply("DeviceClass", "DELETED", {"metadata": {"name": "gpu.example.com"}})
    assert cache.device_class("gpu.example.com") is None


def test_internal_errors_and_failing_subscribers_do_not_escape(caplog: pytest.LogCaptureFixture,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    cache = ClusterCache(FeatureGates())
    delivered: list[str] = []

    def failing(kind: str, event: str, new: dict, old: dict | None) -> None:
        raise RuntimeError("subscriber bug")

    cache.subscribe(failing)
    cache.subscribe(lambda kind, event, new, old: delivered.append(new["metadata"]["name"]))

    def broken_upsert(slice_: object) -> None:
        raise KeyError("inventory bug")

    monkeypatch.setattr(cache.inventory, "upsert_slice", broken_upsert)
    cache.apply("ResourceSlice", "ADDED", {"metadata": {"name": "s"}, "spec": {
        "driver": "d", "nodeName": "n", "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
        "devices": []}})
    assert "internal error: KeyError" in cache.stats()["invalidObjects"][0]["error"]
    assert delivered == ["s"], "later subscribers still run"
    assert "cache subscriber failed" in caplog.text and "internal error indexing" in caplog.text


def test_the_same_resource_version_is_applied_once() -> None:
    cache = ClusterCache(FeatureGates())
    seen: list[str] = []
    cache.subscribe(lambda kind, event, new, old: seen.append(event))
    cache.apply("ResourceClaim", "ADDED", claim("a", "uid-a", rv="7"))
    echo = claim("a", "uid-a", rv="7")
    cache.apply("ResourceClaim", "MODIFIED", echo)
    assert seen == ["ADDED"] and cache.raw("ResourceClaim", "ns/a") is not echo
    unversioned = claim("a", "uid-a", rv="")   # snapshot objects without versions always apply
    cache.apply("ResourceClaim", "MODIFIED", unversioned)
    assert seen == ["ADDED", "MODIFIED"] and cache.raw("ResourceClaim", "ns/a") == unversioned


def test_reapplying_the_stored_object_reindexes_it() -> None:
    cache = ClusterCache(FeatureGates())
    cache.apply("ResourceClaim", "ADDED", claim("a", "uid-a", rv="7"))
    stored = cache.raw("ResourceClaim", "ns/a")
    stored["status"] = {"allocation": allocation("gpu-3")}
    cache.apply("ResourceClaim", "MODIFIED", stored)
    assert cache.allocated.owner_of("gpu.example.com", "node-1", "gpu-3") == "ns/a"


def test_an_invalid_claims_allocation_still_counts_its_devices() -> None:
    cache = ClusterCache(FeatureGates())
    cache.apply("ResourceClaim", "ADDED", claim("a", "uid-a", allocation=allocation("gpu-0")))
    broken = claim("a", "uid-a", rv="2", allocation=allocation("gpu-0"))
    broken["spec"]["devices"]["requests"] = "not a list"   # beyond our model, accepted by the API server
    cache.apply("ResourceClaim", "MODIFIED", broken)
    assert cache.claim("ns", "a") is None, "never allocated or reserved by us"
    assert cache.allocated.owner_of("gpu.example.com", "node-1", "gpu-0") == "ns/a"
    [detail] = cache.stats()["invalidObjects"]
    assert "spec.devices.requests" in detail["error"]
    assert "still counts 1 device(s) as in use" in detail["error"]
    assert cache.stats()["invalidClaimAllocations"] == {"claims": 1, "devices": 1, "unreadable": 0}

    moved = copy.deepcopy(broken)
    moved["metadata"]["resourceVersion"] = "3"
    moved["status"]["allocation"] = allocation("gpu-1")
    cache.apply("ResourceClaim", "MODIFIED", moved)
    assert cache.allocated.owner_of("gpu.example.com", "node-1", "gpu-0") is None
    assert cache.allocated.owner_of("gpu.example.com", "node-1", "gpu-1") == "ns/a"
    cache.apply("ResourceClaim", "MODIFIED", claim("a", "uid-a", rv="4", allocation=allocation("gpu-2")))
    assert cache.claim("ns", "a") is not None and cache.stats()["invalidClaimAllocations"]["claims"] == 0
    assert [cache.allocated.is_allocated(("gpu.example.com", "node-1", f"gpu-{i}")) for i in range(3)] == [
        False, False, True]

    moved["metadata"]["resourceVersion"] = "5"
    cache.apply("ResourceClaim", "MODIFIED", moved)
    assert cache.allocated.owner_of("gpu.example.com", "node-1", "gpu-2") is None
    cache.apply("ResourceClaim", "DELETED", moved)
    assert not any(cache.allocated.is_allocated(("gpu.example.com", "node-1", f"gpu-{i}")) for i in range(3))
    assert cache.stats()["invalid"] == {} and cache.stats()["invalidClaimAllocations"]["claims"] == 0


def test_an_allocation_we_cannot_read_is_logged_counted_and_explained(
        caplog: pytest.LogCaptureFixture) -> None:
    cache = ClusterCache(FeatureGates())
    unreadable = claim("a", "uid-a", allocation=allocation("gpu-0"))
    results = unreadable["status"]["allocation"]["devices"]["results"]
    results.append({"request": "gpu", "driver": "gpu.example.com", "device": "gpu-1"})   # no pool
    cache.apply("ResourceClaim", "ADDED", unreadable)
    assert cache.claim("ns", "a") is None
    assert cache.allocated.owner_of("gpu.example.com", "node-1", "gpu-0") == "ns/a"
    error = cache.stats()["invalidObjects"][0]["error"]
    assert "status.allocation.devices.results[1].pool" in error      # why the claim is rejected
    assert "results[1]: pool missing" in error and "given out twice" in error
    assert cache.stats()["invalidClaimAllocations"] == {"claims": 1, "devices": 1, "unreadable": 1}
    assert "given out twice" in caplog.text
    garbage = claim("b", "uid-b")
    garbage["status"] = {"allocation": ["not", "an", "object"]}
    cache.apply("ResourceClaim", "ADDED", garbage)
    assert "status.allocation: must be an object; no device counted" in str(cache.stats()["invalidObjects"])


def test_a_claim_without_uid_gives_its_devices_back_when_deleted() -> None:
    cache = ClusterCache(FeatureGates())
    raw = claim("a", "", allocation=allocation("gpu-0"))
    cache.apply("ResourceClaim", "ADDED", raw)
    assert cache.allocated.owner_of("gpu.example.com", "node-1", "gpu-0") == "ns/a"
    cache.apply("ResourceClaim", "DELETED", raw)
    assert cache.allocated.owner_of("gpu.example.com", "node-1", "gpu-0") is None


def test_managed_fields_are_dropped_so_writes_back_keep_the_servers(cache: ClusterCache) -> None:
    raw = claim("tracked", "uid-tracked")
    raw["metadata"]["managedFields"] = [{"manager": "kube-controller-manager", "operation": "Update"}]
    cache.apply("ResourceClaim", "ADDED", raw)
    stored = cache.raw("ResourceClaim", "ns/tracked")
    assert stored is not None and "managedFields" not in stored["metadata"]
    assert stored["metadata"]["uid"] == "uid-tracked"


def test_a_new_version_of_a_claim_reuses_the_parsed_spec_only_when_the_spec_did_not_change() -> None:
    cache = ClusterCache(FeatureGates())
    cache.apply("ResourceClaim", "ADDED", claim("a", "uid-a", rv="1"))
    first = cache.claim("ns", "a")
    cache.apply("ResourceClaim", "MODIFIED", claim("a", "uid-a", rv="2", allocation=allocation("gpu-0")))
    second = cache.claim("ns", "a")
    assert second is not first and second.allocation is not None
    assert second.requests is first.requests, "an equal spec is shared, so its parse is reused"
    changed = claim("a", "uid-a", rv="3")
    changed["spec"]["devices"]["requests"][0]["exactly"]["count"] = 2
    cache.apply("ResourceClaim", "MODIFIED", changed)
    third = cache.claim("ns", "a")
    assert third.requests is not first.requests and third.requests[0].exactly.count == 2
    # A claim read from the cache is a copy whose spec is the stored (shared) object: changed on a deep
    # copy, at the same version, it is taken and parsed again.
    stored = copy.deepcopy(cache.raw("ResourceClaim", "ns/a"))
    stored["spec"]["devices"]["requests"][0]["exactly"]["count"] = 3
    cache.apply("ResourceClaim", "MODIFIED", stored)
    assert cache.claim("ns", "a").requests[0].exactly.count == 3
    broken = claim("a", "uid-a", rv="4")
    broken["spec"]["devices"]["requests"][0]["exactly"]["count"] = 0
    cache.apply("ResourceClaim", "MODIFIED", broken)
    assert cache.claim("ns", "a") is None and "count" in cache.stats()["invalidObjects"][0]["error"]
