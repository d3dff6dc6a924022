"""ClusterWatcher against the fake API server: lists, watches, drops, 410 Gone, bookmarks, backoff."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator, Callable

import pytest
from fakeapi import FakeApiServer

from allocator import FeatureGates
from extender.kube.client import KubeClient
from extender.kube.informer import Backoff, ClusterWatcher, ListStrategy, WatchedKind
from extender.state.cache import ClusterCache, Replacement

CLAIMS = "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims"


def claim(name: str) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}}}


def node(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "uid": f"uid-{name}"}}


# The limit only bounds a hang: on a loaded 2-core CI machine a watch reconnect can take seconds.
async def eventually(condition: Callable[[], bool], timeout_s: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        if loop.time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.01)


@pytest.fixture
def cache() -> ClusterCache:
    return ClusterCache(FeatureGates())


@pytest.fixture
def restarts() -> list[str]:
    return []


@pytest.fixture
async def watcher(kube: KubeClient, cache: ClusterCache,
                  restarts: list[str]) -> AsyncIterator[ClusterWatcher]:
    w = ClusterWatcher(kube, cache, on_restart=restarts.append, backoff_initial_s=0.2, backoff_max_s=0.5)
    yield w
    await w.stop()


async def test_initial_lists_then_ready(fake_api: FakeApiServer, watcher: ClusterWatcher,
                                        cache: ClusterCache) -> None:
    fake_api.seed([node("n1"), node("n2"), claim("a")])
    assert not cache.ready
    await watcher.start()
    assert await watcher.wait_ready(30)
    assert cache.ready and cache.node_names() == ["n1", "n2"]
    assert cache.claim("ns", "a") is not None
    health = watcher.health()
    assert health["ready"] and all(k["listed"] and k["lists"] == 1 for k in health["kinds"].values())
    assert health["kinds"]["Node"]["lastEventTime"].endswith("Z")


async def test_watch_events_reach_the_cache(kube: KubeClient, watcher: ClusterWatcher,
                                            cache: ClusterCache) -> None:
    await watcher.start()
    await watcher.wait_ready(30)
    await kube.create(CLAIMS, claim("a"))
    await eventually(lambda: cache.claim("ns", "a") is not None)
    await kube.delete(f"{CLAIMS}/a")
    await eventually(lambda: cache.claim("ns", "a") is None)
    assert watcher.health()["kinds"]["ResourceClaim"]["events"] == 2


async def test_dropped_watch_resumes_without_relisting(fake_api: FakeApiServer, kube: KubeClient,
                                                       watcher: ClusterWatcher, cache: ClusterCache,
                                                       restarts: list[str]) -> None:
    await watcher.start()
    await watcher.wait_ready(30)
    await eventually(lambda: fake_api.open_watches == len(watcher.kinds))
    fake_api.close_watches("resourceclaims")
    fake_api.seed([claim("made-while-disconnected")])   # must come from the history replay on resume
    await eventually(lambda: cache.claim("ns", "made-while-disconnected") is not None)
    await kube.create(CLAIMS, claim("after"))
    await eventually(lambda: cache.claim("ns", "after") is not None)
    health = watcher.health()["kinds"]["ResourceClaim"]
    assert health["restarts"] == 1 and health["errors"] == 1 and health["lists"] == 1
    assert restarts == ["ResourceClaim"]


async def test_gone_relists_and_detects_deletions(fake_api: FakeApiServer, watcher: ClusterWatcher,
                                                  cache: ClusterCache, restarts: list[str]) -> None:
    collector_on: dict[str, bool] = {}
    cache.subscribe(lambda _kind, _type, new, _old: collector_on.setdefault(new["metadata"]["name"],
                                                                            gc.isenabled()))
    fake_api.seed([claim("stays"), claim("goes")])
    gc.enable()
    await watcher.start()
    await watcher.wait_ready(30)
    await eventually(lambda: fake_api.open_watches == len(watcher.kinds))
    # While the watch is down, one claim is deleted and the history that recorded it is compacted away.
    fake_api.close_watches("resourceclaims")
    fake_api.remove_object("ResourceClaim", "goes", "ns")
    fake_api.seed([claim("new")])
    fake_api.expire_history()
    await eventually(lambda: cache.claim("ns", "goes") is None and cache.claim("ns", "new") is not None)
    assert cache.claim("ns", "stays") is not None
    # The re-list ran with the collector paused (common/heap.py), the first list as it found it.
    assert collector_on == {"stays": True, "goes": True, "new": False} and gc.isenabled()
    health = watcher.health()["kinds"]["ResourceClaim"]
    assert health["lists"] == 2 and health["restarts"] == 2     # the drop, then the 410
    assert restarts == ["ResourceClaim", "ResourceClaim"]


async def test_bookmarks_advance_the_resource_version(fake_api: FakeApiServer, kube: KubeClient,
                                                      watcher: ClusterWatcher) -> None:
    await watcher.start()
    await watcher.wait_ready(30)
    await kube.create(CLAIMS, claim("a"))   # changes the global version, not the nodes'
    target = str(fake_api.resource_version)
    await eventually(lambda: watcher.health()["kinds"]["Node"]["resourceVersion"] == target)
    assert watcher.health()["kinds"]["Node"]["bookmarks"] >= 1


async def test_server_timeouts_resume_quietly(kube: KubeClient, cache: ClusterCache, fake_api: FakeApiServer,
                                              restarts: list[str]) -> None:
    watcher = ClusterWatcher(kube, cache, on_restart=restarts.append, watch_timeout_s=(1, 1))
    try:
        await watcher.start()
        await watcher.wait_ready(30)
        # Wait for the resumed watch itself instead of sleeping past the 1 s server timeout: under load
        # a fixed sleep can end before the first watch did, and the claim would arrive on that one.
        await eventually(lambda: fake_api.requests.get("watch resourceclaims", 0) >= 2)
        await kube.create(CLAIMS, claim("late"))
        await eventually(lambda: cache.claim("ns", "late") is not None)
        assert restarts == [] and watcher.health()["kinds"]["ResourceClaim"]["lists"] == 1
        assert fake_api.requests["watch resourceclaims"] >= 2
    finally:
        await watcher.stop()


async def test_list_errors_back_off_and_delay_readiness(fake_api: FakeApiServer,
                                                        watcher: ClusterWatcher) -> None:
    fake_api.fail_next("list", "nodes", count=2, status=500)
    await watcher.start()
    assert await watcher.wait_ready(30)
    health = watcher.health()["kinds"]["Node"]
    assert health["errors"] == 2 and "500 InternalError" in health["lastError"]
    assert health["lists"] == 1


async def test_optional_kind_not_served_counts_as_empty(kube: KubeClient, cache: ClusterCache) -> None:
    kinds = (WatchedKind("Node", "/api/v1/nodes"),
             WatchedKind("DeviceTaintRule", "/apis/resource.k8s.io/v1alpha9/devicetaintrules", optional=True))
    watcher = ClusterWatcher(kube, cache, kinds=kinds)
    try:
        await watcher.start()
        assert await watcher.wait_ready(30)
        health = watcher.health()["kinds"]["DeviceTaintRule"]
        assert health["available"] is False and health["errors"] == 0
    finally:
        await watcher.stop()


def test_backoff_grows_with_jitter_up_to_the_maximum() -> None:
    backoff = Backoff(initial_s=1.0, max_s=4.0)
    delays = [backoff.next() for _ in range(5)]
    for delay, ceiling in zip(delays, [1, 2, 4, 4, 4], strict=True):
        assert ceiling / 2 <= delay <= ceiling
    backoff.reset()
    assert backoff.next() <= 1.0


async def test_unexpected_errors_restart_from_a_fresh_list(fake_api: FakeApiServer, watcher: ClusterWatcher,
                                                           cache: ClusterCache,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    fake_api.seed([node("n1")])
    real_replacing = cache.replacing
    failures = []

    def replacing_failing_once(kind: str) -> Replacement:
        if kind == "Node" and not failures:
            failures.append(kind)
            raise RuntimeError("bug")
        return real_replacing(kind)

    monkeypatch.setattr(cache, "replacing", replacing_failing_once)
    await watcher.start()
    assert await watcher.wait_ready(30)
    assert cache.node_names() == ["n1"]
    health = watcher.health()["kinds"]["Node"]
    assert health["errors"] == 1 and health["lastError"] == "RuntimeError: bug"


def test_a_list_response_lets_go_of_each_item_once_the_cache_has_it() -> None:
    from extender.kube.informer import _handed_over

    items = [{"a": 1}, {"b": 2}]
    handed = []
    for item in _handed_over(items):
        assert items[len(handed)] is None   # the list no longer holds the item being handed over
        handed.append(item)
    assert handed == [{"a": 1}, {"b": 2}] and items == [None, None]


async def test_a_long_list_page_lets_other_tasks_run_between_its_slices(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from extender.kube import informer

    class Recording:
        def __init__(self) -> None:
            self.added: list[dict] = []

        def add(self, raw: dict) -> None:
            self.added.append(raw)

        def finish(self) -> None:
            raise AssertionError("a page does not finish the replacement")

        def finishing(self) -> list[None]:
            raise AssertionError("a page does not finish the replacement")

    turns: list[int] = []
    replacement = Recording()

    async def other_task() -> None:
        while True:
            turns.append(len(replacement.added))
            await asyncio.sleep(0)

    monkeypatch.setattr(informer, "LIST_SLICE_S", 0.0)   # every object takes its whole slice
    task = asyncio.create_task(other_task())
    await asyncio.sleep(0)
    items = [{"n": index} for index in range(4)]
    await informer._apply_in_slices(replacement, items)
    task.cancel()
    assert replacement.added == [{"n": index} for index in range(4)] and items == [None] * 4
    assert turns[:5] == [0, 1, 2, 3, 4]   # the other task ran after each object

    turns.clear()
    monkeypatch.setattr(informer, "LIST_SLICE_S", 60.0)
    task = asyncio.create_task(other_task())
    await asyncio.sleep(0)
    await informer._apply_in_slices(replacement, [{"n": index} for index in range(4)])
    task.cancel()
    assert turns == [4]   # a short page is applied in one go


async def test_lists_running_at_once_share_one_slice_per_turn_of_the_event_loop(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import time
    from types import SimpleNamespace

    from common import tasks
    from extender.kube import informer

    now = [0.0]
    loop_turn = [0]
    added: dict[int, list[str]] = {}

    class Recording:
        def __init__(self, kind: str) -> None:
            self.kind = kind

        def add(self, raw: dict) -> None:
            now[0] += 0.001   # each object takes 1 ms of the fake clock
            added.setdefault(loop_turn[0], []).append(self.kind)

    async def ticker() -> None:
        while True:
            loop_turn[0] += 1
            await asyncio.sleep(0)

    monkeypatch.setattr(informer, "LIST_SLICE_S", 0.004)
    monkeypatch.setattr(tasks, "time", SimpleNamespace(perf_counter=lambda: now[0], time=time.time,
                                                       monotonic=time.monotonic))

    async def two_lists(shared: tasks.SharedSlices | None) -> list[list[str]]:
        added.clear()
        task = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        await asyncio.gather(*(informer._apply_in_slices(Recording(kind), [{}] * 12, shared)
                               for kind in "ab"))
        task.cancel()
        return [len(kinds) for _, kinds in sorted(added.items())]

    # The first list starts alone (its first slice is whole), then both take half a slice per turn.
    shared = await two_lists(tasks.SharedSlices())
    assert shared == [6, 4, 4, 4, 4, 2]   # the first list ends a turn before the second
    assert await two_lists(None) == [8, 8, 8]   # each list a whole slice per turn


@pytest.mark.parametrize("strategy", [ListStrategy("paged", page_size=2), ListStrategy("watchlist")],
                         ids=["paged", "watchlist"])
async def test_paged_and_watch_list_sync_relist_and_follow(
        fake_api: FakeApiServer, kube: KubeClient, cache: ClusterCache, strategy: ListStrategy) -> None:
    fake_api.seed([node("n1"), *(claim(f"c{index}") for index in range(5))])
    watcher = ClusterWatcher(kube, cache, list_strategy=strategy, backoff_initial_s=0.2, backoff_max_s=0.5)
    try:
        await watcher.start()
        assert await watcher.wait_ready(30)
        assert sorted(raw["metadata"]["name"] for raw in cache.valid_objects("ResourceClaim")) == [
            f"c{index}" for index in range(5)]
        if strategy.mode == "paged":
            assert fake_api.requests["list resourceclaims"] == 3   # 2 + 2 + 1
        else:
            assert "list resourceclaims" not in fake_api.requests
        # A 410 re-reads the kind the same way, and deletions made meanwhile are seen.
        await eventually(lambda: fake_api.open_watches == len(watcher.kinds))
        fake_api.close_watches("resourceclaims")
        fake_api.remove_object("ResourceClaim", "c0", "ns")
        fake_api.seed([claim("late")])
        fake_api.expire_history()
        await eventually(lambda: cache.claim("ns", "c0") is None and cache.claim("ns", "late") is not None)
        assert watcher.health()["kinds"]["ResourceClaim"]["lists"] == 2
        # Then the watch follows from the version the re-read ended at.
        await kube.create(CLAIMS, claim("after"))
        await eventually(lambda: cache.claim("ns", "after") is not None)
    finally:
        await watcher.stop()


def test_an_unknown_list_strategy_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown list strategy 'chunks'"):
        ListStrategy("chunks")
    with pytest.raises(ValueError, match="page size must be positive"):
        ListStrategy("paged", page_size=0)


def test_a_replacement_finishes_in_steps_and_deletes_what_was_not_seen(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from extender.state import cache as cache_module

    monkeypatch.setattr(cache_module, "FINISH_STEP", 2)
    store = ClusterCache(FeatureGates())
    for name in ("a", "b", "c", "d", "e"):
        store.apply("Node", "ADDED", node(name))
    replacement = store.replacing("Node")
    for name in ("a", "d"):
        replacement.add(node(name))
    steps = replacement.finishing()
    next(steps)   # a, b: b deleted
    assert store.node_names() == ["a", "c", "d", "e"]
    store.apply("Node", "DELETED", node("c"))   # changed between two steps
    store.apply("Node", "ADDED", node("f"))     # stored after the finishing started: kept
    assert list(steps) == [None, None]
    assert store.node_names() == ["a", "d", "f"]
