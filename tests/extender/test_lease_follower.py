"""--follow-scheduler-lease (second-scheduler mode): the verbs allocate while this pod's kube-scheduler
holds its Lease, after a fence when it takes over, and stop before another pod's scheduler may begin."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest
from fakeapi import FakeApiServer
from test_leader_verbs import bind, config, eventually, get, replica  # noqa: F401 (config: the fixture)

from extender.kube.leader import LeaderElector, LeaseFollower
from extender.options import LeaderOptions, OptionsError
from extender.plugin.claimwriter import FINALIZER

PATH = "/apis/coordination.k8s.io/v1/namespaces/dra-extender/leases/dra-scheduler"


class ApiError(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"{status} from the API server")
        self.status = status


class Leases:
    """The Lease as kube-scheduler's election writes it; `fail` makes reads fail, `answer_delay_s` makes
    an answer (taken when the read is served, at once) arrive that much later."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.spec: dict[str, Any] | None = None
        self.fail = False
        self.answer_delay_s = 0.0
        self.renewals = 0

    def hold(self, holder: str, duration: int = 15) -> None:
        self.renewals += 1
        self.spec = {"holderIdentity": holder, "leaseDurationSeconds": duration,
                     "renewTime": f"2026-12-06T08:00:{self.renewals:02d}.000000Z"}

    async def get(self, path: str) -> dict[str, Any]:
        assert path == PATH
        if self.fail:
            raise ApiError(503)
        if self.spec is None:
            raise ApiError(404)
        answer = {"metadata": {"name": "dra-scheduler", "namespace": "dra-extender"}, "spec": dict(self.spec)}
        self.clock.t += self.answer_delay_s
        return answer

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        raise AssertionError("a follower never writes the Lease")

    update = create


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def now(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(0)


class Follower:
    def __init__(self) -> None:
        self.clock = Clock()
        self.leases = Leases(self.clock)
        self.events: list[str] = []
        self.follower = LeaseFollower(self.leases, self.clock, holder_prefix="pod-a_",
                                      namespace="dra-extender", name="dra-scheduler",
                                      on_started=self._started, on_stopped=self._stopped)

    async def _started(self) -> None:
        self.events.append("started")

    async def _stopped(self) -> None:
        self.events.append("stopped")

    async def observe(self, after_s: float = 1.0) -> bool:
        self.clock.t += after_s
        return await self.follower.observe()

    async def following(self, holder: str = "pod-a_1") -> None:
        """Reads at 101 and 102 with a renewal between them: following, the renewal dated 101."""
        self.leases.hold(holder)
        await self.observe()
        self.leases.hold(holder)
        assert await self.observe()


async def test_follows_only_a_renewal_seen_while_polling() -> None:
    f = Follower()
    assert not await f.observe()  # no Lease yet
    f.leases.hold("pod-a_1")
    # Found as it is: the record of a scheduler of this pod that may have died since.
    assert not await f.observe()
    f.leases.hold("pod-a_1")
    assert await f.observe()
    assert f.events == ["started"] and f.follower.leading()


async def test_stops_writing_before_another_scheduler_may_take_over() -> None:
    f = Follower()
    await f.following()
    # The renewal happened after the read at 101 was served; another candidate may take over 15 s after
    # it saw it (116 at the earliest); we stop 10 s after the read before the one that showed it.
    f.clock.t = 110.9
    assert f.follower.leading()
    f.clock.t = 111.0
    assert not f.follower.leading(), "writes stop at the deadline, before the next poll runs"
    assert not await f.observe(0.0)
    assert f.events == ["started", "stopped"]


async def test_a_slow_answer_only_makes_us_stop_earlier() -> None:
    f = Follower()
    await f.following()
    f.leases.answer_delay_s = 8.0  # the read sent at 103 is served at once, its answer arrives at 111
    await f.observe()
    f.leases.answer_delay_s = 0.0
    renewed_at = 103.1  # just after that read was served: this pod's scheduler renews, then dies
    f.leases.hold("pod-a_1")
    await f.observe()  # sent at 112, it shows the renewal
    takeover = renewed_at + 15  # another pod's scheduler, seeing that renewal at once
    f.clock.t = takeover - 0.1
    assert not f.follower.leading()


async def test_another_holder_or_a_release_ends_following_at_once() -> None:
    for successor in ("pod-b_7", ""):
        f = Follower()
        await f.following()
        f.leases.hold(successor)
        assert not await f.observe(0.5)
        assert f.events == ["started", "stopped"]


async def test_a_new_identity_of_this_pod_is_a_new_term() -> None:
    f = Follower()
    await f.following("pod-a_1")
    f.leases.hold("pod-a_2")  # this pod's scheduler restarted and took the Lease again
    assert await f.observe()
    assert f.events == ["started", "stopped", "started"], "a fence between the two holders"


async def test_following_again_after_a_gap_is_a_new_term() -> None:
    f = Follower()
    await f.following()
    f.leases.fail = True
    for _ in range(8):
        await f.observe()
    assert f.follower.leading(), "a failed read keeps following until the deadline"
    assert f.follower.failures == 8 and "503" in f.follower.last_error
    f.leases.fail = False
    f.leases.hold("pod-a_1")  # renewed again (the other pod may have led in between)
    await f.observe(10.0)
    assert f.events == ["started", "stopped"], "the deadline ended the term before anything was read"
    f.leases.hold("pod-a_1")
    assert await f.observe()
    assert f.events == ["started", "stopped", "started"]


async def test_the_deadline_follows_the_leases_own_duration() -> None:
    f = Follower()
    f.leases.hold("pod-a_1", duration=30)
    await f.observe()
    f.leases.hold("pod-a_1", duration=30)
    assert await f.observe()
    f.clock.t = 101 + 24.9
    assert f.follower.leading()
    f.clock.t = 101 + 25.0
    assert not f.follower.leading()


async def test_a_failing_callback_does_not_stop_the_follower() -> None:
    f = Follower()

    async def broken() -> None:
        raise RuntimeError("controllers could not start")

    f.follower._on_started = broken
    await f.following()
    assert f.follower.is_following
    f.leases.hold("pod-b_1")
    assert not await f.observe()


class SlowLeaseServer:
    """A Lease whose next read waits in the API server's queue, the holder renewing meanwhile."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.spec = {"holderIdentity": "A", "leaseDurationSeconds": 15, "renewTime": "r0"}
        self.queued_s = 0.0

    async def get(self, path: str) -> dict[str, Any]:
        if self.queued_s:
            self.clock.t += self.queued_s
            self.spec = {**self.spec, "renewTime": "r1"}  # A renews just before the read is served
        return {"metadata": {"resourceVersion": "1"}, "spec": dict(self.spec)}

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        raise AssertionError("B never finds the Lease missing")

    async def update(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.spec = body["spec"]
        return body


async def test_a_candidate_dates_a_change_by_the_answer_not_the_request() -> None:
    clock = Clock()
    clock.t = 0.0
    server = SlowLeaseServer(clock)

    async def nothing() -> None:
        pass

    candidate = LeaderElector(server, clock, identity="B", namespace="ns", name="l",
                              on_started=nothing, on_stopped=nothing)
    assert not await candidate.try_acquire_or_renew()
    clock.t, server.queued_s = 2.0, 19.0  # served at 21, A renewed at 19 and may write until 29
    assert not await candidate.try_acquire_or_renew()
    server.queued_s = 0.0
    clock.t = 23.0
    assert not await candidate.try_acquire_or_renew(), "A may still be writing"
    clock.t = 36.0
    assert await candidate.try_acquire_or_renew()


def test_options_refuse_two_deciders_and_a_malformed_lease() -> None:
    with pytest.raises(OptionsError, match="--no-leader-elect-verbs"):
        LeaderOptions(enabled=True, follow_scheduler_lease="dra-extender/dra-scheduler")
    with pytest.raises(OptionsError, match="--follow-scheduler-lease: expected NAMESPACE/NAME, got 'x'"):
        LeaderOptions(follow_scheduler_lease="x")
    LeaderOptions(enabled=True, verbs=False, follow_scheduler_lease="dra-extender/dra-scheduler")


def hold(fake_api: FakeApiServer, holder: str, renewal: int) -> None:
    fake_api.put_object({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "dra-scheduler", "namespace": "dra-extender"},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15,
                 "renewTime": f"2026-12-06T08:00:{renewal:02d}.000000Z"}})


async def test_the_sidecar_allocates_only_while_its_scheduler_leads_and_fences_first(
        fake_api: FakeApiServer, config: str) -> None:  # noqa: F811 (the fixture imported above)
    following = LeaderOptions(follow_scheduler_lease="dra-extender/dra-scheduler")
    own = f"{socket.gethostname()}_1"
    hold(fake_api, "other-pod_9", 1)
    async with replica(config, "", following) as app:
        await eventually(lambda: asyncio.sleep(0, app.cluster.cache.ready))
        # A standby is ready (rollouts and the PodDisruptionBudget count it) but its verbs refuse.
        status, _ = await get(app, "/readyz")
        assert status == 200
        assert ("this pod's kube-scheduler does not hold the Lease dra-extender/dra-scheduler"
                in await bind(app, "p0", "node-0"))
        # The other pod's extender left a claim half-written; then this pod's scheduler takes over.
        claim = fake_api.get_object("ResourceClaim", "c1", "default")
        claim["metadata"]["finalizers"] = [FINALIZER]
        fake_api.put_object(claim)
        hold(fake_api, own, 2)

        async def allocating() -> bool:
            return app.scheduler.authority.term is not None

        await eventually(allocating, timeout_s=10)
        assert FINALIZER not in (fake_api.get_object("ResourceClaim", "c1", "default")["metadata"].get(
            "finalizers") or ()), "fenced before the first allocation"
        assert await bind(app, "p0", "node-0") == ""
        state = (await get(app, "/debug/state"))[1]
        assert '"schedulerLease"' in state and own in state
        hold(fake_api, "other-pod_9", 3)  # the other pod's scheduler (after a release) leads now

        async def stopped() -> bool:
            return app.scheduler.authority.term is None

        await eventually(stopped, timeout_s=10)
        assert "does not hold the Lease" in await bind(app, "p1", "node-0")
