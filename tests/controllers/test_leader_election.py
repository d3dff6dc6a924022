from __future__ import annotations

import asyncio

from ctrl_objects import claim, consumer, pod, resource_slice, taint
from prometheus_client import CollectorRegistry

from extender.kube.leader import LeaderElector

LEASE = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/controllers"


class Candidate:
    def __init__(self, env, identity: str) -> None:
        self.started = 0
        self.stopped = 0
        self.elector = LeaderElector(
            env.client,
            env.clock,
            identity=identity,
            namespace="kube-system",
            name="controllers",
            on_started=self._started,
            on_stopped=self._stopped,
            wall=env.clock.now,
        )

    async def _started(self) -> None:
        self.started += 1

    async def _stopped(self) -> None:
        self.stopped += 1

    async def attempt(self) -> bool:
        return await self.elector.try_acquire_or_renew()


def lease(env) -> dict:
    return env.server.get_object("Lease", "controllers", "kube-system")["spec"]


async def test_release_hands_over_at_once(env) -> None:
    a, b = Candidate(env, "a"), Candidate(env, "b")
    assert await a.attempt()
    assert not await b.attempt()
    assert lease(env)["holderIdentity"] == "a"
    assert lease(env)["leaseDurationSeconds"] == 15
    await a.elector.stop()
    assert (a.started, a.stopped) == (1, 1)
    assert lease(env)["holderIdentity"] == ""
    assert await b.attempt()
    assert (lease(env)["holderIdentity"], lease(env)["leaseTransitions"]) == ("b", 1)
    assert b.started == 1


async def test_crashed_leader_is_replaced_after_lease_duration(env) -> None:
    a, b = Candidate(env, "a"), Candidate(env, "b")
    assert await a.attempt()
    assert not await b.attempt()  # b observes a's record now
    env.clock.advance(2)
    assert await a.attempt()  # a renews: b restarts its count
    renewed = lease(env)["renewTime"]
    env.clock.advance(14)
    # 16 s since b first looked, but the record changed meanwhile: b's own clock restarts now, so
    # clock skew between replicas never matters.
    assert not await b.attempt()
    env.clock.advance(14)
    assert not await b.attempt()
    env.clock.advance(1)  # a is gone: 15 s without a change as b observes it
    assert await b.attempt()
    assert lease(env)["holderIdentity"] == "b"
    assert lease(env)["renewTime"] != renewed
    # a comes back: it cannot renew any more and steps down once its renew deadline has passed.
    assert not await a.attempt()
    assert (a.started, a.stopped) == (1, 1)


async def test_leader_steps_down_when_it_cannot_renew(env) -> None:
    a = Candidate(env, "a")
    assert await a.attempt()
    env.server.fail_next("get", "leases", count=10, status=503)
    env.clock.advance(5)
    assert await a.attempt()  # still within the renew deadline
    env.clock.advance(5)
    assert not await a.attempt()
    assert (a.started, a.stopped) == (1, 1)


async def test_racing_candidates_only_one_wins(env) -> None:
    a, b = Candidate(env, "a"), Candidate(env, "b")
    assert await a.attempt()
    await a.elector.stop()
    results = await asyncio.gather(a.attempt(), b.attempt())
    assert sorted(results) == [False, True]


async def test_controllers_hand_over_between_two_instances(env) -> None:
    now = env.clock.now()
    p1, p2 = pod("p1", claims=["c1"]), pod("p2", claims=["c2"])
    env.server.seed(
        [
            resource_slice("s1", {"gpu-0": [], "gpu-1": []}),
            p1,
            p2,
            claim("c1", devices=["gpu-0"], reserved_for=[consumer(p1)]),
            claim("c2", devices=["gpu-1"], reserved_for=[consumer(p2)]),
        ]
    )
    first = await env.start(leader_elect=True)
    second = await env.start(leader_elect=True, registry=CollectorRegistry())
    electors = {}
    for name, controllers in (("first", first), ("second", second)):
        electors[name] = LeaderElector(env.client, env.clock, identity=name, namespace="kube-system",
                                       name="controllers", on_started=controllers.lead,
                                       on_stopped=controllers.stand_down, wall=env.clock.now)
    assert (first.active, second.active) == (False, False), "nothing acts before it leads"
    assert await electors["first"].try_acquire_or_renew()
    assert not await electors["second"].try_acquire_or_renew()
    await env.settle()
    assert (first.active, second.active) == (True, False)
    env.server.put_object(resource_slice("s1", {"gpu-0": [taint("broken", added=now)], "gpu-1": []}))
    await env.settle()
    assert env.pod_names() == {"default/p2"}
    assert [path for verb, path in env.client.calls if verb == "delete"] == [
        "/api/v1/namespaces/default/pods/p1"
    ]
    await electors["first"].stop()  # releases the Lease
    assert not first.active
    assert await electors["second"].try_acquire_or_renew()
    assert second.active
    env.server.put_object(resource_slice("s1", {"gpu-0": [], "gpu-1": [taint("broken", added=now)]}))
    await env.settle()
    assert env.pod_names() == set()
    assert lease(env)["holderIdentity"] == "second"


async def test_leading_ends_at_the_renew_deadline_before_the_loop_notices(env) -> None:
    a = Candidate(env, "a")
    assert await a.attempt()
    assert a.elector.leading()
    env.clock.advance(9.9)
    assert a.elector.leading()
    env.clock.advance(0.2)  # no attempt ran meanwhile (it may hang on a slow API server)
    assert a.elector.is_leader and not a.elector.leading()


async def test_failing_attempts_are_counted_for_readiness(env) -> None:
    a = Candidate(env, "a")
    env.server.fail_next("get", "leases", count=2, status=403, message="leases is forbidden")
    assert not await a.attempt()
    assert not await a.attempt()
    assert a.elector.failures == 2 and "forbidden" in a.elector.last_error
    assert await a.attempt()
    assert a.elector.failures == 0 and a.elector.describe()["holder"] == "a"
