"""The verdict snapshot (extender/plugin/twins.py): nodes that are alike share one search.

The randomized check that answers with the snapshot equal fresh ones is in
test_filtercache_differential.py (test_verdict_snapshot_equals_uncached_filter)."""

from __future__ import annotations

import importlib
from typing import Any

import dra_objects as o
import pytest

from allocator import AllocatedState, Allocator, FeatureGates
from extender.plugin.claimwriter import ClaimWriter
from extender.plugin.filtercache import FilterCache
from extender.plugin.scheduling import Scheduler
from extender.state.assume import AssumeCache
from extender.state.cache import ClusterCache

NODES = ["node-0", "node-1", "node-2", "node-3"]


def make(objs: list[dict[str, Any]]) -> Scheduler:
    cache = ClusterCache.from_objects(objs, FeatureGates())
    assume = AssumeCache()
    assume.attach(cache)
    return Scheduler(cache, assume, ClaimWriter(None, cache), filter_cache=FilterCache(cache, assume))


def workload(objs: list[dict[str, Any]], pods: int = 3, count: int = 1) -> list[dict[str, Any]]:
    for index in range(pods):
        objs += [o.claim(f"c{index}", count=count), o.pod(f"p{index}", [f"c{index}"])]
    return objs


def pod(scheduler: Scheduler, name: str) -> dict[str, Any]:
    found = scheduler.cache.pod("default", name)
    assert found is not None
    return found


@pytest.fixture
def searches(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The nodes the allocator searched, in order."""
    searched: list[str] = []
    original = Allocator.allocate

    def counting(self: Allocator, node: Any, claims: Any) -> Any:
        searched.append(node.name)
        return original(self, node, claims)

    monkeypatch.setattr(Allocator, "allocate", counting)
    return searched


def pooled_cluster() -> list[dict[str, Any]]:
    """Alike nodes whose pools are not named after them."""
    objs = o.cluster(4, 2)
    for raw in objs:
        if raw["kind"] == "ResourceSlice":
            raw["spec"]["pool"]["name"] = "pool-" + raw["spec"]["nodeName"]
    return objs


async def test_alike_nodes_are_searched_once_and_get_their_own_pool_and_node(searches: list[str]) -> None:
    scheduler = make(workload(pooled_cluster()))
    plan = scheduler.planner.plan(pod(scheduler, "p0"))
    verdicts = await scheduler.checker.check_all(plan, NODES, use_cache=True)
    assert searches == ["node-0"]
    assert scheduler.filter_cache is not None and scheduler.filter_cache.stats()["twinHits"] == 3
    for node, verdict in verdicts.items():
        assert verdict.fits and verdict.outcome is not None
        (allocation,) = verdict.outcome.allocations
        assert allocation["devices"]["results"] == [
            {"request": "gpu", "driver": o.DRIVER, "pool": f"pool-{node}", "device": "gpu-0"}]
        assert allocation["nodeSelector"] == {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [node]}]}]}


async def test_nodes_with_other_devices_in_use_are_not_twins(searches: list[str]) -> None:
    objs = workload(o.cluster(4, 2))
    taken = o.claim("taken")
    o.allocate(taken, "node-1", ["gpu-0"])
    scheduler = make([*objs, taken])
    result = await scheduler.filter(pod(scheduler, "p0"), NODES)
    assert result.passed == NODES
    assert searches == ["node-0", "node-1"]  # node-2 and node-3 are node-0's twins
    plan = scheduler.planner.plan(pod(scheduler, "p0"))
    verdict = scheduler.checker.check(plan, "node-1", use_cache=True)
    assert verdict.outcome is not None
    assert verdict.outcome.allocations[0]["devices"]["results"][0]["device"] == "gpu-1"


async def test_failures_are_not_shared(searches: list[str]) -> None:
    scheduler = make(workload(o.cluster(4, 2), count=3))
    result = await scheduler.filter(pod(scheduler, "p0"), NODES)
    assert not result.passed
    assert searches == NODES
    assert "claim default/c0: request gpu: needs 3 devices" in result.unresolvable["node-2"]


async def test_nodes_that_see_a_shared_pool_are_searched_each(searches: list[str]) -> None:
    shared = o.gpu_slice("shared", 2)
    del shared["spec"]["nodeName"]
    shared["spec"]["allNodes"] = True
    scheduler = make(workload([*o.cluster(4, 2), shared]))
    assert (await scheduler.filter(pod(scheduler, "p0"), NODES)).passed == NODES
    assert searches == NODES


async def test_nodes_with_other_declared_features_are_not_twins(searches: list[str]) -> None:
    objs = workload(o.cluster(4, 2))
    for raw in objs:
        if raw["kind"] == "Node" and raw["metadata"]["name"] in ("node-2", "node-3"):
            raw["status"] = {"declaredFeatures": ["ExampleFeature"]}
    scheduler = make(objs)
    assert (await scheduler.filter(pod(scheduler, "p0"), NODES)).passed == NODES
    assert searches == ["node-0", "node-2"]


async def test_a_class_change_is_never_answered_by_an_older_twin(searches: list[str]) -> None:
    scheduler = make(workload(o.cluster(4, 2)))
    assert (await scheduler.filter(pod(scheduler, "p0"), NODES[:2])).passed == NODES[:2]
    scheduler.cache.apply("DeviceClass", "MODIFIED", o.device_class(
        expression='device.driver == "other.example.com"'))
    assert (await scheduler.filter(pod(scheduler, "p0"), NODES[2:])).passed == []
    assert searches == ["node-0", "node-2", "node-3"]


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """The results a moved outcome rewrote for its node, as (driver, pool) of the twin's result."""
    likeness = importlib.import_module("allocator.likeness")  # the package's `likeness` is the function
    rewritten: list[tuple[str, str]] = []
    original = likeness._pool_id

    def counting(result: dict[str, Any]) -> tuple[str, str]:
        rewritten.append(original(result))
        return original(result)

    monkeypatch.setattr(likeness, "_pool_id", counting)
    return rewritten


async def test_a_twins_allocations_are_built_when_first_read(built: list[tuple[str, str]]) -> None:
    scheduler = make(workload(pooled_cluster()))
    plan = scheduler.planner.plan(pod(scheduler, "p0"))
    verdicts = await scheduler.checker.check_all(plan, NODES, use_cache=True)
    assert built == []
    outcome = verdicts["node-2"].outcome
    assert outcome is not None and outcome.allocations is outcome.allocations
    assert built == [(o.DRIVER, "pool-node-0")]
    assert outcome.allocations[0]["devices"]["results"][0]["pool"] == "pool-node-2"


async def test_prioritize_scores_twins_without_building_their_allocations(
        built: list[tuple[str, str]]) -> None:
    objs = workload(pooled_cluster())
    taken = o.claim("taken")
    (result,) = o.allocate(taken, "node-0", ["gpu-0"])["status"]["allocation"]["devices"]["results"]
    result["pool"] = "pool-node-0"
    scheduler = make([*objs, taken])
    p0 = pod(scheduler, "p0")
    assert (await scheduler.filter(p0, NODES)).passed == NODES
    scores = await scheduler.prioritize(p0, NODES)
    assert built == []
    assert scores["node-0"] > scores["node-1"] == scores["node-2"] == scores["node-3"] > 0   # binpack
    plan = scheduler.planner.plan(p0)
    for node in NODES[1:]:
        outcome = scheduler.checker.check(plan, node, use_cache=True).outcome
        assert outcome is not None
        expected = [(r["driver"], r["pool"]) for a in outcome.allocations for r in a["devices"]["results"]]
        assert outcome.result_pools() == set(expected) == {(o.DRIVER, f"pool-{node}")}
        assert outcome.result_count() == len(expected) == 1


def test_alike_nodes_keep_one_likeness_and_other_nodes_their_own() -> None:
    cache = ClusterCache(FeatureGates())
    for name, devices in (("node-1", 2), ("node-2", 2), ("node-3", 3)):
        cache.apply("Node", "ADDED", o.node(name))
        cache.apply("ResourceSlice", "ADDED", o.gpu_slice(name, devices))
    alike = [cache.inventory.node_likeness(cache.node(name), cache.features)[1]   # type: ignore[arg-type]
             for name in ("node-1", "node-2", "node-3")]
    assert alike[0] is not None and alike[0] is alike[1]
    assert alike[2] is not None and alike[2] != alike[0]


@pytest.fixture
def reads_in_use(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """The device keys whose use a twin key read (AllocatedState.allocated_flags), in order."""
    read: list[tuple[Any, ...]] = []
    original = AllocatedState.allocated_flags

    def counting(self: AllocatedState, keys: tuple[Any, ...]) -> tuple[bool, ...]:
        read.append(keys)
        return original(self, keys)

    monkeypatch.setattr(AllocatedState, "allocated_flags", counting)
    return read


def shapes(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pods p1, p2, p3 whose claims are of three shapes (one, two and three devices)."""
    for count in (1, 2, 3):
        objs += [o.claim(f"c{count}", count=count), o.pod(f"p{count}", [f"c{count}"])]
    return objs


def pools_read(reads: list[tuple[Any, ...]]) -> list[str]:
    return [keys[0][1] for keys in reads]


async def test_devices_in_use_are_read_once_per_node_until_its_pool_changes(
        searches: list[str], reads_in_use: list[tuple[Any, ...]]) -> None:
    scheduler = make(shapes(o.cluster(4, 4)))
    assert (await scheduler.filter(pod(scheduler, "p1"), NODES)).passed == NODES
    assert pools_read(reads_in_use) == NODES
    reads_in_use.clear()
    # Another claim shape: a new twin search, but what is in use on each node is known.
    assert (await scheduler.filter(pod(scheduler, "p2"), NODES)).passed == NODES
    assert reads_in_use == [] and searches == ["node-0", "node-0"]

    # A device of node-1 allocated (written) and one of node-2 in flight: only those are read again,
    # and neither node is taken for its old twins any more.
    taken = o.claim("taken")
    scheduler.cache.apply("ResourceClaim", "ADDED", o.allocate(taken, "node-1", ["gpu-0", "gpu-1"]))
    flying = scheduler.cache.claim("default", "c1")
    assert flying is not None
    scheduler.assume.reserve(flying, o.allocate(o.claim("c1"), "node-2", ["gpu-3", "gpu-2"])["status"]
                             ["allocation"], "someone")
    searches.clear()
    reads_in_use.clear()
    result = await scheduler.filter(pod(scheduler, "p3"), NODES)
    assert result.passed == ["node-0", "node-3"]
    assert pools_read(reads_in_use) == ["node-1", "node-2"]
    searches.clear()
    reads_in_use.clear()
    assert (await scheduler.filter(pod(scheduler, "p2"), NODES)).passed == NODES
    assert reads_in_use == [] and searches == ["node-1", "node-2"]
    plan = scheduler.planner.plan(pod(scheduler, "p2"))
    for node, free in (("node-1", ["gpu-2", "gpu-3"]), ("node-2", ["gpu-0", "gpu-1"])):
        verdict = scheduler.checker.check(plan, node, use_cache=True)
        assert verdict.outcome is not None
        assert sorted(r["device"] for r in verdict.outcome.allocations[0]["devices"]["results"]) == free


async def test_the_warm_up_reads_devices_in_use_for_the_first_filter(
        reads_in_use: list[tuple[Any, ...]]) -> None:
    taken = o.claim("taken")
    scheduler = make([*shapes(o.cluster(4, 4)), o.allocate(taken, "node-3", ["gpu-0"])])
    filter_cache = scheduler.filter_cache
    assert filter_cache is not None
    for name in NODES:
        node = scheduler.cache.node(name)
        assert node is not None
        filter_cache.warm(node)
    assert pools_read(reads_in_use) == NODES
    reads_in_use.clear()
    plan = scheduler.planner.plan(pod(scheduler, "p3"))
    verdicts = await scheduler.checker.check_all(plan, NODES, use_cache=True)
    assert reads_in_use == []
    assert [name for name, verdict in verdicts.items() if verdict.fits] == NODES
    outcome = verdicts["node-3"].outcome
    assert outcome is not None
    devices = sorted(result["device"] for result in outcome.allocations[0]["devices"]["results"])
    assert devices == ["gpu-1", "gpu-2", "gpu-3"]
