"""A rate-limited, delaying, de-duplicating work queue processed by a fixed number of asyncio workers.

Semantics (those of client-go's rate-limited delaying queue, with the give-up removed):
- a key is held at most once; scheduling a key that is already waiting keeps the earlier time, and a
  key scheduled while a worker processes it runs once more after that worker is done;
- `process(key)` returns None when the work is done, or a time at which to look at the key again;
  if it raises, the key is retried after `RateLimiter.delay(key)`, for as long as it takes;
- exactly `workers` tasks process keys, so at most that many calls of `process` are in flight;
- memory is one entry per distinct key (the time heap is compacted when stale entries pile up).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

from common.tasks import SLICE_S
from extender.controllers.clock import Clock, TimerHandle

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)


class RateLimiter(Generic[K]):
    """Per-key exponential backoff combined with an overall token bucket (the larger delay wins).

    client-go's default caps the backoff at 1000 s; evictions are waited for, so the cap here is 60 s.
    """

    def __init__(
        self,
        clock: Clock,
        *,
        base_delay: float = 0.005,
        max_delay: float = 60.0,
        qps: float = 10.0,
        burst: int = 100,
    ) -> None:
        if base_delay <= 0 or max_delay < base_delay or qps <= 0 or burst < 1:
            raise ValueError("rate limiter needs 0 < base_delay <= max_delay, qps > 0 and burst >= 1")
        self._clock = clock
        self._base = base_delay
        self._max = max_delay
        self._qps = qps
        self._burst = float(burst)
        self._tokens = float(burst)
        self._last = clock.now()
        self._failures: dict[K, int] = {}

    def delay(self, key: K) -> float:
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        backoff = min(self._max, self._base * (2 ** min(failures, 60)))
        return max(backoff, self._reserve_token())

    def forget(self, key: K) -> None:
        self._failures.pop(key, None)

    def failures(self, key: K) -> int:
        return self._failures.get(key, 0)

    def _reserve_token(self) -> float:
        now = self._clock.now()
        self._tokens = min(self._burst, self._tokens + (now - self._last) * self._qps)
        self._last = now
        self._tokens -= 1.0
        return 0.0 if self._tokens >= 0 else -self._tokens / self._qps


Process = Callable[[K], Awaitable[float | None]]


class WorkQueue(Generic[K]):
    def __init__(
        self,
        process: Process[K],
        *,
        clock: Clock,
        workers: int = 10,
        rate_limiter: RateLimiter[K] | None = None,
        name: str = "workqueue",
        on_retry: Callable[[K, BaseException], None] | None = None,
    ) -> None:
        if workers < 1:
            raise ValueError(f"{name}: the number of workers must be at least 1, got {workers}")
        self.name = name
        self._process = process
        self._clock = clock
        self._workers = workers
        self._limiter: RateLimiter[K] = rate_limiter or RateLimiter(clock)
        self._on_retry = on_retry
        self._due: dict[K, float] = {}  # waiting keys -> when
        self._heap: list[tuple[float, int, K]] = []  # may hold stale entries, see _compact
        self._seq = itertools.count()
        # Insertion-ordered set, FIFO. Not a dict: taking a dict's first key walks every key deleted
        # before it, 0.6 s for 40,000 ready keys in all (a mass eviction), where popitem is O(1).
        self._ready: OrderedDict[K, None] = OrderedDict()
        self._running: set[K] = set()
        self._rerun: dict[K, float] = {}  # running keys scheduled again meanwhile
        self._ready_signal = asyncio.Semaphore(0)
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task] = []
        self._stopping = False
        self._idle = asyncio.Event()
        self._idle.set()

    # ---- producer side (synchronous, never blocks) --------------------------------------------

    def schedule(self, key: K, when: float) -> None:
        if key in self._running:
            self._rerun[key] = min(when, self._rerun.get(key, when))
            return
        if key in self._ready:
            return
        current = self._due.get(key)
        if current is not None and current <= when:
            return
        if when <= self._clock.now():
            self._due.pop(key, None)
            self._make_ready(key)
            return
        self._due[key] = when
        heapq.heappush(self._heap, (when, next(self._seq), key))
        self._compact()
        self._wake.set()

    def cancel(self, key: K) -> bool:
        """Forget a key that is waiting or ready; a running key is not interrupted but not re-run."""
        found = self._due.pop(key, None) is not None
        if key in self._ready:
            del self._ready[key]
            found = True
        if self._rerun.pop(key, None) is not None:
            found = True
        self._limiter.forget(key)
        self._update_idle()
        return found

    def __contains__(self, key: object) -> bool:
        return key in self._due or key in self._ready or key in self._running

    def depth(self) -> int:
        """Keys waiting or ready (not those being processed)."""
        return len(self._due) + len(self._ready)

    def in_flight(self) -> int:
        return len(self._running)

    def memory_entries(self) -> int:
        """Everything the queue holds, stale heap entries included: bounded by a small multiple of keys."""
        return len(self._heap) + len(self._due) + len(self._ready) + len(self._running) + len(self._rerun)

    # ---- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        if self._tasks:
            return
        self._stopping = False
        self._tasks = [asyncio.create_task(self._timer_loop(), name=f"{self.name}-timer")]
        self._tasks += [
            asyncio.create_task(self._worker(), name=f"{self.name}-worker-{i}") for i in range(self._workers)
        ]

    async def stop(self) -> None:
        self._stopping = True
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._running.clear()

    async def wait_idle(self) -> None:
        """Until nothing is ready or running (keys waiting for a later time do not count)."""
        await self._idle.wait()

    # ---- internals ----------------------------------------------------------------------------

    def _make_ready(self, key: K) -> None:
        self._ready[key] = None
        self._idle.clear()
        self._ready_signal.release()

    def _update_idle(self) -> None:
        if not self._ready and not self._running:
            self._idle.set()

    def _compact(self) -> None:
        if len(self._heap) > 2 * len(self._due) + 64:
            self._heap = [(when, seq, key) for when, seq, key in self._heap if self._due.get(key) == when]
            heapq.heapify(self._heap)

    def _move_due(self) -> float | None:
        """Move due keys to the ready set; return the next waiting time."""
        now = self._clock.now()
        while self._heap:
            when, _, key = self._heap[0]
            if self._due.get(key) != when:
                heapq.heappop(self._heap)
                continue
            if when > now:
                return when
            heapq.heappop(self._heap)
            del self._due[key]
            self._make_ready(key)
        return None

    async def _timer_loop(self) -> None:
        while not self._stopping:
            self._wake.clear()
            next_due = self._move_due()
            self._update_idle()
            timer: TimerHandle | None = None
            if next_due is not None:
                timer = self._clock.call_at(next_due, self._wake.set)
            try:
                await self._wake.wait()
            finally:
                if timer is not None:
                    timer.cancel()

    async def _worker(self) -> None:
        # Acquiring a ready key does not suspend, nor does a key whose processing ends without I/O:
        # a worker would take every ready key in one step (40,000 in a mass eviction) without this.
        slice_end = time.perf_counter() + SLICE_S
        while not self._stopping:
            if time.perf_counter() >= slice_end:
                await asyncio.sleep(0)
                slice_end = time.perf_counter() + SLICE_S
            await self._ready_signal.acquire()
            if not self._ready:
                continue  # the key was cancelled after it became ready
            key, _ = self._ready.popitem(last=False)
            self._running.add(key)
            again: float | None = None
            try:
                again = await self._process(key)
            except asyncio.CancelledError:
                raise
            except Exception as err:
                delay = self._limiter.delay(key)
                log.warning(
                    "%s: %s failed (attempt %d), retrying in %.3fs: %s",
                    self.name,
                    key,
                    self._limiter.failures(key),
                    delay,
                    err,
                )
                if self._on_retry is not None:
                    self._on_retry(key, err)
                again = self._clock.now() + delay
            else:
                if again is None:
                    self._limiter.forget(key)
            finally:
                self._running.discard(key)
            rerun = self._rerun.pop(key, None)
            if rerun is not None:
                again = rerun if again is None else min(again, rerun)
            if again is not None:
                self.schedule(key, again)
            self._update_idle()
