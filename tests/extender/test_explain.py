from __future__ import annotations

import copy
from typing import Any

import dra_objects as o
import pytest
from loop_turns import loop_turns

from allocator import FeatureGates
from extender.http.explain import ExplainError, explain_pod, render_text
from extender.plugin.claimwriter import ClaimWriter
from extender.plugin.filtercache import FilterCache
from extender.plugin.scheduling import Scheduler
from extender.state.assume import AssumeCache
from extender.state.cache import ClusterCache


def make(objs: list[dict[str, Any]]) -> Scheduler:
    cache = ClusterCache.from_objects(objs, FeatureGates())
    return Scheduler(cache, AssumeCache(), ClaimWriter(None, cache))


def cluster_with_a_busy_node() -> Scheduler:
    busy = o.allocate(
        o.claim("busy"), "node-0", ["gpu-0", "gpu-1"], [{"resource": "pods", "name": "x", "uid": "x"}]
    )
    a100_only = o.claim("want", count=2)
    a100_only["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = [
        {"cel": {"expression": 'device.attributes["gpu.example.com"].model == "A100"'}}
    ]
    objs = [
        o.device_class(),
        o.node("node-0"),
        o.gpu_slice("node-0", 3),
        o.node("node-1"),
        o.gpu_slice("node-1", 4, models=["A100", "H100"]),
        o.node("node-2"),
        o.gpu_slice("node-2", 2),
        busy,
        a100_only,
        o.pod("p", ["want"]),
    ]
    return make(objs)


async def test_explain_names_the_step_and_the_owner() -> None:
    report = await explain_pod(cluster_with_a_busy_node(), "default", "p")
    nodes = {node["node"]: node for node in report["nodes"]}
    assert report["fittingNodes"] == 2 and report["error"] == ""
    assert report["claims"] == [
        {"podClaimName": "c0", "claim": "default/want", "allocated": False, "reservedFor": 0}
    ]
    busy = nodes["node-0"]
    assert not busy["fits"] and not busy["unresolvable"]
    [request] = busy["requests"]
    assert (request["needed"], request["considered"]) == (2, 3)
    assert request["rejected"] == {"in use": 2} and request["inUseBy"] == {"default/busy": 2}
    assert nodes["node-1"]["fits"] and [d["device"] for d in nodes["node-1"]["allocation"][0]["devices"]] == [
        "gpu.example.com/node-1/gpu-0",
        "gpu.example.com/node-1/gpu-2",
    ]
    assert nodes["node-2"]["fits"]


async def test_text_rendering() -> None:
    report = await explain_pod(cluster_with_a_busy_node(), "default", "p", ["node-0", "node-1"])
    text = render_text(report)
    assert text.splitlines()[0] == "pod default/p: fits 1 of 2 node(s)"
    assert "node-0: does not fit (unschedulable): claim default/want: request gpu: needs 2 devices" in text
    assert "rejected: in use 2 (default/busy: 2)" in text
    assert "claim default/want, request gpu: gpu.example.com/node-1/gpu-2" in text


async def test_request_selector_rejections_are_counted() -> None:
    report = await explain_pod(cluster_with_a_busy_node(), "default", "p", ["node-1"])
    assert report["nodes"][0]["fits"]
    scheduler = cluster_with_a_busy_node()
    want = copy.deepcopy(scheduler.cache.claim("default", "want").raw)
    want["spec"]["devices"]["requests"][0]["exactly"]["count"] = 3
    scheduler.cache.apply("ResourceClaim", "MODIFIED", want)
    [node] = (await explain_pod(scheduler, "default", "p", ["node-1"]))["nodes"]
    assert node["requests"][0]["rejected"] == {"request selector": 2}


async def test_not_ready_pod_and_unknown_names() -> None:
    scheduler = make([*o.cluster(1, 1), o.pod("p", ["missing"])])
    report = await explain_pod(scheduler, "default", "p")
    assert report["nodes"][0]["message"] == 'could not find ResourceClaim "default/missing"'
    assert "does not fit (unresolvable)" in render_text(report)
    with pytest.raises(ExplainError, match="pod default/nobody not found"):
        await explain_pod(scheduler, "default", "nobody")
    with pytest.raises(ExplainError, match="node ghost not found"):
        await explain_pod(scheduler, "default", "p", ["ghost"])


async def test_scheduling_error_is_reported() -> None:
    broken = o.claim("c")
    broken["spec"]["devices"]["requests"][0]["exactly"]["count"] = -1
    report = await explain_pod(make([*o.cluster(1, 1), broken, o.pod("p", ["c"])]), "default", "p")
    assert "invalid claim" in report["error"] and report["nodes"] == []
    assert render_text(report).startswith("pod default/p: error: invalid claim")


async def test_driver_lost_pools_are_shown() -> None:
    lost = [
        {
            "driver": o.DRIVER,
            "pool": "node-9",
            "devices": ["gpu-0", "gpu-1"],
            "claims": ["default/old"],
            "seconds_left": 42.4,
            "expired": False,
        }
    ]
    report = await explain_pod(cluster_with_a_busy_node(), "default", "p", ["node-0"], driver_lost=lost)
    assert report["driverLost"] == lost
    assert "driver lost: pool gpu.example.com/node-9: 2 device(s) still held by default/old (42s left)" in (
        render_text(report)
    )


async def test_explaining_many_nodes_lets_other_requests_run_and_leaves_the_filter_cache_alone() -> None:
    ticks = [0.0]

    def clock() -> float:  # every reading advances 1 ms: explain must yield about every 5 nodes
        ticks[0] += 0.001
        return ticks[0]

    cache = ClusterCache.from_objects([*o.cluster(60, 1), o.claim("c", count=2), o.pod("p", ["c"])],
                                      FeatureGates())
    assume = AssumeCache()
    filter_cache = FilterCache(cache, assume)
    scheduler = Scheduler(cache, assume, ClaimWriter(None, cache), clock=clock, filter_cache=filter_cache)
    async with loop_turns() as turns:
        report = await explain_pod(scheduler, "default", "p")
    assert len(report["nodes"]) == 60 and report["fittingNodes"] == 0
    assert turns.count >= 60 // 6
    assert filter_cache.stats() == {"entries": 0, "hits": 0, "verdictHits": 0, "misses": 0, "twins": 0,
                                   "twinHits": 0}, (
        "explain always computes afresh")
