"""The DRAExplanation Event: one line over all nodes beside kube-scheduler's FailedScheduling, written
at most once per pod and interval, the same words only after a while, within a global rate."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import dra_objects as o
import pytest

from allocator import FeatureGates
from extender.controllers.clock import RealClock
from extender.kube.client import KubeClient
from extender.kube.events import EventRecorder
from extender.plugin.claimwriter import ClaimWriter
from extender.plugin.explanation import EVENT_REASON, MAX_MESSAGE, Explanations, summarize
from extender.plugin.scheduling import Scheduler
from extender.plugin.verdicts import NOT_AVAILABLE, NodeVerdict, Reason, blocked
from extender.state.assume import AssumeCache
from extender.state.cache import ClusterCache

SELECTOR = 'device.attributes["gpu.example.com"].model == "A100"'


class Sink:
    def __init__(self) -> None:
        self.events: list[tuple[dict[str, Any], str, str, str]] = []

    def record(self, involved: Mapping[str, Any], reason: str, message: str, *,
               event_type: str = "Normal") -> None:
        self.events.append((dict(involved), reason, message, event_type))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def ours(node: str, message: str) -> NodeVerdict:
    """A failed node whose message says more than upstream's words ("cannot fit resource")."""
    return NodeVerdict(node, fits=False, message=message, unresolvable=True, reason=Reason.EXTENDED_RESOURCE)


def cluster_of_500() -> list[dict[str, Any]]:
    """500 nodes with one GPU each: 480 in use by other claims, 20 of a model the request rejects."""
    objs: list[dict[str, Any]] = [o.device_class()]
    for index in range(500):
        name = f"node-{index}"
        objs += [o.node(name), o.gpu_slice(name, 1, models=["H100" if index >= 480 else "A100"])]
        if index < 480:
            user = {"resource": "pods", "name": f"u{index}", "uid": f"u{index}"}
            objs.append(o.allocate(o.claim(f"used-{index}"), name, ["gpu-0"], reserved_for=[user]))
    selectors = [{"cel": {"expression": SELECTOR}}]
    request = {"name": "gpu", "exactly": {"deviceClassName": o.CLASS, "selectors": selectors}}
    objs += [o.claim("x", requests=[request]), o.pod("p", ["x"])]
    return objs


def scheduler_of(objs: list[dict[str, Any]], **options: Any) -> Scheduler:
    cache = ClusterCache.from_objects(objs, FeatureGates())
    assume = AssumeCache()
    assume.attach(cache)
    return Scheduler(cache, assume, ClaimWriter(None, cache), **options)


def pod_of(scheduler: Scheduler, name: str = "p") -> dict[str, Any]:
    pod = scheduler.cache.pod("default", name)
    assert pod is not None
    return pod


async def test_one_line_over_500_nodes_says_why_per_request() -> None:
    sink = Sink()
    # The first node also compiles the selector: on a loaded machine that alone can pass the default
    # node timeout, and a timed-out node would change the summary this test is about.
    scheduler = scheduler_of(cluster_of_500(), explanations=Explanations(sink), node_deadline_s=60.0,
                             filter_deadline_s=120.0)
    nodes = [f"node-{index}" for index in range(500)]
    result = await scheduler.filter(pod_of(scheduler), nodes, brief=True)
    assert result.passed == [] and len(result.unresolvable) == 500
    [(involved, reason, message, event_type)] = sink.events
    assert message == ("request gpu of claim default/x: 0 of 500 nodes (480 in use, 20 rejected by request "
                       "selectors)")
    assert (reason, event_type) == (EVENT_REASON, "Warning")
    pod = pod_of(scheduler)
    assert involved == {"apiVersion": "v1", "kind": "Pod", "name": "p", "namespace": "default",
                        "uid": pod["metadata"]["uid"]}


async def test_no_event_where_a_node_fits_or_for_explain_and_simulate() -> None:
    sink = Sink()
    objs = [*o.cluster(2, 1), o.claim("c"), o.pod("p", ["c"]), o.claim("big", count=2), o.pod("q", ["big"])]
    scheduler = scheduler_of(objs, explanations=Explanations(sink))
    assert (await scheduler.filter(pod_of(scheduler), ["node-0", "node-1"], brief=True)).passed
    assert not (await scheduler.filter(pod_of(scheduler, "q"), ["node-0", "node-1"])).passed  # not brief
    assert sink.events == []
    await scheduler.filter(pod_of(scheduler, "q"), ["node-0", "node-1"], brief=True)
    assert [message for _, _, message, _ in sink.events] == [
        "request gpu of claim default/big: 0 of 2 nodes (2 too few devices)"]


def test_nothing_to_add_to_upstreams_words_writes_nothing() -> None:
    # A claim not created yet, in use, on another node: kube-scheduler's line says it all.
    verdict = blocked('pod "default/p": ResourceClaim not created yet', Reason.CLAIMS_NOT_READY)
    assert summarize({"a": verdict.on("a"), "b": verdict.on("b")}) is None
    on_other = NodeVerdict("a", fits=False, message=NOT_AVAILABLE, unresolvable=True,
                           reason=Reason.CLAIM_ON_OTHER_NODE)
    assert summarize({"a": on_other}) is None
    # Our own words with no upstream counterpart reach kube-scheduler's line as they are.
    shared = blocked("resourceclaim default/c is shared by PodGroup default/g: the pod is not in that "
                     "PodGroup", Reason.CLAIM_OF_A_PODGROUP)
    assert summarize({"a": shared.on("a"), "b": shared.on("b")}) is None
    assert summarize({"a": ours("a", "node does not provide extended resource example.com/x and no "
                                     "DeviceClass maps it")}) == (
        "1 node: node does not provide extended resource example.com/x and no DeviceClass maps it")


def test_nodes_that_fail_otherwise_are_counted_by_what_they_say() -> None:
    cpu = NodeVerdict("b", fits=False, message="Insufficient cpu: the pod requests 5 (4 of it ...)",
                      unresolvable=True, reason=Reason.NODE_ALLOCATABLE, words="Insufficient cpu")
    operations = NodeVerdict("c", fits=False, message="resourceclaim not available on the node: its devices "
                             "skip node operations", unresolvable=True, reason=Reason.NODE_OPERATIONS)
    line = summarize({"b": cpu, "c": operations, "d": operations})
    assert line == ("2 nodes: resourceclaim not available on the node: its devices skip node operations; "
                    "1 node: Insufficient cpu")


def test_a_long_line_is_cut_as_kube_scheduler_cuts_its_own() -> None:
    many = [ours(f"n{index}", f"reason number {index} " + "x" * 40) for index in range(100)]
    line = summarize({verdict.node: verdict for verdict in many})
    assert line is not None and len(line) == MAX_MESSAGE and line.endswith(" ...")


def test_once_per_pod_and_interval_the_same_words_only_after_a_while_and_a_global_rate() -> None:
    sink, clock = Sink(), Clock()
    explanations = Explanations(sink, clock=clock, per_pod_interval_s=30, repeat_after_s=600, rate_per_s=1,
                                burst=2)
    failing = {"a": ours("a", "one")}
    other = {"a": ours("a", "two")}
    pod = {"metadata": {"name": "p", "namespace": "default", "uid": "u1"}}
    explanations.after_filter(pod, failing)
    clock.now += 10
    explanations.after_filter(pod, other)  # within the pod's interval
    clock.now += 25
    explanations.after_filter(pod, failing)  # the same words: not yet
    explanations.after_filter(pod, other)  # new words, interval over
    assert [message for _, _, message, _ in sink.events] == ["1 node: one", "1 node: two"]
    clock.now += 601
    explanations.after_filter(pod, other)  # the same words after REPEAT_AFTER_S
    assert len(sink.events) == 3
    # Other pods at the same moment: one token is left of the bucket (2, refilled 1 a second).
    for uid in ("u2", "u3", "u4"):
        explanations.after_filter({"metadata": {"name": uid, "namespace": "default", "uid": uid}}, failing)
    assert len(sink.events) == 4 and explanations.rate_limited == 2
    clock.now += 1
    explanations.after_filter({"metadata": {"name": "u4", "namespace": "default", "uid": "u4"}}, failing)
    assert len(sink.events) == 5


async def test_the_event_reaches_the_api_server_as_a_core_v1_event(fake_api: Any) -> None:
    client = KubeClient.for_url(fake_api.url)
    recorder = EventRecorder(client, RealClock(), "dra-extender")
    recorder.start()
    try:
        objs = [*o.cluster(1, 1), o.claim("big", count=2), o.pod("q", ["big"])]
        scheduler = scheduler_of(objs, explanations=Explanations(recorder))
        # kube-scheduler's copy of a pod carries no apiVersion or kind.
        pod = {key: value for key, value in pod_of(scheduler, "q").items()
               if key not in ("apiVersion", "kind")}
        await scheduler.filter(pod, ["node-0"], brief=True)
        await asyncio.wait_for(recorder.flush(), 10)
    finally:
        await recorder.stop()
        await client.close()
    [event] = fake_api.objects("Event")
    assert event["involvedObject"] == {"apiVersion": "v1", "kind": "Pod", "name": "q", "namespace": "default",
                                       "uid": pod["metadata"]["uid"]}
    assert (event["reason"], event["type"], event["source"]) == (EVENT_REASON, "Warning",
                                                                 {"component": "dra-extender"})
    assert event["metadata"]["namespace"] == "default"
    assert event["message"] == "request gpu of claim default/big: 0 of 1 node (1 too few devices)"


@pytest.mark.parametrize("count", [1, 3])
def test_counts_read_naturally(count: int) -> None:
    verdicts = {f"n{index}": ours(f"n{index}", "ours") for index in range(count)}
    assert summarize(verdicts) == f"{count} node{'s' if count > 1 else ''}: ours"
