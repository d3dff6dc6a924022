"""Time for the controllers: a Clock protocol and the real clock (tests drive a fake one: tests/support).

Everything is wall-clock seconds since the epoch, because eviction deadlines are derived from the
taints' `timeAdded` timestamps written by the API server.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Protocol


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    def now(self) -> float: ...

    def call_at(self, when: float, callback: Callable[[], None]) -> TimerHandle:
        """Run `callback` (on the event loop) once `now() >= when`."""
        ...

    async def sleep(self, seconds: float) -> None: ...


class RealClock:
    def now(self) -> float:
        return time.time()

    def call_at(self, when: float, callback: Callable[[], None]) -> TimerHandle:
        return asyncio.get_running_loop().call_later(max(0.0, when - time.time()), callback)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


def parse_time(text: str) -> float:
    """RFC 3339 timestamp (metav1.Time / MicroTime) to epoch seconds; ValueError naming bad text."""
    if not isinstance(text, str) or not text:
        raise ValueError(f"invalid timestamp {text!r}")
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError as err:
        raise ValueError(f"invalid timestamp {text!r}: {err}") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def format_micro_time(epoch: float) -> str:
    """metav1.MicroTime, as Leases use it."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
