"""Extended resources backed by DRA through the HTTP server, with kube-scheduler's payload shapes, on
the bundled example cluster (DeviceClass extended-gpu.example.com, pod plain-gpu-job); and with
--filter-holds-devices and preempt."""

from __future__ import annotations

import dra_objects as o
import orjson
from test_extended_resources import extended_class, gpu_pod, special_claims
from test_scheduling import make, pod_of
from test_server import get, post

from extender.http.server import ExtenderServer

NODES = ["node-1", "node-2", "node-3"]


async def test_extended_filter_prioritize_bind_and_explain_over_http(example: ExtenderServer) -> None:
    base = example.urls["extender"]
    pod = example.cache.pod("default", "plain-gpu-job")
    args = orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": NODES})
    status, body = await post(base + "/filter", args)
    assert status == 200 and body["Error"] == "" and sorted(body["NodeNames"]) == NODES
    status, scores = await post(base + "/prioritize", args)
    assert status == 200 and {entry["Host"] for entry in scores} == set(NODES)
    status, text = await get(example.urls["debug"] + "/debug/explain?pod=default/plain-gpu-job")
    assert status == 200 and orjson.loads(text)["extendedResources"] == [
        {"container": "main", "resource": "example.com/gpu", "request": "container-0-request-0",
         "deviceClass": "extended-gpu.example.com"}]
    binding = {"PodName": "plain-gpu-job", "PodNamespace": "default", "PodUID": pod["metadata"]["uid"],
               "Node": "node-2"}
    status, body = await post(base + "/bind", orjson.dumps(binding))
    assert (status, body) == (200, {"Error": ""})
    bound = example.cache.pod("default", "plain-gpu-job")
    claim_name = bound["status"]["extendedResourceClaimStatus"]["resourceClaimName"]
    claim = example.cache.claim("default", claim_name)
    assert claim is not None and claim.allocation is not None
    assert {r["pool"] for r in claim.allocation["devices"]["results"]} == {"node-2"}
    assert len(claim.allocation["devices"]["results"]) == 2


async def test_extended_filter_holds_devices_until_bind() -> None:
    scheduler = make([extended_class(), *o.cluster(2, 2)[1:], gpu_pod("p"), gpu_pod("q")], hold_devices=True)
    first = await scheduler.filter(pod_of(scheduler, "p"), ["node-0", "node-1"])
    assert len(first.passed) == 1
    second = await scheduler.filter(pod_of(scheduler, "q"), ["node-0", "node-1"])
    assert second.passed and second.passed != first.passed, "p's devices are held"
    await scheduler.bind("default", "p", uid=pod_of(scheduler, "p")["metadata"]["uid"],
                         node_name=first.passed[0])
    assert len(special_claims(scheduler)) == 1
    assert scheduler.holds.holding() == {pod_of(scheduler, "q")["metadata"]["uid"]}


async def test_extended_preempt_keeps_nodes_where_victims_free_devices() -> None:
    """The victim on node-0 is itself an extended-resource pod: evicting it frees its special claim."""
    victim = gpu_pod("victim")
    uid = victim["metadata"]["uid"]
    victim["spec"]["nodeName"] = "node-0"
    used = o.allocate(o.claim("victim-extended-resources-abcde", count=2), "node-0", ["gpu-0", "gpu-1"],
                      [{"resource": "pods", "name": "victim", "uid": uid}])
    victim["status"]["extendedResourceClaimStatus"] = {"resourceClaimName": "victim-extended-resources-abcde",
                                                       "requestMappings": []}
    scheduler = make([extended_class(), *o.cluster(2, 2)[1:], used, victim, gpu_pod("p")])
    victims = {"node-0": {"Pods": [{"UID": uid}]}, "node-1": {"Pods": []}}
    kept = await scheduler.preempt(pod_of(scheduler, "p"), victims)
    assert set(kept) == {"node-0", "node-1"}  # node-1 fits already; evicting on node-0 frees 2 devices
    full = o.allocate(o.claim("other", count=2), "node-1", ["gpu-0", "gpu-1"],
                      [{"resource": "pods", "name": "x", "uid": "x"}])
    scheduler.cache.apply("ResourceClaim", "ADDED", full)
    kept = await scheduler.preempt(pod_of(scheduler, "p"), victims)
    assert set(kept) == {"node-0"}
