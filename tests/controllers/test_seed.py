"""Long work of the controllers in slices of the event loop: the seed (events that arrive meanwhile held
until it is done, stopped with its term, a failed seed reported without leaving a half-made term
behind) and a DeviceTaintRule's change (later events after it, no eviction while it runs)."""

from __future__ import annotations

import asyncio
import logging

import pytest
from ctrl_objects import DRIVER, claim, consumer, pod, resource_slice, rule, taint

import extender.controllers as controllers_module
from extender.controllers.taint_eviction import TaintEvictionController


def tainted_cluster(env, pods: int = 1) -> list[dict]:
    """Two slices of two pools (node-0 listed first), pods using node-1's tainted gpu-1."""
    now = env.clock.now()
    users = [pod(f"p{index}", claims=[f"c{index}"]) for index in range(pods)]
    env.server.seed([
        resource_slice("s0", {"gpu-0": []}, pool="node-0"),
        resource_slice("s1", {"gpu-1": [taint("broken", added=now)]}),
        *users,
        *(claim(f"c{index}", devices=["gpu-1"], reserved_for=[consumer(user)])
          for index, user in enumerate(users)),
    ])
    return users


def shared_gpu_cluster(env, pods: int) -> None:
    """One untainted slice; `pods` pods, each with its own claim reserved on gpu-0."""
    users = [pod(f"p{index}", claims=[f"c{index}"]) for index in range(pods)]
    claims = [claim(f"c{index}", reserved_for=[consumer(user)]) for index, user in enumerate(users)]
    env.server.seed([resource_slice("s1", {"gpu-0": []}), *users, *claims])


async def test_the_seed_lets_other_work_run_between_its_steps(env, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(controllers_module, "SLICE_S", 0.0)   # a yield after every step
    tainted_cluster(env, pods=3)
    controllers = await env.start(leader_elect=True)
    turns_while_seeding = 0

    async def other_work() -> None:
        nonlocal turns_while_seeding
        while True:
            term = controllers.term
            turns_while_seeding += term is not None and not term.seeded
            await asyncio.sleep(0)

    ticker = asyncio.create_task(other_work())
    await controllers.lead()
    await controllers.seeded()
    ticker.cancel()
    # a step per slice and claim taken, one for the claims' eviction times, one per pod, and the
    # ticker between any two of them
    assert turns_while_seeding >= 2 + 3 + 1 + 3, turns_while_seeding
    await env.settle()
    assert env.pod_names() == set(), "the seed's outcome is the same: every user of gpu-1 goes"


async def test_events_during_the_seed_wait_until_it_is_done(env, monkeypatch: pytest.MonkeyPatch) -> None:
    """The slice s1 loses its taint after the seed took the cache's objects and read s0, before it read
    its own older copy of s1: that copy must not win over the event."""
    monkeypatch.setattr(controllers_module, "SLICE_S", 0.0)
    tainted_cluster(env)
    controllers = await env.start(leader_elect=True)
    await controllers.lead()
    term = controllers.term
    assert term is not None and not term.seeded
    while not term.pools.has_pool((DRIVER, "node-0")):
        await asyncio.sleep(0)
    assert not term.pools.has_pool((DRIVER, "node-1"))
    env.server.put_object(resource_slice("s1", {"gpu-1": []}))   # the taint goes
    assert not term.seeded
    await env.settle()
    assert term.seeded and controllers.state()["seeded"]
    assert env.pod_names() == {"default/p0"}
    assert env.deletes() == []


async def test_a_term_that_ends_during_its_seed_does_nothing(env, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(controllers_module, "SLICE_S", 0.0)
    tainted_cluster(env)
    controllers = await env.start(leader_elect=True)
    await controllers.lead()
    await asyncio.sleep(0)
    assert controllers.term is not None and not controllers.term.seeded
    await controllers.stand_down()
    assert not controllers.active
    await env.settle()
    env.clock.advance(3600)
    await env.settle()
    assert env.pod_names() == {"default/p0"} and env.deletes() == []
    await controllers.lead()   # the next term seeds afresh and acts
    await env.settle()
    assert env.pod_names() == set()


async def test_a_failed_seed_is_reported_and_leaves_no_term(env, monkeypatch: pytest.MonkeyPatch,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    tainted_cluster(env)
    broken = [True]
    seeding = TaintEvictionController.seeding

    def failing(self, rules, pods):
        if broken[0]:
            raise RuntimeError("seed bug")
        return seeding(self, rules, pods)

    monkeypatch.setattr(TaintEvictionController, "seeding", failing)
    await env.settle()
    with pytest.raises(RuntimeError, match="seed bug"):
        await controllers_module.start_controllers(
            env.cache, env.client, controllers_module.ControllerOptions(names=("taint-eviction",)),
            clock=env.clock, registry=env.registry)

    caplog.set_level(logging.ERROR, logger="extender.controllers")
    elected = await env.start(leader_elect=True)
    await elected.lead()
    await env.settle()
    assert not elected.active and elected.state() == {
        "controllers": ["taint-eviction"], "active": False, "leader_election": True}
    assert "their seed failed" in caplog.text
    env.server.put_object(resource_slice("s0", {"gpu-0": []}, pool="node-0", generation=2))
    await env.settle()
    assert env.pod_names() == {"default/p0"}, "events after a failed seed reach no half-made term"
    broken[0] = False
    await elected.lead()
    await env.settle()
    assert env.pod_names() == set()


async def test_a_rule_change_is_worked_through_in_slices_and_nothing_is_evicted_meanwhile(
        env, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rule over the whole driver is added, then deleted while its change is still being worked
    through: the deletion waits for it, and no pod is evicted in between."""
    monkeypatch.setattr(controllers_module, "SLICE_S", 0.0)
    shared_gpu_cluster(env, 3)
    controllers = await env.start()
    term = controllers.term
    env.server.put_object(rule("whole-driver", selector={"driver": DRIVER}, added=env.clock.now()))
    assert term.busy and controllers.state()["busy"]
    for _ in range(4):   # the recomputation and a pod or two: evictions are wished for, not made
        await asyncio.sleep(0)
    env.server.remove_object("DeviceTaintRule", "whole-driver")
    await env.settle()
    assert not term.busy
    assert env.pod_names() == {f"default/p{index}" for index in range(3)} and env.deletes() == []


async def test_a_rule_change_that_fails_midway_leaves_the_term_working(
        env, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    user = pod("p0", claims=["c0"])
    env.server.seed([resource_slice("s1", {"gpu-1": []}), user,
                     claim("c0", devices=["gpu-1"], reserved_for=[consumer(user)])])
    controllers = await env.start()

    def failing(self, previous, new, status):
        yield
        raise RuntimeError("change bug")

    monkeypatch.setattr(TaintEvictionController, "_rule_changed", failing)
    caplog.set_level(logging.ERROR, logger="extender.controllers")
    env.server.put_object(rule("whole-driver", selector={"driver": DRIVER}, effect="None"))
    assert controllers.term.busy
    env.server.put_object(resource_slice("s1", {"gpu-1": [taint("broken", added=env.clock.now())]}))
    await env.settle()
    assert "working through a change failed" in caplog.text
    assert not controllers.term.busy
    assert env.pod_names() == set(), "the slice's taint, held behind the failed change, still evicts"


async def test_a_change_that_starts_as_another_ends_still_holds_the_evictions(
        env, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first change ends and wakes the waiting evictions; the rule's deletion starts a second one
    before they run: they wait for it too (an asyncio.Event, once set, wakes its waiters even if it is
    cleared before they resume)."""
    monkeypatch.setattr(controllers_module, "SLICE_S", 0.0)
    shared_gpu_cluster(env, 3)
    controllers = await env.start()
    term = controllers.term
    settled = term._settled
    set_event = settled.set

    def set_then_delete() -> None:
        if not set_then_delete.done:   # type: ignore[attr-defined]
            set_then_delete.done = True   # type: ignore[attr-defined]
            asyncio.get_running_loop().call_soon(env.server.remove_object, "DeviceTaintRule", "whole-driver")
        set_event()

    set_then_delete.done = False   # type: ignore[attr-defined]
    monkeypatch.setattr(settled, "set", set_then_delete)
    env.server.put_object(rule("whole-driver", selector={"driver": DRIVER}, added=env.clock.now()))
    await env.settle()
    assert env.deletes() == [] and len(env.pod_names()) == 3


async def test_a_stopped_term_lets_go_of_its_indexes(env) -> None:
    """The seed froze the term (the collector never walks it again), so what it held must go by
    reference counting when it ends."""
    tainted_cluster(env, pods=2)
    controllers = await env.start(leader_elect=True)
    await controllers.lead()
    await env.settle()
    term = controllers.term
    assert term.claims.keys() and term.pools.pool_ids()
    await controllers.stand_down()
    assert term.claims.keys() == [] and term.pools.pool_ids() == [] and term.claims.pools() == []


async def test_a_start_cancelled_during_the_seed_leaves_no_term(env, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(controllers_module, "SLICE_S", 0.0)
    tainted_cluster(env, pods=3)
    await env.settle()
    starting = asyncio.create_task(controllers_module.start_controllers(
        env.cache, env.client, controllers_module.ControllerOptions(names=("taint-eviction",)),
        clock=env.clock, registry=env.registry))
    for _ in range(3):
        await asyncio.sleep(0)
    starting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await starting
    controllers = env.cache._subscribers[-1].__self__   # start_controllers never returned it
    assert controllers.term is None and not controllers.active
    env.server.put_object(resource_slice("s0", {"gpu-0": []}, pool="node-0", generation=2))
    assert controllers.term is None, "events reach no half-made term"
    assert env.deletes() == [] and len(env.pod_names()) == 3


async def test_with_the_real_cache_a_slice_changed_during_the_seed_wins(
        cluster_cache_env, monkeypatch: pytest.MonkeyPatch) -> None:
    """As test_events_during_the_seed_wait_until_it_is_done, over ClusterCache's packed snapshot."""
    env = cluster_cache_env
    monkeypatch.setattr(controllers_module, "SLICE_S", 0.0)
    tainted_cluster(env)
    controllers = await env.start(leader_elect=True)
    await controllers.lead()
    term = controllers.term
    while not term.pools.has_pool((DRIVER, "node-0")):
        await asyncio.sleep(0)
    env.server.put_object(resource_slice("s1", {"gpu-1": []}))
    assert not term.seeded
    await env.settle()
    assert env.pod_names() == {"default/p0"} and env.deletes() == []


async def test_a_rule_held_during_the_seed_is_worked_through_after_it(
        env, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(controllers_module, "SLICE_S", 0.0)
    user = pod("p0", claims=["c0"])
    env.server.seed([resource_slice("s1", {"gpu-0": []}), user,
                     claim("c0", reserved_for=[consumer(user)])])
    controllers = await env.start(leader_elect=True)
    await controllers.lead()
    term = controllers.term
    env.server.put_object(rule("whole-driver", selector={"driver": DRIVER}, added=env.clock.now()))
    assert not term.seeded   # the rule is held, its change then made inside the seed's last steps
    await env.settle()
    assert term.seeded and not term.busy
    assert env.pod_names() == set()


async def test_standing_down_during_a_rule_change_stops_it_and_the_waiting_evictions(
        env, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(controllers_module, "SLICE_S", 0.0)
    shared_gpu_cluster(env, 10)
    controllers = await env.start(leader_elect=True)
    await controllers.lead()
    await env.settle()
    term = controllers.term
    env.server.put_object(rule("whole-driver", selector={"driver": DRIVER}, added=env.clock.now()))
    for _ in range(4):   # part of the change: some evictions wished for, waiting for the term
        await asyncio.sleep(0)
    assert term.busy
    await controllers.stand_down()
    assert term._job is None and not controllers.active
    await env.settle()
    env.clock.advance(60)
    await env.settle()
    assert env.deletes() == [] and len(env.pod_names()) == 10
