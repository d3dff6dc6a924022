"""A controllers' Clock that tests drive by hand (see extender/controllers/clock.py)."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable

from extender.controllers.clock import TimerHandle


class _FakeTimer:
    __slots__ = ("callback", "cancelled", "when")

    def __init__(self, when: float, callback: Callable[[], None]) -> None:
        self.when = when
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeClock:
    """Time stands still until `advance` moves it; timers due on the way fire in order."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self._now = start
        self._timers: list[tuple[float, int, _FakeTimer]] = []
        self._seq = itertools.count()

    def now(self) -> float:
        return self._now

    def call_at(self, when: float, callback: Callable[[], None]) -> TimerHandle:
        timer = _FakeTimer(when, callback)
        heapq.heappush(self._timers, (when, next(self._seq), timer))
        return timer

    async def sleep(self, seconds: float) -> None:
        future = asyncio.get_running_loop().create_future()

        def wake() -> None:
            if not future.done():
                future.set_result(None)

        timer = self.call_at(self._now + max(0.0, seconds), wake)
        try:
            await future
        finally:
            timer.cancel()

    def pending_timers(self) -> int:
        return sum(1 for _, _, timer in self._timers if not timer.cancelled)

    def next_timer(self) -> float | None:
        while self._timers and self._timers[0][2].cancelled:
            heapq.heappop(self._timers)
        return self._timers[0][0] if self._timers else None

    def advance(self, seconds: float) -> None:
        """Move time forward by `seconds`, firing every timer that falls due, each at its own time."""
        if seconds < 0:
            raise ValueError(f"cannot move a clock backwards ({seconds} s)")
        target = self._now + seconds
        while self._timers and self._timers[0][0] <= target:
            when, _, timer = heapq.heappop(self._timers)
            if timer.cancelled:
                continue
            self._now = max(self._now, when)
            timer.callback()
        self._now = target
