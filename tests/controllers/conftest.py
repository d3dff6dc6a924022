"""Test bed for the controllers: the fake API server over loopback, a cache mirrored from it by real
watches, a client that counts concurrent calls, and a fake clock (so no test sleeps)."""

from __future__ import annotations

import asyncio
import copy
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from fakeapi import FakeApiServer
from fakeclock import FakeClock
from prometheus_client import CollectorRegistry

from allocator import FeatureGates
from extender.controllers import ControllerOptions, Controllers, start_controllers
from extender.kube.client import KubeClient
from extender.state.cache import ClusterCache

KINDS = {"Pod", "ResourceClaim", "ResourceSlice", "DeviceTaintRule"}


class MirrorCache:
    """The ClusterCache methods the controllers use, fed synchronously with every change the fake API
    server makes (an infinitely fast watch), so a test can wait for quiescence deterministically."""

    def __init__(self) -> None:
        self._objects: dict[tuple[str, str, str], dict] = {}
        self._subscribers: list[Any] = []

    def subscribe(self, callback: Any) -> None:
        self._subscribers.append(callback)

    def objects_taken(self, *kinds: str) -> Callable[[], Iterator[dict]]:
        """As ClusterCache's: what is stored is taken now, a kind at a time in the order given."""
        taken = [obj for kind in kinds for (stored, _, _), obj in sorted(self._objects.items())
                 if stored == kind]
        return lambda: (copy.deepcopy(obj) for obj in taken)

    def pod(self, namespace: str, name: str) -> dict | None:
        return self._objects.get(("Pod", namespace, name))

    def pods_in_group(self, namespace: str, group_name: str) -> list[dict]:
        return [obj for (kind, ns, _), obj in sorted(self._objects.items())
                if kind == "Pod" and ns == namespace
                and ((obj.get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName") == group_name]

    def apply(self, kind: str, event_type: str, obj: dict) -> None:
        meta = obj["metadata"]
        key = (kind, str(meta.get("namespace") or ""), str(meta["name"]))
        old = self._objects.get(key)
        if event_type == "DELETED":
            self._objects.pop(key, None)
        else:
            self._objects[key] = obj
        for callback in self._subscribers:
            callback(kind, event_type, obj, old)


class MirroredApiServer(FakeApiServer):
    """Applies every change to `cache` (MirrorCache or the real ClusterCache) as it happens."""

    def __init__(self, cache: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.cache = cache

    def _emit(self, resource: Any, event_type: str, obj: dict) -> None:  # the fake server's watch fan-out
        super()._emit(resource, event_type, obj)
        if obj.get("kind") in KINDS:
            self.cache.apply(obj["kind"], event_type, copy.deepcopy(obj))


class CountingClient:
    """Delegates to KubeClient; records every call and the peak number of concurrent calls per verb."""

    def __init__(self, inner: KubeClient) -> None:
        self.inner = inner
        self.calls: list[tuple[str, str]] = []
        self.in_flight: Counter[str] = Counter()
        self.peak: Counter[str] = Counter()

    async def _call(self, verb: str, path: str, *args: Any, **kwargs: Any) -> Any:
        self.calls.append((verb, path))
        self.in_flight[verb] += 1
        self.peak[verb] = max(self.peak[verb], self.in_flight[verb])
        try:
            return await getattr(self.inner, verb)(path, *args, **kwargs)
        finally:
            self.in_flight[verb] -= 1

    async def get(self, path: str) -> dict:
        return await self._call("get", path)

    async def create(self, path: str, body: dict) -> dict:
        return await self._call("create", path, body)

    async def update(self, path: str, body: dict) -> dict:
        return await self._call("update", path, body)

    async def patch(self, path: str, body: Any, content_type: str = "application/merge-patch+json") -> dict:
        return await self._call("patch", path, body, content_type)

    async def delete(self, path: str, *, preconditions: dict | None = None) -> dict:
        return await self._call("delete", path, preconditions=preconditions)


class Env:
    def __init__(self, server: Any, kube: KubeClient) -> None:
        self.server = server
        self.kube = kube
        self.client = CountingClient(kube)
        self.cache = server.cache
        self.clock = FakeClock()
        self.registry = CollectorRegistry()
        self.controllers: list[Controllers] = []

    async def start(self, names: tuple[str, ...] = ("taint-eviction",), **options: Any) -> Controllers:
        await self.settle()
        registry = options.pop("registry", self.registry)
        controllers = await start_controllers(
            self.cache,
            self.client,
            ControllerOptions(names=names, **options),
            clock=self.clock,
            registry=registry,
        )
        self.controllers.append(controllers)
        await self.settle()
        return controllers

    async def settle(self) -> None:
        """Until nothing moves: no API call in flight or started, no queue work, every event sent."""
        for _ in range(10_000):
            progress = (self.server.resource_version, len(self.client.calls))
            for _ in range(3):
                await asyncio.sleep(0)
            while any(self.client.in_flight.values()):
                await asyncio.sleep(0.001)  # real loopback I/O, not controller time
            for controllers in self.controllers:
                await controllers.seeded()
                term = controllers.term
                for _ in range(100_000):   # a long change worked through in slices
                    if term is None or not term.busy:
                        break
                    await asyncio.sleep(0)
                else:
                    raise AssertionError("the controllers stay busy")
                if term is not None:
                    await term.queue.wait_idle()
                    await term.recorder.flush()
            if progress == (self.server.resource_version, len(self.client.calls)):
                return
        raise AssertionError("controllers did not settle")

    async def advance(self, seconds: float, step: float = 1.0) -> None:
        """Let `seconds` of fake time pass in steps, settling after each."""
        remaining = seconds
        while remaining > 1e-9:
            delta = min(step, remaining)
            self.clock.advance(delta)
            remaining -= delta
            await self.settle()

    def events(self, reason: str | None = None) -> list[tuple[str, str, str]]:
        """(involved kind/namespace/name, reason, message) of recorded events, oldest first."""
        found = []
        by_version = sorted(self.server.objects("Event"), key=lambda e: int(e["metadata"]["resourceVersion"]))
        for event in by_version:
            obj = event["involvedObject"]
            if reason is None or event["reason"] == reason:
                found.append(
                    (
                        f"{obj['kind']}/{obj.get('namespace', '')}/{obj['name']}",
                        event["reason"],
                        event["message"],
                    )
                )
        return found

    def pod_names(self) -> set[str]:
        return {f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in self.server.objects("Pod")}

    def deletes(self) -> list[str]:
        return [path for verb, path in self.client.calls if verb == "delete"]

    def metric(self, name: str) -> float:
        value = self.registry.get_sample_value(name)
        return 0.0 if value is None else value


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    async for environment in _env(MirrorCache()):
        yield environment


@pytest.fixture
async def cluster_cache_env() -> AsyncIterator[Env]:
    """The same, with the extender's real ClusterCache instead of MirrorCache."""
    async for environment in _env(ClusterCache(FeatureGates())):
        yield environment


async def _env(cache: Any) -> AsyncIterator[Env]:
    server = MirroredApiServer(cache)
    await server.start()
    kube = KubeClient.for_url(server.url)
    environment = Env(server, kube)
    yield environment
    for controllers in environment.controllers:
        await controllers.stop()
    await kube.close()
    await server.stop()
