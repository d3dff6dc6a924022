"""Evicting pods: the single place that decides when a pod is deleted and does the API calls.

Controllers say *why* and *when* a pod must go (`want`, one entry per source such as "taint" or
"driver-loss"); the earliest wish wins. The work queue calls `process` when the time comes:
GET the pod (a different UID means the pod was replaced: never touch it), record the event
`DeviceTaintManagerEviction` "Marking for deletion", add the `DisruptionTarget` condition and DELETE
with a UID precondition. Errors propagate so the queue retries with backoff for as long as needed.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from common.objects import metadata_of
from extender.controllers.clock import Clock
from extender.controllers.metrics import ControllerMetrics
from extender.kube.events import EventRecorder, format_time

log = logging.getLogger(__name__)

EVENT_REASON = "DeviceTaintManagerEviction"
CONDITION_TYPE = "DisruptionTarget"
CONDITION_REASON = "DeletionByDeviceTaintManager"
TAINT_MESSAGE = "Device Taint manager: deleting due to NoExecute taint"
DRIVER_LOST_MESSAGE = "Device Taint manager: deleting because the driver of an allocated device is gone"
DRIVER_LOST = "DriverLost"
EVICTED_UIDS_REMEMBERED = 500


class PodClient(Protocol):
    async def get(self, path: str) -> dict: ...
    async def patch(self, path: str, body: Any, content_type: str = ...) -> dict: ...
    async def delete(self, path: str, *, preconditions: dict | None = None) -> dict: ...


class PodRef(NamedTuple):
    namespace: str
    name: str
    uid: str

    @classmethod
    def of(cls, pod: dict) -> PodRef:
        meta = metadata_of(pod)
        return cls(str(meta.get("namespace") or ""), str(meta.get("name") or ""), str(meta.get("uid") or ""))

    def path(self) -> str:
        return f"/api/v1/namespaces/{self.namespace}/pods/{self.name}"

    def reference(self) -> dict[str, str]:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
        }


class Reason(NamedTuple):
    """Why a pod goes: kind "DeviceTaintRule" (name, uid), "ResourceSlice" (name, driver/pool/device
    taint #i) or "DriverLost" (driver/pool, "")."""

    kind: str
    name: str
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.kind} {self.name} {self.detail}".strip()


@dataclass(frozen=True)
class Eviction:
    when: float
    reasons: tuple[Reason, ...]

    @staticmethod
    def combine(evictions: list[Eviction]) -> Eviction | None:
        if not evictions:
            return None
        reasons = sorted({reason for eviction in evictions for reason in eviction.reasons})
        return Eviction(min(e.when for e in evictions), tuple(reasons))


def status_error(err: BaseException) -> int | None:
    status = getattr(err, "status", None)
    return status if isinstance(status, int) else None


class PodEvictor:
    def __init__(
        self,
        client: PodClient,
        recorder: EventRecorder,
        clock: Clock,
        metrics: ControllerMetrics,
        *,
        schedule: Callable[[PodRef, float], None],
        cancel: Callable[[PodRef], bool],
        on_evicted: Callable[[PodRef, Eviction], None] | None = None,
    ) -> None:
        self._client = client
        self._recorder = recorder
        self._clock = clock
        self._metrics = metrics
        self._schedule = schedule
        self._cancel = cancel
        self._on_evicted = on_evicted
        self._wanted: dict[PodRef, dict[str, Eviction]] = {}
        self._evicted: OrderedDict[str, None] = OrderedDict()  # UIDs, bounded LRU
        self._announced: set[PodRef] = set()

    # ---- wishes (synchronous) -----------------------------------------------------------------

    def want(self, ref: PodRef, source: str, eviction: Eviction | None) -> None:
        """Set (or, with None, withdraw) the eviction wanted by `source` for this pod."""
        if ref.uid in self._evicted:
            return
        wishes = self._wanted.get(ref)
        if eviction is None:
            if not wishes or source not in wishes:
                return
            del wishes[source]
            if not wishes:
                del self._wanted[ref]
                self._cancel(ref)
                self._announced.discard(ref)
                self._recorder.record(ref.reference(), EVENT_REASON, "Cancelling deletion")
                return
        else:
            if wishes is None:
                wishes = self._wanted[ref] = {}
            if wishes.get(source) == eviction:
                return
            wishes[source] = eviction
        effective = self.eviction(ref)
        if effective is not None:
            self._schedule(ref, effective.when)

    def forget(self, ref: PodRef) -> None:
        """The pod is gone: drop everything about it, without an event."""
        if self._wanted.pop(ref, None) is not None:
            self._cancel(ref)
        self._announced.discard(ref)

    def eviction(self, ref: PodRef) -> Eviction | None:
        wishes = self._wanted.get(ref)
        return Eviction.combine(list(wishes.values())) if wishes else None

    def pending(self) -> dict[PodRef, Eviction]:
        return {ref: ev for ref in self._wanted if (ev := self.eviction(ref)) is not None}

    def was_evicted(self, uid: str) -> bool:
        return uid in self._evicted

    # ---- work (called by the queue) -----------------------------------------------------------

    async def process(self, ref: PodRef) -> float | None:
        eviction = self.eviction(ref)
        if eviction is None or ref.uid in self._evicted:
            return None
        if eviction.when > self._clock.now():
            return eviction.when
        try:
            pod = await self._client.get(ref.path())
        except Exception as err:
            if status_error(err) == 404:
                self._done(ref)
                return None
            raise
        if metadata_of(pod).get("uid") != ref.uid:
            log.info("pod %s/%s was replaced (UID %s gone), not evicting the new one", *ref)
            self._done(ref)
            return None
        if not metadata_of(pod).get("deletionTimestamp") and not await self._delete(
            ref, pod, eviction
        ):
            self._done(ref)  # deleted by someone else meanwhile: not our eviction, no metrics
            return None
        latency = max(0.0, self._clock.now() - eviction.when)
        log.info(
            "evicted pod %s/%s (%s) %.3fs after its eviction time: %s",
            ref.namespace,
            ref.name,
            ref.uid,
            latency,
            ", ".join(map(str, eviction.reasons)),
            extra={"pod": f"{ref.namespace}/{ref.name}", "duration": round(latency, 3)},
        )
        self._metrics.pod_deletions.inc()
        self._metrics.pod_deletion_latency.observe(latency)
        self._done(ref)
        self._remember(ref.uid)
        if self._on_evicted is not None:
            self._on_evicted(ref, eviction)
        return None

    async def _delete(self, ref: PodRef, pod: dict, eviction: Eviction) -> bool:
        """Condition, then DELETE; False when the pod vanished before we could delete it."""
        if ref not in self._announced:
            self._announced.add(ref)
            self._recorder.record(ref.reference(), EVENT_REASON, "Marking for deletion")
        only_driver_lost = all(reason.kind == DRIVER_LOST for reason in eviction.reasons)
        condition = {
            "type": CONDITION_TYPE,
            "status": "True",
            "reason": CONDITION_REASON,
            "message": DRIVER_LOST_MESSAGE if only_driver_lost else TAINT_MESSAGE,
        }
        conditions = (pod.get("status") or {}).get("conditions") or []
        if not any(_same_condition(existing, condition) for existing in conditions):
            condition["lastTransitionTime"] = format_time(self._clock.now())
            merged = [c for c in conditions if c.get("type") != CONDITION_TYPE] + [condition]
            meta = metadata_of(pod)
            # uid and resourceVersion make the merge patch conditional: a replaced pod or a concurrent
            # status write gets 409 and the queue retries with a fresh GET.
            body = {
                "metadata": {"uid": ref.uid, "resourceVersion": meta.get("resourceVersion")},
                "status": {"conditions": merged},
            }
            await self._client.patch(ref.path() + "/status", body, "application/merge-patch+json")
        try:
            await self._client.delete(ref.path(), preconditions={"uid": ref.uid})
        except Exception as err:
            if status_error(err) == 404:
                return False
            raise
        return True

    def _done(self, ref: PodRef) -> None:
        self._wanted.pop(ref, None)
        self._announced.discard(ref)

    def _remember(self, uid: str) -> None:
        self._evicted[uid] = None
        self._evicted.move_to_end(uid)
        while len(self._evicted) > EVICTED_UIDS_REMEMBERED:
            self._evicted.popitem(last=False)


def _same_condition(existing: Any, wanted: dict[str, str]) -> bool:
    return isinstance(existing, dict) and all(existing.get(k) == v for k, v in wanted.items())
