"""--requeue-claim: while pods we rejected wait, a slice change becomes one update of our own claim,
which kube-scheduler requeues extender-rejected pods on (against the in-process fake API server)."""

from __future__ import annotations

import asyncio
from typing import Any

import dra_objects as o
import pytest

from allocator import FeatureGates
from common.objects import parse_namespaced_name
from extender.kube.client import KubeClient
from extender.plugin.claimwriter import ClaimWriter
from extender.plugin.requeue import ANNOTATION, RequeueNudge
from extender.plugin.scheduling import Scheduler
from extender.state.assume import AssumeCache
from extender.state.cache import ClusterCache

SLICE = o.gpu_slice("node-9", 1)


def requeue_claims(fake_api: Any) -> list[dict[str, Any]]:
    return [c for c in fake_api.objects("ResourceClaim") if c["metadata"]["name"] == "requeue"]


@pytest.fixture
async def nudge(fake_api: Any) -> Any:
    client = KubeClient.for_url(fake_api.url)
    nudge = RequeueNudge(client, "dra-extender", "requeue", delay_s=0.05, min_interval_s=0.3)
    yield nudge
    await nudge.stop()
    await client.close()


async def settled(nudge: RequeueNudge) -> None:
    while nudge._task is not None:
        await asyncio.sleep(0.01)


async def test_a_slice_change_while_a_rejected_pod_waits_updates_our_claim(fake_api: Any, nudge: Any) -> None:
    pod = o.pod("p", ["c"])
    nudge.on_change("ResourceSlice", "ADDED", SLICE, None)
    await settled(nudge)
    assert requeue_claims(fake_api) == [] and nudge.writes == 0  # nobody waits: no write
    nudge.rejected(pod)
    nudge.on_change("ResourceSlice", "ADDED", SLICE, None)
    await settled(nudge)
    [claim] = requeue_claims(fake_api)  # created on first use
    assert claim["metadata"]["namespace"] == "dra-extender"
    assert claim["metadata"]["annotations"] == {ANNOTATION: "1"} and claim["spec"] == {"devices": {}}
    nudge.on_change("DeviceTaintRule", "DELETED", {"metadata": {"name": "r"}}, None)
    await settled(nudge)
    [claim] = requeue_claims(fake_api)  # then updated: each write is a ResourceClaim update event
    assert claim["metadata"]["annotations"] == {ANNOTATION: "2"} and nudge.failures == 0


async def test_a_burst_of_changes_is_one_write_and_writes_are_spaced(fake_api: Any, nudge: Any) -> None:
    nudge.rejected(o.pod("p", ["c"]))
    loop = asyncio.get_running_loop()
    started = loop.time()
    for _ in range(50):
        nudge.on_change("ResourceSlice", "MODIFIED", SLICE, SLICE)
    await settled(nudge)
    assert nudge.writes == 1
    nudge.on_change("ResourceSlice", "MODIFIED", SLICE, SLICE)
    await settled(nudge)
    assert nudge.writes == 2 and loop.time() - started >= 0.3  # min_interval_s after the first


async def test_bound_or_deleted_pods_stop_waiting_and_other_kinds_are_no_trigger(nudge: Any) -> None:
    pods = [o.pod(f"p{i}", ["c"]) for i in range(3)]
    for pod in pods:
        nudge.rejected(pod)
    bound = {**pods[0], "spec": {**pods[0]["spec"], "nodeName": "node-0"}}
    nudge.on_change("Pod", "MODIFIED", bound, pods[0])
    nudge.on_change("Pod", "DELETED", pods[1], None)
    nudge.admitted(pods[2])  # a later filter found nodes
    assert nudge.waiting == 0
    nudge.rejected(pods[2])
    for kind, event in (("ResourceSlice", "DELETED"), ("DeviceTaintRule", "ADDED"), ("Node", "MODIFIED"),
                        ("ResourceClaim", "MODIFIED"), ("DeviceClass", "ADDED")):
        nudge.on_change(kind, event, {}, None)  # kube-scheduler sees these itself, or they free nothing
    assert nudge._task is None


async def test_a_refused_write_is_logged_and_the_next_change_tries_again(
        fake_api: Any, nudge: Any, caplog: pytest.LogCaptureFixture) -> None:
    nudge.rejected(o.pod("p", ["c"]))
    fake_api.fail_next("update", "resourceclaims", status=403)
    nudge.on_change("ResourceSlice", "ADDED", SLICE, None)
    await settled(nudge)
    assert nudge.failures == 1 and "could not update ResourceClaim dra-extender/requeue" in caplog.text
    nudge.on_change("ResourceSlice", "ADDED", SLICE, None)
    await settled(nudge)
    assert len(requeue_claims(fake_api)) == 1


async def test_the_scheduler_tells_the_nudge_which_pods_wait() -> None:
    objs = [*o.cluster(1, 1), o.claim("c"), o.pod("p", ["c"]), o.claim("big", count=2), o.pod("q", ["big"])]
    cache = ClusterCache.from_objects(objs, FeatureGates())
    assume = AssumeCache()
    assume.attach(cache)
    nudge = RequeueNudge(None, "ns", "requeue")  # type: ignore[arg-type]  # never writes here
    scheduler = Scheduler(cache, assume, ClaimWriter(None, cache), requeue=nudge)
    p, q = cache.pod("default", "p"), cache.pod("default", "q")
    assert p is not None and q is not None
    await scheduler.filter(q, ["node-0"])  # not the answer to kube-scheduler: nothing waits
    assert nudge.waiting == 0
    await scheduler.filter(q, ["node-0"], brief=True)
    await scheduler.filter(p, ["node-0"], brief=True)
    assert nudge._waiting == {q["metadata"]["uid"]}
    assert scheduler.describe_state()["requeue"] == {"claim": "ns/requeue", "waitingPods": 1, "writes": 0,
                                                     "failures": 0}


@pytest.mark.parametrize("text", ["", "ns", "/name", "ns/", "a/b/c"])
def test_the_claim_is_named_namespace_slash_name(text: str) -> None:
    with pytest.raises(ValueError, match="NAMESPACE/NAME"):
        parse_namespaced_name(text)
    assert parse_namespaced_name("dra-extender/requeue") == ("dra-extender", "requeue")

