"""Bind under adversarial timing: overlapping binds of one pod, filters during a bind, writes whose
outcome is unknown, shared claims. No device may ever end up in two claims."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import dra_objects as o
import pytest
from lost_binding import bound_in_cache

from allocator import FeatureGates, ResourceClaim
from extender.plugin.claimwriter import ClaimRef, ClaimWriter
from extender.plugin.extendedresources import Variant
from extender.plugin.scheduling import BindFailed, Scheduler
from extender.state.assume import AssumeCache
from extender.state.cache import ClusterCache


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class GatedWriter(ClaimWriter):
    """Binds of the pods named in `gates` wait for their gate before writing anything."""

    def __init__(self, cache: ClusterCache) -> None:
        super().__init__(None, cache)
        self.gates: dict[str, asyncio.Event] = {}

    async def bind(self, pod: dict, node: str, claims: list[tuple[ResourceClaim, dict | None]],
                   consumers: Mapping[str, dict] | None = None, *, extended: Variant | None = None,
                   node_allocatable: Sequence[dict] | None = None, term: int | None = None,
                   binding: bool = True, held: Sequence[str] = (),
                   before_binding: Callable[[Sequence[ClaimRef]], Awaitable[None]] | None = None) -> None:
        gate = self.gates.get(pod["metadata"]["name"])
        if gate is not None:
            await gate.wait()
        await super().bind(pod, node, claims, consumers, extended=extended, node_allocatable=node_allocatable,
                           term=term, binding=binding, held=held, before_binding=before_binding)


def make(objs: list[dict[str, Any]], **options: Any) -> tuple[Scheduler, GatedWriter, Clock]:
    cache = ClusterCache.from_objects(objs, FeatureGates())
    clock = Clock()
    assume = AssumeCache(clock=clock)
    assume.attach(cache)
    writer = GatedWriter(cache)
    writer._resolve_budget = 0.2
    return Scheduler(cache, assume, writer, **options), writer, clock


def pod_of(scheduler: Scheduler, name: str) -> dict:
    pod = scheduler.cache.pod("default", name)
    assert pod is not None
    return pod


def uid(scheduler: Scheduler, name: str) -> str:
    return pod_of(scheduler, name)["metadata"]["uid"]


def devices_in_use(scheduler: Scheduler) -> list[tuple[str, str, str]]:
    """Allocated devices over all claims in the cache plus those in flight (duplicates kept)."""
    found = []
    allocations = [(raw.get("status") or {}).get("allocation") for raw in scheduler.cache.objects()
                   if raw["kind"] == "ResourceClaim"]
    for claim_uid, _, allocation in scheduler.assume.in_flight():
        cached = scheduler.cache.claim_by_uid(claim_uid)
        if cached is None or cached.allocation is None:
            allocations.append(allocation)
    for allocation in allocations:
        for result in ((allocation or {}).get("devices") or {}).get("results") or []:
            found.append((result["driver"], result["pool"], result["device"]))
    return found


async def settle(*tasks: asyncio.Task[None]) -> list[BaseException | None]:
    return list(await asyncio.gather(*tasks, return_exceptions=True))


async def test_second_bind_of_a_pod_cannot_free_the_devices_of_the_first() -> None:
    """kube-scheduler gave up on a slow bind and retried the pod elsewhere while the first bind still
    writes: the retry must not replace the first bind's reservation (its devices would look free)."""
    objs = [*o.cluster(2, 1), o.claim("c"), o.pod("p", ["c"]), o.claim("d"), o.pod("q", ["d"])]
    scheduler, writer, _ = make(objs)
    writer.gates["p"] = asyncio.Event()
    first = asyncio.create_task(scheduler.bind("default", "p", uid=uid(scheduler, "p"), node_name="node-0"))
    await asyncio.sleep(0)
    second = asyncio.create_task(scheduler.bind("default", "p", uid=uid(scheduler, "p"), node_name="node-1"))
    await asyncio.sleep(0)
    # node-0's only device belongs to the first bind until it is written or given up.
    with pytest.raises(BindFailed, match="no longer fits node node-0"):
        await scheduler.bind("default", "q", uid=uid(scheduler, "q"), node_name="node-0")
    writer.gates["p"].set()
    results = await settle(first, second)
    assert results[0] is None
    assert isinstance(results[1], BindFailed) and "already being bound" in str(results[1])
    devices = devices_in_use(scheduler)
    assert devices == [(o.DRIVER, "node-0", "gpu-0")]
    assert pod_of(scheduler, "p")["spec"]["nodeName"] == "node-0"


async def test_filter_retry_during_bind_keeps_the_bind_reservation() -> None:
    objs = [*o.cluster(1, 1), o.claim("c"), o.pod("p", ["c"]), o.claim("d"), o.pod("q", ["d"])]
    scheduler, writer, clock = make(objs, hold_devices=True, hold_ttl_s=5.0)
    assert (await scheduler.filter(pod_of(scheduler, "p"), ["node-0"])).passed == ["node-0"]
    writer.gates["p"] = asyncio.Event()
    bind = asyncio.create_task(scheduler.bind("default", "p", uid=uid(scheduler, "p"), node_name="node-0"))
    await asyncio.sleep(0)
    await scheduler.filter(pod_of(scheduler, "p"), ["node-0"])  # kube-scheduler retried the pod
    clock.now += 60  # any hold taken by that filter has expired; the bind's reservation has no TTL
    result = await scheduler.filter(pod_of(scheduler, "q"), ["node-0"])
    assert result.passed == []
    with pytest.raises(BindFailed, match="no longer fits"):
        await scheduler.bind("default", "q", uid=uid(scheduler, "q"), node_name="node-0")
    writer.gates["p"].set()
    assert await settle(bind) == [None]
    assert devices_in_use(scheduler) == [(o.DRIVER, "node-0", "gpu-0")]


class LostStatusWrite:
    """A store whose status write reaches the API server but whose answer is lost; afterwards the
    API server cannot be reached (so the undo fails too)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.written: dict | None = None
        self.down = False

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.inner, name)
        if not asyncio.iscoroutinefunction(attribute):
            return attribute

        async def call(*args: Any) -> Any:
            if self.down:
                raise OSError("connection refused")
            return await attribute(*args)
        return call

    async def update_claim_status(self, claim: dict) -> dict:
        if self.down:
            raise OSError("connection refused")
        self.written = claim
        self.down = True
        raise TimeoutError("status write timed out")


async def test_write_with_unknown_outcome_keeps_its_devices_in_flight_until_the_watch_says() -> None:
    objs = [*o.cluster(1, 1), o.claim("c"), o.pod("p", ["c"]), o.claim("d"), o.pod("q", ["d"])]
    scheduler, writer, clock = make(objs)
    store = LostStatusWrite(writer._store)
    writer._store = store
    with pytest.raises(BindFailed, match="undo incomplete"):
        await scheduler.bind("default", "p", uid=uid(scheduler, "p"), node_name="node-0")
    assert store.written is not None, "the status write reached the API server"
    # The API server may hold the allocation: the device must not be offered to anyone else.
    assert (await scheduler.filter(pod_of(scheduler, "q"), ["node-0"])).passed == []
    store.down = False
    writer._store = store.inner
    with pytest.raises(BindFailed, match="no longer fits"):
        await scheduler.bind("default", "q", uid=uid(scheduler, "q"), node_name="node-0")
    # No time limit: only the API server's objects tell whether the write can still apply.
    clock.now += 3600
    assert len(scheduler.assume) == 1
    # The watch delivers what the API server holds: from then on the cache counts the device.
    written = store.written
    written["metadata"] = {**written["metadata"], "resourceVersion": "99"}
    scheduler.cache.apply("ResourceClaim", "MODIFIED", written)
    assert len(scheduler.assume) == 0
    assert devices_in_use(scheduler) == [(o.DRIVER, "node-0", "gpu-0")]


async def test_write_with_unknown_outcome_ends_when_the_claim_shows_another_version() -> None:
    objs = [*o.cluster(1, 1), o.claim("c"), o.pod("p", ["c"]), o.claim("d"), o.pod("q", ["d"])]
    scheduler, writer, _ = make(objs)
    store = LostStatusWrite(writer._store)
    writer._store = store
    with pytest.raises(BindFailed):
        await scheduler.bind("default", "p", uid=uid(scheduler, "p"), node_name="node-0")
    writer._store = store.inner
    assert len(scheduler.assume) == 1
    # Not even the same pod's retry may allocate the claim again while its state is unknown.
    with pytest.raises(BindFailed, match="in the process of being allocated"):
        await scheduler.bind("default", "p", uid=uid(scheduler, "p"), node_name="node-0")
    assert len(scheduler.assume) == 1
    # The claim at a later version without an allocation (the fence removed our finalizer): the lost
    # write was sent at the earlier version and can never apply now.
    cached = scheduler.cache.raw("ResourceClaim", "default/c")
    assert cached is not None and store.written is not None
    assert cached["metadata"]["resourceVersion"] == store.written["metadata"]["resourceVersion"]
    version = int(cached["metadata"]["resourceVersion"]) + 1
    scheduler.cache.apply("ResourceClaim", "MODIFIED", {
        **cached, "metadata": {**cached["metadata"], "resourceVersion": str(version), "finalizers": []}})
    assert len(scheduler.assume) == 0
    await scheduler.bind("default", "p", uid=uid(scheduler, "p"), node_name="node-0")


async def test_a_definite_failure_releases_at_once() -> None:
    objs = [*o.cluster(1, 1), o.claim("c"), o.pod("p", ["c"]), o.claim("d"), o.pod("q", ["d"])]
    scheduler, writer, _ = make(objs)
    writer.gates["p"] = asyncio.Event()
    bind = asyncio.create_task(scheduler.bind("default", "p", uid=uid(scheduler, "p"), node_name="node-0"))
    await asyncio.sleep(0)
    # Bound by someone else after bind's own checks: the Binding is refused after the claim writes.
    bound_in_cache(scheduler.cache, "default", "p", "elsewhere")
    writer.gates["p"].set()
    with pytest.raises(BindFailed, match="already assigned"):
        await bind
    assert len(scheduler.assume) == 0
    await scheduler.bind("default", "q", uid=uid(scheduler, "q"), node_name="node-0")


async def test_shared_claim_is_allocated_once_by_the_first_pod() -> None:
    objs = [*o.cluster(2, 1), o.claim("shared"), o.pod("p1", ["shared"]), o.pod("p2", ["shared"])]
    scheduler, writer, _ = make(objs)
    writer.gates["p1"] = asyncio.Event()
    first = asyncio.create_task(scheduler.bind("default", "p1", uid=uid(scheduler, "p1"), node_name="node-0"))
    await asyncio.sleep(0)
    result = await scheduler.filter(pod_of(scheduler, "p2"), ["node-0", "node-1"])
    assert result.passed == [] and "is in the process of being allocated" in result.unresolvable["node-1"]
    with pytest.raises(BindFailed, match="in the process of being allocated"):
        await scheduler.bind("default", "p2", uid=uid(scheduler, "p2"), node_name="node-1")
    writer.gates["p1"].set()
    assert await settle(first) == [None]
    allocation = scheduler.cache.claim("default", "shared").allocation
    # The second pod may only go where the claim is; its bind adds the reservation, nothing else.
    assert (await scheduler.filter(pod_of(scheduler, "p2"), ["node-0", "node-1"])).passed == ["node-0"]
    await scheduler.bind("default", "p2", uid=uid(scheduler, "p2"), node_name="node-0")
    claim = scheduler.cache.claim("default", "shared")
    assert claim.allocation == allocation
    assert list(claim.reserved_uids) == [uid(scheduler, "p1"), uid(scheduler, "p2")]
    assert devices_in_use(scheduler) == [(o.DRIVER, "node-0", "gpu-0")]


async def test_confirmation_counts_the_device_before_dropping_the_in_flight_record() -> None:
    objs = [*o.cluster(1, 1), o.claim("c"), o.pod("p", ["c"])]
    cache = ClusterCache.from_objects(objs, FeatureGates())
    key = (o.DRIVER, "node-0", "gpu-0")
    seen: list[bool] = []
    assume = AssumeCache()
    # Registered first, so it runs before the assume cache drops anything: at every claim event the
    # device must be counted by the cache's own state or by the in-flight records.
    cache.subscribe(lambda kind, *_: seen.append(
        kind != "ResourceClaim" or cache.allocated.is_allocated(key) or bool(assume.in_flight())))
    assume.attach(cache)
    scheduler = Scheduler(cache, assume, ClaimWriter(None, cache))
    await scheduler.bind("default", "p", uid=uid(scheduler, "p"), node_name="node-0")
    assert seen and all(seen)
    assert cache.allocated.is_allocated(key) and len(assume) == 0


def test_a_restart_trusts_nothing_in_flight() -> None:
    objs = [*o.cluster(1, 1), o.claim("c"), o.pod("p", ["c"])]
    cache = ClusterCache.from_objects(objs, FeatureGates())
    before = AssumeCache()
    before.reserve(cache.claim("default", "c"), {"devices": {"results": [
        {"request": "gpu", "driver": o.DRIVER, "pool": "node-0", "device": "gpu-0"}]}}, "pod")
    after = AssumeCache()  # a new process: state comes from the cluster only
    assert after.in_flight() == []
    assert not after.allocated_view(cache).is_allocated((o.DRIVER, "node-0", "gpu-0"))


async def test_hold_is_taken_from_the_current_state_not_from_verdicts_older_than_a_yield() -> None:
    ticks = [0.0]

    def stepped() -> float:  # every reading advances 1 ms: the filter yields every few nodes
        ticks[0] += 0.001
        return ticks[0]

    nodes = [f"node-{index}" for index in range(30)]
    objs = [*o.cluster(30, 1), o.claim("c"), o.pod("p", ["c"]), o.claim("d"), o.pod("q", ["d"])]
    scheduler, writer, _ = make(objs, hold_devices=True, clock=stepped)
    writer.gates["q"] = asyncio.Event()
    # Runs at the filter's first yield, after node-0 was judged free: q takes node-0's only device.
    bind_q = asyncio.create_task(scheduler.bind("default", "q", uid=uid(scheduler, "q"), node_name="node-0"))
    result = await scheduler.filter(pod_of(scheduler, "p"), nodes)
    assert "node-0" not in result.passed and result.passed
    devices = devices_in_use(scheduler)
    assert len(devices) == len(set(devices)), f"a device is held twice: {devices}"
    writer.gates["q"].set()
    assert await settle(bind_q) == [None]


async def test_a_stale_hold_cannot_release_what_a_failed_bind_left_in_flight() -> None:
    objs = [*o.cluster(1, 1), o.claim("c"), o.pod("p", ["c"]), o.claim("d"), o.pod("q", ["d"])]
    scheduler, writer, _ = make(objs, hold_devices=True)
    assert (await scheduler.filter(pod_of(scheduler, "p"), ["node-0"])).passed == ["node-0"]
    store = LostStatusWrite(writer._store)
    writer._store = store
    with pytest.raises(BindFailed, match="undo incomplete"):
        await scheduler.bind("default", "p", uid=uid(scheduler, "p"), node_name="node-0")
    writer._store = store.inner
    # kube-scheduler retries p: its old hold is gone with the bind, the unknown write still counts.
    retry = await scheduler.filter(pod_of(scheduler, "p"), ["node-0"])
    assert "in the process of being allocated" in retry.unresolvable["node-0"]
    assert (await scheduler.filter(pod_of(scheduler, "q"), ["node-0"])).passed == []


async def test_holds_of_pods_that_never_bind_are_forgotten() -> None:
    objs = [*o.cluster(2, 1), o.claim("c"), o.pod("p", ["c"]), o.claim("d"), o.pod("q", ["d"])]
    scheduler, _, clock = make(objs, hold_devices=True, hold_ttl_s=5.0)
    assert (await scheduler.filter(pod_of(scheduler, "p"), ["node-0", "node-1"])).passed
    clock.now += 10  # p was deleted, or went to another scheduler: its hold expires
    assert (await scheduler.filter(pod_of(scheduler, "q"), ["node-0", "node-1"])).passed
    assert scheduler.holds.holding() == {uid(scheduler, "q")}


async def test_a_deleted_pod_frees_its_hold_at_once() -> None:
    objs = [*o.cluster(1, 1), o.claim("c"), o.pod("p", ["c"]), o.claim("d"), o.pod("q", ["d"])]
    scheduler, _, _ = make(objs, hold_devices=True, hold_ttl_s=30.0)
    assert (await scheduler.filter(pod_of(scheduler, "p"), ["node-0"])).passed == ["node-0"]
    assert (await scheduler.filter(pod_of(scheduler, "q"), ["node-0"])).passed == []
    scheduler.cache.apply("Pod", "DELETED", pod_of(scheduler, "p"))
    assert len(scheduler.assume) == 0 and scheduler.holds.holding() == set()
    assert (await scheduler.filter(pod_of(scheduler, "q"), ["node-0"])).passed == ["node-0"]


async def test_a_claim_allocated_during_a_holding_filter_is_not_held_again() -> None:
    ticks = [0.0]

    def stepped() -> float:
        ticks[0] += 0.001
        return ticks[0]

    nodes = [f"node-{index}" for index in range(30)]
    objs = [*o.cluster(30, 2), o.claim("s"), o.claim("c"), o.pod("p", ["s", "c"])]
    scheduler, _, _ = make(objs, hold_devices=True, clock=stepped)

    async def allocate_shared_claim() -> None:  # the watch reports s allocated (another pod) meanwhile
        raw = scheduler.cache.raw("ResourceClaim", "default/s")
        allocated = o.allocate({**raw, "metadata": {**raw["metadata"], "resourceVersion": "5"}}, "node-0",
                               ["gpu-0"], [{"resource": "pods", "name": "x", "uid": "x"}])
        scheduler.cache.apply("ResourceClaim", "MODIFIED", allocated)

    task = asyncio.create_task(allocate_shared_claim())
    result = await scheduler.filter(pod_of(scheduler, "p"), nodes)
    await task
    assert result.passed == ["node-0"] and result.error == ""
    held = [claim.name for _, claim, _ in scheduler.assume.in_flight()]
    assert held == ["c"]
    assert devices_in_use(scheduler) == [(o.DRIVER, "node-0", "gpu-0"), (o.DRIVER, "node-0", "gpu-1")]


class TimedOutStatusWrite:
    """The status write times out on the client before the API server handled it: the server may
    still apply it later. Everything else works (so the undo itself succeeds)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.sent: dict | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def update_claim_status(self, claim: dict) -> dict:
        if self.sent is None and (claim.get("status") or {}).get("allocation"):
            self.sent = claim
            raise TimeoutError("request timed out")
        return await self.inner.update_claim_status(claim)


async def test_a_timed_out_status_write_is_read_back_and_sent_again() -> None:
    objs = [*o.cluster(1, 1), o.claim("c"), o.pod("p", ["c"]), o.claim("d"), o.pod("q", ["d"])]
    scheduler, writer, _ = make(objs)
    store = TimedOutStatusWrite(writer._store)
    writer._store = store
    # The claim still has the version the lost write was sent at: it has not applied, and sending the
    # same write again can only apply once.
    await scheduler.bind("default", "p", uid=uid(scheduler, "p"), node_name="node-0")
    assert store.sent is not None and len(scheduler.assume) == 0
    assert writer.unknown_outcomes == 1
    assert scheduler.cache.pod("default", "p")["spec"]["nodeName"] == "node-0"
    with pytest.raises(BindFailed, match="no longer fits"):
        await scheduler.bind("default", "q", uid=uid(scheduler, "q"), node_name="node-0")
    assert devices_in_use(scheduler) == [(o.DRIVER, "node-0", "gpu-0")]


async def test_concurrent_binds_share_a_device_only_within_its_capacity() -> None:
    """allowMultipleAllocations: the same device in several claims is allowed (distinct shareIDs) as
    long as the consumed capacity fits; in-flight shares count like written ones."""
    shared_slice = o.gpu_slice("node-0", 1)  # one device with 80Gi of memory
    shared_slice["spec"]["devices"][0]["allowMultipleAllocations"] = True
    objs = [o.device_class(), o.node("node-0"), shared_slice]
    request = [{"name": "gpu", "exactly": {"deviceClassName": o.CLASS,
                                           "capacity": {"requests": {"memory": "30Gi"}}}}]
    for index in range(3):
        objs += [o.claim(f"c{index}", requests=request), o.pod(f"p{index}", [f"c{index}"])]
    scheduler, writer, _ = make(objs)
    for index in range(3):
        writer.gates[f"p{index}"] = asyncio.Event()  # all three re-check before any writes
    binds = [asyncio.create_task(scheduler.bind("default", f"p{i}", uid=uid(scheduler, f"p{i}"),
                                                node_name="node-0"))
             for i in range(3)]
    await asyncio.sleep(0)
    for gate in writer.gates.values():
        gate.set()
    results = await settle(*binds)
    assert [result is None for result in results] == [True, True, False]
    assert "without enough capacity" in str(results[2])
    shares = [result for index in range(2)
              for result in scheduler.cache.claim("default", f"c{index}").allocation["devices"]["results"]]
    assert {share["device"] for share in shares} == {"gpu-0"}
    assert len({share["shareID"] for share in shares}) == 2
