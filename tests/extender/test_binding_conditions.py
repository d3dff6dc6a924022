"""Device binding conditions (DRADeviceBindingConditions): the pod is bound only once every binding
condition of its devices is True; a failure condition or the binding timeout frees the claim and the pod
is scheduled again. Against the fake API server, with a test driver writing the device conditions the
way a DRA driver does (an update of the claim's status)."""

from __future__ import annotations

import asyncio
import copy
import datetime
import re
import time
from collections.abc import AsyncIterator
from typing import Any

import dra_objects as o
import orjson
import pytest
from fakeapi import FakeApiServer
from waiting import wait_until

from allocator import FeatureGates
from extender.http.devicemap import build_map, render_page, take_view
from extender.http.explain import explain_pod, render_text
from extender.http.server import ExtenderServer
from extender.kube.client import KubeClient
from extender.kube.informer import ClusterWatcher
from extender.plugin.authority import Authority
from extender.plugin.bindingconditions import (
    EVENT_FAILED,
    EVENT_PENDING,
    BindingPolicy,
    BindingSweeper,
    State,
    claim_binding,
)
from extender.plugin.claimwriter import FINALIZER, ClaimWriter
from extender.plugin.scheduling import BindFailed, Scheduler
from extender.state.assume import AssumeCache
from extender.state.cache import ClusterCache

ATTACHED, FAILED = "attached", "failed"
DEVICE = "gpu.example.com/node-0/gpu-0"
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"


# ---- the state of one claim, a pure function of the claim and the time -----------------------------

def allocated_claim(*, conditions: list[dict[str, Any]] | None = None,
                    at: str | None = "2030-01-01T00:00:00Z",
                    devices: tuple[str, ...] = ("gpu-0",)) -> dict[str, Any]:
    raw = o.allocate(o.claim("c0"), "node-0", list(devices))
    for result in raw["status"]["allocation"]["devices"]["results"]:
        result["bindingConditions"] = [ATTACHED]
        result["bindingFailureConditions"] = [FAILED]
    if at is not None:
        raw["status"]["allocation"]["allocationTimestamp"] = at
    if conditions is not None:
        raw["status"]["devices"] = [{"driver": o.DRIVER, "pool": "node-0", "device": devices[0],
                                     "conditions": conditions}]
    return raw


def condition(kind: str, status: str = "True", reason: str = "Testing", message: str = "") -> dict[str, Any]:
    return {"type": kind, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": "2030-01-01T00:00:01Z", "observedGeneration": 1}


AT = datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC).timestamp()


def test_a_device_without_a_status_waits_for_all_its_conditions() -> None:
    state = claim_binding(allocated_claim(), timeout_s=600, now=AT + 10)
    assert state is not None and state.state == State.PENDING
    assert state.devices[0].pending == (ATTACHED,) and state.deadline == AT + 600
    assert state.describe() == (f"waiting for device binding conditions: claim default/c0, device {DEVICE}: "
                                "attached not True yet (until 2030-01-01T00:10:00Z)")


def test_every_condition_true_is_ready_and_false_or_unknown_is_not() -> None:
    assert claim_binding(allocated_claim(conditions=[condition(ATTACHED)]), timeout_s=600,
                         now=AT).state == State.READY  # type: ignore[union-attr]
    for status in ("False", "Unknown"):
        raw = allocated_claim(conditions=[condition(ATTACHED, status)])
        state = claim_binding(raw, timeout_s=600, now=AT)
        assert state is not None and state.state == State.PENDING


def test_a_true_failure_condition_fails_and_names_it() -> None:
    raw = allocated_claim(conditions=[condition(ATTACHED, "False"), condition(FAILED, message="no path")])
    state = claim_binding(raw, timeout_s=600, now=AT)
    assert state is not None and state.state == State.FAILED
    assert state.describe() == (f"device binding failed: claim default/c0, device {DEVICE}: "
                                "binding failure condition failed is True (Testing: no path)")
    # A failure wins over readiness, and over a timeout.
    raw = allocated_claim(conditions=[condition(ATTACHED), condition(FAILED)])
    assert claim_binding(raw, timeout_s=1, now=AT + 100).state == State.FAILED  # type: ignore[union-attr]


def test_a_failure_of_a_later_device_is_seen_when_an_earlier_one_has_no_status() -> None:
    """Deliberately more than upstream, which stops at the first device without a status."""
    raw = allocated_claim(devices=("gpu-0", "gpu-1"))
    raw["status"]["devices"] = [{"driver": o.DRIVER, "pool": "node-0", "device": "gpu-1",
                                 "conditions": [condition(FAILED)]}]
    state = claim_binding(raw, timeout_s=600, now=AT)
    assert state is not None and state.state == State.FAILED and "gpu-1" in state.describe()


def test_the_timeout_counts_from_the_allocation_timestamp() -> None:
    raw = allocated_claim()
    assert claim_binding(raw, timeout_s=600, now=AT + 600).state == State.PENDING  # type: ignore[union-attr]
    state = claim_binding(raw, timeout_s=600, now=AT + 600.5)
    assert state is not None and state.state == State.TIMED_OUT
    assert state.describe() == (f"device binding timeout: claim default/c0, device {DEVICE}: "
                                "attached not True 600s after its allocation at 2030-01-01T00:00:00Z")
    # Without (or with an unreadable) allocationTimestamp a claim never times out, as upstream.
    for at in (None, "yesterday"):
        state = claim_binding(allocated_claim(at=at), timeout_s=1, now=AT + 10**6)
        assert state is not None and state.state == State.PENDING


def test_claims_without_binding_conditions_and_gates_off_have_no_state() -> None:
    plain = o.allocate(o.claim("c0"), "node-0", ["gpu-0"])
    assert claim_binding(plain, timeout_s=600, now=AT) is None
    assert claim_binding(o.claim("c0"), timeout_s=600, now=AT) is None
    for gate in ("DRADeviceBindingConditions", "DRAResourceClaimDeviceStatus"):
        cache = ClusterCache(FeatureGates({gate: False}))
        assert BindingPolicy(cache).of(allocated_claim()) is None
    assert BindingPolicy(ClusterCache(FeatureGates())).of(allocated_claim()) is not None


# ---- the extender against the fake API server ----------------------------------------------------

def cluster(*, with_plain_device: bool = True) -> list[dict[str, Any]]:
    """node-0: gpu-0 with binding conditions ("attached", failure "failed"); node-1: gpu-0 without (the
    allocator prefers devices without binding conditions, so node-1's is taken away while it must not
    be chosen)."""
    objs = o.cluster(2, 1)
    for obj in objs:
        if obj["kind"] == "ResourceSlice" and obj["spec"]["nodeName"] == "node-0":
            for device in obj["spec"]["devices"]:
                device["bindingConditions"] = [ATTACHED]
                device["bindingFailureConditions"] = [FAILED]
                device["bindsToNode"] = True
        if obj["kind"] == "ResourceSlice" and obj["spec"]["nodeName"] == "node-1" and not with_plain_device:
            obj["spec"]["devices"] = []
    return [*objs, o.claim("c0"), o.pod("p0", ["c0"])]


class Events:
    def __init__(self) -> None:
        self.recorded: list[tuple[str, str, str, str]] = []

    def record(self, involved: Any, reason: str, message: str, *, event_type: str = "Normal") -> None:
        self.recorded.append((involved["metadata"]["name"], event_type, reason, message))


class Extender:
    """One `dra-extender serve` process as bind sees it: a watch-fed cache, the claim writer, the
    scheduler (with a wall clock the test may move)."""

    def __init__(self, fake: FakeApiServer, client: KubeClient, *, timeout_s: float, bind_wait_s: float,
                 features: FeatureGates | None = None) -> None:
        self.fake, self.client = fake, client
        self.cache = ClusterCache(features or FeatureGates())
        self.watcher = ClusterWatcher(client, self.cache)
        self.skew = 0.0  # seconds added to the wall clock
        self.events = Events()
        self.authority = Authority.always()
        assume = AssumeCache()
        assume.attach(self.cache)
        self.writer = ClaimWriter(client, self.cache, retry_delay_s=0, authority=self.authority)
        self.scheduler = Scheduler(self.cache, assume, self.writer, authority=self.authority,
                                   binding_timeout_s=timeout_s, bind_wait_s=bind_wait_s,
                                   wall_clock=lambda: time.time() + self.skew, events=self.events)

    async def start(self) -> Extender:
        await self.watcher.start()
        assert await self.watcher.wait_ready(30)
        return self

    async def stop(self) -> None:
        await self.watcher.stop()

    def pod(self, name: str = "p0") -> dict[str, Any]:
        found = self.cache.pod("default", name)
        assert found is not None
        return found

    async def filter(self, name: str = "p0") -> Any:
        return await self.scheduler.filter(self.pod(name), ["node-0", "node-1"], brief=True)

    async def bind(self, node: str, name: str = "p0") -> None:
        await self.scheduler.bind("default", name, uid=self.pod(name)["metadata"]["uid"], node_name=node)

    async def caught_up(self) -> None:
        """Until the cache holds every claim and pod at the API server's version."""
        def same(kind: str) -> bool:
            return all((self.cache.raw(kind, f"default/{obj['metadata']['name']}") or {}).get("metadata", {})
                       .get("resourceVersion") == obj["metadata"]["resourceVersion"]
                       for obj in self.fake.objects(kind))
        await wait_until(lambda: same("ResourceClaim") and same("Pod"))


async def report(client: KubeClient, name: str, device: str, *conditions: dict[str, Any]) -> None:
    """What the test driver does: write the device's conditions into the claim's status."""
    current = await client.get(f"{CLAIMS}/{name}")
    current["status"]["devices"] = [{"driver": o.DRIVER, "pool": device.split("/")[0],
                                     "device": device.split("/")[1], "conditions": list(conditions)}]
    await client.update(f"{CLAIMS}/{name}/status", current)


def stored(fake: FakeApiServer, kind: str, name: str) -> dict[str, Any]:
    found = fake.get_object(kind, name, "default")
    assert found is not None
    return found


def results(fake: FakeApiServer, name: str = "c0") -> list[tuple[str, str]]:
    allocation = (stored(fake, "ResourceClaim", name).get("status") or {}).get("allocation") or {}
    return [(r["pool"], r["device"]) for r in allocation.get("devices", {}).get("results", ())]


def take_plain_device(fake: FakeApiServer) -> None:
    """Another claim holds node-1's device, so the pod's claim gets the one with binding conditions."""
    fake.put_object(o.allocate(o.claim("other"), "node-1", ["gpu-0"]))


@pytest.fixture
async def extenders(fake_api: FakeApiServer, kube: KubeClient) -> AsyncIterator[list[Extender]]:
    started: list[Extender] = []
    yield started
    for extender in started:
        await extender.stop()


async def start(fake: FakeApiServer, kube: KubeClient, extenders: list[Extender], **options: Any) -> Extender:
    options.setdefault("timeout_s", 600.0)
    options.setdefault("bind_wait_s", 0.2)
    extender = await Extender(fake, kube, **options).start()
    extenders.append(extender)
    return extender


async def allocated_and_waiting(fake: FakeApiServer, kube: KubeClient, extenders: list[Extender],
                                **options: Any) -> Extender:
    """p0's claim allocated on node-0's device with binding conditions; its first bind answered that it
    waits, leaving the claim allocated and reserved for the pod, the pod unbound."""
    fake.seed(cluster())
    take_plain_device(fake)
    extender = await start(fake, kube, extenders, **options)
    await extender.caught_up()
    assert (await extender.filter()).passed == ["node-0"]
    waiting = f"waiting for device binding conditions: claim default/c0, device {DEVICE}: attached not True"
    with pytest.raises(BindFailed, match=re.escape(waiting)):
        await extender.bind("node-0")
    raw = stored(fake, "ResourceClaim", "c0")
    assert results(fake) == [("node-0", "gpu-0")]
    result = raw["status"]["allocation"]["devices"]["results"][0]
    assert result["bindingConditions"] == [ATTACHED] and result["bindingFailureConditions"] == [FAILED]
    assert raw["status"]["allocation"]["allocationTimestamp"]
    assert [entry["name"] for entry in raw["status"]["reservedFor"]] == ["p0"]
    assert not stored(fake, "Pod", "p0")["spec"].get("nodeName")
    return extender


async def test_the_pod_is_bound_once_every_binding_condition_is_true(
        fake_api: FakeApiServer, kube: KubeClient, extenders: list[Extender]) -> None:
    extender = await allocated_and_waiting(fake_api, kube, extenders)
    # kube-scheduler's retry: the claim, allocated and reserved, pins the pod to node-0.
    await extender.caught_up()
    assert (await extender.filter()).passed == ["node-0"]
    extender.scheduler.bind_wait_s = 10.0
    bind = asyncio.ensure_future(extender.bind("node-0"))
    await wait_until(lambda: extender.scheduler.waiting_binds != {})
    state = extender.scheduler.describe_state()["bindingConditions"]
    assert state["bindsWaiting"][0]["pod"] == "default/p0"
    assert state["bindsWaiting"][0]["claims"][0]["devices"] == [
        {"device": DEVICE, "pending": [ATTACHED], "failed": []}]
    await report(kube, "c0", "node-0/gpu-0", condition(ATTACHED, "False"))
    await asyncio.sleep(0.1)
    assert not bind.done(), "a condition that is not True binds nothing"
    started = time.monotonic()
    await report(kube, "c0", "node-0/gpu-0", condition(ATTACHED))
    await asyncio.wait_for(bind, 5)
    assert time.monotonic() - started < 2, "the waiting bind wakes on the claim's change"
    assert stored(fake_api, "Pod", "p0")["spec"]["nodeName"] == "node-0"
    assert results(fake_api) == [("node-0", "gpu-0")]
    # Upstream's Normal event once per pod and allocation, not per bind call.
    assert [(kind, reason) for _, kind, reason, _ in extender.events.recorded] == [("Normal", EVENT_PENDING)]
    metrics = extender.scheduler.metrics.render().decode()
    assert 'dra_extender_binding_conditions_total{outcome="ready"} 1.0' in metrics
    assert 'dra_extender_binding_conditions_total{outcome="waiting"} 1.0' in metrics
    assert 'dra_extender_bind_failures_total{stage="write"}' not in metrics, "waiting is not failing"


async def test_a_failure_condition_frees_the_claim_and_the_pod_goes_elsewhere(
        fake_api: FakeApiServer, kube: KubeClient, extenders: list[Extender]) -> None:
    extender = await allocated_and_waiting(fake_api, kube, extenders)
    extender.scheduler.bind_wait_s = 10.0
    bind = asyncio.ensure_future(extender.bind("node-0"))
    await wait_until(lambda: extender.scheduler.waiting_binds != {})
    # The device cannot be attached: the driver says so, and the other node's device is free again.
    fake_api.remove_object("ResourceClaim", "other", "default")
    await report(kube, "c0", "node-0/gpu-0", condition(ATTACHED, "False"),
                 condition(FAILED, message="The test is failing the binding."))
    with pytest.raises(BindFailed) as failed:
        await asyncio.wait_for(bind, 5)
    assert (f"device binding failed: claim default/c0, device {DEVICE}: binding failure condition failed is "
            "True (Testing: The test is failing the binding.); the claim was deallocated; the pod is "
            "scheduled again") in str(failed.value)
    # As upstream's PostFilter: allocation, reservations and device statuses cleared in one write; then,
    # as the resourceclaim controller, our finalizer.
    raw = stored(fake_api, "ResourceClaim", "c0")
    assert raw["status"] == {}
    assert FINALIZER not in (raw["metadata"].get("finalizers") or ())
    # kube-scheduler's FailedScheduling events of the pod are one series that keeps the wait's message:
    # our Warning event says what became of the wait.
    [(_, kind, _, said)] = [e for e in extender.events.recorded if e[2] == EVENT_FAILED]
    assert kind == "Warning" and said.startswith("device binding failed: claim default/c0")
    # kube-scheduler's retry takes the pod to the device that needs no binding conditions.
    await extender.caught_up()
    assert (await extender.filter()).passed == ["node-0", "node-1"]
    await extender.bind("node-1")
    assert stored(fake_api, "Pod", "p0")["spec"]["nodeName"] == "node-1"
    assert results(fake_api) == [("node-1", "gpu-0")]


async def test_a_failure_seen_by_filter_frees_the_claim_and_answers_an_error_naming_it(
        fake_api: FakeApiServer, kube: KubeClient, extenders: list[Extender]) -> None:
    """The failure came while kube-scheduler held the pod in its backoff: its next filter frees the claim
    (upstream's PostFilter) and answers with an Error, so the pod's condition says why."""
    extender = await allocated_and_waiting(fake_api, kube, extenders)
    await report(kube, "c0", "node-0/gpu-0", condition(FAILED, reason="Unreachable"))
    await extender.caught_up()
    result = await extender.filter()
    assert result.passed == [] and result.error.startswith(
        f"device binding failed: claim default/c0, device {DEVICE}: binding failure condition failed is True "
        "(Unreachable); the claim was deallocated")
    assert stored(fake_api, "ResourceClaim", "c0")["status"] == {}
    # The next attempt allocates afresh: node-0's device again (node-1's is taken), a new wait.
    await extender.caught_up()
    assert (await extender.filter()).passed == ["node-0"]
    with pytest.raises(BindFailed, match="waiting for device binding conditions"):
        await extender.bind("node-0")
    assert "devices" not in stored(fake_api, "ResourceClaim", "c0")["status"]


async def test_the_binding_timeout_frees_the_claim_and_says_binding_timeout(
        fake_api: FakeApiServer, kube: KubeClient, extenders: list[Extender]) -> None:
    extender = await allocated_and_waiting(fake_api, kube, extenders, timeout_s=600.0)
    extender.skew = 601.0  # ten minutes later, the attach never done
    await extender.caught_up()
    with pytest.raises(BindFailed) as timed_out:
        await extender.bind("node-0")
    assert (f"device binding timeout: claim default/c0, device {DEVICE}: attached not True 600s after its "
            "allocation at ") in str(timed_out.value)
    assert str(timed_out.value).endswith("; the claim was deallocated; the pod is scheduled again")
    assert stored(fake_api, "ResourceClaim", "c0")["status"] == {}
    assert not stored(fake_api, "Pod", "p0")["spec"].get("nodeName")


async def test_a_waiting_bind_wakes_at_the_binding_timeout(
        fake_api: FakeApiServer, kube: KubeClient, extenders: list[Extender]) -> None:
    """No change of the claim wakes it: the timeout itself does, within this call's wait."""
    extender = await allocated_and_waiting(fake_api, kube, extenders, timeout_s=2.0)
    extender.scheduler.bind_wait_s = 10.0
    started = time.monotonic()
    with pytest.raises(BindFailed, match="device binding timeout"):
        await extender.bind("node-0")
    # allocationTimestamp has whole seconds: the deadline is 1 to 2 s after the allocation.
    assert time.monotonic() - started < 3
    assert stored(fake_api, "ResourceClaim", "c0")["status"] == {}


async def test_the_wait_holds_across_a_restart(fake_api: FakeApiServer, kube: KubeClient,
                                               extenders: list[Extender]) -> None:
    """Nothing of the wait is kept in memory: another process (a restart, a new leader) finds it in the
    claim, both the binding and the timeout."""
    first = await allocated_and_waiting(fake_api, kube, extenders)
    await first.stop()
    extenders.remove(first)
    second = await start(fake_api, kube, extenders, bind_wait_s=0.2)
    await second.caught_up()
    assert (await second.filter()).passed == ["node-0"]
    with pytest.raises(BindFailed, match="waiting for device binding conditions"):
        await second.bind("node-0")
    assert results(fake_api) == [("node-0", "gpu-0")], "the allocation of the first process is kept"
    await report(kube, "c0", "node-0/gpu-0", condition(ATTACHED))
    await second.caught_up()
    await second.bind("node-0")
    assert stored(fake_api, "Pod", "p0")["spec"]["nodeName"] == "node-0"


async def test_the_timeout_holds_across_a_restart(fake_api: FakeApiServer, kube: KubeClient,
                                                  extenders: list[Extender]) -> None:
    first = await allocated_and_waiting(fake_api, kube, extenders)
    allocated_at = stored(fake_api, "ResourceClaim", "c0")["status"]["allocation"]["allocationTimestamp"]
    await first.stop()
    extenders.remove(first)
    second = await start(fake_api, kube, extenders)
    second.skew = 601.0
    await second.caught_up()
    result = await second.filter()
    assert result.error.startswith("device binding timeout: claim default/c0")
    assert allocated_at in result.error
    assert stored(fake_api, "ResourceClaim", "c0")["status"] == {}


async def test_bind_answers_kube_scheduler_with_the_error_on_the_wire(
        fake_api: FakeApiServer, kube: KubeClient, extenders: list[Extender]) -> None:
    """kube-scheduler's ExtenderBindingArgs in, ExtenderBindingResult out: the Error becomes the pod's
    PodScheduled condition message."""
    extender = await allocated_and_waiting(fake_api, kube, extenders)
    server = ExtenderServer(extender.scheduler)
    await server.start("127.0.0.1", 0, 0)
    try:
        import aiohttp

        body = {"PodName": "p0", "PodNamespace": "default", "PodUID": extender.pod()["metadata"]["uid"],
                "Node": "node-0"}
        async with aiohttp.ClientSession() as session, session.post(
                f"{server.urls['extender']}/bind", data=orjson.dumps(body),
                headers={"Content-Type": "application/json"}) as response:
            assert response.status == 200
            answer = orjson.loads(await response.read())
    finally:
        await server.stop()
    assert list(answer) == ["Error"]
    assert answer["Error"].startswith("binding pod default/p0 to node node-0: waiting for device binding "
                                      "conditions: claim default/c0")
    assert "binding timeout" not in answer["Error"], "upstream's tests read that phrase as the timeout"


async def test_a_claim_others_use_is_not_freed(fake_api: FakeApiServer, kube: KubeClient,
                                               extenders: list[Extender]) -> None:
    """Upstream frees a failed claim only when reserved for nobody or the pod alone: here a bound pod
    shares it, so the pod fits no node, in upstream's words."""
    extender = await allocated_and_waiting(fake_api, kube, extenders)
    shared = stored(fake_api, "ResourceClaim", "c0")
    shared["status"]["reservedFor"].append({"resource": "pods", "name": "user", "uid": "uid-of-user"})
    shared["status"]["devices"] = [{"driver": o.DRIVER, "pool": "node-0", "device": "gpu-0",
                                    "conditions": [condition(FAILED)]}]
    fake_api.put_object(shared)
    await extender.caught_up()
    result = await extender.filter()
    assert result.passed == [] and not result.error
    assert set(result.unresolvable.values()) == {"resourceclaim not available on the node"}
    assert stored(fake_api, "ResourceClaim", "c0")["status"]["allocation"]


async def test_with_the_gate_off_the_pod_is_bound_at_once(fake_api: FakeApiServer, kube: KubeClient,
                                                          extenders: list[Extender]) -> None:
    """As upstream's PreBind with DRADeviceBindingConditions off: the conditions of a claim allocated
    elsewhere are not waited for (and our allocator does not pick such devices)."""
    objs = cluster()
    claim = next(obj for obj in objs if obj["kind"] == "ResourceClaim")
    pod = next(obj for obj in objs if obj["kind"] == "Pod")
    o.allocate(claim, "node-0", ["gpu-0"], reserved_for=[{"resource": "pods", "name": "p0",
                                                          "uid": pod["metadata"]["uid"]}])
    claim["status"]["allocation"]["devices"]["results"][0]["bindingConditions"] = [ATTACHED]
    fake_api.seed(objs)
    extender = await start(fake_api, kube, extenders,
                           features=FeatureGates({"DRADeviceBindingConditions": False}))
    await extender.caught_up()
    await extender.bind("node-0")
    assert stored(fake_api, "Pod", "p0")["spec"]["nodeName"] == "node-0"


async def test_explain_and_the_device_map_show_a_pod_waiting(
        fake_api: FakeApiServer, kube: KubeClient, extenders: list[Extender]) -> None:
    extender = await allocated_and_waiting(fake_api, kube, extenders)
    await extender.caught_up()
    report_ = await explain_pod(extender.scheduler, "default", "p0")
    assert report_["bindingConditions"][0]["state"] == "pending"
    assert report_["bindingConditions"][0]["devices"][0]["pending"] == [ATTACHED]
    text = render_text(report_)
    assert (f"  waiting for device binding conditions: claim default/c0, device {DEVICE}: attached not True "
            "yet (until ") in text
    page = render_page(build_map(take_view(extender.cache, [], binding=extender.scheduler.binding)), page=1,
                       per_page=50, node_filter="")
    assert "waiting for device binding conditions: claim default/c0" in page
    assert 'data-state="allocated"' in page and "binding: attached pending" in page


async def test_the_sweeper_frees_a_failed_claim_no_bind_settles(
        fake_api: FakeApiServer, kube: KubeClient, extenders: list[Extender]) -> None:
    """kube-scheduler no longer sends the pod (its node filled up while it waited): after the grace period
    the leader frees the claim and tells the pod why."""
    extender = await allocated_and_waiting(fake_api, kube, extenders)
    now = [0.0]
    warned: list[tuple[str, str, str]] = []
    sweeper = BindingSweeper(extender.cache, extender.writer, extender.scheduler.binding, extender.authority,
                             clock=lambda: now[0], grace_s=30.0,
                             report=lambda pod, reason, message: warned.append(
                                 (pod["metadata"]["name"], reason, message)))
    assert sweeper.describe()["watched"] == 1
    assert await sweeper.sweep_once() == 0, "pending: nothing to free"
    await report(kube, "c0", "node-0/gpu-0", condition(FAILED))
    await extender.caught_up()
    assert await sweeper.sweep_once() == 0, "the grace period gives bind and filter their chance"
    now[0] = 29.0
    assert await sweeper.sweep_once() == 0
    now[0] = 31.0
    assert await sweeper.sweep_once() == 1
    assert stored(fake_api, "ResourceClaim", "c0")["status"] == {}
    assert [(pod, reason) for pod, reason, _ in warned] == [("p0", EVENT_FAILED)]
    assert warned[0][2].startswith("device binding failed: claim default/c0")
    await extender.caught_up()
    assert sweeper.describe() == {"watched": 0, "failedOrTimedOut": 0, "freed": 1}


async def test_the_sweeper_leaves_a_claim_a_bound_pod_uses(
        fake_api: FakeApiServer, kube: KubeClient, extenders: list[Extender]) -> None:
    extender = await allocated_and_waiting(fake_api, kube, extenders)
    pod = copy.deepcopy(stored(fake_api, "Pod", "p0"))
    pod["spec"]["nodeName"] = "node-0"
    fake_api.put_object(pod)
    await report(kube, "c0", "node-0/gpu-0", condition(FAILED))
    await extender.caught_up()
    now = [0.0]
    sweeper = BindingSweeper(extender.cache, extender.writer, extender.scheduler.binding, extender.authority,
                             clock=lambda: now[0], grace_s=1.0)
    await sweeper.sweep_once()
    now[0] = 5.0
    assert await sweeper.sweep_once() == 0
    assert stored(fake_api, "ResourceClaim", "c0")["status"]["allocation"]


async def test_the_special_claim_of_extended_resources_is_kept_while_it_waits() -> None:
    """A pod asking for `example.com/gpu: 1` gets its claim created at bind. While its devices wait for
    their binding conditions, kube-scheduler's retries keep that claim (a claim of an earlier attempt is
    otherwise removed); once the binding fails, it is deleted, as upstream does."""
    from test_extended_resources import extended_class, gpu_pod, special_claims
    from test_scheduling import make, pod_of

    objs = cluster()
    objs[0] = extended_class()
    objs = [obj for obj in objs if obj["kind"] not in ("ResourceClaim", "Pod")]
    objs.append(o.allocate(o.claim("other"), "node-1", ["gpu-0"]))
    scheduler = make([*objs, gpu_pod("p", count=1)], bind_wait_s=0.05)
    pod = pod_of(scheduler, "p")

    async def attempt() -> tuple[list[str], str]:
        result = await scheduler.filter(pod_of(scheduler, "p"), ["node-0", "node-1"], brief=True)
        if not result.passed:
            return [], result.error
        try:
            await scheduler.bind("default", "p", uid=pod["metadata"]["uid"], node_name=result.passed[0])
        except BindFailed as failed:
            return result.passed, str(failed)
        return result.passed, ""

    passed, said = await attempt()
    assert passed == ["node-0"] and "waiting for device binding conditions" in said
    [special] = special_claims(scheduler)
    passed, said = await attempt()
    assert passed == ["node-0"] and "waiting for device binding conditions" in said
    assert special_claims(scheduler) == [special], "the retry keeps the claim it waits on"
    failed = copy.deepcopy(special)
    failed["status"]["devices"] = [{"driver": o.DRIVER, "pool": "node-0", "device": "gpu-0",
                                    "conditions": [condition(FAILED)]}]
    failed["metadata"]["resourceVersion"] = str(int(failed["metadata"]["resourceVersion"]) + 1)
    scheduler.cache.apply("ResourceClaim", "MODIFIED", failed)
    passed, said = await attempt()
    assert passed == []
    assert said.startswith(f"device binding failed: claim default/{special['metadata']['name']}")
    assert "the claim was deleted" in said
    assert special_claims(scheduler) == []


async def waiting_again(extender: Extender) -> asyncio.Future[None]:
    """kube-scheduler's retry of the pod, its bind now waiting for the claim allocated by the first call."""
    extender.scheduler.bind_wait_s = 10.0
    await extender.caught_up()
    bind = asyncio.ensure_future(extender.bind("node-0"))
    await wait_until(lambda: extender.scheduler.waiting_binds != {})
    return bind


async def test_a_claim_deallocated_while_the_bind_waits_is_never_bound(
        fake_api: FakeApiServer, kube: KubeClient, extenders: list[Extender]) -> None:
    """Someone (an admin, a driver's controller) clears the claim's status: with no allocation left to
    wait for, the pod must not be bound (upstream's PreBind finds the claim not ready)."""
    extender = await allocated_and_waiting(fake_api, kube, extenders)
    bind = await waiting_again(extender)
    current = await kube.get(f"{CLAIMS}/c0")
    current["status"] = {}
    await kube.update(f"{CLAIMS}/c0/status", current)
    with pytest.raises(BindFailed, match="ResourceClaim default/c0 is not allocated any more while the pod "
                                         "waited for device binding conditions"):
        await asyncio.wait_for(bind, 5)
    assert not stored(fake_api, "Pod", "p0")["spec"].get("nodeName")
    assert extender.scheduler.waiting_binds == {}


async def test_a_claim_unreserved_while_the_bind_waits_is_never_bound(
        fake_api: FakeApiServer, kube: KubeClient, extenders: list[Extender]) -> None:
    extender = await allocated_and_waiting(fake_api, kube, extenders)
    bind = await waiting_again(extender)
    current = await kube.get(f"{CLAIMS}/c0")
    current["status"]["reservedFor"] = [{"resource": "pods", "name": "user", "uid": "uid-of-user"}]
    await kube.update(f"{CLAIMS}/c0/status", current)
    with pytest.raises(BindFailed, match="ResourceClaim default/c0 is not reserved for the pod any more"):
        await asyncio.wait_for(bind, 5)
    assert not stored(fake_api, "Pod", "p0")["spec"].get("nodeName")
    assert stored(fake_api, "ResourceClaim", "c0")["status"]["allocation"], "theirs now: left alone"


@pytest.mark.parametrize("recreated", [False, True])
async def test_a_claim_deleted_while_the_bind_waits_is_never_bound(
        fake_api: FakeApiServer, kube: KubeClient, extenders: list[Extender], recreated: bool) -> None:
    """Force-deleted (its finalizers removed), or deleted and created again under the same name: the
    claim the pod waited on is gone."""
    extender = await allocated_and_waiting(fake_api, kube, extenders)
    bind = await waiting_again(extender)
    fake_api.remove_object("ResourceClaim", "c0", "default")
    if recreated:
        again = o.allocate(o.claim("c0"), "node-0", ["gpu-0"], reserved_for=[
            {"resource": "pods", "name": "p0", "uid": extender.pod()["metadata"]["uid"]}])
        again["metadata"]["uid"] = "uid-of-the-new-c0"
        fake_api.put_object(again)
    with pytest.raises(BindFailed, match="ResourceClaim default/c0 was deleted while the pod waited"):
        await asyncio.wait_for(bind, 5)
    assert not stored(fake_api, "Pod", "p0")["spec"].get("nodeName")


async def test_a_waiting_bind_keeps_the_sweeper_off_the_claim_an_earlier_call_allocated(
        fake_api: FakeApiServer, kube: KubeClient, extenders: list[Extender]) -> None:
    """The retry does not write c0 (allocated and reserved by the first call) but waits on it: the
    sweeper must not free it under the bind."""
    extender = await allocated_and_waiting(fake_api, kube, extenders)
    uid = stored(fake_api, "ResourceClaim", "c0")["metadata"]["uid"]
    assert not extender.writer.writing(uid)
    bind = await waiting_again(extender)
    assert extender.writer.writing(uid)
    await report(kube, "c0", "node-0/gpu-0", condition(ATTACHED))
    await asyncio.wait_for(bind, 5)
    assert not extender.writer.writing(uid)
    assert stored(fake_api, "Pod", "p0")["spec"]["nodeName"] == "node-0"


async def test_a_deallocation_whose_answer_was_lost_is_done(
        fake_api: FakeApiServer, kube: KubeClient, extenders: list[Extender]) -> None:
    """The sweeper's deallocation applies but its answer is lost: the claim read again shows no
    allocation, so it was deallocated (and the pod hears it), not "its binding conditions changed"."""
    extender = await allocated_and_waiting(fake_api, kube, extenders)
    await report(kube, "c0", "node-0/gpu-0", condition(FAILED))
    await extender.caught_up()
    now = [0.0]
    warned: list[str] = []
    sweeper = BindingSweeper(extender.cache, extender.writer, extender.scheduler.binding, extender.authority,
                             clock=lambda: now[0], grace_s=1.0,
                             report=lambda pod, reason, message: warned.append(pod["metadata"]["name"]))
    assert await sweeper.sweep_once() == 0
    now[0] = 5.0
    fake_api.lose_answers("update", "resourceclaims", subresource="status")
    assert await sweeper.sweep_once() == 1
    raw = stored(fake_api, "ResourceClaim", "c0")
    assert raw["status"] == {}
    assert FINALIZER not in (raw["metadata"].get("finalizers") or ())
    assert warned == ["p0"] and sweeper.freed == 1
