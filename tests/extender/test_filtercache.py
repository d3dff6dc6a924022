from __future__ import annotations

import asyncio
from typing import Any

import dra_objects as o
import pytest

from allocator import AllocationOutcome, FeatureGates, Node
from extender.plugin.claimwriter import ClaimWriter
from extender.plugin.filtercache import FilterCache
from extender.plugin.nodecheck import NodeChecker
from extender.plugin.scheduling import BindFailed, Scheduler
from extender.plugin.verdicts import CANNOT_ALLOCATE
from extender.state.assume import AssumeCache
from extender.state.cache import ClusterCache

NODES = ["node-0", "node-1", "node-2"]


def make(objs: list[dict[str, Any]], **options: Any) -> Scheduler:
    cache = ClusterCache.from_objects(objs, FeatureGates())
    assume = AssumeCache()
    assume.attach(cache)
    return Scheduler(
        cache, assume, ClaimWriter(None, cache), filter_cache=FilterCache(cache, assume), **options
    )


def workload(pods: int, count: int = 1) -> list[dict[str, Any]]:
    objs = o.cluster(3, 2)
    for index in range(pods):
        objs += [o.claim(f"c{index}", count=count), o.pod(f"p{index}", [f"c{index}"])]
    return objs


def pod(scheduler: Scheduler, name: str) -> dict:
    found = scheduler.cache.pod("default", name)
    assert found is not None
    return found


async def test_pods_with_identical_claims_reuse_outcomes() -> None:
    scheduler = make(workload(3))
    cache = scheduler.filter_cache
    first = await scheduler.filter(pod(scheduler, "p0"), NODES)
    assert cache.stats()["misses"] == 3 and cache.stats()["hits"] == 0
    second = await scheduler.filter(pod(scheduler, "p1"), NODES)
    assert cache.stats()["hits"] == 3
    assert first.passed == second.passed == NODES


async def test_pods_of_a_workload_share_the_fits_verdicts_until_a_nodes_entry_changes() -> None:
    scheduler = make(workload(4, count=2))
    checker = scheduler.checker
    await checker.check_all(scheduler.planner.plan(pod(scheduler, "p0")), NODES, use_cache=True)
    second = await checker.check_all(scheduler.planner.plan(pod(scheduler, "p1")), NODES, use_cache=True)
    third = await checker.check_all(scheduler.planner.plan(pod(scheduler, "p2")), NODES, use_cache=True)
    assert all(second[node] is third[node] and third[node].fits for node in NODES)
    await scheduler.bind("default", "p1", uid=pod(scheduler, "p1")["metadata"]["uid"], node_name="node-1")
    fourth = await checker.check_all(scheduler.planner.plan(pod(scheduler, "p3")), NODES, use_cache=True)
    assert [fourth[node] is third[node] for node in NODES] == [True, False, True]
    assert not fourth["node-1"].fits and "needs 2 devices, 0 match" in fourth["node-1"].message


async def test_a_warm_filter_answers_with_the_verdicts_kept_for_its_claims() -> None:
    """The same pod filtered again gets the very verdicts of its last filter, failures too; a pod with
    other claims of the same spec gets its own failures, and a Node event drops that node's verdicts."""
    scheduler = make([*workload(2, count=2), o.claim("big", count=3), o.pod("pb", ["big"])])
    await scheduler.bind("default", "p1", uid=pod(scheduler, "p1")["metadata"]["uid"], node_name="node-1")
    checker, cache = scheduler.checker, scheduler.filter_cache
    assert cache is not None

    async def verdicts(name: str) -> dict[str, Any]:
        return await checker.check_all(scheduler.planner.plan(pod(scheduler, name)), NODES, use_cache=True)

    await verdicts("p0")
    second, third = await verdicts("p0"), await verdicts("p0")
    assert all(second[node] is third[node] for node in NODES)
    assert [third[node].fits for node in NODES] == [True, False, True]
    assert cache.stats()["verdictHits"] == 3
    await verdicts("pb")  # another spec: its own verdicts, nothing of p0's dropped
    big = await verdicts("pb")
    assert not any(verdict.fits for verdict in big.values()) and "default/big" in big["node-0"].message
    fourth = await verdicts("p0")
    assert all(fourth[node] is third[node] for node in NODES)
    node = scheduler.cache.raw("Node", "node-2")
    scheduler.cache.apply("Node", "MODIFIED", {**node, "metadata": {
        **node["metadata"], "labels": {"zone": "b"}, "resourceVersion": "9"}})
    after = await verdicts("p0")
    assert [after[node] is third[node] for node in NODES] == [True, True, False] and after["node-2"].fits
    assert list(after) == NODES  # in the order asked, although node-2 was looked up after the others


async def test_a_kept_failure_is_never_shown_for_other_claims() -> None:
    scheduler = make(workload(3, count=3))  # 3 devices wanted, 2 per node: every node fails
    for _ in range(3):
        first = await scheduler.filter(pod(scheduler, "p0"), NODES)
    second = await scheduler.filter(pod(scheduler, "p1"), NODES)
    again = await scheduler.filter(pod(scheduler, "p0"), NODES)
    assert scheduler.filter_cache is not None and scheduler.filter_cache.stats()["verdictHits"] == 3
    assert all(message.startswith("claim default/c0:") for message in first.unresolvable.values())
    assert all(message.startswith("claim default/c1:") for message in second.unresolvable.values())
    assert again.unresolvable == first.unresolvable


async def test_a_bind_invalidates_only_its_node() -> None:
    scheduler = make(workload(4, count=2))
    cache = scheduler.filter_cache
    await scheduler.filter(pod(scheduler, "p0"), NODES)
    await scheduler.bind("default", "p0", uid=pod(scheduler, "p0")["metadata"]["uid"], node_name="node-1")
    result = await scheduler.filter(pod(scheduler, "p1"), NODES)
    assert result.passed == ["node-0", "node-2"]
    assert "needs 2 devices, 0 match" in result.failed["node-1"]
    assert cache.stats()["hits"] == 2  # node-0 and node-2 unchanged


async def test_in_flight_holds_invalidate_their_pools() -> None:
    scheduler = make(workload(3, count=2), hold_devices=True)
    held = (await scheduler.filter(pod(scheduler, "p0"), NODES)).passed
    assert len(held) == 1
    result = await scheduler.filter(pod(scheduler, "p1"), NODES)
    assert held[0] not in result.passed and result.passed  # the held node is full for p1
    scheduler.holds.release(pod(scheduler, "p0")["metadata"]["uid"])
    result = await scheduler.filter(pod(scheduler, "p2"), NODES)
    # p1 holds one node now; the node p0 released is free again.
    assert held[0] in result.passed


async def test_failures_name_their_own_claim() -> None:
    scheduler = make(workload(2, count=3))  # 3 devices wanted, 2 per node
    first = await scheduler.filter(pod(scheduler, "p0"), NODES)
    second = await scheduler.filter(pod(scheduler, "p1"), NODES)
    assert all(message.startswith("claim default/c0:") for message in first.unresolvable.values())
    assert all(message.startswith("claim default/c1:") for message in second.unresolvable.values())


async def test_slice_changes_are_seen() -> None:
    scheduler = make(workload(2, count=3))
    assert (await scheduler.filter(pod(scheduler, "p0"), NODES)).passed == []
    scheduler.cache.apply(
        "ResourceSlice",
        "MODIFIED",
        o.gpu_slice("node-2", 3) | {"metadata": {"name": "node-2-gpu", "uid": "s2", "resourceVersion": "2"}},
    )
    assert (await scheduler.filter(pod(scheduler, "p1"), NODES)).passed == ["node-2"]


async def test_bind_never_uses_cached_outcomes() -> None:
    scheduler = make(workload(2))
    await scheduler.filter(pod(scheduler, "p0"), ["node-0"])
    # Someone else takes both devices of node-0 behind the extender's back (no in-flight entry).
    taken = o.allocate(o.claim("other"), "node-0", ["gpu-0", "gpu-1"])
    scheduler.cache.apply("ResourceClaim", "ADDED", taken)
    hits = scheduler.filter_cache.stats()["hits"]
    with pytest.raises(BindFailed, match="no longer fits"):
        await scheduler.bind("default", "p0", uid=pod(scheduler, "p0")["metadata"]["uid"], node_name="node-0")
    assert scheduler.filter_cache.stats()["hits"] == hits


async def test_claim_status_changes_are_never_answered_from_the_cache() -> None:
    scheduler = make(workload(1))
    p0 = pod(scheduler, "p0")
    assert (await scheduler.filter(p0, NODES)).passed == NODES
    # Allocated elsewhere (another scheduler instance) on node-1: only node-1 is possible now.
    claim = scheduler.cache.raw("ResourceClaim", "default/c0")
    allocated = o.allocate({**claim, "metadata": {**claim["metadata"], "resourceVersion": "2"}},
                           "node-1", ["gpu-0"], [{"resource": "pods", "name": "x", "uid": "x"}])
    scheduler.cache.apply("ResourceClaim", "MODIFIED", allocated)
    result = await scheduler.filter(p0, NODES)
    assert result.passed == ["node-1"]
    assert result.unresolvable["node-0"] == "resourceclaim not available on the node"
    # Reserved by the maximum number of consumers.
    consumers = [{"resource": "pods", "name": f"x{i}", "uid": f"x{i}"} for i in range(256)]
    full = {**allocated, "metadata": {**allocated["metadata"], "resourceVersion": "3"},
            "status": {**allocated["status"], "reservedFor": consumers}}
    scheduler.cache.apply("ResourceClaim", "MODIFIED", full)
    assert (await scheduler.filter(p0, NODES)).unresolvable == dict.fromkeys(NODES, "resourceclaim in use")
    # Being deleted.
    deleting = {**full, "metadata": {**full["metadata"], "resourceVersion": "4",
                                     "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    scheduler.cache.apply("ResourceClaim", "MODIFIED", deleting)
    result = await scheduler.filter(p0, NODES)
    assert result.passed == [] and all("being deleted" in m for m in result.unresolvable.values())


def recreated(name: str, count: int) -> dict[str, Any]:
    """`name` deleted and created again: same name, new UID, a later resourceVersion."""
    claim = o.claim(name, count=count)
    claim["metadata"].update(uid=f"{claim['metadata']['uid']}-again", resourceVersion="50")
    return claim


@pytest.mark.parametrize("hold_devices", [False, True])
@pytest.mark.parametrize("was_allocated", [False, True])
@pytest.mark.parametrize("delivery", ["events", "relist"])
async def test_a_recreated_claim_is_never_answered_with_the_old_claims_fits(
        delivery: str, was_allocated: bool, hold_devices: bool) -> None:
    objs = [o.device_class(), o.node("node-0"), o.gpu_slice("node-0", 1), o.node("node-1"),
            o.gpu_slice("node-1", 2)]
    p = o.pod("p", ["c"])
    old = o.claim("c")
    if was_allocated:   # allocated on node-0 and reserved for p by an earlier cycle
        o.allocate(old, "node-0", ["gpu-0"], [{"resource": "pods", "name": "p", "uid": p["metadata"]["uid"]}])
    scheduler = make([*objs, old, p], hold_devices=hold_devices)
    first = await scheduler.filter(pod(scheduler, "p"), ["node-0", "node-1"])
    assert "node-0" in first.passed
    new = recreated("c", count=2)   # node-0 has one device: only node-1 fits the new claim
    if delivery == "events":
        scheduler.cache.apply("ResourceClaim", "DELETED", scheduler.cache.raw("ResourceClaim", "default/c"))
        scheduler.cache.apply("ResourceClaim", "ADDED", new)
    else:   # the deletion was missed; a re-list shows the new claim under the same name
        scheduler.cache.replace("ResourceClaim", [new])
    again = await scheduler.filter(pod(scheduler, "p"), ["node-0", "node-1"])
    assert again.passed == ["node-1"]
    assert again.unresolvable["node-0"] == "claim default/c: request gpu: needs 2 devices, 1 matches"
    uid = p["metadata"]["uid"]
    with pytest.raises(BindFailed, match="no longer fits node node-0"):
        await scheduler.bind("default", "p", uid=uid, node_name="node-0")
    await scheduler.bind("default", "p", uid=uid, node_name="node-1")
    bound = scheduler.cache.claim("default", "c")
    assert bound is not None and bound.uid == new["metadata"]["uid"] and len(scheduler.assume) == 0


async def test_a_claim_recreated_while_filter_yields_gets_verdicts_for_the_new_claim() -> None:
    ticks = [0.0]

    def clock() -> float:  # every reading advances 1 ms: filter yields about every 5 nodes
        ticks[0] += 0.001
        return ticks[0]

    objs = [*o.cluster(30, 1), o.node("big"), o.gpu_slice("big", 2), o.claim("c"), o.pod("p", ["c"])]
    scheduler = make(objs, clock=clock)

    async def recreate_claim() -> None:   # runs at the filter's first yield
        scheduler.cache.apply("ResourceClaim", "DELETED", scheduler.cache.raw("ResourceClaim", "default/c"))
        scheduler.cache.apply("ResourceClaim", "ADDED", recreated("c", count=2))

    task = asyncio.create_task(recreate_claim())
    result = await scheduler.filter(pod(scheduler, "p"), [*(f"node-{i}" for i in range(30)), "big"])
    await task
    assert result.passed == ["big"], "no node may pass for the deleted one-device claim"
    assert len(result.unresolvable) == 30


async def test_an_allocation_appearing_on_a_claim_our_model_rejects_invalidates_cached_outcomes() -> None:
    scheduler = make([*o.cluster(2, 1), o.claim("c"), o.pod("p", ["c"])])
    assert (await scheduler.filter(pod(scheduler, "p"), ["node-0", "node-1"])).passed == ["node-0", "node-1"]
    odd = o.allocate(o.claim("odd"), "node-0", ["gpu-0"], [{"resource": "pods", "name": "x", "uid": "x"}])
    odd["spec"]["devices"]["requests"][0]["exactly"]["count"] = "1"   # beyond our model
    scheduler.cache.apply("ResourceClaim", "ADDED", odd)
    result = await scheduler.filter(pod(scheduler, "p"), ["node-0", "node-1"])
    assert result.passed == ["node-1"] and "(1 in use)" in result.failed["node-0"]


async def test_a_failure_is_reused_for_the_next_pods_claims_under_their_names() -> None:
    objs = workload(3, count=2)
    scheduler = make(objs)
    uncached = Scheduler(*_parts(objs))
    cache = scheduler.filter_cache
    await scheduler.bind("default", "p0", uid=pod(scheduler, "p0")["metadata"]["uid"], node_name="node-1")
    await uncached.bind("default", "p0", uid=pod(uncached, "p0")["metadata"]["uid"], node_name="node-1")
    first = await scheduler.filter(pod(scheduler, "p1"), NODES)
    misses = cache.stats()["misses"]
    second = await scheduler.filter(pod(scheduler, "p2"), NODES)
    assert cache.stats()["misses"] == misses  # node-1's failure was not searched again
    assert "claim default/c1: request" in first.failed["node-1"] + "".join(first.unresolvable.values())
    expected = await uncached.filter(pod(uncached, "p2"), NODES)
    assert (second.passed, second.failed, second.unresolvable) == (
        expected.passed, expected.failed, expected.unresolvable)
    assert "c2" in (second.failed | second.unresolvable)["node-1"]
    assert "c1" not in (second.failed | second.unresolvable)["node-1"]


async def test_a_brief_answer_never_renames_carried_failures(monkeypatch: pytest.MonkeyPatch) -> None:
    scheduler = make(workload(3, count=2))
    await scheduler.bind("default", "p0", uid=pod(scheduler, "p0")["metadata"]["uid"], node_name="node-1")
    await scheduler.filter(pod(scheduler, "p1"), NODES, brief=True)  # node-1's failure, for c1
    renamed: list[dict[str, str]] = []
    original = AllocationOutcome.for_claims

    def counting(self: AllocationOutcome, renames: dict[str, str]) -> AllocationOutcome | None:
        renamed.append(dict(renames))
        return original(self, renames)

    monkeypatch.setattr(AllocationOutcome, "for_claims", counting)
    brief = await scheduler.filter(pod(scheduler, "p2"), NODES, brief=True)
    assert brief.passed and (brief.failed | brief.unresolvable)["node-1"] == CANNOT_ALLOCATE
    assert renamed == []  # carried over from c1 without working out the words for c2
    full = await scheduler.filter(pod(scheduler, "p2"), NODES)
    assert renamed == [{"default/c1": "default/c2"}]
    assert "claim default/c2: request" in (full.failed | full.unresolvable)["node-1"]


async def test_nodes_after_a_yield_are_looked_up_in_the_cache_again() -> None:
    ticks = [0.0]

    def stepped() -> float:  # every reading advances 10 ms: the filter yields after its first search
        ticks[0] += 0.01
        return ticks[0]

    scheduler = make(workload(3, count=2), clock=stepped)
    assert (await scheduler.filter(pod(scheduler, "p0"), ["node-1", "node-2"])).passed == ["node-1", "node-2"]
    # Runs at p2's first yield (after node-0, not cached, was searched): p1 takes node-1's two devices.
    bind = asyncio.create_task(scheduler.bind("default", "p1", uid=pod(scheduler, "p1")["metadata"]["uid"],
                                              node_name="node-1"))
    result = await scheduler.filter(pod(scheduler, "p2"), NODES)
    assert result.passed == ["node-0", "node-2"]  # node-1's outcome from before the yield is stale
    await bind


def _parts(objs: list[dict[str, Any]]) -> tuple[ClusterCache, AssumeCache, ClaimWriter]:
    cache = ClusterCache.from_objects(objs, FeatureGates())
    assume = AssumeCache()
    assume.attach(cache)
    return cache, assume, ClaimWriter(None, cache)


async def test_a_cold_check_looks_each_node_up_in_the_cache_about_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """After a yield only the nodes not reached yet are looked up again, about a stretch's worth: not
    the rest of a 512-node batch at every yield of a check that searches most nodes."""
    ticks = [0.0]

    def stepped() -> float:  # every reading advances 50 us: the check yields every few dozen nodes
        ticks[0] += 0.00005
        return ticks[0]

    objs = [*o.cluster(600, 2), o.claim("c0"), o.pod("p0", ["c0"])]
    scheduler = make(objs, clock=stepped)
    looked_up: list[int] = []
    original = NodeChecker._cached_verdicts

    def counting(self: NodeChecker, plan: Any, names: list[str], node_objects: Any) -> Any:
        looked_up.append(len(names))
        return original(self, plan, names, node_objects)

    monkeypatch.setattr(NodeChecker, "_cached_verdicts", counting)
    names = [f"node-{index}" for index in range(600)]
    assert (await scheduler.filter(pod(scheduler, "p0"), names)).passed == names
    assert len(looked_up) > 5, "the check must have yielded, or this proves nothing"
    assert sum(looked_up) < 1.5 * len(names)


@pytest.fixture
def keyed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The nodes whose filter-cache key was worked out, in order."""
    names: list[str] = []
    original = FilterCache.node_key

    def counting(self: FilterCache, node: Any) -> tuple[int, ...]:
        names.append(node.name)
        return original(self, node)

    monkeypatch.setattr(FilterCache, "node_key", counting)
    return names


async def test_a_shapes_snapshot_looks_up_again_only_the_nodes_that_changed(keyed: list[str]) -> None:
    scheduler = make(workload(3))
    cache = scheduler.filter_cache
    assert cache is not None
    await scheduler.filter(pod(scheduler, "p0"), NODES)
    await scheduler.filter(pod(scheduler, "p0"), NODES)  # the snapshot now has every node
    keyed.clear()
    assert (await scheduler.filter(pod(scheduler, "p1"), NODES)).passed == NODES
    assert keyed == []
    await scheduler.bind("default", "p1", uid=pod(scheduler, "p1")["metadata"]["uid"], node_name="node-1")
    result = await scheduler.filter(pod(scheduler, "p2"), NODES)
    assert result.passed == NODES
    assert set(keyed) == {"node-1"}  # its pool changed: looked up (and searched) again
    keyed.clear()
    labelled = o.node("node-2", {"zone": "b"})
    labelled["metadata"]["resourceVersion"] = "2"
    scheduler.cache.apply("Node", "MODIFIED", labelled)
    await scheduler.filter(pod(scheduler, "p2"), NODES)
    assert set(keyed) == {"node-2"}


async def test_a_cold_filter_works_out_each_nodes_key_once(keyed: list[str]) -> None:
    scheduler = make(workload(3, count=2))
    assert (await scheduler.filter(pod(scheduler, "p0"), NODES)).passed == NODES
    assert sorted(keyed) == sorted(NODES)


def test_a_key_found_missing_is_never_used_after_a_change() -> None:
    scheduler = make(workload(3, count=2))
    cache = scheduler.filter_cache
    assert cache is not None
    plan = scheduler.planner.plan(pod(scheduler, "p0"))
    scheduler.checker.evaluation.prepare(plan)
    assert plan.signature is not None

    def node(name: str) -> Any:
        found = scheduler.cache.node(name)
        assert found is not None
        return found

    def changes() -> list[Any]:
        taken = o.allocate(o.claim("taken"), "node-1", ["gpu-0"])
        labelled = o.node("node-2", {"zone": "b"})
        labelled["metadata"]["resourceVersion"] = "2"
        other_class = o.device_class(expression='device.driver == "other.example.com"')
        return [lambda: scheduler.cache.apply("ResourceClaim", "ADDED", taken),
                lambda: scheduler.cache.apply("Node", "MODIFIED", labelled),
                lambda: scheduler.cache.apply("DeviceClass", "MODIFIED", other_class)]

    for change in changes():
        assert cache.hits_for(plan.signature, NODES, scheduler.cache.node) == []
        before = {name: cache.node_key(node(name)) for name in NODES}
        change()
        after = {name: cache.node_key(node(name)) for name in NODES}
        assert after != before, "the change must move a key, or this proves nothing"
        for name in NODES:
            assert cache.get(plan.signature, node(name))[0] == after[name]

    # A Node kube-scheduler sent (nodeCacheCapable false) is not the cached one: its own key.
    assert cache.hits_for(plan.signature, NODES, scheduler.cache.node) == []
    sent = Node.from_api(o.node("node-0", {"zone": "c"}))
    assert cache.get(plan.signature, sent)[0] == cache.node_key(sent) != cache.node_key(node("node-0"))


async def test_a_change_to_a_pool_every_node_sees_reaches_every_nodes_kept_verdicts() -> None:
    """The pool's nodes are kept as one name until a second node sees it: both must be looked up again."""
    shared = o.gpu_slice("shared", 1)
    del shared["spec"]["nodeName"]
    shared["spec"]["allNodes"] = True
    objs = [o.device_class(), o.node("node-0"), o.node("node-1"), shared,
            o.claim("c0"), o.pod("p0", ["c0"]), o.claim("c1"), o.pod("p1", ["c1"])]
    scheduler = make(objs)
    nodes = ["node-0", "node-1"]
    for name in ("p0", "p1"):   # the same claim shape twice: the second answer comes from the snapshot
        assert (await scheduler.filter(pod(scheduler, name), nodes)).passed == nodes
    await scheduler.bind("default", "p0", uid=pod(scheduler, "p0")["metadata"]["uid"], node_name="node-0")
    after = await scheduler.filter(pod(scheduler, "p1"), nodes)
    assert after.passed == [] and set(after.failed) | set(after.unresolvable) == set(nodes)
