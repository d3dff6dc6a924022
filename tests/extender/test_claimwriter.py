"""ClaimWriter.bind against the fake API server (real HTTP) and in snapshot mode."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import yaml
from fakeapi import ApiRequest, FakeApiServer, StatusError
from waiting import wait_until

from allocator import FeatureGates, ResourceClaim
from extender.kube.client import KubeClient
from extender.kube.informer import ClusterWatcher
from extender.plugin.authority import Authority
from extender.plugin.claimwriter import FINALIZER, BindError, ClaimWriter
from extender.state.assume import AssumeCache
from extender.state.cache import ClusterCache

DRIVER = "gpu.example.com"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "cluster"


def raw_claim(name: str, *, allocation: dict | None = None, reserved: list[dict] | None = None) -> dict:
    obj: dict = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                 "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
                 "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}}}
    if allocation is not None:
        obj["metadata"]["finalizers"] = [FINALIZER]
        obj["status"] = {"allocation": allocation, "reservedFor": reserved or []}
    return obj


def raw_pod(name: str, *claims: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
            "spec": {"containers": [{"name": "c"}],
                     "resourceClaims": [{"name": c, "resourceClaimName": c} for c in claims]}}


def allocation(device: str, node: str = "node-1") -> dict:
    return {"devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": node, "device": device}]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}


def ref(pod: str) -> dict:
    return {"resource": "pods", "name": pod, "uid": f"uid-{pod}"}


class Cluster:
    """The fake API server plus a cache filled from it (what the watcher would hold)."""

    def __init__(self, fake: FakeApiServer, kube: KubeClient, *objects: dict) -> None:
        self.fake = fake
        fake.seed(objects)
        self.cache = ClusterCache(FeatureGates())
        for kind in ("Pod", "ResourceClaim"):
            self.cache.replace(kind, fake.objects(kind))
        self.cache.ready = True
        self.writer = ClaimWriter(kube, self.cache, retry_delay_s=0)

    def claim(self, name: str) -> dict:
        return self.fake.get_object("ResourceClaim", name, "ns")

    def pod(self, name: str) -> dict:
        return self.fake.get_object("Pod", name, "ns")

    def cached(self, name: str) -> ResourceClaim:
        claim = self.cache.claim("ns", name)
        assert claim is not None
        return claim

    async def bind(self, pod: str, node: str, *claims: tuple[str, dict | None]) -> None:
        await self.writer.bind(self.cache.pod("ns", pod), node, [(self.cached(c), a) for c, a in claims])


@pytest.fixture
def cluster(fake_api: FakeApiServer, kube: KubeClient) -> Cluster:
    return Cluster(fake_api, kube, raw_pod("p1", "a"), raw_pod("p2", "a"), raw_claim("a"),
                   raw_claim("shared", allocation=allocation("gpu-7"), reserved=[ref("other")]))


async def test_allocate_reserve_and_bind(cluster: Cluster) -> None:
    await cluster.bind("p1", "node-1", ("a", allocation("gpu-0")))
    claim = cluster.claim("a")
    assert claim["metadata"]["finalizers"] == [FINALIZER]
    assert claim["status"]["allocation"]["devices"] == allocation("gpu-0")["devices"]
    assert claim["status"]["allocation"]["allocationTimestamp"], "binding-condition gates are on by default"
    assert claim["status"]["reservedFor"] == [ref("p1")]
    assert cluster.pod("p1")["spec"]["nodeName"] == "node-1"
    assert cluster.fake.requests == {"update resourceclaims": 1, "update resourceclaims/status": 1,
                                     "create pods/binding": 1}, "no extra reads without conflicts"
    # the cache shows the write before any watch event could
    assert cluster.cached("a").allocation is not None
    assert cluster.cache.allocated.owner_of(DRIVER, "node-1", "gpu-0") == "ns/a"


async def test_already_allocated_claim_only_gets_the_reservation(cluster: Cluster) -> None:
    cluster.fake.seed([raw_pod("p3", "shared")])
    cluster.cache.replace("Pod", cluster.fake.objects("Pod"))
    await cluster.bind("p3", "node-1", ("shared", None))
    claim = cluster.claim("shared")
    assert claim["status"]["reservedFor"] == [ref("other"), ref("p3")]
    assert claim["status"]["allocation"] == allocation("gpu-7")
    assert "update resourceclaims" not in cluster.fake.requests


async def test_conflicts_on_status_writes_are_retried_with_a_fresh_read(cluster: Cluster) -> None:
    cluster.fake.fail_next("update", "resourceclaims", subresource="status", count=2, status=409)
    await cluster.bind("p1", "node-1", ("a", allocation("gpu-0")))
    assert cluster.claim("a")["status"]["reservedFor"] == [ref("p1")]
    assert cluster.writer.conflicts == 2
    assert cluster.fake.requests["get resourceclaims"] == 2
    assert cluster.fake.requests["update resourceclaims"] == 1, "the finalizer is added once"


async def test_a_stale_cached_claim_conflicts_and_is_reread(cluster: Cluster) -> None:
    cluster.fake.put_object({**cluster.claim("a"), "metadata": {**cluster.claim("a")["metadata"],
                                                                "labels": {"touched": "yes"}}})
    await cluster.bind("p1", "node-1", ("a", allocation("gpu-0")))
    assert cluster.claim("a")["metadata"]["labels"] == {"touched": "yes"}
    assert cluster.claim("a")["status"]["reservedFor"] == [ref("p1")]
    assert cluster.writer.conflicts == 1


async def test_persistent_conflicts_give_up_and_undo(cluster: Cluster) -> None:
    cluster.fake.fail_next("update", "resourceclaims", subresource="status", count=5, status=409)
    with pytest.raises(BindError, match="still conflicting after 5 attempts"):
        await cluster.bind("p1", "node-1", ("a", allocation("gpu-0")))
    claim = cluster.claim("a")
    assert "status" not in claim
    assert not claim["metadata"].get("finalizers"), "the finalizer we added is removed"
    assert "nodeName" not in cluster.pod("p1")["spec"]
    assert cluster.cached("a").allocation is None


async def test_claim_allocated_elsewhere_aborts_without_touching_their_allocation(cluster: Cluster) -> None:
    theirs = cluster.claim("a")
    theirs["metadata"]["finalizers"] = [FINALIZER]
    theirs["status"] = {"allocation": allocation("gpu-5"), "reservedFor": [ref("theirs")]}
    cluster.fake.put_object(theirs)
    with pytest.raises(BindError, match="ResourceClaim ns/a got allocated elsewhere in the meantime"):
        await cluster.bind("p1", "node-1", ("a", allocation("gpu-0")))
    claim = cluster.claim("a")
    assert claim["status"] == {"allocation": allocation("gpu-5"), "reservedFor": [ref("theirs")]}
    assert claim["metadata"]["finalizers"] == [FINALIZER]
    assert "nodeName" not in cluster.pod("p1")["spec"]
    # Their devices count from now on, before the watch delivers the claim.
    assert cluster.cached("a").allocation == allocation("gpu-5")


async def test_claim_being_deleted_aborts(cluster: Cluster, kube: KubeClient) -> None:
    cluster.fake.put_object({**cluster.claim("a"), "metadata": {**cluster.claim("a")["metadata"],
                                                                "finalizers": ["someone/else"]}})
    await kube.delete("/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/a")
    with pytest.raises(BindError, match="ResourceClaim ns/a got deleted in the meantime"):
        await cluster.bind("p1", "node-1", ("a", allocation("gpu-0")))
    assert cluster.claim("a")["metadata"]["finalizers"] == ["someone/else"]


async def test_failed_binding_undoes_allocation_reservation_and_finalizer(cluster: Cluster) -> None:
    cluster.fake.fail_next("create", "pods", subresource="binding", status=403, message="no binding for you")
    with pytest.raises(BindError) as err:
        await cluster.bind("p1", "node-1", ("a", allocation("gpu-0")), ("shared", None))
    assert str(err.value) == ("binding pod ns/p1 to node node-1: creating the Binding: "
                              "403 Forbidden: no binding for you")
    fresh = cluster.claim("a")
    assert "allocation" not in fresh.get("status", {}) and not fresh["status"].get("reservedFor")
    assert not fresh["metadata"].get("finalizers")
    shared = cluster.claim("shared")
    assert shared["status"] == {"allocation": allocation("gpu-7"), "reservedFor": [ref("other")]}
    assert shared["metadata"]["finalizers"] == [FINALIZER], "not ours to remove"
    assert cluster.cached("a").allocation is None
    assert cluster.cache.allocated.owner_of(DRIVER, "node-1", "gpu-0") is None
    assert cluster.writer.undone == 1


async def test_failure_on_a_later_claim_undoes_the_earlier_ones(cluster: Cluster) -> None:
    cluster.fake.seed([raw_claim("b")])
    cluster.cache.replace("ResourceClaim", cluster.fake.objects("ResourceClaim"))
    calls = []

    def refuse_b(request: ApiRequest) -> None:
        # Faults are checked after interceptors, so this one applies to the request being intercepted.
        if request.verb == "update" and request.name == "b" and request.subresource == "status":
            calls.append(request)
            cluster.fake.fail_next("update", "resourceclaims", subresource="status", status=403, message="no")

    cluster.fake.intercept(refuse_b)
    with pytest.raises(BindError, match=r"ResourceClaim ns/b: updating status: 403 \w+: no"):
        await cluster.bind("p1", "node-1", ("a", allocation("gpu-0")), ("b", allocation("gpu-1")))
    assert calls
    for name in ("a", "b"):
        claim = cluster.claim(name)
        assert not (claim.get("status") or {}).get("allocation") and not claim["metadata"].get("finalizers")


async def test_two_binds_racing_for_one_claim(cluster: Cluster) -> None:
    results = await asyncio.gather(
        cluster.bind("p1", "node-1", ("a", allocation("gpu-0"))),
        cluster.bind("p2", "node-2", ("a", allocation("gpu-3", "node-2"))),
        return_exceptions=True)
    failures = [r for r in results if isinstance(r, BaseException)]
    assert len(failures) == 1 and isinstance(failures[0], BindError)
    assert "got allocated elsewhere in the meantime" in str(failures[0])
    winner = "p1" if results[0] is None else "p2"
    loser = "p2" if winner == "p1" else "p1"
    claim = cluster.claim("a")
    assert claim["status"]["reservedFor"] == [ref(winner)]
    assert claim["metadata"]["finalizers"] == [FINALIZER]
    assert cluster.pod(winner)["spec"]["nodeName"]
    assert "nodeName" not in cluster.pod(loser)["spec"]


async def test_reserved_for_limit_is_reported(cluster: Cluster) -> None:
    full = cluster.claim("shared")
    full["status"]["reservedFor"] = [ref(f"x{i}") for i in range(256)]
    cluster.fake.put_object(full)
    cluster.cache.replace("ResourceClaim", cluster.fake.objects("ResourceClaim"))
    with pytest.raises(BindError, match="must have at most 256 items"):
        await cluster.bind("p1", "node-1", ("shared", None))
    assert len(cluster.claim("shared")["status"]["reservedFor"]) == 256


async def test_binding_a_pod_already_on_the_node_is_idempotent(cluster: Cluster) -> None:
    await cluster.bind("p1", "node-1", ("a", allocation("gpu-0")))
    await cluster.bind("p1", "node-1", ("a", None))   # a retried bind: nothing left to write
    with pytest.raises(BindError, match='already assigned to node "node-1"'):
        await cluster.bind("p1", "node-2", ("a", None))
    reserved = cluster.claim("a")["status"]["reservedFor"]
    assert reserved == [ref("p1")], "undo keeps a reservation it did not make"


async def cancel_bind_while_stalled(cluster: Cluster, subresource: str) -> asyncio.Event:
    """Start p1's bind, hold its first request to `subresource` in the API server, cancel the bind
    meanwhile; returns the event that lets the held request go on."""
    entered, release = asyncio.Event(), asyncio.Event()

    async def stall(request: ApiRequest) -> None:
        if request.subresource == subresource:
            entered.set()
            await release.wait()

    remove = cluster.fake.intercept(stall)
    task = asyncio.ensure_future(cluster.bind("p1", "node-1", ("a", allocation("gpu-0"))))
    await asyncio.wait_for(entered.wait(), 30)
    remove()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    return release


async def test_bind_cancelled_during_the_binding_keeps_the_claims(cluster: Cluster) -> None:
    release = await cancel_bind_while_stalled(cluster, "binding")
    # The Binding was sent: the API server may apply it (here it does), so the claims stay.
    release.set()
    await wait_until(lambda: cluster.pod("p1")["spec"].get("nodeName") == "node-1")
    claim = cluster.claim("a")
    assert claim["status"]["reservedFor"] == [ref("p1")] and claim["status"]["allocation"]


async def test_bind_cancelled_during_the_status_write_fences_it_off(cluster: Cluster) -> None:
    release = await cancel_bind_while_stalled(cluster, "status")
    # The undo wrote the claim at the version the status write was sent at: when that write finally
    # reaches storage it conflicts, and the claim is left clean.
    release.set()
    await wait_until(lambda: cluster.fake.requests.get("update resourceclaims/status") == 1)
    await asyncio.sleep(0.05)
    claim = cluster.claim("a")
    assert not (claim.get("status") or {}).get("allocation") and not claim["metadata"].get("finalizers")


def example_cache() -> ClusterCache:
    objs = [o for p in sorted(EXAMPLES.glob("*.yaml")) for o in yaml.safe_load_all(p.read_text()) if o]
    return ClusterCache.from_objects(objs, FeatureGates())


async def test_snapshot_mode_updates_the_cache_objects() -> None:
    cache = example_cache()
    writer = ClaimWriter(None, cache)
    pod = cache.pod("default", "inference")
    before = cache.claim("default", "single-gpu")
    await writer.bind(pod, "node-1", [(before, allocation("gpu-2"))])
    claim = cache.claim("default", "single-gpu")
    assert claim.allocation["devices"] == allocation("gpu-2")["devices"]
    consumer = {"resource": "pods", "name": "inference", "uid": pod["metadata"]["uid"]}
    assert claim.raw["status"]["reservedFor"] == [consumer]
    assert claim.reserved_uids == (pod["metadata"]["uid"],)
    assert claim.raw["metadata"]["finalizers"] == [FINALIZER]
    assert cache.pod("default", "inference")["spec"]["nodeName"] == "node-1"
    assert cache.allocated.owner_of(DRIVER, "node-1", "gpu-2") == "default/single-gpu"
    assert before.allocation is None and "nodeName" not in pod["spec"], "earlier objects are not mutated"


async def test_snapshot_mode_undoes_on_a_failed_binding() -> None:
    cache = example_cache()
    writer = ClaimWriter(None, cache)
    running = cache.pod("default", "training-0")     # already bound to node-1
    claim = cache.claim("default", "single-gpu")
    with pytest.raises(BindError, match="already assigned"):
        await writer.bind(running, "node-2", [(claim, allocation("gpu-0", "node-2"))])
    after = cache.claim("default", "single-gpu")
    assert after.allocation is None and not after.reserved_uids
    assert not after.raw["metadata"].get("finalizers")
    assert cache.allocated.owner_of(DRIVER, "node-2", "gpu-0") is None


async def test_with_the_watcher_late_events_do_not_roll_back_the_written_claim(
        fake_api: FakeApiServer, kube: KubeClient) -> None:
    fake_api.seed([raw_pod("p1", "a"), raw_claim("a")])
    cache = ClusterCache(FeatureGates())
    assume = AssumeCache()
    assume.attach(cache)
    watcher = ClusterWatcher(kube, cache)
    await watcher.start()
    try:
        assert await watcher.wait_ready(30)
        claim = cache.claim("ns", "a")
        assume.reserve(claim, allocation("gpu-0"), "uid-p1")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30   # bounds a hang only: CI machines may be loaded
        while fake_api.open_watches != len(watcher.kinds) and loop.time() < deadline:
            await asyncio.sleep(0.01)
        # Hold back the watch so its events (finalizer update, then status) arrive after the writer's.
        assert fake_api.close_watches("resourceclaims") == 1
        await ClaimWriter(kube, cache).bind(cache.pod("ns", "p1"), "node-1", [(claim, allocation("gpu-0"))])
        assert len(assume) == 0, "the written allocation is in the cache: nothing left in flight"
        allocated_after_event: list[bool] = []
        cache.subscribe(lambda kind, event, new, old: allocated_after_event.append(
            cache.claim("ns", "a").allocation is not None) if kind == "ResourceClaim" else None)
        final_version = fake_api.get_object("ResourceClaim", "a", "ns")["metadata"]["resourceVersion"]
        health = watcher.health()["kinds"]["ResourceClaim"]
        deadline = loop.time() + 30
        while not (health["resourceVersion"] == str(fake_api.resource_version) and health["restarts"]) \
                and loop.time() < deadline:
            await asyncio.sleep(0.01)
            health = watcher.health()["kinds"]["ResourceClaim"]
        assert health["events"] == 2, "the watch delivered both claim writes after the writer stored them"
        assert all(allocated_after_event), "an older event rolled the claim back"
        cached = cache.claim("ns", "a")
        assert cached.raw["metadata"]["resourceVersion"] == final_version
        assert cached.allocation is not None and cached.raw["status"]["reservedFor"] == [ref("p1")]
        assert cache.allocated.owner_of(DRIVER, "node-1", "gpu-0") == "ns/a"
    finally:
        await watcher.stop()


async def test_concurrent_reservations_of_a_shared_claim_all_land(cluster: Cluster) -> None:
    cluster.fake.seed([raw_pod(f"s{i}", "shared") for i in range(5)])
    cluster.cache.replace("Pod", cluster.fake.objects("Pod"))
    await asyncio.gather(*(cluster.bind(f"s{i}", "node-1", ("shared", None)) for i in range(5)))
    reserved = cluster.claim("shared")["status"]["reservedFor"]
    assert sorted(entry["name"] for entry in reserved) == ["other", "s0", "s1", "s2", "s3", "s4"]
    assert cluster.writer.conflicts >= 1, "the stale cached copy must have conflicted at least once"


async def test_binding_whose_answer_was_lost_but_that_happened_is_a_success(cluster: Cluster) -> None:
    async def lost_answer(request: ApiRequest) -> None:
        if request.resource.plural == "pods" and request.subresource == "binding":
            pod = cluster.pod("p1")
            pod["spec"]["nodeName"] = "node-1"
            cluster.fake.put_object(pod)   # the API server bound the pod ...
            raise StatusError(504, "the server timed out")   # ... but the answer is an error

    remove = cluster.fake.intercept(lost_answer)
    await cluster.bind("p1", "node-1", ("a", allocation("gpu-0")))
    remove()
    claim = cluster.claim("a")
    assert claim["status"]["allocation"]["devices"] == allocation("gpu-0")["devices"]
    assert claim["status"]["reservedFor"] == [ref("p1")], "the claims of a bound pod are not undone"


async def test_a_resent_allocation_is_checked_against_devices_taken_meanwhile(cluster: Cluster) -> None:
    """The status write's answer is lost (it did not apply) and, while the claim is read again, another
    writer's allocation of the same device reaches the cache: the write is not sent again."""
    sent: list[ApiRequest] = []

    def another_writer_takes_the_device(request: ApiRequest) -> None:
        if request.subresource == "status" and request.name == "a":
            sent.append(request)
            if len(sent) == 1:
                theirs = raw_claim("b", allocation=allocation("gpu-0"), reserved=[ref("theirs")])
                cluster.cache.apply("ResourceClaim", "ADDED", cluster.fake.put_object(theirs))

    cluster.fake.intercept(another_writer_takes_the_device)
    cluster.fake.fail_next("update", "resourceclaims", subresource="status", status=504)
    with pytest.raises(BindError, match=f"device {DRIVER}/node-1/gpu-0 was allocated to ResourceClaim ns/b "
                                        "in the meantime"):
        await cluster.bind("p1", "node-1", ("a", allocation("gpu-0")))
    assert len(sent) == 1, "the allocation was not sent again"
    claim = cluster.claim("a")
    assert not (claim.get("status") or {}).get("allocation")
    assert FINALIZER not in (claim["metadata"].get("finalizers") or ()), "undone, the lost write fenced off"
    assert cluster.claim("b")["status"]["allocation"] == allocation("gpu-0")
    assert "nodeName" not in cluster.pod("p1")["spec"]


async def test_removing_a_special_claim_writes_nothing_once_the_term_is_over(
        fake_api: FakeApiServer, kube: KubeClient) -> None:
    authority = Authority()
    term = authority.begin()
    special = raw_claim("special")
    special["metadata"]["finalizers"] = [FINALIZER]
    cluster = Cluster(fake_api, kube, special)
    writer = ClaimWriter(kube, cluster.cache, retry_delay_s=0, authority=authority)
    authority.end("standby")
    with pytest.raises(BindError, match="ResourceClaim ns/special: not deleted: this replica is no longer "
                                        "the leader"):
        await writer.remove_claim("ns", "special", "uid-special", term=term)
    assert not [label for label in fake_api.requests if not label.startswith(("get", "list", "watch"))]
    assert cluster.claim("special")["metadata"]["finalizers"] == [FINALIZER]
    authority.begin()
    with pytest.raises(BindError, match="no longer the leader"):
        await writer.remove_claim("ns", "special", "uid-special", term=term)  # a later term is not its own
    await writer.remove_claim("ns", "special", "uid-special", term=authority.term)
    assert cluster.claim("special") is None
