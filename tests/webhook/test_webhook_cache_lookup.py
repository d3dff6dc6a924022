"""The webhook reading the cluster through the extender's ClusterCache."""

from __future__ import annotations

from webhook_fixtures import (
    admission_review,
    allocation,
    claim,
    consumer,
    decide,
    exact_request,
    gpu,
    pod,
    resource_slice,
    result,
    status_update,
    uid,
    with_status,
)

from allocator import FeatureGates
from extender.state.cache import ClusterCache
from extender.state.lookup import ClusterCacheLookup
from extender.state.podtransform import slim_pod
from webhook.admission import AdmissionHandler
from webhook.lookup import StaticClusterLookup


def cluster() -> tuple[list[dict], dict]:
    user = pod("user", {"name": "g", "resourceClaimName": "shared"})
    shared = with_status(
        claim("shared", exact_request("gpu")),
        allocation=allocation(result("gpu", "gpu-0")),
        reserved_for=[consumer(user)],
    )
    slices = [
        resource_slice("s1", [gpu("gpu-0", model="A100"), gpu("gpu-1", model="A100")]),
        resource_slice(
            "s2", [{"name": "nic-0", "attributes": {"x.io/speed": {"int": 100}}}], driver="nic.io"
        ),
    ]
    return [user, shared, *slices], user


def test_adapter_answers_from_the_cache() -> None:
    objects, user = cluster()
    lookup = ClusterCacheLookup(ClusterCache.from_objects(objects, FeatureGates()))
    assert isinstance(lookup, ClusterCacheLookup)
    assert lookup.ready
    assert lookup.pod("ns", "user") == slim_pod(user)  # the cache keeps what the rules read
    shared = lookup.claim("ns", "shared")
    assert shared is not None and shared["metadata"]["name"] == "shared"
    assert lookup.claim("ns", "nope") is None
    assert [c["metadata"]["name"] for c in lookup.allocated_claims()] == ["shared"]
    assert sorted(lookup.devices()) == [
        ("gpu.example.com", "node-1", "gpu-0"),
        ("gpu.example.com", "node-1", "gpu-1"),
        ("nic.io", "node-1", "nic-0"),
    ]
    assert lookup.attribute_names() == {"gpu.example.com/model", "x.io/speed"}
    assert lookup.capacity_names() == {"gpu.example.com/memory"}


def test_adapter_follows_cache_changes() -> None:
    objects, _ = cluster()
    cache = ClusterCache.from_objects(objects, FeatureGates())
    lookup = ClusterCacheLookup(cache)
    assert "gpu.example.com/numa" not in lookup.attribute_names()
    cache.apply("ResourceSlice", "ADDED", resource_slice("s3", [gpu("gpu-9", numa=1)], pool="node-2"))
    assert "gpu.example.com/numa" in lookup.attribute_names()


def test_static_lookups_are_used_as_they_are() -> None:
    static = StaticClusterLookup()
    assert AdmissionHandler(static).lookup is static


def test_rules_over_the_cluster_cache() -> None:
    objects, user = cluster()
    handler = AdmissionHandler(
        ClusterCacheLookup(ClusterCache.from_objects(objects, FeatureGates())), reserved_for_limit=1
    )
    # The shared claim is full at a limit of 1: a second pod is refused.
    newcomer = pod("second", {"name": "g", "resourceClaimName": "shared"})
    assert decide(handler, "validate", admission_review("CREATE", "pods", newcomer))["allowed"] is False
    # Reservations are checked against the cached pods.
    c = claim("other", exact_request("gpu"))
    allocated = with_status(c, allocation=allocation(result("gpu", "gpu-1")), reserved_for=[])
    stale = {**consumer(user), "uid": uid()}
    review = status_update(
        allocated, with_status(c, allocation=allocation(result("gpu", "gpu-1")), reserved_for=[stale])
    )
    assert "stale reference" in decide(handler, "validate", review)["status"]["message"]
    # Cluster-wide eviction counts come from the cache.
    rule = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": "r", "uid": uid()},
        "spec": {"deviceSelector": {}, "taint": {"key": "k", "effect": "NoExecute"}},
    }
    message = decide(handler, "validate", admission_review("CREATE", "devicetaintrules", rule))["status"][
        "message"
    ]
    assert "all 3 devices" in message and "evict 1 pods" in message
