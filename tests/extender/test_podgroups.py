"""Workload claims (KEP-5729): a ResourceClaim shared by a PodGroup and reserved for it."""

from __future__ import annotations

import asyncio
from typing import Any

import dra_objects as o
import podgroup_objects as g
import pytest
from lost_binding import bound_elsewhere_at_binding

from allocator import FeatureGates
from common.rules import RESERVED_FOR_MAX
from extender.http.explain import explain_pod, render_text
from extender.kube.informer import DEFAULT_KINDS, POD_GROUPS, ClusterWatcher, watched_kinds
from extender.plugin.claimwriter import ClaimWriter
from extender.plugin.podclaims import ClaimsNotReady, resolve_pod_claims
from extender.plugin.podgroups import OWNER_PREFIX, group_binding, reservable, reserved_for_pod
from extender.plugin.scheduling import BindFailed, Scheduler
from extender.state.assume import AssumeCache
from extender.state.cache import ClusterCache

NODES = ["node-0", "node-1", "node-2"]
ON = FeatureGates({"DRAWorkloadResourceClaims": True})


def make(objs: list[dict[str, Any]], features: FeatureGates = ON, **options: Any) -> Scheduler:
    cache = ClusterCache.from_objects(objs, features)
    assume = AssumeCache()
    assume.attach(cache)
    return Scheduler(cache, assume, ClaimWriter(None, cache), **options)


def by_name_cluster(members: int, *, outsider: bool = False) -> list[dict[str, Any]]:
    objs = [*o.cluster(3, 2), o.claim("train-gpus", count=2), g.pod_group("train", claim_name="train-gpus")]
    objs += [g.member(f"w{i}", "train", claim_name="train-gpus") for i in range(members)]
    if outsider:
        objs.append(g.member("outsider", None, claim_name="train-gpus"))
    return objs


def current(scheduler: Scheduler, name: str, kind: str = "Pod") -> dict:
    raw = scheduler.cache.raw(kind, f"default/{name}")
    assert raw is not None
    return raw


async def schedule(scheduler: Scheduler, name: str) -> str:
    """Filter, then bind to the first passing node (what kube-scheduler does with one extender)."""
    pod = current(scheduler, name)
    result = await scheduler.filter(pod, NODES, brief=True)
    assert result.passed, (result.failed, result.unresolvable, result.error)
    await scheduler.bind("default", name, uid=pod["metadata"]["uid"], node_name=result.passed[0])
    return result.passed[0]


def test_podgroup_member_resolves_group_claim_and_binding() -> None:
    scheduler = make(by_name_cluster(1))
    plan = scheduler.planner.plan(current(scheduler, "w0"))
    assert plan.blocked is None and plan.group is not None
    assert (plan.group.key, plan.group.pod_claim_names) == ("default/train", frozenset({g.GROUP_CLAIM}))
    assert plan.group.reference() == g.group_reference(current(scheduler, "train", "PodGroup"))
    assert [entry.claim.name for entry in plan.claims] == ["train-gpus"]


def test_podgroup_entry_must_match_in_every_field() -> None:
    objs = by_name_cluster(0)
    other = g.member("w0", "train", claim_name="train-gpus")
    other["spec"]["resourceClaims"][0]["name"] = "other-name"
    other["spec"]["containers"][0]["resources"] = {"claims": [{"name": "other-name"}]}
    scheduler = make([*objs, other])
    binding = group_binding(current(scheduler, "w0"), scheduler.cache)
    assert binding is not None and binding.pod_claim_names == frozenset()
    # The claim is not reserved for the group yet, so the member may still use it for itself (upstream
    # reserves it for the pod); once the group holds it, the non-matching entry is refused.
    claim = current(scheduler, "train-gpus", "ResourceClaim")   # a copy, as every read of the cache
    group = g.group_reference(current(scheduler, "train", "PodGroup"))
    o.allocate(claim, "node-0", ["gpu-0", "gpu-1"], [group])
    scheduler.cache.apply("ResourceClaim", "MODIFIED", claim)
    blocked = scheduler.planner.plan(current(scheduler, "w0")).blocked
    assert blocked is not None and "does not match the PodGroup's entry" in blocked.message


def test_podgroup_template_claim_is_owned_by_the_group() -> None:
    group = g.pod_group("train", template="gpu-template", generated="train-gpus-x7k2p")
    claim = g.owned_by_group(o.claim("train-gpus-x7k2p", count=1), group)
    pod = g.member("w0", "train", template="gpu-template", generated="train-gpus-x7k2p")
    scheduler = make([*o.cluster(1, 2), group, claim, pod])
    plan = scheduler.planner.plan(current(scheduler, "w0"))
    assert plan.blocked is None and plan.group is not None
    assert plan.group.pod_claim_names == frozenset({g.GROUP_CLAIM})
    # Gate off: the claim's owner is not the pod, exactly upstream's refusal.
    off = make([*o.cluster(1, 2), group, claim, pod], FeatureGates())
    blocked = off.planner.plan(current(off, "w0")).blocked
    assert blocked is not None and blocked.message.endswith("(Pod is not owner)")
    # A pod of another group naming the generated claim through its own status: refused like upstream.
    stranger = g.member("s0", "other", template="gpu-template", generated="train-gpus-x7k2p")
    with pytest.raises(ClaimsNotReady, match=r"\(neither Pod nor PodGroup other is the owner\)$"):
        resolve_pod_claims(stranger, scheduler.cache, accept_group_owner=True)


def test_podgroup_missing_group_blocks_with_upstream_words() -> None:
    pod = g.member("w0", "train", claim_name="train-gpus")
    scheduler = make([*o.cluster(1, 2), o.claim("train-gpus"), pod])
    blocked = scheduler.planner.plan(current(scheduler, "w0")).blocked
    assert blocked is not None and blocked.message == 'podgroup.scheduling.k8s.io "train" not found'


async def test_podgroup_first_pod_allocates_for_the_group_later_pods_add_nothing() -> None:
    scheduler = make(by_name_cluster(3))
    group_ref = g.group_reference(current(scheduler, "train", "PodGroup"))
    first = await schedule(scheduler, "w0")
    claim = current(scheduler, "train-gpus", "ResourceClaim")
    assert claim["status"]["reservedFor"] == [group_ref]
    allocation = claim["status"]["allocation"]
    version = claim["metadata"]["resourceVersion"]
    for name in ("w1", "w2"):
        assert await schedule(scheduler, name) == first
    claim = current(scheduler, "train-gpus", "ResourceClaim")
    assert claim["status"]["reservedFor"] == [group_ref]
    assert claim["status"]["allocation"] == allocation
    assert claim["metadata"]["resourceVersion"] == version  # later pods wrote nothing
    assert all(current(scheduler, f"w{i}")["spec"]["nodeName"] == first for i in range(3))
    assert len(scheduler.assume) == 0


async def test_podgroup_of_1000_pods_is_not_limited_by_reserved_for() -> None:
    scheduler = make(by_name_cluster(1000))
    for i in range(1000):
        await schedule(scheduler, f"w{i}")
    claim = current(scheduler, "train-gpus", "ResourceClaim")
    assert len(claim["status"]["reservedFor"]) == 1 < RESERVED_FOR_MAX
    assert all(current(scheduler, f"w{i}")["spec"].get("nodeName") for i in range(1000))


async def test_podgroup_outsider_cannot_use_the_groups_claim() -> None:
    scheduler = make(by_name_cluster(1, outsider=True))
    await schedule(scheduler, "w0")
    result = await scheduler.filter(current(scheduler, "outsider"), NODES)
    assert result.passed == []
    assert set(result.unresolvable.values()) == {
        "resourceclaim default/train-gpus is shared by PodGroup default/train: the pod is not in that "
        "PodGroup (pod default/outsider)"}
    with pytest.raises(BindFailed, match="is shared by PodGroup default/train"):
        await scheduler.bind("default", "outsider", uid="", node_name="node-0")


async def test_podgroup_gang_cycle_members_share_the_in_flight_allocation() -> None:
    """kube-scheduler's gang cycle filters every pod of the group before it binds any: the first pod's
    filter holds the shared claim's devices for the group, the others share them (kubernetes#137617),
    and a pod outside the group waits."""
    scheduler = make(by_name_cluster(3, outsider=True))
    first = await scheduler.filter(current(scheduler, "w0"), NODES)
    assert len(first.passed) == 1
    held_on = first.passed[0]
    assert [entry["podUID"] for entry in scheduler.assume.describe()] == [
        OWNER_PREFIX + current(scheduler, "train", "PodGroup")["metadata"]["uid"]]
    for name in ("w1", "w2"):
        result = await scheduler.filter(current(scheduler, name), NODES)
        assert result.passed == [held_on]  # the shared allocation is on that node only
        assert set(result.unresolvable.values()) == {"resourceclaim not available on the node"}
    outsider = await scheduler.filter(current(scheduler, "outsider"), NODES)
    assert set(outsider.unresolvable.values()) == {
        "resource claim default/train-gpus is in the process of being allocated"}
    # The binds come in any order; the last pod filtered binds first.
    for name in ("w2", "w0", "w1"):
        await scheduler.bind("default", name, uid="", node_name=held_on)
    claim = current(scheduler, "train-gpus", "ResourceClaim")
    assert claim["status"]["reservedFor"] == [g.group_reference(current(scheduler, "train", "PodGroup"))]
    assert len(scheduler.assume) == 0


async def test_podgroup_concurrent_binds_write_the_claim_once() -> None:
    scheduler = make(by_name_cluster(4))
    writes = 0
    store = scheduler.writer._store
    update_status = store.update_claim_status

    async def counted(claim: dict) -> dict:
        nonlocal writes
        writes += 1
        await asyncio.sleep(0.01)  # a slow API server: the other binds arrive meanwhile
        return await update_status(claim)

    store.update_claim_status = counted  # type: ignore[method-assign]
    await asyncio.gather(*(scheduler.bind("default", f"w{i}", uid="", node_name="node-1") for i in range(4)))
    assert writes == 1
    claim = current(scheduler, "train-gpus", "ResourceClaim")
    assert claim["status"]["reservedFor"] == [g.group_reference(current(scheduler, "train", "PodGroup"))]
    assert {current(scheduler, f"w{i}")["spec"]["nodeName"] for i in range(4)} == {"node-1"}


async def test_podgroup_retried_bind_waiting_for_the_group_write_is_refused_not_run_twice() -> None:
    """kube-scheduler retries a bind that timed out. When the first request is still waiting for another
    bind of its PodGroup, the retry must get "already being bound", as it does without a group."""
    scheduler = make(by_name_cluster(3))
    await schedule(scheduler, "w0")  # the group's claim is allocated: w1's bind only binds the pod
    node = current(scheduler, "w0")["spec"]["nodeName"]
    release = asyncio.get_running_loop().create_future()
    scheduler._group_writes["default/train"] = release  # another bind of the group is writing
    binds = 0
    bind_pod = scheduler.writer.bind

    async def counted(*args: Any, **kwargs: Any) -> None:
        nonlocal binds
        binds += 1
        await asyncio.sleep(0.01)  # a slow API server: the retry arrives meanwhile
        await bind_pod(*args, **kwargs)

    scheduler.writer.bind = counted  # type: ignore[method-assign]
    first = asyncio.create_task(scheduler.bind("default", "w1", uid="", node_name=node))
    retry = asyncio.create_task(scheduler.bind("default", "w1", uid="", node_name=node))
    await asyncio.sleep(0.01)
    del scheduler._group_writes["default/train"]
    release.set_result(None)
    outcomes = await asyncio.gather(first, retry, return_exceptions=True)
    assert binds == 1
    assert outcomes[0] is None and isinstance(outcomes[1], BindFailed)
    assert "already being bound" in str(outcomes[1])


async def test_podgroup_failed_bind_undoes_the_groups_allocation_and_the_next_pod_allocates() -> None:
    scheduler = make(by_name_cluster(2))
    bound_elsewhere_at_binding(scheduler, "w0", "node-2")
    with pytest.raises(BindFailed, match="already assigned"):
        await scheduler.bind("default", "w0", uid="", node_name="node-0")
    claim = current(scheduler, "train-gpus", "ResourceClaim")
    assert not claim["status"].get("allocation") and not claim["status"].get("reservedFor")
    assert len(scheduler.assume) == 0
    await schedule(scheduler, "w1")
    assert current(scheduler, "train-gpus", "ResourceClaim")["status"]["reservedFor"] == [
        g.group_reference(current(scheduler, "train", "PodGroup"))]


async def test_podgroup_failed_bind_keeps_a_group_reservation_it_did_not_allocate() -> None:
    scheduler = make(by_name_cluster(2))
    await schedule(scheduler, "w0")
    bound_elsewhere_at_binding(scheduler, "w1", "node-2")
    node = current(scheduler, "w0")["spec"]["nodeName"]
    with pytest.raises(BindFailed, match="already assigned"):
        await scheduler.bind("default", "w1", uid="", node_name=node)
    claim = current(scheduler, "train-gpus", "ResourceClaim")
    assert claim["status"]["allocation"] and claim["status"]["reservedFor"] == [
        g.group_reference(current(scheduler, "train", "PodGroup"))]


async def test_podgroup_deleted_group_holds_nothing_in_flight() -> None:
    scheduler = make(by_name_cluster(2))
    await scheduler.filter(current(scheduler, "w0"), NODES)
    assert len(scheduler.assume) == 1
    scheduler.cache.apply("PodGroup", "DELETED", current(scheduler, "train", "PodGroup"))
    assert len(scheduler.assume) == 0
    result = await scheduler.filter(current(scheduler, "w1"), NODES)
    assert set(result.unresolvable.values()) == {'podgroup.scheduling.k8s.io "train" not found'}


async def test_podgroup_gate_off_reserves_for_each_pod_as_before() -> None:
    scheduler = make(by_name_cluster(2), FeatureGates())
    await schedule(scheduler, "w0")
    await schedule(scheduler, "w1")
    reserved = current(scheduler, "train-gpus", "ResourceClaim")["status"]["reservedFor"]
    assert [entry["name"] for entry in reserved] == ["w0", "w1"]
    assert all(entry["resource"] == "pods" and "apiGroup" not in entry for entry in reserved)


def test_podgroup_reservation_rules() -> None:
    pod = g.member("w0", "train", claim_name="c")
    group_entry = {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "train", "uid": "g1"}
    full = {"status": {"reservedFor": [{"resource": "pods", "name": f"p{i}", "uid": f"u{i}"}
                                       for i in range(RESERVED_FOR_MAX - 1)] + [group_entry]}}
    assert reserved_for_pod(full, pod, accept_group=True)
    assert not reserved_for_pod(full, pod, accept_group=False)
    assert reservable(full, pod, consumer_uid="g1", accept_group=True, limit=RESERVED_FOR_MAX)
    assert not reservable(full, pod, consumer_uid=pod["metadata"]["uid"], accept_group=False,
                          limit=RESERVED_FOR_MAX)
    # Same name in another group's namespace is still matched by name only, as upstream does.
    other = g.member("w1", "eval", claim_name="c")
    assert not reserved_for_pod(full, other, accept_group=True)


def test_podgroup_cache_indexes_members_and_rejects_malformed_groups() -> None:
    bad = g.pod_group("bad", claim_name="x")
    bad["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] = "t"
    cache = ClusterCache.from_objects([g.pod_group("train", claim_name="c"), bad,
                                       g.member("w0", "train", claim_name="c"),
                                       g.member("w1", "train", claim_name="c"), g.member("x", None)], ON)
    assert [pod["metadata"]["name"] for pod in cache.pods_in_group("default", "train")] == ["w0", "w1"]
    assert cache.pod_group("default", "bad") is None
    assert cache.stats()["invalid"] == {"PodGroup": 1}
    assert "exactly one of resourceClaimName and resourceClaimTemplateName" in (
        cache.stats()["invalidObjects"][0]["error"])
    cache.apply("Pod", "DELETED", cache.pod("default", "w0"))
    assert [pod["metadata"]["name"] for pod in cache.pods_in_group("default", "train")] == ["w1"]


async def test_podgroup_explain_names_the_group_and_what_blocks_it() -> None:
    scheduler = make(by_name_cluster(3, outsider=True))
    await schedule(scheduler, "w0")
    report = await explain_pod(scheduler, "default", "w1")
    assert report["claims"][0]["sharedBy"] == {"podGroup": "default/train", "pods": 3}
    text = render_text(report)
    assert ("  claim gpus -> default/train-gpus (allocated, claim shared by PodGroup default/train, "
            "3 pods)") in text
    blocked = render_text(await explain_pod(scheduler, "default", "outsider"))
    assert ("  blocked on every node: resourceclaim default/train-gpus is shared by PodGroup default/train: "
            "the pod is not in that PodGroup (pod default/outsider)") in blocked


def test_podgroup_kind_is_watched_only_with_the_gate() -> None:
    assert POD_GROUPS not in watched_kinds(FeatureGates())
    assert watched_kinds(ON) == (*DEFAULT_KINDS, POD_GROUPS)
    assert POD_GROUPS.path == "/apis/scheduling.k8s.io/v1beta1/podgroups" and POD_GROUPS.optional


async def test_podgroup_watch_feeds_the_cache(fake_api, kube) -> None:
    group = g.pod_group("train", claim_name="train-gpus")
    fake_api.seed([group])
    cache = ClusterCache(ON)
    watcher = ClusterWatcher(kube, cache, kinds=watched_kinds(ON))
    await watcher.start()
    try:
        assert await watcher.wait_ready(5)
        watched = cache.pod_group("default", "train")
        assert watched is not None and watched["spec"]["resourceClaims"] == group["spec"]["resourceClaims"]
        fake_api.remove_object("PodGroup", "train", "default")
        for _ in range(200):
            if cache.pod_group("default", "train") is None:
                break
            await asyncio.sleep(0.01)
        assert cache.pod_group("default", "train") is None
    finally:
        await watcher.stop()
