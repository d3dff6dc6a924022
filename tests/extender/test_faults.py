"""Every way an API write can fail, against the fake API server with injected faults: refused, applied
with its answer lost, or still in flight when its writer gave up or died. After each, no device is in
two claims, no bound pod lacks its devices, and no claim is left with our finalizer and no allocation."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import dra_objects as o
import pytest
from fakeapi import ApiRequest, FakeApiServer

from allocator import FeatureGates
from extender.kube.client import ApiError, KubeClient
from extender.plugin import claimwriter
from extender.plugin.authority import Authority
from extender.plugin.claimwriter import FINALIZER, ClaimWriter
from extender.plugin.fence import ClaimFence, HalfWrittenSweeper
from extender.plugin.repair import BoundPodRepair
from extender.plugin.scheduling import BindFailed, Scheduler
from extender.state.assume import AssumeCache
from extender.state.cache import ClusterCache

CLAIMS_PATH = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"
KINDS = ("Node", "DeviceClass", "ResourceSlice", "ResourceClaim", "Pod")


class Replica:
    """One extender process: its cache (as its initial lists left it), writer, scheduler and fence."""

    def __init__(self, fake: FakeApiServer, client: KubeClient, *, budget_s: float = 3.0) -> None:
        self.fake = fake
        self.cache = ClusterCache(FeatureGates())
        self.reload()
        self.cache.ready = True
        self.authority = Authority()
        assume = AssumeCache()
        assume.attach(self.cache)
        self.writer = ClaimWriter(client, self.cache, retry_delay_s=0, resolve_budget_s=budget_s,
                                  authority=self.authority)
        self.scheduler = Scheduler(self.cache, assume, self.writer, authority=self.authority)
        self.fence = ClaimFence(self.cache, self.writer, self.authority, retry_first_s=0.01)

    def reload(self, *kinds: str) -> None:
        for kind in kinds or KINDS:
            self.cache.replace(kind, self.fake.objects(kind))

    async def bind(self, pod: str, node: str) -> None:
        cached = self.cache.pod("default", pod)
        assert cached is not None
        await self.scheduler.bind("default", pod, uid=cached["metadata"]["uid"], node_name=node)


@pytest.fixture
async def client(fake_api: FakeApiServer) -> AsyncIterator[KubeClient]:
    kube = KubeClient.for_url(fake_api.url)
    yield kube
    await kube.close()


async def started(fake: FakeApiServer, client: KubeClient, **options: Any) -> Replica:
    """The default cluster seeded, and a replica that has fenced (it may allocate)."""
    seed(fake)
    replica = Replica(fake, client, **options)
    await replica.fence.run()
    return replica


def seed(fake: FakeApiServer, *, nodes: int = 1, devices: int = 1, pods: int = 2) -> None:
    objs = o.cluster(nodes, devices)
    for index in range(pods):
        objs += [o.claim(f"c{index}"), o.pod(f"p{index}", [f"c{index}"])]
    fake.seed(objs)


def claim(fake: FakeApiServer, name: str) -> dict:
    found = fake.get_object("ResourceClaim", name, "default")
    assert found is not None
    return found


def devices_in_use(fake: FakeApiServer) -> list[tuple[str, str]]:
    return [(result["pool"], result["device"])
            for raw in fake.objects("ResourceClaim")
            for result in (((raw.get("status") or {}).get("allocation") or {}).get("devices") or {}).get(
                "results") or ()]


def assert_invariants(fake: FakeApiServer) -> None:
    """What the e2e fault suite checks too, read from the API server's objects."""
    devices = devices_in_use(fake)
    assert len(devices) == len(set(devices)), f"a device in two allocations: {sorted(devices)}"
    half = [raw["metadata"]["name"] for raw in fake.objects("ResourceClaim")
            if FINALIZER in (raw["metadata"].get("finalizers") or ())
            and not (raw.get("status") or {}).get("allocation")]
    assert not half, f"claims with our finalizer and no allocation: {half}"
    for pod in fake.objects("Pod"):
        node = pod["spec"].get("nodeName")
        if not node:
            continue
        for ref in pod["spec"].get("resourceClaims") or ():
            raw = claim(fake, ref["resourceClaimName"])
            status = raw.get("status") or {}
            assert status.get("allocation"), f"pod {pod['metadata']['name']} is bound without its devices"
            assert pod["metadata"]["uid"] in {entry["uid"] for entry in status.get("reservedFor") or ()}
            assert {r["pool"] for r in status["allocation"]["devices"]["results"]} == {node}


class LateWrites:
    """Holds matching requests in the API server until released: a write a dead process sent, still in
    a queue (its client is gone, the API server applies it all the same)."""

    def __init__(self, fake: FakeApiServer, match: Callable[[ApiRequest], bool]) -> None:
        self.match = match
        self.held = asyncio.Event()
        self.release = asyncio.Event()
        self.remove = fake.intercept(self._hold)

    async def _hold(self, request: ApiRequest) -> None:
        if self.match(request):
            self.held.set()
            await self.release.wait()


def status_write_of(name: str) -> Callable[[ApiRequest], bool]:
    return lambda request: request.subresource == "status" and request.name == name


async def dead_process_sends_allocation(fake: FakeApiServer, client: KubeClient, name: str,
                                        pod: str, device: str) -> asyncio.Task[Any]:
    """What a process killed mid-bind leaves behind: its finalizer write landed, its status write is in
    flight (held in the API server until `LateWrites.release`)."""
    current = claim(fake, name)
    current["metadata"]["finalizers"] = [FINALIZER]
    written = fake.put_object(current)
    allocated = o.allocate({**written, "metadata": dict(written["metadata"])}, "node-0", [device],
                           reserved_for=[{"resource": "pods", "name": pod,
                                          "uid": claim_pod_uid(fake, pod)}])
    allocated["metadata"]["finalizers"] = [FINALIZER]
    return asyncio.ensure_future(client.update(f"{CLAIMS_PATH}/{name}/status", allocated))


def claim_pod_uid(fake: FakeApiServer, pod: str) -> str:
    found = fake.get_object("Pod", pod, "default")
    assert found is not None
    return str(found["metadata"]["uid"])


# ---- item 1: a late write of a dead process never lands on top of a new allocation ------------------

async def test_the_start_up_fence_stops_a_dead_process_late_allocation(fake_api: FakeApiServer,
                                                                        client: KubeClient) -> None:
    seed(fake_api)
    late = LateWrites(fake_api, status_write_of("c0"))
    ghost = await dead_process_sends_allocation(fake_api, client, "c0", "p0", "gpu-0")
    await asyncio.wait_for(late.held.wait(), 10)
    replica = Replica(fake_api, client)  # started after the crash: lists, then fences
    await replica.fence.run()
    assert replica.fence.fenced == 1
    assert FINALIZER not in (claim(fake_api, "c0")["metadata"].get("finalizers") or ())
    await replica.bind("p1", "node-0")
    late.release.set()
    with pytest.raises(ApiError) as refused:
        await ghost
    assert refused.value.conflict, "the late write was sent at the version the fence replaced"
    assert devices_in_use(fake_api) == [("node-0", "gpu-0")]
    assert_invariants(fake_api)


async def test_without_the_fence_the_late_write_would_land(
        fake_api: FakeApiServer, client: KubeClient) -> None:
    """The hazard the fence exists for, shown with the same fault (so the test above can fail)."""
    seed(fake_api)
    late = LateWrites(fake_api, status_write_of("c0"))
    ghost = await dead_process_sends_allocation(fake_api, client, "c0", "p0", "gpu-0")
    await asyncio.wait_for(late.held.wait(), 10)
    replica = Replica(fake_api, client)
    replica.authority.begin()  # no fence
    await replica.bind("p1", "node-0")
    late.release.set()
    await ghost
    assert sorted(devices_in_use(fake_api)) == [("node-0", "gpu-0"), ("node-0", "gpu-0")]


async def test_no_allocation_before_the_fence(fake_api: FakeApiServer, client: KubeClient) -> None:
    seed(fake_api)
    replica = Replica(fake_api, client)
    with pytest.raises(BindFailed, match="may not bind now: waiting for the start-up fence"):
        await replica.bind("p0", "node-0")
    assert devices_in_use(fake_api) == []


async def test_the_fence_reads_allocations_the_cache_has_not_seen(fake_api: FakeApiServer,
                                                                  client: KubeClient) -> None:
    """A standby's watch may lag behind what the previous leader wrote: the fence's quorum read fills
    the cache before anything is allocated from it."""
    seed(fake_api)
    replica = Replica(fake_api, client)
    fake_api.put_object(o.allocate(claim(fake_api, "c0"), "node-0", ["gpu-0"], reserved_for=[
        {"resource": "pods", "name": "p0", "uid": claim_pod_uid(fake_api, "p0")}]))
    await replica.fence.run()
    with pytest.raises(BindFailed, match="no longer fits"):
        await replica.bind("p1", "node-0")
    assert devices_in_use(fake_api) == [("node-0", "gpu-0")]


async def test_a_device_taken_while_the_bind_awaited_ends_the_bind(fake_api: FakeApiServer,
                                                                   client: KubeClient) -> None:
    replica = await started(fake_api, client)

    def other_writer_allocates(request: ApiRequest) -> None:
        if request.verb == "update" and request.name == "c0" and request.subresource is None:
            theirs = o.allocate(claim(fake_api, "c1"), "node-0", ["gpu-0"])
            replica.cache.apply("ResourceClaim", "MODIFIED", fake_api.put_object(theirs))  # the watch

    fake_api.intercept(other_writer_allocates)
    with pytest.raises(BindFailed, match=r"device gpu.example.com/node-0/gpu-0 was allocated to "
                                         r"ResourceClaim default/c1 in the meantime"):
        await replica.bind("p0", "node-0")
    assert devices_in_use(fake_api) == [("node-0", "gpu-0")]
    assert not claim(fake_api, "c0")["metadata"].get("finalizers"), "the undo removed our finalizer"


# ---- item 2: an unknown outcome is never a failure ----------------------------------------------------

@pytest.mark.parametrize("drop", [False, True], ids=["504", "cut-connection"])
async def test_a_lost_status_write_answer_is_read_back(fake_api: FakeApiServer, client: KubeClient,
                                                       drop: bool) -> None:
    replica = await started(fake_api, client)
    fake_api.lose_answers("update", "resourceclaims", subresource="status", drop=drop)
    fake_api.fail_next("get", "resourceclaims", status=429)  # the first read back is refused
    await replica.bind("p0", "node-0")
    if drop:
        # The connection pool sends a PUT cut before any answer byte once more on a new connection: the
        # copy conflicts (the first applied), and the fresh read shows our own allocation.
        assert replica.writer.conflicts + replica.writer.unknown_outcomes == 1
    else:
        assert replica.writer.unknown_outcomes == 1
        assert fake_api.requests["update resourceclaims/status"] == 1, "read back, not written twice"
    assert_invariants(fake_api)


async def test_a_status_write_refused_by_a_5xx_is_sent_again(
        fake_api: FakeApiServer, client: KubeClient) -> None:
    replica = await started(fake_api, client)
    fake_api.fail_next("update", "resourceclaims", subresource="status", status=503, count=2)
    await replica.bind("p0", "node-0")
    assert fake_api.requests["update resourceclaims/status"] == 3
    assert len(replica.scheduler.assume) == 0
    assert_invariants(fake_api)


@pytest.mark.parametrize("drop", [False, True], ids=["504", "cut-connection"])
@pytest.mark.parametrize("read_failure", [503, 429], ids=["unavailable", "refused"])
async def test_a_lost_binding_answer_with_failing_checks_never_undoes(fake_api: FakeApiServer,
                                                                      client: KubeClient, drop: bool,
                                                                      read_failure: int) -> None:
    """The probe's case: the Binding applied, its answer lost, and the check of the pod failing too
    (a refused read, 429, tells no more than an unavailable server)."""
    replica = await started(fake_api, client)
    fake_api.lose_answers("create", "pods", subresource="binding", drop=drop)
    fake_api.fail_next("get", "pods", status=read_failure, count=3)
    await replica.bind("p0", "node-0")
    assert fake_api.get_object("Pod", "p0", "default")["spec"]["nodeName"] == "node-0"
    assert_invariants(fake_api)


async def test_a_binding_whose_outcome_stays_unknown_keeps_the_claims(fake_api: FakeApiServer,
                                                                      client: KubeClient) -> None:
    replica = await started(fake_api, client, budget_s=0.3)
    fake_api.lose_answers("create", "pods", subresource="binding")
    fake_api.fail_next("get", "pods", status=503, count=1000)
    with pytest.raises(BindFailed, match="claims stay allocated and reserved for the pod"):
        await replica.bind("p0", "node-0")
    assert fake_api.get_object("Pod", "p0", "default")["spec"]["nodeName"] == "node-0"
    assert_invariants(fake_api)


async def test_a_binding_refused_by_a_5xx_is_sent_again(fake_api: FakeApiServer, client: KubeClient) -> None:
    replica = await started(fake_api, client)
    fake_api.fail_next("create", "pods", subresource="binding", status=500)
    await replica.bind("p0", "node-0")
    assert fake_api.requests["create pods/binding"] == 2
    assert_invariants(fake_api)


async def test_a_pod_bound_without_its_devices_is_repaired(
        fake_api: FakeApiServer, client: KubeClient) -> None:
    replica = await started(fake_api, client)
    pod = fake_api.get_object("Pod", "p0", "default")
    pod["spec"]["nodeName"] = "node-0"  # bound by someone, its claim never allocated
    replica.cache.apply("Pod", "MODIFIED", fake_api.put_object(pod))
    reports: list[str] = []
    repair = BoundPodRepair(replica.scheduler, grace_s=0, report=lambda pod, reason, message: reports.append(
        message))
    assert await repair.repair_due() == 1
    assert reports == [] and repair.repaired == 1
    assert_invariants(fake_api)


async def test_a_pod_bound_where_its_devices_are_taken_is_reported(fake_api: FakeApiServer,
                                                                   client: KubeClient) -> None:
    replica = await started(fake_api, client)
    await replica.bind("p1", "node-0")  # takes the only device
    pod = fake_api.get_object("Pod", "p0", "default")
    pod["spec"]["nodeName"] = "node-0"
    replica.cache.apply("Pod", "MODIFIED", fake_api.put_object(pod))
    reports: list[tuple[str, str]] = []
    repair = BoundPodRepair(replica.scheduler, grace_s=0, report=lambda pod, reason, message: reports.append(
        (reason, message)))
    assert await repair.repair_due() == 0
    assert [reason for reason, _ in reports] == ["DevicesMissing"]
    assert "ResourceClaim default/c0 is not allocated" in reports[0][1]
    assert [entry["pod"] for entry in repair.describe()["withoutDevices"]] == ["default/p0"]
    assert replica.scheduler.metrics.repairs.labels(outcome="failed")._value.get() == 1
    assert await repair.repair_due() == 0 and len(reports) == 1, "reported once, retried after a pause"


# ---- item 3: nothing half-written stays ------------------------------------------------------------

async def test_an_undo_whose_status_write_gets_a_5xx_still_finishes(fake_api: FakeApiServer,
                                                                    client: KubeClient) -> None:
    replica = await started(fake_api, client)
    fake_api.fail_next("create", "pods", subresource="binding", status=403, message="no")
    statuses = 0

    def refuse_the_undo_once(request: ApiRequest) -> None:
        nonlocal statuses
        if request.subresource == "status" and request.verb == "update":
            statuses += 1
            if statuses == 2:  # the undo's, after the bind's own
                fake_api.fail_next("update", "resourceclaims", subresource="status", status=500)

    fake_api.intercept(refuse_the_undo_once)
    with pytest.raises(BindFailed, match="creating the Binding: 403"):
        await replica.bind("p0", "node-0")
    assert statuses == 3
    assert devices_in_use(fake_api) == []
    assert_invariants(fake_api)


async def test_a_failed_finalizer_removal_is_retried_by_the_sweeper(fake_api: FakeApiServer,
                                                                    client: KubeClient) -> None:
    replica = await started(fake_api, client)
    sweeper = HalfWrittenSweeper(replica.cache, replica.writer, replica.authority, grace_s=0)
    fake_api.fail_next("create", "pods", subresource="binding", status=403)
    updates = 0

    def refuse_the_finalizer_removal(request: ApiRequest) -> None:
        nonlocal updates
        if request.verb == "update" and request.subresource is None:
            updates += 1
            if updates == 2:
                fake_api.fail_next("update", "resourceclaims", status=403, message="not now")

    remove = fake_api.intercept(refuse_the_finalizer_removal)
    with pytest.raises(BindFailed, match="undo incomplete"):
        await replica.bind("p0", "node-0")
    remove()
    assert claim(fake_api, "c0")["metadata"]["finalizers"] == [FINALIZER]
    assert sweeper.describe()["halfWritten"] == 1
    assert await sweeper.sweep_once() == 1
    assert_invariants(fake_api)


async def test_the_fence_cleans_a_crash_between_the_finalizer_and_the_allocation(
        fake_api: FakeApiServer, client: KubeClient) -> None:
    seed(fake_api)
    current = claim(fake_api, "c0")
    current["metadata"]["finalizers"] = [FINALIZER]
    fake_api.put_object(current)
    replica = Replica(fake_api, client)
    await replica.fence.run()
    assert_invariants(fake_api)
    await replica.bind("p0", "node-0")
    assert_invariants(fake_api)


async def test_the_fence_reads_the_claims_a_page_at_a_time(
        fake_api: FakeApiServer, client: KubeClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each page is checked and freed before the next is read; a half-written claim on the last page
    is fenced all the same."""
    monkeypatch.setattr(claimwriter, "LIST_PAGE", 2)
    seed(fake_api, pods=5)
    current = claim(fake_api, "c4")
    current["metadata"]["finalizers"] = [FINALIZER]
    fake_api.put_object(current)
    replica = Replica(fake_api, client)
    lists = fake_api.requests.get("list resourceclaims", 0)
    await replica.fence.run()
    assert fake_api.requests["list resourceclaims"] - lists == 3
    assert replica.fence.fenced == 1 and not claim(fake_api, "c4")["metadata"].get("finalizers")
    assert_invariants(fake_api)


async def test_the_sweeper_leaves_claims_a_bind_is_writing(
        fake_api: FakeApiServer, client: KubeClient) -> None:
    replica = await started(fake_api, client)
    sweeper = HalfWrittenSweeper(replica.cache, replica.writer, replica.authority, grace_s=0)
    late = LateWrites(fake_api, status_write_of("c0"))
    bind = asyncio.ensure_future(replica.bind("p0", "node-0"))
    await asyncio.wait_for(late.held.wait(), 10)
    assert sweeper.describe()["halfWritten"] == 1
    assert await sweeper.sweep_once() == 0
    late.release.set()
    await bind
    assert sweeper.describe()["halfWritten"] == 0
    assert_invariants(fake_api)


# ---- item 4: unsettled holds end when the truth is known -------------------------------------------

async def test_an_unsettled_hold_ends_when_the_write_is_fenced_off(fake_api: FakeApiServer,
                                                                   client: KubeClient) -> None:
    """The status write goes unanswered and the API server stays unreachable for the whole budget: the
    devices stay held. Once the API server answers, the sweeper writes the claim at that version, and
    the hold ends at once (not after a fixed time)."""
    replica = await started(fake_api, client, budget_s=0.3)
    sweeper = HalfWrittenSweeper(replica.cache, replica.writer, replica.authority, grace_s=0)
    fake_api.fail_next("update", "resourceclaims", subresource="status", status=504)
    fake_api.fail_next("get", "resourceclaims", status=503, count=1000)
    with pytest.raises(BindFailed, match="outcome unknown"):
        await replica.bind("p0", "node-0")
    assert [entry["claim"] for entry in replica.scheduler.assume.describe()] == ["default/c0"]
    with pytest.raises(BindFailed, match="no longer fits"):
        await replica.bind("p1", "node-0")
    fake_api._faults.clear()  # the API server is back
    assert await sweeper.sweep_once() == 1
    assert len(replica.scheduler.assume) == 0
    await replica.bind("p1", "node-0")
    assert_invariants(fake_api)


async def test_a_refused_write_never_holds_devices(fake_api: FakeApiServer, client: KubeClient) -> None:
    replica = await started(fake_api, client)
    fake_api.fail_next("update", "resourceclaims", subresource="status", status=422, message="invalid")
    with pytest.raises(BindFailed, match="422"):
        await replica.bind("p0", "node-0")
    assert len(replica.scheduler.assume) == 0
    await replica.bind("p1", "node-0")
    assert_invariants(fake_api)


# ---- the term: a replica that lost its Lease writes nothing more ------------------------------------

async def test_a_bind_whose_term_ended_writes_nothing_more(
        fake_api: FakeApiServer, client: KubeClient) -> None:
    replica = await started(fake_api, client)

    def lose_the_lease(request: ApiRequest) -> None:
        if request.verb == "update" and request.subresource is None:
            replica.authority.end("standby")

    fake_api.intercept(lose_the_lease)
    with pytest.raises(BindFailed, match="no longer the leader"):
        await replica.bind("p0", "node-0")
    assert "update resourceclaims/status" not in fake_api.requests
    # Left for the next leader's fence: our finalizer, no allocation.
    assert claim(fake_api, "c0")["metadata"]["finalizers"] == [FINALIZER]
    successor = Replica(fake_api, client)
    await successor.fence.run()
    assert_invariants(fake_api)
