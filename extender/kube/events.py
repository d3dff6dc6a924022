"""Kubernetes Events (core/v1) recorded without blocking the caller: the controllers' and the
scheduler's explanations of pods it found no node for.

`record` only appends to a bounded buffer; one background task posts the events. When the API server
is slow and the buffer is full, the oldest unsent events are dropped (and counted): events are advice
for humans, never worth unbounded memory or a stalled controller.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import deque
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Protocol

from common.objects import metadata_of
from common.tasks import cancel_and_wait

log = logging.getLogger(__name__)


class WallClock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch."""
        ...


def format_time(epoch: float) -> str:
    """metav1.Time: whole seconds, UTC."""
    return datetime.fromtimestamp(int(epoch), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class EventClient(Protocol):
    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]: ...


def object_reference(obj: Mapping[str, Any]) -> dict[str, str]:
    meta = metadata_of(obj)
    ref = {
        "apiVersion": str(obj.get("apiVersion") or ""),
        "kind": str(obj.get("kind") or ""),
        "name": str(meta.get("name") or ""),
        "uid": str(meta.get("uid") or ""),
    }
    if meta.get("namespace"):
        ref["namespace"] = str(meta["namespace"])
    return ref


class EventRecorder:
    def __init__(self, client: EventClient, clock: WallClock, component: str, *,
                 max_pending: int = 1000) -> None:
        self._client = client
        self._clock = clock
        self._component = component
        self._pending: deque[dict[str, Any]] = deque()
        self._max_pending = max_pending
        self._signal = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._drained = asyncio.Event()
        self._drained.set()
        self.dropped = 0

    def record(
        self, involved: Mapping[str, Any], reason: str, message: str, *, event_type: str = "Normal"
    ) -> None:
        """`involved` is an object reference (see object_reference) or the object itself."""
        ref = dict(involved) if "metadata" not in involved else object_reference(involved)
        now = format_time(self._clock.now())
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{ref.get('name', 'object')}.{uuid.uuid4().hex[:16]}",
                "namespace": ref.get("namespace") or "default",
            },
            "involvedObject": ref,
            "reason": reason,
            "message": message,
            "type": event_type,
            "source": {"component": self._component},
            "reportingComponent": self._component,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        if len(self._pending) >= self._max_pending:
            self._pending.popleft()
            self.dropped += 1
        self._pending.append(event)
        self._drained.clear()
        self._signal.set()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._send_loop(), name=f"{self._component}-events")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)

    async def flush(self) -> None:
        """Until every event recorded so far has been sent (or failed); needs `start` first."""
        await self._drained.wait()

    async def _send_loop(self) -> None:
        while True:
            await self._signal.wait()
            self._signal.clear()
            while self._pending:
                event = self._pending.popleft()
                try:
                    await self._client.create(
                        f"/api/v1/namespaces/{event['metadata']['namespace']}/events", event
                    )
                except asyncio.CancelledError:
                    raise
                except Exception as err:
                    log.warning(
                        "recording event %s %s on %s failed: %s",
                        event["reason"],
                        event["message"],
                        event["involvedObject"].get("name"),
                        err,
                    )
            self._drained.set()
