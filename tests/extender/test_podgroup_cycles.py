"""PodGroup scheduling cycles: kube-scheduler filters and reserves every pod of a PodGroup before it binds
any, so a pod's filter holds what it allocates for the group's cycle (extender.plugin.holds): a later pod
of the group sharing one of its claims reuses that allocation, devices held by the group are taken for
its other pods, and nothing of a gang that cannot fit binds.

The claims here are the pods' own or plainly shared ones (not the PodGroup's workload claims, see
test_podgroups.py), with DRAWorkloadResourceClaims off (PodGroups not watched: the pods' group is known
by name only) and on (upstream's integration suite runs with every gate on)."""

from __future__ import annotations

import asyncio
from typing import Any

import dra_objects as o
import podgroup_objects as g
import pytest
from test_bind_races import LostStatusWrite

from allocator import FeatureGates
from extender.kube.client import ApiError
from extender.plugin.claimwriter import ClaimWriter
from extender.plugin.scheduling import BindFailed, Scheduler
from extender.plugin.verdicts import CANNOT_ALLOCATE, NOT_AVAILABLE
from extender.state.assume import AssumeCache
from extender.state.cache import ClusterCache

GATES = [pytest.param(FeatureGates(), id="workload-claims-off"),
         pytest.param(FeatureGates({"DRAWorkloadResourceClaims": True}), id="workload-claims-on")]
GANG = "gang:default/train"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def member(name: str, claims: list[str], group: str | None = "train") -> dict[str, Any]:
    pod = o.pod(name, claims)
    if group is not None:
        pod["spec"]["schedulingGroup"] = {"podGroupName": group}
    return pod


def group_without_claims(name: str = "train", min_count: int = 2) -> dict[str, Any]:
    group = g.pod_group(name, min_count=min_count)
    group["spec"].pop("resourceClaims")
    return group


def make(objs: list[dict[str, Any]], features: FeatureGates, *, clock: Clock | None = None) -> Scheduler:
    cache = ClusterCache.from_objects([*objs, group_without_claims()], features)
    assume = AssumeCache(clock=clock) if clock is not None else AssumeCache()
    assume.attach(cache)
    return Scheduler(cache, assume, ClaimWriter(None, cache), hold_ttl_s=30.0)


def current(scheduler: Scheduler, name: str, kind: str = "Pod") -> dict:
    raw = scheduler.cache.raw(kind, f"default/{name}")
    assert raw is not None
    return raw


def owners(scheduler: Scheduler) -> dict[str, str]:
    return {entry["claim"]: entry["podUID"] for entry in scheduler.assume.describe()}


def uid(scheduler: Scheduler, name: str) -> str:
    return str(current(scheduler, name)["metadata"]["uid"])


def one_device_on_node_0() -> list[dict[str, Any]]:
    """upstream's incompatible-node-selectors: worker-0 has the only device, worker-1 none."""
    return [o.device_class(), o.node("node-0"), o.gpu_slice("node-0", 1), o.node("node-1")]


@pytest.mark.parametrize("features", GATES)
async def test_claim_shared_on_incompatible_nodes_is_not_available_there(features: FeatureGates) -> None:
    """Upstream's PodGroup/incompatible-node-selectors: pod 0 may only run on node-0 (the one device),
    pod 1 only on node-1. Pod 1's filter sees the claim's allocation held for pod 0 on node-0: not
    available on node-1 (not allocated afresh there)."""
    scheduler = make([*one_device_on_node_0(), o.claim("shared"),
                      member("w0", ["shared"]), member("w1", ["shared"])], features)
    first = await scheduler.filter(current(scheduler, "w0"), ["node-0"], brief=True)
    assert first.passed == ["node-0"]
    assert owners(scheduler) == {"default/shared": GANG}
    second = await scheduler.filter(current(scheduler, "w1"), ["node-1"], brief=True)
    assert second.passed == [] and second.unresolvable == {"node-1": NOT_AVAILABLE}
    # Nothing binds (kube-scheduler fails the whole cycle); a pod outside a PodGroup in pod 1's place
    # would have been told the devices are missing, not the claim's node.
    alone = make([*one_device_on_node_0(), o.claim("shared"), member("solo", ["shared"], group=None)],
                 features)
    solo = await alone.filter(current(alone, "solo"), ["node-1"], brief=True)
    assert solo.unresolvable == {"node-1": CANNOT_ALLOCATE}


@pytest.mark.parametrize("features", GATES)
async def test_claim_shared_on_a_compatible_node_is_written_once_for_both(features: FeatureGates) -> None:
    scheduler = make([*o.cluster(2, 1), o.claim("shared"),
                      member("w0", ["shared"]), member("w1", ["shared"])], features)
    first = await scheduler.filter(current(scheduler, "w0"), ["node-0", "node-1"], brief=True)
    assert len(first.passed) == 1
    node = first.passed[0]
    held = scheduler.assume.pending(current(scheduler, "shared", "ResourceClaim")["metadata"]["uid"])
    assert held is not None and held.pod_uid == GANG
    held_devices = held.allocation["devices"]["results"]
    second = await scheduler.filter(current(scheduler, "w1"), ["node-0", "node-1"], brief=True)
    assert second.passed == [node]  # the held allocation's node only
    assert set(second.unresolvable.values()) == {NOT_AVAILABLE}

    store = scheduler.writer._store
    update_status = store.update_claim_status
    allocating = 0

    async def counted(claim: dict) -> dict:
        nonlocal allocating
        before = current(scheduler, "shared", "ResourceClaim")
        allocating += not (before.get("status") or {}).get("allocation")
        await asyncio.sleep(0.01)  # a slow API server: the other bind arrives meanwhile
        return await update_status(claim)

    store.update_claim_status = counted  # type: ignore[method-assign]
    # The pod filtered last binds first, both at once.
    await asyncio.gather(scheduler.bind("default", "w1", uid="", node_name=node),
                         scheduler.bind("default", "w0", uid="", node_name=node))
    claim = current(scheduler, "shared", "ResourceClaim")
    assert allocating == 1
    assert claim["status"]["allocation"]["devices"]["results"] == held_devices  # the allocation held
    assert sorted(entry["name"] for entry in claim["status"]["reservedFor"]) == ["w0", "w1"]
    assert all(entry["resource"] == "pods" for entry in claim["status"]["reservedFor"])
    assert {current(scheduler, name)["spec"]["nodeName"] for name in ("w0", "w1")} == {node}
    assert len(scheduler.assume) == 0 and scheduler.holds.holding() == set()


@pytest.mark.parametrize("features", GATES)
async def test_members_competing_for_too_few_devices_fail_at_filter(features: FeatureGates) -> None:
    """Two pods of a gang with a claim each, one device in the cluster: the second pod's filter finds the
    device held for the first, so the gang's cycle fails and nothing binds (before, both filters passed
    and one bind failed after the other had bound: a partial gang)."""
    scheduler = make([*o.cluster(1, 1), o.claim("a"), o.claim("b"),
                      member("w0", ["a"]), member("w1", ["b"])], features)
    first = await scheduler.filter(current(scheduler, "w0"), ["node-0"], brief=True)
    assert first.passed == ["node-0"]
    second = await scheduler.filter(current(scheduler, "w1"), ["node-0"], brief=True)
    assert second.passed == [] and second.unresolvable == {"node-0": CANNOT_ALLOCATE}
    # The next cycle: pod 0 filtered again drops its own hold first and takes the device again.
    again = await scheduler.filter(current(scheduler, "w0"), ["node-0"], brief=True)
    assert again.passed == ["node-0"] and list(owners(scheduler)) == ["default/a"]
    assert (await scheduler.filter(current(scheduler, "w1"), ["node-0"], brief=True)).passed == []


@pytest.mark.parametrize("features", GATES)
async def test_pod_outside_the_group_finds_the_claim_being_allocated(features: FeatureGates) -> None:
    scheduler = make([*o.cluster(2, 1), o.claim("shared"), member("w0", ["shared"]),
                      member("solo", ["shared"], group=None), member("stranger", ["shared"], group="eval"),
                      group_without_claims("eval")], features)
    assert (await scheduler.filter(current(scheduler, "w0"), ["node-0", "node-1"], brief=True)).passed
    for name in ("solo", "stranger"):
        result = await scheduler.filter(current(scheduler, name), ["node-0", "node-1"], brief=True)
        assert result.passed == []
        assert set(result.unresolvable.values()) == {
            "resource claim default/shared is in the process of being allocated"}


async def test_held_claim_outlives_the_pod_that_made_it_while_another_member_shares_it() -> None:
    scheduler = make([*o.cluster(2, 2), o.claim("shared"), o.claim("own"),
                      member("w0", ["shared", "own"]), member("w1", ["shared"])], FeatureGates())
    assert (await scheduler.filter(current(scheduler, "w0"), ["node-0", "node-1"], brief=True)).passed
    assert (await scheduler.filter(current(scheduler, "w1"), ["node-0", "node-1"], brief=True)).passed
    assert set(owners(scheduler)) == {"default/shared", "default/own"}
    scheduler.cache.apply("Pod", "DELETED", current(scheduler, "w0"))
    assert owners(scheduler) == {"default/shared": GANG}  # pod 1 still shares it; pod 0's own is free
    scheduler.cache.apply("Pod", "DELETED", current(scheduler, "w1"))
    assert owners(scheduler) == {} and scheduler.holds.holding() == set()


async def test_held_claims_expire_with_the_hold() -> None:
    clock = Clock()
    scheduler = make([*o.cluster(1, 1), o.claim("a"), o.claim("b"),
                      member("w0", ["a"]), member("w1", ["b"])], FeatureGates(), clock=clock)
    assert (await scheduler.filter(current(scheduler, "w0"), ["node-0"], brief=True)).passed
    assert scheduler.holds.holding() == {uid(scheduler, "w0")}
    clock.now += 31  # kube-scheduler gave up on the gang and never bound pod 0
    assert len(scheduler.assume) == 0 and scheduler.holds.holding() == set()
    assert (await scheduler.filter(current(scheduler, "w1"), ["node-0"], brief=True)).passed == ["node-0"]


async def test_deleted_podgroup_frees_what_its_cycle_held() -> None:
    scheduler = make([*o.cluster(1, 1), o.claim("a"), member("w0", ["a"])],
                     FeatureGates({"DRAWorkloadResourceClaims": True}))
    assert (await scheduler.filter(current(scheduler, "w0"), ["node-0"], brief=True)).passed
    assert owners(scheduler) == {"default/a": GANG}
    scheduler.cache.apply("PodGroup", "DELETED", current(scheduler, "train", "PodGroup"))
    assert len(scheduler.assume) == 0


async def test_failed_first_bind_of_a_shared_claim_lets_the_other_member_allocate() -> None:
    """The bind writing the shared allocation fails for good: its entry goes, and the other pod's bind
    (which waited for it) allocates the claim itself on its node."""
    scheduler = make([*o.cluster(2, 1), o.claim("shared"),
                      member("w0", ["shared"]), member("w1", ["shared"])], FeatureGates())
    node = (await scheduler.filter(current(scheduler, "w0"), ["node-0", "node-1"], brief=True)).passed[0]
    second = await scheduler.filter(current(scheduler, "w1"), ["node-0", "node-1"], brief=True)
    assert second.passed == [node]
    store = scheduler.writer._store
    update_status = store.update_claim_status
    calls = 0

    async def refused_once(claim: dict) -> dict:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.01)
        if calls == 1:
            raise ApiError(422, "Invalid", "refused")
        return await update_status(claim)

    store.update_claim_status = refused_once  # type: ignore[method-assign]
    outcomes = await asyncio.gather(scheduler.bind("default", "w0", uid="", node_name=node),
                                    scheduler.bind("default", "w1", uid="", node_name=node),
                                    return_exceptions=True)
    assert isinstance(outcomes[0], Exception) and outcomes[1] is None
    claim = current(scheduler, "shared", "ResourceClaim")
    assert [entry["name"] for entry in claim["status"]["reservedFor"]] == ["w1"]
    assert len(scheduler.assume) == 0


async def test_lost_answer_of_the_shared_write_keeps_the_claim_from_being_allocated_twice() -> None:
    """The first bind's write of the shared allocation reaches the API server but its answer is lost: the
    other pod's bind (which waited for it) must not allocate the claim again; once the watch shows the
    write, that pod's retry only adds its reservation."""
    scheduler = make([*o.cluster(2, 1), o.claim("shared"),
                      member("w0", ["shared"]), member("w1", ["shared"])], FeatureGates())
    node = (await scheduler.filter(current(scheduler, "w0"), ["node-0", "node-1"], brief=True)).passed[0]
    assert (await scheduler.filter(current(scheduler, "w1"), ["node-0", "node-1"], brief=True)).passed
    writer = scheduler.writer
    assert isinstance(writer, ClaimWriter)
    writer._resolve_budget = 0.2
    store = LostStatusWrite(writer._store)
    writer._store = store
    first, second = await asyncio.gather(scheduler.bind("default", "w0", uid="", node_name=node),
                                         scheduler.bind("default", "w1", uid="", node_name=node),
                                         return_exceptions=True)
    assert isinstance(first, BindFailed) and store.written is not None
    assert isinstance(second, BindFailed) and "is in the process of being allocated" in str(second)
    assert list(owners(scheduler)) == ["default/shared"]  # its devices stay counted
    writer._store = store.inner
    written = store.written
    written["metadata"] = {**written["metadata"], "resourceVersion": "99"}
    scheduler.cache.apply("ResourceClaim", "MODIFIED", written)
    assert len(scheduler.assume) == 0
    await scheduler.bind("default", "w1", uid="", node_name=node)
    claim = current(scheduler, "shared", "ResourceClaim")
    assert claim["status"]["allocation"] == written["status"]["allocation"]
    assert [entry["name"] for entry in claim["status"]["reservedFor"]] == ["w0", "w1"]
