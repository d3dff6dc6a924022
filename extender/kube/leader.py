"""Leader election through a coordination.k8s.io/v1 Lease, so only one replica allocates (answers the
extender verbs) and runs the controllers.

Like client-go's leaderelection: a candidate takes the Lease when it does not exist, is released
(empty holder), or has not been renewed for leaseDurationSeconds *as observed on our own clock*
(the holder's renewTime is only compared with itself, so clock skew between replicas does not
matter). Every write carries the resourceVersion we read, so two candidates racing for the same
Lease cannot both win: the loser gets 409 Conflict. The leader renews every retry period and steps
down when it could not renew within the renew deadline.

`leading()` is what writers consult before each write: it turns false as soon as the renew deadline
has passed since the last successful renewal *was sent*, whether or not the election loop has run
since (its attempt may hang on a slow API server). Another candidate takes over only a whole lease
duration after it last saw the record change, which is after that renewal was sent: so the old leader
has stopped writing before the new one starts (the margin is lease duration minus renew deadline, 5 s
with client-go's defaults, for the two clocks' rates and this process's own pauses).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, Protocol

from common.tasks import cancel_and_wait

log = logging.getLogger(__name__)

# client-go's defaults (and kube-scheduler's --leader-elect-* defaults).
LEASE_DURATION_S = 15.0
RENEW_DEADLINE_S = 10.0
RETRY_PERIOD_S = 2.0


class LeaseClock(Protocol):
    """Durations only: `now()` is compared with itself, never with the Lease's timestamps."""

    def now(self) -> float: ...
    async def sleep(self, seconds: float) -> None: ...


class MonotonicClock:
    """The clock of a real election: monotonic, so a step of the wall clock changes no deadline."""

    def now(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


def default_identity() -> str:
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def format_micro_time(epoch: float) -> str:
    """metav1.MicroTime, as Leases use it."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseClient(Protocol):
    async def get(self, path: str) -> dict[str, Any]: ...
    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]: ...
    async def update(self, path: str, body: dict[str, Any]) -> dict[str, Any]: ...


async def _guarded(callback: Callable[[], Awaitable[None]], what: str) -> None:
    """A leadership callback that fails is logged: the election (and the follower) must keep running,
    or this replica would silently never lead again."""
    try:
        await callback()
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("%s failed", what)


def _status(err: BaseException) -> int | None:
    status = getattr(err, "status", None)
    return status if isinstance(status, int) else None


class LeaderElector:
    def __init__(
        self,
        client: LeaseClient,
        clock: LeaseClock,
        *,
        identity: str,
        namespace: str,
        name: str,
        lease_duration: float = LEASE_DURATION_S,
        renew_deadline: float = RENEW_DEADLINE_S,
        retry_period: float = RETRY_PERIOD_S,
        on_started: Callable[[], Awaitable[None]],
        on_stopped: Callable[[], Awaitable[None]],
        wall: Callable[[], float] = time.time,
    ) -> None:
        if not identity:
            raise ValueError("leader election needs a non-empty identity")
        if not lease_duration > renew_deadline > retry_period > 0:
            raise ValueError("leader election needs lease duration > renew deadline > retry period > 0")
        self.identity = identity
        self._client = client
        self._clock = clock
        self._collection = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        self._path = f"{self._collection}/{name}"
        self._namespace = namespace
        self._name = name
        self._duration = lease_duration
        self._renew_deadline = renew_deadline
        self._retry = retry_period
        self._on_started = on_started
        self._on_stopped = on_stopped
        self._wall = wall
        self._lease: dict[str, Any] | None = None
        # The last attempt's error (not "held by another": a failure to read or write the Lease), and
        # how many attempts in a row failed so: /readyz reports an election that cannot work.
        self.last_error = ""
        self.failures = 0
        self.holder = ""  # the holder seen at the last attempt
        self._observed: tuple[Any, Any] | None = None  # (holderIdentity, renewTime) last seen
        self._observed_at = 0.0
        self._last_renewed = 0.0
        self.is_leader = False
        self._task: asyncio.Task[None] | None = None

    @property
    def lease(self) -> str:
        return f"{self._namespace}/{self._name}"

    def leading(self) -> bool:
        """Leader, and the renew deadline not passed since the last successful renewal was sent."""
        return self.is_leader and self._clock.now() - self._last_renewed < self._renew_deadline

    def describe(self) -> dict[str, Any]:
        return {"lease": self.lease, "identity": self.identity, "leader": self.leading(),
                "holder": self.holder or None, "failingAttempts": self.failures,
                "lastError": self.last_error or None}

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"leader-election-{self._name}")

    async def stop(self, *, release: bool = True) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)
        if self.is_leader:
            await self._step_down()
            if release:
                await self._release()

    async def _run(self) -> None:
        while True:
            await self.try_acquire_or_renew()
            await self._clock.sleep(self._retry)

    async def try_acquire_or_renew(self) -> bool:
        """One attempt; flips leadership (and runs the callbacks) as a result. Returns is_leader."""
        now = self._clock.now()
        try:
            acquired = await self._attempt(now)
            self.failures, self.last_error = 0, ""
        except asyncio.CancelledError:
            raise
        except Exception as err:
            log.warning("lease %s/%s: %s", self._namespace, self._name, err)
            acquired = False
            self.failures += 1
            self.last_error = str(err) or type(err).__name__
        if acquired:
            self._last_renewed = now
            if not self.is_leader:
                log.info("%s is now the leader (lease %s/%s)", self.identity, self._namespace, self._name)
                self.is_leader = True
                await _guarded(self._on_started, f"lease {self.lease}: starting to lead")
        elif self.is_leader and self._clock.now() - self._last_renewed >= self._renew_deadline:
            log.warning(
                "%s could not renew lease %s/%s in time, stepping down",
                self.identity,
                self._namespace,
                self._name,
            )
            await self._step_down()
        return self.is_leader

    async def _attempt(self, now: float) -> bool:
        try:
            lease = await self._client.get(self._path)
        except Exception as err:
            if _status(err) != 404:
                raise
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self._name, "namespace": self._namespace},
                "spec": self._spec(now, transitions=0),
            }
            self._lease = await self._client.create(self._collection, body)
            self.holder = self.identity
            return True
        # A change counts as seen when the answer arrived: the read may have waited long in the API
        # server's queue, and the holder may have renewed just before it was served.
        seen = self._clock.now()
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        self.holder = holder
        record = (holder, spec.get("renewTime"))
        if record != self._observed:
            self._observed, self._observed_at = record, seen
        duration = spec.get("leaseDurationSeconds") or self._duration
        if holder and holder != self.identity and seen < self._observed_at + duration:
            return False
        transitions = spec.get("leaseTransitions") or 0
        taking_over = holder != self.identity
        new_spec = self._spec(now, transitions=transitions + (1 if taking_over else 0))
        if not taking_over:
            new_spec["acquireTime"] = spec.get("acquireTime") or new_spec["acquireTime"]
        body = {**lease, "spec": new_spec}
        try:
            self._lease = await self._client.update(self._path, body)
        except Exception as err:
            if _status(err) == 409:
                return False  # someone else wrote first
            raise
        self._observed = (self.identity, new_spec["renewTime"])
        self._observed_at = now
        self.holder = self.identity
        return True

    def _spec(self, now: float, *, transitions: int) -> dict[str, Any]:
        stamp = format_micro_time(self._wall())
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self._duration),
            "acquireTime": stamp,
            "renewTime": stamp,
            "leaseTransitions": transitions,
        }

    async def _step_down(self) -> None:
        self.is_leader = False
        await _guarded(self._on_stopped, f"lease {self.lease}: stepping down")

    async def _release(self) -> None:
        """Hand the Lease over at once instead of letting others wait for it to expire."""
        lease = self._lease
        if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
            return
        stamp = format_micro_time(self._wall())
        spec = {
            **lease["spec"],
            "holderIdentity": "",
            "leaseDurationSeconds": 1,
            "renewTime": stamp,
            "acquireTime": stamp,
        }
        try:
            self._lease = await self._client.update(self._path, {**lease, "spec": spec})
        except Exception as err:
            log.warning(
                "releasing lease %s/%s failed (others take over when it expires): %s",
                self._namespace,
                self._name,
                err,
            )


# A followed holder's renewal counts for its Lease duration minus this margin: what our polls of the
# Lease may lag behind its renewals, so we stop writing before a new holder may begin.
FOLLOW_MARGIN_S = 5.0
FOLLOW_POLL_S = 1.0


class LeaseFollower:
    """Follows a Lease another process of this pod competes for (second-scheduler mode: the pod's own
    kube-scheduler, whose identity is `<hostname>_<uuid>`), never writing it.

    While a holder of this pod keeps renewing it, `leading()` is true; it turns false once the Lease's
    duration minus FOLLOW_MARGIN_S has passed since the renewal, before another candidate may take the
    Lease over (a whole duration after it saw that renewal). A renewal is dated no later than the start
    of the read before the one that showed it (that read still saw the old record), so slow answers only
    make us stop earlier. Each holder identity is a term of its own: a new identity (this pod's
    scheduler restarted), or following again after a gap, stops and starts again, so the fence runs.
    """

    def __init__(self, client: LeaseClient, clock: LeaseClock, *, holder_prefix: str, namespace: str,
                 name: str, poll_s: float = FOLLOW_POLL_S, on_started: Callable[[], Awaitable[None]],
                 on_stopped: Callable[[], Awaitable[None]]) -> None:
        if not holder_prefix:
            raise ValueError("following a Lease needs the holder identity's prefix")
        self.holder_prefix = holder_prefix
        self._client = client
        self._clock = clock
        self._path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
        self.lease = f"{namespace}/{name}"
        self._poll_s = poll_s
        self._on_started = on_started
        self._on_stopped = on_stopped
        self._record: tuple[Any, Any] | None = None  # (holderIdentity, renewTime) last seen
        self._last_read_at: float | None = None  # when the last successful read was sent
        self._renewed_at = float("-inf")  # no later than the followed holder's last renewal
        self._deadline = LEASE_DURATION_S - FOLLOW_MARGIN_S
        self._following = ""  # the holder identity followed now
        self.holder = ""
        self.failures = 0
        self.last_error = ""
        self._task: asyncio.Task[None] | None = None

    @property
    def is_following(self) -> bool:
        return bool(self._following)

    def leading(self) -> bool:
        return self.is_following and self.leading_at(self._clock.now())

    def leading_at(self, now: float) -> bool:
        return now - self._renewed_at < self._deadline

    def describe(self) -> dict[str, Any]:
        return {"lease": self.lease, "followedHolderPrefix": self.holder_prefix, "leader": self.leading(),
                "holder": self.holder or None, "failingAttempts": self.failures,
                "lastError": self.last_error or None}

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"lease-follower-{self.lease}")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)
        await self._stop_following("stopping")

    async def _run(self) -> None:
        while True:
            await self.observe()
            await self._clock.sleep(self._poll_s)

    async def observe(self) -> bool:
        """One read of the Lease; flips following (and runs the callbacks) as a result."""
        sent = self._clock.now()
        if self.is_following and not self.leading_at(sent):
            await self._stop_following(f"no renewal seen for {self._deadline:g} s")
        try:
            lease = await self._client.get(self._path)
        except asyncio.CancelledError:
            raise
        except Exception as err:
            self.failures += 1
            self.last_error = str(err) or type(err).__name__
            if _status(err) != 404:
                log.warning("lease %s: %s", self.lease, err)
            return self.is_following
        self.failures, self.last_error = 0, ""
        spec = lease.get("spec") or {}
        self.holder = str(spec.get("holderIdentity") or "")
        record = (self.holder, spec.get("renewTime"))
        ours = self.holder.startswith(self.holder_prefix)
        # Only a change seen between two reads is a renewal: a record as found at the first read may be
        # the last one of a scheduler of this pod that has since died.
        if ours and self._last_read_at is not None and record != self._record:
            self._renewed_at = self._last_read_at
            duration = spec.get("leaseDurationSeconds")
            if isinstance(duration, int) and duration > 0:
                self._deadline = max(duration - FOLLOW_MARGIN_S, duration / 2)
        self._record, self._last_read_at = record, sent
        if self.is_following and self.holder != self._following:
            await self._stop_following(f"held by {self.holder}" if self.holder else "released")
        now = self._clock.now()
        if ours and not self.is_following and self.leading_at(now):
            log.info("lease %s: held by %s, this pod's scheduler", self.lease, self.holder)
            self._following = self.holder
            await _guarded(self._on_started, f"lease {self.lease}: following {self.holder}")
        elif self.is_following and not self.leading_at(now):
            await self._stop_following(f"no renewal seen for {self._deadline:g} s")
        return self.is_following

    async def _stop_following(self, why: str) -> None:
        if not self.is_following:
            return
        log.warning("lease %s: no longer following %s (%s)", self.lease, self._following, why)
        self._following = ""
        await _guarded(self._on_stopped, f"lease {self.lease}: no longer following")
