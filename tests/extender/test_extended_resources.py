"""Extended resources backed by DRA (KEP-5004): the mapping from container resources to device requests,
the DeviceClass choice, and filter/bind/undo/stale claims through the scheduler in snapshot mode."""

from __future__ import annotations

import asyncio
from typing import Any

import dra_objects as o
import pytest
from lost_binding import bound_elsewhere_at_binding
from test_scheduling import make, pod_of

from allocator import FeatureGates
from extender.http.explain import explain_pod, render_text
from extender.kube.client import ApiError
from extender.plugin.claimwriter import ClaimWriter
from extender.plugin.extendedresources import (
    EXTENDED_CLAIM_ANNOTATION,
    IMPLICIT_PREFIX,
    build_requests,
    requested_names,
)
from extender.plugin.filtercache import FilterCache
from extender.plugin.scheduling import BindFailed, Scheduler
from extender.state.assume import AssumeCache
from extender.state.cache import ClusterCache

GPU = "example.com/gpu"


def extended_class(name: str = o.CLASS, resource: str | None = GPU, created: str = "2026-01-01T00:00:00Z",
                   expression: str | None = None) -> dict[str, Any]:
    raw = o.device_class(name, expression)
    raw["metadata"]["creationTimestamp"] = created
    if resource is not None:
        raw["spec"]["extendedResourceName"] = resource
    return raw


def container(name: str, requests: dict[str, Any] | None = None, *, limits: dict[str, Any] | None = None,
              sidecar: bool = False) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = {k: str(v) for k, v in requests.items()}
    if limits is not None:
        resources["limits"] = {k: str(v) for k, v in limits.items()}
    raw: dict[str, Any] = {"name": name, "image": "registry.example.com/app:1", "resources": resources}
    if sidecar:
        raw["restartPolicy"] = "Always"
    return raw


def extended_pod(name: str, containers: list[dict[str, Any]], init: list[dict[str, Any]] | None = None,
                 **options: Any) -> dict[str, Any]:
    raw = o.pod(name, [], **options)
    raw["spec"]["containers"] = containers
    if init:
        raw["spec"]["initContainers"] = init
    return raw


def gpu_pod(name: str, count: int = 2) -> dict[str, Any]:
    return extended_pod(name, [container("main", {GPU: count, "cpu": "100m"})])


def plugin_node(name: str, gpus: int) -> dict[str, Any]:
    """A node whose device plugin lists the resource in its allocatable."""
    raw = o.node(name)
    raw["status"] = {"allocatable": {GPU: str(gpus), "cpu": "8"}}
    return raw


def special_claims(scheduler: Scheduler) -> list[dict]:
    return [raw for raw in scheduler.cache.objects() if raw.get("kind") == "ResourceClaim"
            and (raw["metadata"].get("annotations") or {}).get(EXTENDED_CLAIM_ANNOTATION) == "true"]


async def schedule(scheduler: Scheduler, name: str) -> str | None:
    """Filter, then bind on the first passing node; the node, or None when none fits."""
    pod = pod_of(scheduler, name)
    result = await scheduler.filter(pod, scheduler.cache.node_names())
    assert result.error == ""
    if not result.passed:
        return None
    await scheduler.bind("default", name, uid=pod["metadata"]["uid"], node_name=result.passed[0])
    return result.passed[0]


def request(name: str, class_name: str, count: int) -> dict[str, Any]:
    return {"name": name, "exactly": {"deviceClassName": class_name, "allocationMode": "ExactCount",
                                      "count": count}}


# ---- the mapping (upstream's createRequestsAndMappings cases, and ours) ------------------------------

CLASSES = {"ext/a": "class", "ext/b": "class1", "ext/init": "classInit"}


@pytest.mark.parametrize(
    ("containers", "init", "resources", "want"),
    [
        pytest.param([container("c", {"ext/a": 1, "ext/b": 2})], [], ("ext/a",),
                     [request("container-0-request-0", "class", 1)], id="one resource of two mapped"),
        pytest.param([container("c", {"ext/a": 1, "ext/b": 2})], [], ("ext/a", "ext/b"),
                     [request("container-0-request-0", "class", 1),
                      request("container-0-request-1", "class1", 2)],
                     id="two resources, one container"),
        pytest.param([container("c", {"ext/a": 1}), container("d", {"ext/b": 2})], [], ("ext/a", "ext/b"),
                     [request("container-0-request-0", "class", 1),
                      request("container-1-request-0", "class1", 2)],
                     id="two containers"),
        pytest.param([container("c", {"ext/a": 1})], [container("i", {"ext/init": 2})], ("ext/a", "ext/init"),
                     [request("container-0-request-0", "classInit", 2),
                      request("container-1-request-0", "class", 1)],
                     id="one init container, one container"),
        pytest.param([container("c", {"ext/a": 1})],
                     [container("i0", {"ext/init": 1}), container("i1", {"ext/init": 2})],
                     ("ext/a", "ext/init"),
                     [request("container-1-request-0", "classInit", 2),
                      request("container-2-request-0", "class", 1)],
                     id="two init containers: only the largest"),
        pytest.param([container("c", {"ext/a": 1})],
                     [container("i0", {"ext/init": 1}), container("s", {"ext/init": 1}, sidecar=True),
                      container("i2", {"ext/init": 2})], ("ext/a", "ext/init"),
                     [request("container-1-request-0", "classInit", 1),
                      request("container-2-request-0", "classInit", 2),
                      request("container-3-request-0", "class", 1)],
                     id="init containers reuse a later sidecar's devices"),
        pytest.param([container("c", {"ext/a": 0, "ext/b": 1})], [], ("ext/a", "ext/b"),
                     [request("container-0-request-1", "class1", 1)], id="zero quantity: no request"),
        pytest.param([container("c", limits={"ext/a": 3})], [], ("ext/a",),
                     [request("container-0-request-0", "class", 3)], id="limits only count as requests"),
    ],
)
def test_extended_requests_as_upstream_builds_them(containers: list, init: list, resources: tuple,
                                                   want: list) -> None:
    pod = extended_pod("p", containers, init)
    requests, _ = build_requests(pod, resources, CLASSES)
    assert requests == want


def test_extended_init_container_mappings_point_at_reused_and_largest_requests() -> None:
    pod = extended_pod("p", [container("main", {"ext/init": 2})],
                       [container("i0", {"ext/init": 3}), container("i1", {"ext/init": 1})])
    requests, mappings = build_requests(pod, ("ext/init",), CLASSES)
    # main (index 2) gets 2; i0 reuses them and needs 1 more; i1 is covered by main's 2.
    assert requests == [request("container-0-request-0", "classInit", 1),
                        request("container-2-request-0", "classInit", 2)]
    assert mappings == [
        {"containerName": "main", "resourceName": "ext/init", "requestName": "container-2-request-0"},
        {"containerName": "i0", "resourceName": "ext/init", "requestName": "container-2-request-0"},
        {"containerName": "i0", "resourceName": "ext/init", "requestName": "container-0-request-0"},
        {"containerName": "i1", "resourceName": "ext/init", "requestName": "container-2-request-0"},
    ]


def test_extended_requested_names_skip_zero_and_native_resources() -> None:
    pod = extended_pod("p", [container("c", {GPU: 0, "cpu": 1, "kubernetes.io/x": 1, "example.com/fpga": 1,
                                              IMPLICIT_PREFIX + "gpu": 1})])
    assert requested_names(pod) == {"example.com/fpga", IMPLICIT_PREFIX + "gpu"}


# ---- DeviceClass choice ------------------------------------------------------------------------------


def test_extended_class_choice_newest_wins_then_smallest_name_and_implicit_names() -> None:
    scheduler = make([
        extended_class("old", created="2026-01-01T00:00:00Z"),
        extended_class("new-b", created="2026-02-01T00:00:00Z"),
        extended_class("new-a", created="2026-02-01T00:00:00Z"),
        extended_class("plain", resource=None),
    ])
    extended = scheduler.planner.extended
    assert extended.class_for(GPU) == "new-a"
    assert extended.class_for(IMPLICIT_PREFIX + "plain") == "plain"
    assert extended.class_for(IMPLICIT_PREFIX + "old") == "old"
    assert extended.class_for("example.com/other") is None
    scheduler.cache.apply("DeviceClass", "DELETED", scheduler.cache.raw("DeviceClass", "new-a"))
    assert extended.class_for(GPU) == "new-b"
    scheduler.cache.apply("DeviceClass", "DELETED", scheduler.cache.raw("DeviceClass", "new-b"))
    assert extended.class_for(GPU) == "old"


async def test_extended_class_added_later_moves_the_filter_answer() -> None:
    objs = [o.node("node-0"), o.gpu_slice("node-0", 2), o.device_class("other"), gpu_pod("p")]
    cache = ClusterCache.from_objects(objs, FeatureGates())
    assume = AssumeCache()
    assume.attach(cache)
    scheduler = Scheduler(cache, assume, ClaimWriter(None, cache), filter_cache=FilterCache(cache, assume))
    pod = pod_of(scheduler, "p")
    # No class maps the resource: not ours to judge (NodeResourcesFit rejects it).
    assert (await scheduler.filter(pod, ["node-0"])).passed == ["node-0"]
    assert not scheduler.planner.needs_dra(pod)
    only_one = "device.attributes['gpu.example.com'].index > 0"
    cache.apply("DeviceClass", "ADDED", extended_class(expression=only_one))
    result = await scheduler.filter(pod, ["node-0"])
    assert result.passed == [] and "example.com/gpu of container main" in result.unresolvable["node-0"]
    cache.apply("DeviceClass", "MODIFIED", {**extended_class(), "metadata": {
        **extended_class()["metadata"], "resourceVersion": "2"}})
    assert (await scheduler.filter(pod, ["node-0"])).passed == ["node-0"]


# ---- filter and bind ---------------------------------------------------------------------------------


async def test_extended_two_nodes_two_devices_three_pods_exactly_two_bind() -> None:
    objs = [extended_class(), *o.cluster(2, 2)[1:], gpu_pod("p0"), gpu_pod("p1"), gpu_pod("p2")]
    scheduler = make(objs)
    placed = [await schedule(scheduler, f"p{i}") for i in range(3)]
    assert sorted(filter(None, placed)) == ["node-0", "node-1"] and placed[2] is None
    devices = [(r["pool"], r["device"]) for raw in special_claims(scheduler)
               for r in raw["status"]["allocation"]["devices"]["results"]]
    assert len(devices) == 4 == len(set(devices))
    result = await scheduler.filter(pod_of(scheduler, "p2"), ["node-0", "node-1"])
    assert result.failed == dict.fromkeys(["node-0", "node-1"], result.failed["node-0"])
    assert result.failed["node-0"] == ("extended resources: example.com/gpu of container main "
                                       "(request container-0-request-1): needs 2 devices, 0 match (2 in use)")


async def test_extended_bind_creates_the_special_claim_and_pod_status() -> None:
    scheduler = make([extended_class(), *o.cluster(1, 4)[1:], gpu_pod("p")])
    assert await schedule(scheduler, "p") == "node-0"
    pod = pod_of(scheduler, "p")
    (claim,) = special_claims(scheduler)
    meta = claim["metadata"]
    assert meta["name"].startswith("p-extended-resources-") and meta["namespace"] == "default"
    assert meta["ownerReferences"] == [{"apiVersion": "v1", "kind": "Pod", "name": "p",
                                        "uid": pod["metadata"]["uid"], "controller": True}]
    assert meta["finalizers"] == ["resource.kubernetes.io/delete-protection"]
    # cpu sorts before example.com/gpu among the container's requests: request index 1.
    assert claim["spec"] == {"devices": {"requests": [request("container-0-request-1", o.CLASS, 2)]}}
    results = claim["status"]["allocation"]["devices"]["results"]
    assert [r["request"] for r in results] == ["container-0-request-1"] * 2
    owner = {"resource": "pods", "name": "p", "uid": pod["metadata"]["uid"]}
    assert claim["status"]["reservedFor"] == [owner]
    assert pod["status"]["extendedResourceClaimStatus"] == {
        "resourceClaimName": meta["name"],
        "requestMappings": [{"containerName": "main", "resourceName": GPU,
                             "requestName": "container-0-request-1"}],
    }
    assert pod["spec"]["nodeName"] == "node-0"
    assert scheduler.assume.pending(f"extended-resources-{pod['metadata']['uid']}") is None
    # Deleting the claim (what the resourceclaim controller does once the pod is gone) frees the devices.
    scheduler.cache.apply("ResourceClaim", "DELETED", claim)
    scheduler.cache.apply("Pod", "ADDED", gpu_pod("q"))
    scheduler.cache.apply("Pod", "ADDED", gpu_pod("r"))
    assert await schedule(scheduler, "q") == "node-0" and await schedule(scheduler, "r") == "node-0"


async def test_extended_resources_together_with_ordinary_claims_in_one_search() -> None:
    raw = gpu_pod("p", 2)
    raw["spec"]["resourceClaims"] = [{"name": "c0", "resourceClaimName": "c"}]
    scheduler = make([extended_class(), *o.cluster(2, 3)[1:], o.claim("c", count=2), raw])
    result = await scheduler.filter(pod_of(scheduler, "p"), ["node-0", "node-1"])
    # 2 + 2 devices on nodes with 3 each: nowhere, not even though each part fits alone.
    assert result.passed == []
    scheduler = make([extended_class(), *o.cluster(1, 4)[1:], o.claim("c", count=2), raw])
    assert await schedule(scheduler, "p") == "node-0"
    ordinary = scheduler.cache.claim("default", "c")
    assert ordinary is not None and ordinary.allocation is not None
    (special,) = special_claims(scheduler)
    taken = {r["device"] for r in ordinary.allocation["devices"]["results"]}
    taken |= {r["device"] for r in special["status"]["allocation"]["devices"]["results"]}
    assert len(taken) == 4


async def test_extended_device_plugin_node_is_used_without_a_claim() -> None:
    scheduler = make([extended_class(), plugin_node("plugin", 8), o.node("dra"), o.gpu_slice("dra", 1),
                      gpu_pod("p")])
    result = await scheduler.filter(pod_of(scheduler, "p"), ["dra", "plugin"])
    assert result.passed == ["plugin"] and "needs 2 devices, 1 match" in result.unresolvable["dra"]
    await scheduler.bind("default", "p", uid=pod_of(scheduler, "p")["metadata"]["uid"], node_name="plugin")
    assert special_claims(scheduler) == [] and pod_of(scheduler, "p")["spec"]["nodeName"] == "plugin"
    assert "extendedResourceClaimStatus" not in pod_of(scheduler, "p")["status"]


async def test_extended_device_plugin_serves_one_resource_dra_the_other() -> None:
    node = plugin_node("node-0", 8)
    raw = extended_pod("p", [container("main", {GPU: 1, IMPLICIT_PREFIX + "fpga": 1})])
    scheduler = make([extended_class(), o.device_class("fpga"), node, o.gpu_slice("node-0", 1), raw])
    assert await schedule(scheduler, "p") == "node-0"
    (claim,) = special_claims(scheduler)
    assert claim["spec"]["devices"]["requests"] == [request("container-0-request-0", "fpga", 1)]


async def test_extended_unmapped_resource_on_a_node_without_it_does_not_fit() -> None:
    raw = extended_pod("p", [container("main", {GPU: 1, "example.com/nic": 1})])
    scheduler = make([extended_class(), *o.cluster(1, 2)[1:], raw])
    result = await scheduler.filter(pod_of(scheduler, "p"), ["node-0"])
    assert result.unresolvable == {
        "node-0": "node does not provide extended resource example.com/nic and no DeviceClass maps it"}


async def test_extended_zero_quantity_pod_is_not_ours() -> None:
    scheduler = make([extended_class(), *o.cluster(1, 0)[1:], gpu_pod("p", 0)])
    pod = pod_of(scheduler, "p")
    assert not scheduler.planner.needs_dra(pod)
    assert (await scheduler.filter(pod, ["node-0"])).passed == ["node-0"]


async def test_extended_failed_binding_leaves_no_claim() -> None:
    scheduler = make([extended_class(), *o.cluster(1, 2)[1:], gpu_pod("p")])
    pod = pod_of(scheduler, "p")
    assert (await scheduler.filter(pod, ["node-0"])).passed == ["node-0"]
    bound_elsewhere_at_binding(scheduler, "p", "elsewhere")
    with pytest.raises(BindFailed, match="already assigned"):
        await scheduler.bind("default", "p", uid=pod["metadata"]["uid"], node_name="node-0")
    assert special_claims(scheduler) == []
    assert list(scheduler.assume.in_flight()) == []
    assert not scheduler.cache.allocated.is_allocated((o.DRIVER, "node-0", "gpu-0"))


async def test_extended_stale_claim_of_an_earlier_attempt_is_removed_by_filter() -> None:
    pod = gpu_pod("p")
    stale = o.allocate(o.claim("p-extended-resources-old", owner_pod=pod, count=2), "node-0",
                       ["gpu-0", "gpu-1"], [{"resource": "pods", "name": "p", "uid": pod["metadata"]["uid"]}])
    stale["metadata"]["annotations"] = {EXTENDED_CLAIM_ANNOTATION: "true"}
    scheduler = make([extended_class(), *o.cluster(1, 2)[1:], pod, stale])
    plan = scheduler.planner.plan(pod_of(scheduler, "p"))
    assert plan.blocked is not None and "of an earlier attempt is being removed" in plan.blocked.message
    assert await schedule(scheduler, "p") == "node-0"
    (claim,) = special_claims(scheduler)
    assert claim["metadata"]["name"] != "p-extended-resources-old"


async def test_extended_explain_names_requests_by_container_and_resource() -> None:
    raw = extended_pod("p", [container("main", {GPU: 3})], [container("setup", {GPU: 1})])
    scheduler = make([extended_class(), *o.cluster(1, 2)[1:], raw])
    report = await explain_pod(scheduler, "default", "p")
    assert report["extendedResources"] == [
        {"container": "main", "resource": GPU, "request": "container-1-request-0", "deviceClass": o.CLASS},
        {"container": "setup", "resource": GPU, "request": "container-1-request-0", "deviceClass": o.CLASS},
    ]
    (node,) = report["nodes"]
    assert node["message"] == ("extended resources: example.com/gpu of containers main, setup "
                               "(request container-1-request-0): needs 3 devices, 2 match")
    text = render_text(report)
    assert "extended resource example.com/gpu of container main -> request container-1-request-0" in text


async def test_extended_pod_status_write_failing_undoes_the_created_claim(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scheduler = make([extended_class(), *o.cluster(1, 2)[1:], gpu_pod("p")])
    pod = pod_of(scheduler, "p")

    async def refused(namespace: str, name: str, status: dict) -> None:
        raise ApiError(422, "Invalid", "pods \"p\" is invalid")

    monkeypatch.setattr(scheduler.writer._store, "patch_pod_status", refused)
    assert (await scheduler.filter(pod, ["node-0"])).passed == ["node-0"]
    with pytest.raises(BindFailed, match="extendedResourceClaimStatus: 422 Invalid"):
        await scheduler.bind("default", "p", uid=pod["metadata"]["uid"], node_name="node-0")
    assert special_claims(scheduler) == [] and list(scheduler.assume.in_flight()) == []
    assert not pod_of(scheduler, "p")["spec"].get("nodeName")
    monkeypatch.undo()
    assert await schedule(scheduler, "p") == "node-0"


async def test_extended_bind_waits_for_a_pod_the_watch_has_not_delivered_yet() -> None:
    """kube-scheduler may bind a pod that filter judged from its own copy before our watch has it;
    refusing would cost the pod kube-scheduler's backoff."""
    scheduler = make([extended_class(), *o.cluster(1, 2)[1:]])
    late = gpu_pod("p")
    bind = asyncio.create_task(scheduler.bind("default", "p", uid=late["metadata"]["uid"],
                                              node_name="node-0"))
    await asyncio.sleep(0.05)
    scheduler.cache.apply("Pod", "ADDED", late)
    await bind
    assert pod_of(scheduler, "p")["spec"]["nodeName"] == "node-0" and len(special_claims(scheduler)) == 1


async def test_extended_unsettled_write_is_held_under_the_created_claim_until_it_settles(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The special claim's allocation write goes unanswered and the API server stays unreachable while
    the bind undoes: the devices stay held, under the claim the bind created (whose watch events end the
    hold), not under the in-memory claim's UID, which no event ever carries."""
    scheduler = make([extended_class(), *o.cluster(1, 2)[1:], gpu_pod("p")])
    scheduler.writer._resolve_budget = 0.2
    pod = pod_of(scheduler, "p")
    assert (await scheduler.filter(pod, ["node-0"])).passed == ["node-0"]
    store = scheduler.writer._store

    async def lost(claim: dict) -> dict:
        raise TimeoutError()

    async def unreachable(*args: Any, **kwargs: Any) -> dict:
        raise ApiError(503, "ServiceUnavailable", "down")

    monkeypatch.setattr(store, "update_claim_status", lost)
    monkeypatch.setattr(store, "get_claim", unreachable)
    with pytest.raises(BindFailed, match="outcome unknown"):
        await scheduler.bind("default", "p", uid=pod["metadata"]["uid"], node_name="node-0")
    [created] = special_claims(scheduler)
    [held] = scheduler.assume.describe()
    assert held["claimUID"] == created["metadata"]["uid"]
    assert held["unsettledAtResourceVersion"] == created["metadata"]["resourceVersion"]
    assert held["devices"] == [f"{o.DRIVER}/node-0/gpu-0", f"{o.DRIVER}/node-0/gpu-1"]
    monkeypatch.undo()  # the API server answers again
    # The retry's filter removes the claim of the earlier attempt (its finalizer first, at the version the
    # write was sent at, which fences that write off): the hold ends and the pod gets its devices.
    assert await schedule(scheduler, "p") == "node-0"
    [special] = special_claims(scheduler)
    assert special["metadata"]["uid"] != created["metadata"]["uid"]
    assert scheduler.assume.describe() == []
