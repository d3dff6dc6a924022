"""The extender against the in-process fake API server: watch-fed cache, real claim writes, races."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import dra_objects as o
import orjson
import pytest
from fakeapi import StatusError

from allocator import FeatureGates
from extender.http.server import ExtenderServer
from extender.kube.client import KubeClient
from extender.kube.informer import ClusterWatcher
from extender.plugin.claimwriter import ClaimWriter
from extender.plugin.scheduling import Scheduler
from extender.plugin.verdicts import CANNOT_ALLOCATE, Words
from extender.state.assume import AssumeCache
from extender.state.cache import ClusterCache


class Stack:
    def __init__(
        self,
        fake: Any,
        client: KubeClient,
        cache: ClusterCache,
        watcher: ClusterWatcher,
        server: ExtenderServer,
    ) -> None:
        self.fake, self.client, self.cache, self.watcher, self.server = fake, client, cache, watcher, server

    async def post(self, verb: str, body: dict) -> Any:
        async with (
            aiohttp.ClientSession() as session,
            session.post(f"{self.server.urls['extender']}/{verb}", data=orjson.dumps(body),
                         headers={"Content-Type": "application/json"}) as response,
        ):
            assert response.status == 200
            return orjson.loads(await response.read())

    async def settle(self) -> None:
        """Wait until the watch delivered everything the fake API server holds."""
        deadline = asyncio.get_running_loop().time() + 30   # bounds a hang only: CI may be loaded
        while asyncio.get_running_loop().time() < deadline:
            if all(
                self.cache.raw("ResourceClaim", f"default/{c['metadata']['name']}") is not None
                and self.cache.raw("ResourceClaim", f"default/{c['metadata']['name']}")["metadata"][
                    "resourceVersion"
                ]
                == c["metadata"]["resourceVersion"]
                for c in self.fake.objects("ResourceClaim")
            ):
                return
            await asyncio.sleep(0.01)
        raise AssertionError("the watch did not catch up")


@pytest.fixture
async def stack(fake_api: Any) -> AsyncIterator[Stack]:
    objs = o.cluster(2, 2)
    for index in range(6):
        objs += [o.claim(f"c{index}"), o.pod(f"p{index}", [f"c{index}"])]
    fake_api.seed(objs)
    client = KubeClient.for_url(fake_api.url)
    cache = ClusterCache(FeatureGates())
    watcher = ClusterWatcher(client, cache)
    await watcher.start()
    assert await watcher.wait_ready(30)
    assume = AssumeCache()
    assume.attach(cache)
    server = ExtenderServer(Scheduler(cache, assume, ClaimWriter(client, cache)), watch_health=watcher.health)
    await server.start("127.0.0.1", 0, 0)
    yield Stack(fake_api, client, cache, watcher, server)
    await server.stop()
    await watcher.stop()
    await client.close()


def bind_args(stack: Stack, name: str, node: str) -> dict:
    pod = stack.cache.pod("default", name)
    assert pod is not None
    return {"PodName": name, "PodNamespace": "default", "PodUID": pod["metadata"]["uid"], "Node": node}


def api_devices(fake: Any) -> list[tuple[str, str]]:
    found = []
    for claim in fake.objects("ResourceClaim"):
        for result in (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get(
            "results"
        ) or []:
            found.append((result["pool"], result["device"]))
    return found


async def test_concurrent_binds_race_for_the_last_devices(stack: Stack) -> None:
    # 6 pods, 4 devices; every pod binds to node-0 first (2 devices), losers retry on node-1.
    first = await asyncio.gather(*(stack.post("bind", bind_args(stack, f"p{i}", "node-0")) for i in range(6)))
    assert sum(1 for result in first if result["Error"] == "") == 2
    losers = [f"p{i}" for i, result in enumerate(first) if result["Error"]]
    assert all("no longer fits node node-0" in first[int(name[1:])]["Error"] for name in losers)
    second = await asyncio.gather(*(stack.post("bind", bind_args(stack, name, "node-1")) for name in losers))
    assert sum(1 for result in second if result["Error"] == "") == 2
    devices = api_devices(stack.fake)
    assert len(devices) == 4 and len(set(devices)) == 4
    bound = [p for p in stack.fake.objects("Pod") if (p.get("spec") or {}).get("nodeName")]
    assert len(bound) == 4
    await stack.settle()
    state = stack.server.scheduler
    assert state.bind_conflicts == 6 and len(state.assume) == 0
    async with (
        aiohttp.ClientSession() as session,
        session.get(stack.server.urls["debug"] + "/metrics") as response,
    ):
        text = await response.text()
    assert "dra_extender_bind_conflicts_total 6.0" in text
    assert 'dra_extender_bind_failures_total{stage="recheck"} 6.0' in text
    assert "dra_extender_bind_duration_seconds_count 10.0" in text


async def test_status_write_conflict_is_retried(stack: Stack) -> None:
    stack.fake.fail_next(
        "update",
        "resourceclaims",
        subresource="status",
        count=2,
        status=409,
        message="the object has been modified",
    )
    result = await stack.post("bind", bind_args(stack, "p0", "node-1"))
    assert result == {"Error": ""}
    claim = stack.fake.get_object("ResourceClaim", "c0", "default")
    assert claim["status"]["reservedFor"][0]["name"] == "p0"
    assert stack.fake.get_object("Pod", "p0", "default")["spec"]["nodeName"] == "node-1"


async def test_failed_binding_is_undone(stack: Stack) -> None:
    stack.fake.fail_next("create", "pods", subresource="binding", status=403)
    result = await stack.post("bind", bind_args(stack, "p0", "node-0"))
    assert "creating the Binding" in result["Error"]
    claim = stack.fake.get_object("ResourceClaim", "c0", "default")
    assert not (claim.get("status") or {}).get("allocation") and not (claim.get("status") or {}).get(
        "reservedFor"
    )
    assert len(stack.server.scheduler.assume) == 0


async def test_filter_during_bind_sees_devices_in_flight(stack: Stack) -> None:
    # Take node-0's first device for good, then hold the bind of p1 in its claim status write: until
    # that write lands, only the assume cache knows p1's device is taken.
    assert (await stack.post("bind", bind_args(stack, "p0", "node-0")))["Error"] == ""
    await stack.settle()
    write_started, release = asyncio.Event(), asyncio.Event()

    async def slow_status_write(request: Any) -> None:
        if request.resource.plural == "resourceclaims" and request.subresource == "status":
            write_started.set()
            await release.wait()

    remove = stack.fake.intercept(slow_status_write)
    bind = asyncio.create_task(stack.post("bind", bind_args(stack, "p1", "node-0")))
    await asyncio.wait_for(write_started.wait(), 30)
    pod = stack.cache.pod("default", "p2")
    result = await stack.post("filter", {"Pod": pod, "NodeNames": ["node-0", "node-1"], "Nodes": None})
    assert result["NodeNames"] == ["node-1"]
    # As the in-tree plugin: unresolvable, whatever holds the devices.
    assert result["FailedAndUnresolvableNodes"] == {"node-0": CANNOT_ALLOCATE}
    stack.server.scheduler.reasons = Words.DETAILED
    result = await stack.post("filter", {"Pod": pod, "NodeNames": ["node-0", "node-1"], "Nodes": None})
    assert result["FailedNodes"] == {"node-0": CANNOT_ALLOCATE}  # resolvable: evicting p1 would free it
    alone = await stack.post("filter", {"Pod": pod, "NodeNames": ["node-0"], "Nodes": None})
    assert "in use" in alone["FailedNodes"]["node-0"]
    release.set()
    remove()
    assert (await bind)["Error"] == ""
    devices = api_devices(stack.fake)
    assert len(devices) == len(set(devices)) == 2


async def test_status_write_that_landed_but_answered_an_error_is_a_success(stack: Stack) -> None:
    """The API server stored p0's status write but answered with an error while the claim watch is down:
    the extender reads the claim back, finds its own allocation and carries on; the device stays p0's
    while others bind."""
    def landed_but_failed(request: Any) -> None:
        if request.resource.plural == "resourceclaims" and request.subresource == "status" \
                and request.name == "c0":
            if (request.body.get("status") or {}).get("allocation"):
                stack.fake.put_object(request.body)  # stored ...
            raise StatusError(504, "the server timed out waiting for etcd")  # ... but reported failed

    watch_back = asyncio.Event()

    async def hold_claim_watch(request: Any) -> None:
        if request.verb in ("list", "watch") and request.resource.plural == "resourceclaims":
            await watch_back.wait()

    unhold = stack.fake.intercept(hold_claim_watch)
    stack.fake.close_watches("resourceclaims")
    remove = stack.fake.intercept(landed_but_failed)
    result = await stack.post("bind", bind_args(stack, "p0", "node-0"))
    assert result["Error"] == ""
    remove()
    assert stack.fake.get_object("Pod", "p0", "default")["spec"]["nodeName"] == "node-0"
    # Two more pods for node-0's two devices: only one can get the device p0's claim does not hold.
    binds = (stack.post("bind", bind_args(stack, f"p{i}", "node-0")) for i in (1, 2))
    outcomes = await asyncio.gather(*binds)
    assert sorted(bool(outcome["Error"]) for outcome in outcomes) == [False, True]
    devices = api_devices(stack.fake)
    assert len(devices) == len(set(devices)) == 2
    watch_back.set()
    unhold()
    await stack.settle()
    assert len(stack.server.scheduler.assume) == 0, "the watch settles what was in flight"


async def test_watch_drop_and_410_gone_keep_the_cache_current(stack: Stack) -> None:
    stack.fake.close_watches()
    stack.fake.expire_history()
    extra = o.claim("late")
    stack.fake.seed([extra, o.pod("late-pod", ["late"])])
    deadline = asyncio.get_running_loop().time() + 30
    while not (stack.cache.pod("default", "late-pod") is not None and stack.cache.claim("default", "late")) \
            and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.02)
    pod = stack.cache.pod("default", "late-pod")
    assert pod is not None
    result = await stack.post("filter", {"Pod": pod, "NodeNames": ["node-0"], "Nodes": None})
    assert result["NodeNames"] == ["node-0"]
    async with (
        aiohttp.ClientSession() as session,
        session.get(stack.server.urls["debug"] + "/metrics") as response,
    ):
        assert "dra_extender_watch_restarts" in await response.text()
