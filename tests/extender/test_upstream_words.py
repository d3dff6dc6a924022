"""--reasons=upstream (the default): filter answers in the in-tree DynamicResources plugin's words and
statuses, so that kube-scheduler's FailedScheduling line is the one the in-tree plugin gives.

The expected lines are upstream's own, from test/integration/dra of Kubernetes v1.37.1 (core.go,
prioritizedlist.go, pod_group.go); fiterror builds the line from our answer as kube-scheduler does.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import dra_objects as o
import orjson
import pytest
from fiterror import event_message, fit_error

from allocator import FeatureGates
from extender.http.server import ExtenderServer
from extender.plugin.claimwriter import ClaimWriter
from extender.plugin.scheduling import Scheduler
from extender.plugin.verdicts import (
    CANNOT_ALLOCATE,
    NOT_AVAILABLE,
    TIMED_OUT_MESSAGE,
    NodeVerdict,
    Reason,
    Words,
    answer,
    blocked,
)
from extender.state.assume import AssumeCache
from extender.state.cache import ClusterCache


def scheduler_of(objs: list[dict[str, Any]], **options: Any) -> Scheduler:
    cache = ClusterCache.from_objects(objs, FeatureGates())
    assume = AssumeCache()
    assume.attach(cache)
    return Scheduler(cache, assume, ClaimWriter(None, cache), **options)


@pytest.fixture
async def served() -> AsyncIterator[ExtenderServer]:
    """8 nodes as upstream's test: node-0's pool is invalid (two slices list the same devices), the
    others have 1, 2, ... devices; the pod asks for 8."""
    objs = [o.device_class(), o.claim("c", count=8), o.pod("p", ["c"])]
    for index in range(8):
        objs += [o.node(f"node-{index}"), o.gpu_slice(f"node-{index}", index or 2)]
    first, second = objs[4], copy.deepcopy(objs[4])
    for piece in (first, second):
        piece["spec"]["pool"]["resourceSliceCount"] = 2
    second["metadata"]["name"] += "-copy"
    second["metadata"]["uid"] += "-copy"
    server = ExtenderServer(scheduler_of([*objs, second]))
    await server.start("127.0.0.1", 0, 0)
    yield server
    await server.stop()


async def filter_over_http(server: ExtenderServer, nodes: list[str]) -> dict[str, Any]:
    body = {"Pod": server.cache.pod("default", "p"), "Nodes": None, "NodeNames": nodes}
    async with (
        aiohttp.ClientSession() as session,
        session.post(server.urls["extender"] + "/filter", data=orjson.dumps(body),
                     headers={"Content-Type": "application/json"}) as response,
    ):
        assert response.status == 200
        answer_body: dict[str, Any] = orjson.loads(await response.read())
        return answer_body


async def test_the_failed_scheduling_line_is_upstreams(served: ExtenderServer) -> None:
    nodes = [f"node-{index}" for index in range(8)]
    body = await filter_over_http(served, nodes)
    assert body["NodeNames"] == [] and body["FailedNodes"] == {} and body["Error"] == ""
    # core.go, "InvalidPools": the line kube-scheduler gives with the in-tree plugin.
    assert fit_error(8, body["FailedNodes"], body["FailedAndUnresolvableNodes"]) == (
        "0/8 nodes are available: 1 invalid resource pools were encountered, 7 cannot allocate all claims. "
        "preemption: 0/8 nodes are available: 8 Preemption is not helpful for scheduling.")


async def test_detailed_reasons_keep_one_entry_per_distinct_count(served: ExtenderServer) -> None:
    served.scheduler.reasons = Words.DETAILED
    nodes = [f"node-{index}" for index in range(8)]
    body = await filter_over_http(served, nodes)
    line = fit_error(8, body["FailedNodes"], body["FailedAndUnresolvableNodes"])
    assert line.count("needs 8 devices") == 7  # 1, 2, ... 7 match: seven entries of one node each


def test_every_reason_has_upstreams_words_and_status() -> None:
    def failed(reason: Reason, message: str = "ours", unresolvable: bool = False,
               words: str | None = None) -> NodeVerdict:
        return NodeVerdict("n", fits=False, message=message, unresolvable=unresolvable, reason=reason,
                           words=words)

    expected = {
        # Filter's statuses, all UnschedulableAndUnresolvable (statusUnschedulable).
        failed(Reason.DEVICES, "claim default/c: request gpu: needs 2 devices, 1 matches"):
            (CANNOT_ALLOCATE, True),
        failed(Reason.NODE_ERROR, "invalid resource pools were encountered", True):
            ("invalid resource pools were encountered", True),
        failed(Reason.CLAIM_ON_OTHER_NODE, NOT_AVAILABLE, True): (NOT_AVAILABLE, True),
        failed(Reason.NODE_OPERATIONS, "resourceclaim not available on the node: its devices ...", True):
            (NOT_AVAILABLE, True),
        failed(Reason.EXTENDED_RESOURCE, "node does not provide extended resource x", True):
            ("cannot fit resource", True),
        # NodeAllocatable decides like upstream's nodeFitsResources: resolvable when evicting may help.
        failed(Reason.NODE_ALLOCATABLE, "Insufficient cpu: ...", False, "Insufficient cpu"):
            ("Insufficient cpu", False),
        failed(Reason.NODE_ALLOCATABLE, "Insufficient memory: ...", True, "Insufficient memory"):
            ("Insufficient memory", True),
        # PreFilter's, every node alike (kept resolvable by us for two of them).
        blocked("request gpu: device class gpu does not exist", Reason.CLASS_MISSING,
                unresolvable=False).on("n"): ("request gpu: device class gpu does not exist", True),
        blocked("resourceclaim in use", Reason.CLAIM_IN_USE).on("n"): ("resourceclaim in use", True),
        blocked("extended resource claim default/x of an earlier attempt is being removed",
                Reason.STALE_EXTENDED_CLAIM, unresolvable=False).on("n"):
            ("cannot schedule extended resource claim", True),
        blocked('pod "default/p": ResourceClaim not created yet', Reason.CLAIMS_NOT_READY).on("n"):
            ('pod "default/p": ResourceClaim not created yet', True),
    }
    for verdict, words in expected.items():
        assert (verdict.upstream_words, verdict.upstream_unresolvable) == words, verdict


def test_an_answer_in_upstreams_words_puts_each_node_where_upstream_would() -> None:
    verdicts = {
        "a": NodeVerdict("a", fits=False, message="claim x: needs 1 device, 0 match (1 in use)",
                         unresolvable=False, reason=Reason.DEVICES),
        "b": NodeVerdict("b", fits=False, message="Insufficient cpu: ...", unresolvable=False,
                         reason=Reason.NODE_ALLOCATABLE, words="Insufficient cpu"),
        "c": NodeVerdict("c", fits=False, message=NOT_AVAILABLE, unresolvable=True,
                         reason=Reason.CLAIM_ON_OTHER_NODE),
    }
    result = answer(verdicts, words=Words.UPSTREAM)
    assert result.failed == {"b": "Insufficient cpu"}
    assert result.unresolvable == {"a": CANNOT_ALLOCATE, "c": NOT_AVAILABLE}
    detailed = answer(verdicts, words=Words.DETAILED)
    assert detailed.failed == {"a": "claim x: needs 1 device, 0 match (1 in use)",
                               "b": "Insufficient cpu: ..."}


def test_a_timeout_with_no_node_left_is_upstreams_error_naming_the_node() -> None:
    verdicts = {
        "a": NodeVerdict("a", fits=False, message="x", unresolvable=True, reason=Reason.DEVICES),
        "b": NodeVerdict("b", fits=False, message=TIMED_OUT_MESSAGE, reason=Reason.TIMEOUT),
        "c": NodeVerdict("c", fits=False, message=TIMED_OUT_MESSAGE, reason=Reason.TIMEOUT),
    }
    result = answer(verdicts, words=Words.UPSTREAM)
    assert (result.passed, result.failed, result.unresolvable) == ([], {}, {})
    assert result.error == f"node b: {TIMED_OUT_MESSAGE}"
    # Where another node fits the pod goes there (our deliberate difference): timed-out nodes are
    # resolvable failures in upstream's words.
    verdicts["d"] = NodeVerdict("d", fits=True)
    result = answer(verdicts, words=Words.UPSTREAM)
    assert result.passed == ["d"] and result.failed == {"b": TIMED_OUT_MESSAGE, "c": TIMED_OUT_MESSAGE}


async def test_claims_on_another_node_and_devices_in_use_in_upstreams_words() -> None:
    allocated = o.allocate(o.claim("fixed"), "node-0", ["gpu-0"])
    objs = [o.device_class(), o.node("node-0"), o.gpu_slice("node-0", 1), o.node("node-1"),
            o.gpu_slice("node-1", 1), allocated, o.claim("more"), o.pod("p", ["fixed", "more"]),
            o.allocate(o.claim("other"), "node-1", ["gpu-0"], reserved_for=[
                {"resource": "pods", "name": "q", "uid": "q-uid"}]), o.pod("q", ["other"])]
    scheduler = scheduler_of(objs)
    pod = scheduler.cache.pod("default", "p")
    assert pod is not None
    result = await scheduler.filter(pod, ["node-0", "node-1"], brief=True)
    # node-0: its one device is the fixed claim's; node-1: not where the fixed claim is.
    assert result.unresolvable == {"node-0": CANNOT_ALLOCATE, "node-1": NOT_AVAILABLE}
    assert fit_error(2, result.failed, result.unresolvable, preemption=False) == (
        "0/2 nodes are available: 1 cannot allocate all claims, 1 resourceclaim not available on the node.")


async def test_500_nodes_give_one_short_line_in_upstreams_words_and_a_long_one_in_ours() -> None:
    """Each node has a different number of free devices: our per-node words differ on every node."""
    nodes = 500
    objs: list[dict[str, Any]] = [o.device_class(), o.claim("big", count=32), o.pod("p", ["big"])]
    for index in range(nodes):
        objs += [o.node(f"node-{index}"), o.gpu_slice(f"node-{index}", index % 31 + 1)]
    scheduler = scheduler_of(objs)
    pod = scheduler.cache.pod("default", "p")
    assert pod is not None
    names = [f"node-{index}" for index in range(nodes)]
    upstream = await scheduler.filter(pod, names, brief=True)
    line = fit_error(nodes, upstream.failed, upstream.unresolvable)
    assert line == ("0/500 nodes are available: 500 cannot allocate all claims. preemption: 0/500 nodes are "
                    "available: 500 Preemption is not helpful for scheduling.")
    scheduler.reasons = Words.DETAILED
    detailed = await scheduler.filter(pod, names, brief=True)
    ours = fit_error(nodes, detailed.failed, detailed.unresolvable)
    assert ours.count("needs 32 devices") == 31 and len(ours) > 2000
    assert event_message(ours).endswith(" ...") and len(event_message(ours)) == 1024
