"""AssumeCache: in-flight allocations count as used until the cache shows them, expire, never double up."""

from __future__ import annotations

import asyncio
import random

import pytest

from allocator import FeatureGates, ResourceClaim
from extender.state.assume import AlreadyInFlight, AssumeCache
from extender.state.cache import ClusterCache

DRIVER, POOL = "gpu.example.com", "node-1"


def raw_claim(name: str, *, allocation: dict | None = None, rv: str = "1") -> dict:
    obj: dict = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                 "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": rv},
                 "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}}}
    if allocation is not None:
        obj["status"] = {"allocation": allocation}
    return obj


def allocation(device: str) -> dict:
    return {"devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": POOL, "device": device}]}}


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def cache() -> ClusterCache:
    return ClusterCache(FeatureGates())


def test_reserved_allocations_count_as_used(cache: ClusterCache) -> None:
    assume = AssumeCache()
    claim = ResourceClaim.from_api(raw_claim("a"))
    assume.reserve(claim, allocation("gpu-0"), "pod-1")
    view = assume.allocated_view(cache)
    assert view.owner_of(DRIVER, POOL, "gpu-0") == "ns/a"
    assert cache.allocated.owner_of(DRIVER, POOL, "gpu-0") is None, "the cache's own state is untouched"
    assert [(uid, alloc) for uid, _, alloc in assume.in_flight()] == [("uid-a", allocation("gpu-0"))]
    assert assume.describe()[0]["devices"] == [f"{DRIVER}/{POOL}/gpu-0"]
    assume.release("uid-a")
    assert assume.allocated_view(cache).owner_of(DRIVER, POOL, "gpu-0") is None


def test_a_claim_in_flight_for_another_pod_is_refused(cache: ClusterCache) -> None:
    assume = AssumeCache()
    claim = ResourceClaim.from_api(raw_claim("a"))
    assume.reserve(claim, allocation("gpu-0"), "pod-1")
    with pytest.raises(AlreadyInFlight, match="ns/a is in the process of being allocated"):
        assume.reserve(claim, allocation("gpu-1"), "pod-2")
    assume.reserve(claim, allocation("gpu-1"), "pod-1")   # same pod: replaced (e.g. another node at bind)
    view = assume.allocated_view(cache)
    assert view.owner_of(DRIVER, POOL, "gpu-0") is None and view.owner_of(DRIVER, POOL, "gpu-1") == "ns/a"
    assume.release(claim.uid, allocation=allocation("gpu-1"))  # an equal copy is not the entry's own
    assert len(assume) == 1
    mine = allocation("gpu-2")
    assume.reserve(claim, mine, "pod-1")
    assume.release(claim.uid, allocation=mine)
    assert len(assume) == 0


def test_confirmation_from_the_watch(cache: ClusterCache) -> None:
    assume = AssumeCache()
    assume.attach(cache)
    cache.apply("ResourceClaim", "ADDED", raw_claim("a"))
    assume.reserve(cache.claim("ns", "a"), allocation("gpu-0"), "pod-1")
    cache.apply("ResourceClaim", "MODIFIED", raw_claim("a", rv="2"))
    assert len(assume) == 1, "a claim update without allocation confirms nothing"
    cache.apply("ResourceClaim", "MODIFIED", raw_claim("a", rv="3", allocation=allocation("gpu-0")))
    assert len(assume) == 0


def test_attached_cache_events_confirm_and_drop_entries(cache: ClusterCache) -> None:
    assume = AssumeCache()
    assume.attach(cache)
    cache.apply("ResourceClaim", "ADDED", raw_claim("a"))
    cache.apply("ResourceClaim", "ADDED", raw_claim("b"))
    assume.reserve(cache.claim("ns", "a"), allocation("gpu-0"), "pod-1")
    assume.reserve(cache.claim("ns", "b"), allocation("gpu-1"), "pod-2")
    cache.apply("ResourceClaim", "MODIFIED", raw_claim("a", rv="2", allocation=allocation("gpu-0")))
    assert [uid for uid, _, _ in assume.in_flight()] == ["uid-b"]
    assert assume.allocated_view(cache).owner_of(DRIVER, POOL, "gpu-0") == "ns/a", "now counted by the cache"
    cache.apply("ResourceClaim", "DELETED", raw_claim("b", rv="3"))
    assert assume.in_flight() == []


def test_view_skips_entries_the_cache_already_counts(cache: ClusterCache) -> None:
    assume = AssumeCache()   # not attached: allocated_view must still not count a claim twice
    assume.reserve(ResourceClaim.from_api(raw_claim("a")), allocation("gpu-0"), "pod-1")
    cache.apply("ResourceClaim", "ADDED", raw_claim("a", allocation=allocation("gpu-0")))
    view = assume.allocated_view(cache)
    assert view is cache.allocated and len(assume) == 0


def test_ttl_expiry() -> None:
    clock = FakeClock()
    assume = AssumeCache(clock=clock)
    claim = ResourceClaim.from_api(raw_claim("a"))
    assume.reserve(claim, allocation("gpu-0"), "pod-1", ttl_s=5)
    assume.reserve(ResourceClaim.from_api(raw_claim("b")), allocation("gpu-1"), "pod-2")
    clock.now += 4.9
    assert assume.pending("uid-a") is not None
    assert assume.describe()[0]["expiresInSeconds"] == pytest.approx(0.1)
    clock.now += 0.2
    assert assume.pending("uid-a") is None
    assert [uid for uid, _, _ in assume.in_flight()] == ["uid-b"]
    assume.reserve(claim, allocation("gpu-0"), "pod-3")   # expired holds do not block other pods


async def test_concurrent_allocators_never_share_a_device(cache: ClusterCache) -> None:
    assume = AssumeCache()
    devices = [f"gpu-{i}" for i in range(10)]
    chosen: dict[str, str] = {}

    async def schedule(i: int) -> None:
        await asyncio.sleep(random.uniform(0, 0.01))
        # choose and reserve with no await in between (the documented invariant)
        view = assume.allocated_view(cache)
        free = [d for d in devices if not view.is_allocated((DRIVER, POOL, d))]
        if free:
            assume.reserve(ResourceClaim.from_api(raw_claim(f"c{i}")), allocation(free[0]), f"pod-{i}")
            chosen[f"c{i}"] = free[0]
        await asyncio.sleep(random.uniform(0, 0.01))   # the "bind" happens later

    await asyncio.gather(*(schedule(i) for i in range(25)))
    assert len(chosen) == 10 and sorted(chosen.values()) == sorted(devices)


def test_a_view_is_handed_out_again_until_what_it_rests_on_changes(cache: ClusterCache) -> None:
    clock = FakeClock()
    assume = AssumeCache(clock=clock)   # not attached: the view alone must notice the cache's changes
    assume.reserve(ResourceClaim.from_api(raw_claim("a")), allocation("gpu-0"), "pod-1")
    first = assume.allocated_view(cache)
    assert assume.allocated_view(cache) is first, "nothing changed: the same view"

    assume.reserve(ResourceClaim.from_api(raw_claim("b")), allocation("gpu-1"), "pod-2", ttl_s=5)
    with_b = assume.allocated_view(cache)
    assert with_b is not first and with_b.owner_of(DRIVER, POOL, "gpu-1") == "ns/b"
    clock.now += 6   # b's hold expires: the next view must not count it
    assert not assume.allocated_view(cache).is_allocated((DRIVER, POOL, "gpu-1"))

    # The cache now holds a's allocation, on another device than the one in flight: the view must
    # drop the entry (the cache counts the claim) rather than keep counting gpu-0 too.
    before = assume.allocated_view(cache)
    cache.apply("ResourceClaim", "ADDED", raw_claim("a", allocation=allocation("gpu-2")))
    after = assume.allocated_view(cache)
    assert after is not before and len(assume) == 0
    assert not after.is_allocated((DRIVER, POOL, "gpu-0")) and after.owner_of(DRIVER, POOL, "gpu-2") == "ns/a"

    assume.reserve(ResourceClaim.from_api(raw_claim("c")), allocation("gpu-3"), "pod-3")
    counted = assume.allocated_view(cache)
    assume.release("uid-c")
    assert assume.allocated_view(cache) is not counted
    assert not assume.allocated_view(cache).is_allocated((DRIVER, POOL, "gpu-3"))


def test_a_bind_view_leaves_out_its_own_entries_and_is_not_handed_to_others(cache: ClusterCache) -> None:
    assume = AssumeCache()
    assume.reserve(ResourceClaim.from_api(raw_claim("a")), allocation("gpu-0"), "pod-1")
    assume.reserve(ResourceClaim.from_api(raw_claim("b")), allocation("gpu-1"), "group-1")
    shared = assume.allocated_view(cache)
    own = assume.allocated_view(cache, excluding_owners=("pod-1", "group-1"))
    assert not own.is_allocated((DRIVER, POOL, "gpu-0")) and not own.is_allocated((DRIVER, POOL, "gpu-1"))
    assert assume.allocated_view(cache) is shared, "the shared view still counts both"
    assert shared.is_allocated((DRIVER, POOL, "gpu-0")) and shared.is_allocated((DRIVER, POOL, "gpu-1"))
    nothing_to_leave_out = assume.allocated_view(cache, excluding_owners=("pod-9",))
    assert nothing_to_leave_out is shared


def test_holds_expire_in_any_order_they_were_made_or_extended(cache: ClusterCache) -> None:
    clock = FakeClock()
    assume = AssumeCache(clock=clock)
    assume.reserve(ResourceClaim.from_api(raw_claim("a")), allocation("gpu-0"), "pod-1", ttl_s=10)
    assume.reserve(ResourceClaim.from_api(raw_claim("b")), allocation("gpu-1"), "pod-2", ttl_s=3)
    assume.reserve(ResourceClaim.from_api(raw_claim("c")), allocation("gpu-2"), "pod-3")   # a bind's: no TTL
    assume.extend("uid-b", 8)
    clock.now += 5
    assert sorted(uid for uid, _, _ in assume.in_flight()) == ["uid-a", "uid-b", "uid-c"]
    clock.now += 4   # b's extended hold (8 s) is over, a's (10 s) is not
    assert not assume.allocated_view(cache).is_allocated((DRIVER, POOL, "gpu-1"))
    assert sorted(uid for uid, _, _ in assume.in_flight()) == ["uid-a", "uid-c"]
    clock.now += 2
    assert [uid for uid, _, _ in assume.in_flight()] == ["uid-c"]
    assume.reserve(ResourceClaim.from_api(raw_claim("d")), allocation("gpu-3"), "pod-4", ttl_s=1)
    clock.now += 1
    assert [uid for uid, _, _ in assume.in_flight()] == ["uid-c"]
