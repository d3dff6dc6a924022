"""Driver-loss grace period: allocated devices whose pool lost all its ResourceSlices.

When a driver or kubelet restarts, its slices vanish while claims still hold the devices. The
devices stay allocated (claims still hold them, so the allocator's AllocatedState keeps counting
them) and cannot be offered to new claims (they are gone from the Inventory along with their
slices). This tracker reports them as "driver lost" with the time left. If the slices come back in
time, nothing else happens; if not, each affected claim and pod gets an event and, when
configured, the pods are evicted through the shared PodEvictor.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from extender.controllers.claims import (
    ClaimIndex,
    allocated_results,
    consumers,
    pod_claim_keys,
    result_device,
)
from extender.controllers.clock import Clock, TimerHandle
from extender.controllers.evictor import DRIVER_LOST, Eviction, PodEvictor, PodRef, Reason
from extender.controllers.pools import PoolId, PoolIndex
from extender.controllers.taint_eviction import PodLookup
from extender.kube.events import EventRecorder

log = logging.getLogger(__name__)

SOURCE = "driver-loss"
EVENT_REASON = "DeviceDriverLost"


@dataclass
class _LostPool:
    since: float
    deadline: float
    timer: TimerHandle | None = None
    expired: bool = False
    evicting: set[PodRef] = field(default_factory=set)


def _duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes}m{secs}s" if minutes else f"{secs}s"


# How long devices of a pool without ResourceSlices stay reserved unless --driver-loss-grace-period says.
DEFAULT_GRACE_PERIOD_S = 300.0


class DriverLossTracker:
    def __init__(
        self,
        pods: PodLookup,
        clock: Clock,
        recorder: EventRecorder,
        pools: PoolIndex,
        claims: ClaimIndex,
        *,
        grace_period: float = DEFAULT_GRACE_PERIOD_S,
        evictor: PodEvictor | None = None,
    ) -> None:
        if grace_period < 0:
            raise ValueError(f"driver-loss grace period must not be negative, got {grace_period}")
        self._pods = pods
        self._clock = clock
        self._recorder = recorder
        self._pools = pools
        self._grace = grace_period
        self._evictor = evictor  # None: report only, never evict
        self._claims = claims
        self._lost: dict[PoolId, _LostPool] = {}

    def seeding(self) -> Iterator[None]:
        """Initial state from the shared PoolIndex and ClaimIndex (filled already), as steps to run in
        slices."""
        for pool in self._claims.pools():
            self._check(pool)
            yield

    def stop(self) -> None:
        for lost in self._lost.values():
            if lost.timer is not None:
                lost.timer.cancel()

    # ---- events -------------------------------------------------------------------------------

    def on_pools(self, touched: set[PoolId]) -> None:
        for pool in touched:
            self._check(pool)

    # ---- queries ------------------------------------------------------------------------------

    def driver_lost(self) -> list[dict[str, Any]]:
        """For /debug/state and explanations: pools whose driver is gone while claims hold devices."""
        now = self._clock.now()
        report = []
        for pool_id, lost in sorted(self._lost.items()):
            report.append(
                {
                    "driver": pool_id[0],
                    "pool": pool_id[1],
                    "devices": self._claims.devices_in_pool(pool_id),
                    "claims": sorted(self._claims.in_pool(pool_id)),
                    "seconds_left": max(0.0, lost.deadline - now),
                    "expired": lost.expired,
                }
            )
        return report

    def device_count(self) -> int:
        return sum(len(self._claims.devices_in_pool(pool_id)) for pool_id in self._lost)

    # ---- internals ----------------------------------------------------------------------------

    def _check(self, pool_id: PoolId) -> None:
        driver_gone = not self._pools.has_pool(pool_id) and bool(self._claims.in_pool(pool_id))
        lost = self._lost.get(pool_id)
        if driver_gone and lost is None:
            now = self._clock.now()
            lost = self._lost[pool_id] = _LostPool(since=now, deadline=now + self._grace)
            lost.timer = self._clock.call_at(lost.deadline, lambda: self._expire(pool_id))
            log.warning(
                "driver of pool %s/%s is gone while claims hold %s; grace period %s",
                *pool_id,
                ", ".join(self._claims.devices_in_pool(pool_id)),
                _duration(self._grace),
            )
        elif not driver_gone and lost is not None:
            self._recover(pool_id, lost)

    def _recover(self, pool_id: PoolId, lost: _LostPool) -> None:
        del self._lost[pool_id]
        if lost.timer is not None:
            lost.timer.cancel()
        if self._pools.has_pool(pool_id):
            log.info(
                "driver of pool %s/%s is back after %s", *pool_id, _duration(self._clock.now() - lost.since)
            )
        if self._evictor is not None:
            for ref in lost.evicting:
                self._evictor.want(ref, SOURCE, None)

    def _expire(self, pool_id: PoolId) -> None:
        lost = self._lost.get(pool_id)
        if lost is None or lost.expired:
            return
        lost.expired = True
        gone_for = _duration(self._grace)
        action = "; evicting the pods that use them" if self._evictor is not None else ""
        for key in sorted(self._claims.in_pool(pool_id)):
            claim = self._claims.get(key) or {}
            devices = sorted(
                f"{d[0]}/{d[1]}/{d[2]}"
                for r in allocated_results(claim)
                if (d := result_device(r)) is not None and (d[0], d[1]) == pool_id
            )
            message = (
                f"devices {', '.join(devices)} have had no ResourceSlice for {gone_for}: driver lost{action}"
            )
            self._recorder.record(claim, EVENT_REASON, message, event_type="Warning")
            for pod in consumers(claim, self._pods):
                if key not in pod_claim_keys(pod, self._claims):
                    continue
                ref = PodRef.of(pod)
                self._recorder.record(
                    ref.reference(),
                    EVENT_REASON,
                    f"claim {claim['metadata'].get('name')}: {message}",
                    event_type="Warning",
                )
                if self._evictor is not None and (pod.get("spec") or {}).get("nodeName"):
                    lost.evicting.add(ref)
                    self._evictor.want(
                        ref, SOURCE, Eviction(lost.deadline, (Reason(DRIVER_LOST, "/".join(pool_id)),))
                    )
