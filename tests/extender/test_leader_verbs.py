"""--leader-elect in scheduler-config mode: two replicas against one API server, one answering the verbs.
The standby is not ready but its cache is warm; it takes over when the leader goes (at once when the
leader hands the Lease over, after the lease duration when it just stops renewing), fencing first."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import dra_objects as o
import pytest
import yaml
from fakeapi import FakeApiServer

from extender import tuning
from extender.options import LeaderOptions, NetworkOptions, ServeOptions, SourceOptions
from extender.plugin.claimwriter import FINALIZER
from extender.wiring import App

# Short timings with client-go's proportions.
FAST = LeaderOptions(enabled=True, namespace="dra-extender", lease_duration_s=1.5, renew_deadline_s=1.0,
                     retry_period_s=0.1)


def kubeconfig(path: Path, url: str) -> str:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": url}}],
        "users": [{"name": "tester", "user": {"token": "secret"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "tester"}}]}))
    return str(path)


@contextlib.asynccontextmanager
async def replica(config: str, identity: str, leader: LeaderOptions = FAST) -> AsyncIterator[App]:
    options = ServeOptions(source=SourceOptions(kubeconfig=config),
                           network=NetworkOptions(extender_port=0, debug_port=0),
                           leader=LeaderOptions(**{**leader.__dict__, "identity": identity}))
    async with App(options) as app:
        yield app


async def get(app: App, path: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.get(app.server.urls["debug"] + path) as answer:
        return answer.status, await answer.text()


async def bind(app: App, pod: str, node: str) -> str:
    cached = app.cluster.cache.pod("default", pod)
    assert cached is not None
    body = {"PodName": pod, "PodNamespace": "default", "PodUID": cached["metadata"]["uid"], "Node": node}
    async with aiohttp.ClientSession() as session, session.post(
            app.server.urls["extender"] + "/bind", json=body) as answer:
        return str((await answer.json())["Error"])


async def eventually(condition: Any, timeout_s: float = 15.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not await condition():
        assert loop.time() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


@pytest.fixture(autouse=True)
def quiet_gc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tuning, "tune_gc_after_sync", lambda: None)


@pytest.fixture
def config(fake_api: FakeApiServer, tmp_path: Path) -> str:
    objs = o.cluster(1, 2)
    for index in range(3):
        objs += [o.claim(f"c{index}"), o.pod(f"p{index}", [f"c{index}"])]
    fake_api.seed(objs)
    return kubeconfig(tmp_path / "kubeconfig", fake_api.url)


async def ready(app: App) -> bool:
    return (await get(app, "/readyz"))[0] == 200


async def test_only_the_leader_answers_and_the_standby_takes_over_at_once_on_a_handover(
        fake_api: FakeApiServer, config: str) -> None:
    async with replica(config, "a") as first:
        await eventually(lambda: ready(first))
        async with replica(config, "b") as second:
            await eventually(lambda: asyncio.sleep(0, second.cluster.cache.ready))
            status, text = await get(second, "/readyz")
            assert status == 503 and "standby: waiting for the Lease dra-extender/dra-extender" in text
            assert "dra-extender is not ready: standby" in await bind(second, "p0", "node-0")
            assert await bind(first, "p0", "node-0") == ""
            # A standby's cache is warm: it sees the leader's writes through its own watch.
            await eventually(lambda: asyncio.sleep(0, second.cluster.cache.pod("default", "p0")["spec"].get(
                "nodeName") == "node-0"))
            leases = fake_api.objects("Lease")
            assert [lease["spec"]["holderIdentity"] for lease in leases] == ["a"]
            await first.__aexit__(None, None, None)  # a graceful stop hands the Lease over
            loop = asyncio.get_running_loop()
            started = loop.time()
            await eventually(lambda: ready(second), timeout_s=5)
            assert loop.time() - started < FAST.lease_duration_s, "no wait for the lease to expire"
            assert await bind(second, "p1", "node-0") == ""
    allocations = [(claim.get("status") or {}).get("allocation") or {}
                   for claim in fake_api.objects("ResourceClaim")]
    devices = [(r["pool"], r["device"]) for a in allocations for r in a.get("devices", {}).get("results", [])]
    assert len(devices) == len(set(devices)) == 2


async def test_a_leader_that_stops_renewing_is_replaced_after_the_lease_and_fenced(
        fake_api: FakeApiServer, config: str) -> None:
    async with replica(config, "a") as first, replica(config, "b") as second:
        await eventually(lambda: ready(first))
        # The leader hangs (as a SIGSTOP, or a partition, would leave it): its election stops renewing,
        # and it left a claim half-written (its status write still in flight).
        assert first.elector is not None
        first.elector._task.cancel()  # type: ignore[union-attr]
        claim = fake_api.get_object("ResourceClaim", "c2", "default")
        claim["metadata"]["finalizers"] = [FINALIZER]
        fake_api.put_object(claim)
        await eventually(lambda: asyncio.sleep(0, not first.elector.leading()), timeout_s=5)
        assert "dra-extender is not ready" in await bind(first, "p0", "node-0")
        await eventually(lambda: ready(second), timeout_s=10)
        assert FINALIZER not in (fake_api.get_object("ResourceClaim", "c2", "default")["metadata"].get(
            "finalizers") or ()), "the new leader fenced the half-written claim before allocating"
        assert await bind(second, "p0", "node-0") == ""


async def test_an_election_that_cannot_reach_its_lease_is_not_ready(fake_api: FakeApiServer,
                                                                    config: str) -> None:
    fake_api.fail_next("get", "leases", status=403, count=1000,
                       message='leases.coordination.k8s.io "dra-extender" is forbidden')
    async with replica(config, "a") as app:
        await eventually(lambda: asyncio.sleep(0, app.cluster.cache.ready))
        await eventually(lambda: asyncio.sleep(0, app.elector is not None and app.elector.failures >= 2))
        status, text = await get(app, "/readyz")
        assert status == 503 and "forbidden" in text


async def test_controllers_only_election_leaves_the_verbs_to_every_replica(fake_api: FakeApiServer,
                                                                          config: str) -> None:
    """--no-leader-elect-verbs (second-scheduler mode): the verbs do not wait for the Lease."""
    controllers_only = LeaderOptions(**{**FAST.__dict__, "verbs": False})
    async with (replica(config, "a", controllers_only) as first,
                replica(config, "b", controllers_only) as second):
        await eventually(lambda: ready(first))
        await eventually(lambda: ready(second))
        assert await bind(second, "p0", "node-0") == ""
