"""Timed-out nodes are "not known", not "does not fit"; one filter stays within its overall budget.

Time is a stepped fake clock: the allocator stub "spends" its whole deadline on a slow node by moving
the clock forward and raising AllocationTimeout, as the real search would after that much wall time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import dra_objects as o
import pytest

from allocator import AllocationOutcome, Allocator, FeatureGates, Node, ResourceClaim
from allocator.errors import AllocationTimeout
from extender.plugin import planning, scheduling
from extender.plugin.claimwriter import ClaimWriter
from extender.plugin.filtercache import FilterCache
from extender.plugin.scheduling import Scheduler
from extender.plugin.verdicts import TIMED_OUT_MESSAGE
from extender.state.assume import AssumeCache
from extender.state.cache import ClusterCache


class SlowNodes:
    """A fake clock plus the set of nodes whose search runs out of time, and a log of searches."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slow: set[str] = set()
        self.searches: list[tuple[str, float]] = []  # (node, deadline_s the search was given)

    def clock(self) -> float:
        return self.now


@pytest.fixture
def slow_nodes(monkeypatch: pytest.MonkeyPatch) -> SlowNodes:
    state = SlowNodes()

    class SteppedAllocator(Allocator):
        def allocate(self, node: Node, claims: Sequence[ResourceClaim]) -> AllocationOutcome:
            state.searches.append((node.name, self.deadline_s))
            if node.name in state.slow:
                state.now += self.deadline_s
                raise AllocationTimeout(TIMED_OUT_MESSAGE)
            return super().allocate(node, claims)

    monkeypatch.setattr(planning, "Allocator", SteppedAllocator)
    monkeypatch.setattr(scheduling, "Allocator", SteppedAllocator)
    return state


def make(state: SlowNodes, objs: list[dict[str, Any]], **options: Any) -> Scheduler:
    cache = ClusterCache.from_objects(objs, FeatureGates())
    assume = AssumeCache()
    assume.attach(cache)
    return Scheduler(cache, assume, ClaimWriter(None, cache), clock=state.clock, **options)


def pod_of(scheduler: Scheduler) -> dict:
    pod = scheduler.cache.pod("default", "p")
    assert pod is not None
    return pod


# node-0 and node-1 have 2 devices each, node-2 has 1; the pod needs 2.
OBJECTS = [
    o.device_class(),
    *(o.node(f"node-{i}") for i in range(3)),
    o.gpu_slice("node-0", 2),
    o.gpu_slice("node-1", 2),
    o.gpu_slice("node-2", 1),
    o.claim("c", count=2),
    o.pod("p", ["c"]),
]
NODES = ["node-0", "node-1", "node-2"]


async def test_a_timed_out_node_is_a_resolvable_failure_when_another_node_fits(slow_nodes: SlowNodes) -> None:
    slow_nodes.slow = {"node-1"}
    scheduler = make(slow_nodes, OBJECTS)
    result = await scheduler.filter(pod_of(scheduler), NODES)
    assert result.error == ""
    assert result.passed == ["node-0"]
    assert result.failed == {"node-1": TIMED_OUT_MESSAGE}
    assert list(result.unresolvable) == ["node-2"]  # too few devices: a real "does not fit"


async def test_no_fitting_node_and_a_timeout_is_an_error_naming_the_count(slow_nodes: SlowNodes) -> None:
    slow_nodes.slow = {"node-0", "node-1"}
    scheduler = make(slow_nodes, OBJECTS)
    result = await scheduler.filter(pod_of(scheduler), NODES)
    # An Error sends the pod to kube-scheduler's backoff, not to the unschedulable queue.
    assert (result.passed, result.failed, result.unresolvable) == ([], {}, {})
    assert result.error == f"{TIMED_OUT_MESSAGE} on 2 of 3 node(s) and no other node fits"


async def test_no_fitting_node_and_no_timeout_stays_unschedulable(slow_nodes: SlowNodes) -> None:
    scheduler = make(slow_nodes, [*OBJECTS[:-2], o.claim("c", count=3), o.pod("p", ["c"])])
    result = await scheduler.filter(pod_of(scheduler), NODES)
    assert result.error == "" and result.passed == [] and set(result.unresolvable) == set(NODES)


async def test_timed_out_outcomes_are_never_cached(slow_nodes: SlowNodes) -> None:
    slow_nodes.slow = {"node-1"}
    # node-1 unlike node-0, so that no twin answers it (extender/plugin/twins.py): it must be searched again.
    objs = [o.gpu_slice("node-1", 2, models=["H100"]) if raw is OBJECTS[5] else raw for raw in OBJECTS]
    cache = ClusterCache.from_objects(objs, FeatureGates())
    assume = AssumeCache()
    assume.attach(cache)
    filter_cache = FilterCache(cache, assume)
    scheduler = Scheduler(cache, assume, ClaimWriter(None, cache), clock=slow_nodes.clock,
                          filter_cache=filter_cache)
    await scheduler.filter(pod_of(scheduler), NODES)
    assert filter_cache.stats()["entries"] == 2  # node-0 and node-2, not the timed-out node-1
    slow_nodes.slow = set()
    slow_nodes.searches.clear()
    result = await scheduler.filter(pod_of(scheduler), NODES)
    assert [node for node, _ in slow_nodes.searches] == ["node-1"]  # the others came from the cache
    assert result.passed == ["node-0", "node-1"] and result.failed == {}


async def test_one_filter_stays_within_its_budget_however_many_nodes_are_slow(slow_nodes: SlowNodes) -> None:
    names = [f"node-{i}" for i in range(8)]
    slow_nodes.slow = set(names[1:])
    scheduler = make(slow_nodes, [*o.cluster(8, 1), o.claim("c"), o.pod("p", ["c"])],
                     node_deadline_s=1.0, filter_deadline_s=2.5)
    result = await scheduler.filter(pod_of(scheduler), names)
    # node-0 fits at once; node-1 and node-2 use their full second; node-3 only gets what is left; the
    # budget is then spent and node-4.. are timed out without a search.
    assert slow_nodes.searches == [("node-0", 1.0), ("node-1", 1.0), ("node-2", 1.0), ("node-3", 0.5)]
    assert slow_nodes.now == pytest.approx(2.5)
    assert result.passed == ["node-0"]
    assert result.failed == dict.fromkeys(names[1:], TIMED_OUT_MESSAGE)
    assert result.unresolvable == {} and result.error == ""


async def test_budget_spent_before_any_node_fits_is_an_error(slow_nodes: SlowNodes) -> None:
    names = [f"node-{i}" for i in range(5)]
    slow_nodes.slow = {"node-0", "node-1"}
    scheduler = make(slow_nodes, [*o.cluster(5, 1), o.claim("c"), o.pod("p", ["c"])],
                     node_deadline_s=1.0, filter_deadline_s=2.0)
    result = await scheduler.filter(pod_of(scheduler), names)
    assert [node for node, _ in slow_nodes.searches] == ["node-0", "node-1"]
    assert result.error == f"{TIMED_OUT_MESSAGE} on 5 of 5 node(s) and no other node fits"


async def test_each_filter_has_its_own_budget(slow_nodes: SlowNodes) -> None:
    slow_nodes.slow = {"node-0"}
    scheduler = make(slow_nodes, OBJECTS, node_deadline_s=1.0, filter_deadline_s=1.0)
    first = await scheduler.filter(pod_of(scheduler), NODES)
    assert first.error == f"{TIMED_OUT_MESSAGE} on 3 of 3 node(s) and no other node fits"  # 1, 2 unchecked
    slow_nodes.slow = set()
    second = await scheduler.filter(pod_of(scheduler), NODES)
    assert second.passed == ["node-0", "node-1"]


async def test_holding_filter_reports_timed_out_nodes_as_resolvable(slow_nodes: SlowNodes) -> None:
    slow_nodes.slow = {"node-1"}
    scheduler = make(slow_nodes, OBJECTS, hold_devices=True)
    result = await scheduler.filter(pod_of(scheduler), NODES)
    assert result.passed == ["node-0"]
    assert result.failed == {"node-1": TIMED_OUT_MESSAGE} and list(result.unresolvable) == ["node-2"]


async def test_preempt_drops_candidates_whose_check_timed_out(slow_nodes: SlowNodes) -> None:
    used = o.allocate(o.claim("used"), "node-0", ["gpu-0"], [{"resource": "pods", "name": "x", "uid": "x"}])
    other = o.allocate(o.claim("other"), "node-1", ["gpu-0"], [{"resource": "pods", "name": "y", "uid": "y"}])
    slow_nodes.slow = {"node-1"}
    holders = [o.pod(name, [claim]) for name, claim in (("x", "used"), ("y", "other"))]
    for holder in holders:
        holder["metadata"]["uid"] = holder["metadata"]["name"]
    scheduler = make(slow_nodes, [*o.cluster(2, 1), used, other, *holders, o.claim("c"), o.pod("p", ["c"])])
    victims = {node: {"Pods": [{"UID": uid}], "NumPDBViolations": 0} for node, uid in (("node-0", "x"),
                                                                                      ("node-1", "y"))}
    assert await scheduler.preempt(pod_of(scheduler), victims) == {"node-0": victims["node-0"]}
