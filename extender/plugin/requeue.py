"""Prompt requeue: a pod our filter found no node for is tried again soon after devices appear.

kube-scheduler cannot ask an extender which cluster events could help a pod it rejected. It requeues
such a pod on a fixed set of events (pkg/scheduler/framework/types.go, UnrollWildCardResource: every
Pod, Node, ResourceClaim, DeviceClass, PersistentVolume(Claim), CSI and StorageClass event, PodGroup
with GenericWorkload), or after podMaxInUnschedulablePodsDuration (5 minutes; checked every 30 s). A
released claim (a ResourceClaim update) or a new DeviceClass is on that list; a ResourceSlice or a
DeviceTaintRule is not, so a pod waiting for a driver to publish devices waited minutes.

While pods we rejected wait, a ResourceSlice added or changed, or a DeviceTaintRule changed or
removed, makes us update one ResourceClaim of our own (--requeue-claim NAMESPACE/NAME, created on first
use, no requests, never allocated): kube-scheduler sees a ResourceClaim update and moves every pod an
extender rejected to its active queue (or to backoff, if its backoff is not over). One write covers
all waiting pods; a burst of slice changes becomes one write after DELAY_S, then at most one every
MIN_INTERVAL_S. Upstream's plugin requeues its pods on every ResourceSlice add or update, unthrottled;
each pod's own backoff (podMaxBackoffSeconds) still bounds how often it is tried.

Only the replica kube-scheduler calls has waiting pods: standby replicas never write.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from common.claimrefs import pod_uid
from common.objects import metadata_of
from extender.kube.client import ApiError

log = logging.getLogger(__name__)

DELAY_S = 0.2  # gathers the slices a driver publishes at once into one write
MIN_INTERVAL_S = 1.0
ANNOTATION = "dra-extender.io/requeue"  # what each write changes: a counter
_TRIGGERS = {("ResourceSlice", "ADDED"), ("ResourceSlice", "MODIFIED"), ("DeviceTaintRule", "MODIFIED"),
             ("DeviceTaintRule", "DELETED")}


class NudgeClient(Protocol):
    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]: ...

    async def update(self, path: str, body: dict[str, Any]) -> dict[str, Any]: ...


class RequeueNudge:
    def __init__(self, client: NudgeClient, namespace: str, name: str, *, delay_s: float = DELAY_S,
                 min_interval_s: float = MIN_INTERVAL_S, clock: Callable[[], float] = time.monotonic) -> None:
        self._client = client
        self.namespace, self.name = namespace, name
        self._collection = f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims"
        self._path = f"{self._collection}/{name}"
        self.delay_s, self.min_interval_s, self.clock = delay_s, min_interval_s, clock
        self._waiting: set[str] = set()  # UIDs of the pods our last filter of them found no node for
        self._task: asyncio.Task[None] | None = None
        self._again = False  # a trigger since the last write started
        self._last_write = -min_interval_s
        self.writes = 0
        self.failures = 0

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def rejected(self, pod: dict[str, Any]) -> None:
        """A filter of `pod` found no node: it waits in kube-scheduler's unschedulable queue."""
        uid = pod_uid(pod)
        if uid:
            self._waiting.add(uid)

    def admitted(self, pod: dict[str, Any]) -> None:
        """A filter of `pod` found nodes."""
        self._waiting.discard(pod_uid(pod))

    def on_change(self, kind: str, event_type: str, new: dict[str, Any], old: dict[str, Any] | None) -> None:
        """The cluster cache's subscriber."""
        if kind == "Pod":
            if event_type == "DELETED" or (new.get("spec") or {}).get("nodeName"):
                self._waiting.discard(str(metadata_of(new).get("uid") or ""))
            return
        if self._waiting and (kind, event_type) in _TRIGGERS:
            self._again = True  # covered by the write ahead, or, if that one is being sent, by one more
            if self._task is None:
                self._task = asyncio.get_running_loop().create_task(self._run(), name="requeue-nudge")

    async def _run(self) -> None:
        try:
            while self._again:
                await asyncio.sleep(max(self.delay_s, self._last_write + self.min_interval_s - self.clock()))
                self._again = False
                if self._waiting:
                    await self._write()
        finally:
            self._task = None

    async def _write(self) -> None:
        self._last_write = self.clock()
        self.writes += 1
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": self.name, "namespace": self.namespace,
                         "labels": {"app.kubernetes.io/managed-by": "dra-extender"},
                         "annotations": {ANNOTATION: str(self.writes)}},
            "spec": {"devices": {}},
        }
        try:
            try:
                # Unconditional (no resourceVersion): the claim is ours and its spec never changes.
                await self._client.update(self._path, body)
            except ApiError as error:
                if not error.not_found:
                    raise
                await self._client.create(self._collection, body)
        except Exception as error:  # the pods still get retried, only later: say so and go on
            self.failures += 1
            log.warning("could not update ResourceClaim %s/%s to have kube-scheduler retry %d waiting "
                        "pod(s): %s", self.namespace, self.name, len(self._waiting), error)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
