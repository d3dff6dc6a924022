"""Leader election through a coordination.k8s.io/v1 Lease, so only one replica runs the controllers.

Like client-go's leaderelection: a candidate takes the Lease when it does not exist, is released
(empty holder), or has not been renewed for leaseDurationSeconds *as observed on our own clock*
(the holder's renewTime is only compared with itself, so clock skew between replicas does not
matter). Every write carries the resourceVersion we read, so two candidates racing for the same
Lease cannot both win: the loser gets 409 Conflict. The leader renews every retry period and steps
down when it could not renew within the renew deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from extender.controllers.clock import Clock, format_micro_time

log = logging.getLogger(__name__)


class LeaseClient(Protocol):
    async def get(self, path: str) -> dict: ...
    async def create(self, path: str, body: dict) -> dict: ...
    async def update(self, path: str, body: dict) -> dict: ...


def _status(err: BaseException) -> int | None:
    status = getattr(err, "status", None)
    return status if isinstance(status, int) else None


class LeaderElector:
    def __init__(
        self,
        client: LeaseClient,
        clock: Clock,
        *,
        identity: str,
        namespace: str,
        name: str,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        on_started: Callable[[], Awaitable[None]],
        on_stopped: Callable[[], Awaitable[None]],
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
        self._lease: dict | None = None
        self._observed: tuple[Any, Any] | None = None  # (holderIdentity, renewTime) last seen
        self._observed_at = 0.0
        self._last_renewed = 0.0
        self.is_leader = False
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"leader-election-{self._name}")

    async def stop(self, *, release: bool = True) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
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
        except asyncio.CancelledError:
            raise
        except Exception as err:
            log.warning("lease %s/%s: %s", self._namespace, self._name, err)
            acquired = False
        if acquired:
            self._last_renewed = now
            if not self.is_leader:
                log.info("%s is now the leader (lease %s/%s)", self.identity, self._namespace, self._name)
                self.is_leader = True
                await self._on_started()
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
            return True
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        record = (holder, spec.get("renewTime"))
        if record != self._observed:
            self._observed, self._observed_at = record, now
        duration = spec.get("leaseDurationSeconds") or self._duration
        if holder and holder != self.identity and now < self._observed_at + duration:
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
        return True

    def _spec(self, now: float, *, transitions: int) -> dict[str, Any]:
        stamp = format_micro_time(now)
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self._duration),
            "acquireTime": stamp,
            "renewTime": stamp,
            "leaseTransitions": transitions,
        }

    async def _step_down(self) -> None:
        self.is_leader = False
        await self._on_stopped()

    async def _release(self) -> None:
        """Hand the Lease over at once instead of letting others wait for it to expire."""
        lease = self._lease
        if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
            return
        now = self._clock.now()
        spec = {
            **lease["spec"],
            "holderIdentity": "",
            "leaseDurationSeconds": 1,
            "renewTime": format_micro_time(now),
            "acquireTime": format_micro_time(now),
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
