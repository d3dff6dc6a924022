from __future__ import annotations

import asyncio
import itertools

import pytest
from fakeclock import FakeClock

from extender.controllers.clock import RealClock
from extender.controllers.workqueue import RateLimiter, WorkQueue


async def drain(queue: WorkQueue) -> None:
    for _ in range(5):
        await asyncio.sleep(0)
        await queue.wait_idle()


class Recorder:
    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.runs: list[tuple[str, float]] = []
        self.fail_first: dict[str, int] = {}
        self.again: dict[str, float] = {}
        self.in_flight = 0
        self.peak = 0
        self.gate: asyncio.Event | None = None

    async def __call__(self, key: str) -> float | None:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            if self.gate is not None:
                await self.gate.wait()
            self.runs.append((key, self.clock.now()))
            if self.fail_first.get(key, 0) > 0:
                self.fail_first[key] -= 1
                raise RuntimeError("transient")
            return self.again.pop(key, None)
        finally:
            self.in_flight -= 1


@pytest.fixture
async def setup():
    clock = FakeClock()
    work = Recorder(clock)
    queue: WorkQueue[str] = WorkQueue(
        work, clock=clock, workers=3, rate_limiter=RateLimiter(clock, base_delay=1.0)
    )
    queue.start()
    yield clock, work, queue
    await queue.stop()


async def test_items_run_at_their_time_and_are_deduplicated(setup) -> None:
    clock, work, queue = setup
    t0 = clock.now()
    queue.schedule("a", t0 + 10)
    queue.schedule("a", t0 + 5)  # earlier wins
    queue.schedule("a", t0 + 20)  # later is ignored
    queue.schedule("b", t0)
    await drain(queue)
    assert work.runs == [("b", t0)]
    assert queue.depth() == 1
    clock.advance(4.9)
    await drain(queue)
    assert len(work.runs) == 1
    clock.advance(0.1)
    await drain(queue)
    assert work.runs == [("b", t0), ("a", t0 + 5)]
    assert queue.depth() == 0


async def test_process_can_ask_to_run_again_later(setup) -> None:
    clock, work, queue = setup
    t0 = clock.now()
    work.again["a"] = t0 + 30
    queue.schedule("a", t0)
    await drain(queue)
    clock.advance(30)
    await drain(queue)
    assert work.runs == [("a", t0), ("a", t0 + 30)]


async def test_failures_are_retried_with_growing_backoff_without_giving_up(setup) -> None:
    clock, work, queue = setup
    t0 = clock.now()
    work.fail_first["a"] = 8
    queue.schedule("a", t0)
    await drain(queue)
    for _ in range(400):
        clock.advance(1)
        await drain(queue)
    times = [when - t0 for key, when in work.runs]
    assert len(times) == 9  # 8 failures, then success; nothing after
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert gaps == [1, 2, 4, 8, 16, 32, 60, 60]  # 1 s base, doubling, capped at 60 s
    assert "a" not in queue


async def test_key_scheduled_while_running_runs_once_more(setup) -> None:
    clock, work, queue = setup
    work.gate = asyncio.Event()
    queue.schedule("a", clock.now())
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert queue.in_flight() == 1
    queue.schedule("a", clock.now())
    queue.schedule("a", clock.now())
    work.gate.set()
    await drain(queue)
    assert [key for key, _ in work.runs] == ["a", "a"]


async def test_never_more_workers_than_configured(setup) -> None:
    clock, work, queue = setup
    work.gate = asyncio.Event()
    for i in range(50):
        queue.schedule(f"k{i}", clock.now())
    for _ in range(10):
        await asyncio.sleep(0)
    assert work.in_flight == 3
    work.gate.set()
    await drain(queue)
    assert work.peak == 3
    assert len(work.runs) == 50


async def test_cancel_removes_waiting_and_ready_items(setup) -> None:
    clock, work, queue = setup
    queue.schedule("later", clock.now() + 10)
    assert queue.cancel("later")
    assert not queue.cancel("later")
    clock.advance(20)
    await drain(queue)
    assert work.runs == []


async def test_memory_stays_bounded_under_rescheduling(setup) -> None:
    clock, _work, queue = setup
    t0 = clock.now()
    for round_ in range(200):
        for i in range(20):
            queue.cancel(f"k{i}")
            queue.schedule(f"k{i}", t0 + 1000 - round_)
    assert queue.depth() == 20
    assert queue.memory_entries() <= 2 * 20 + 64 + 20 + 1


def test_token_bucket_limits_overall_retry_rate() -> None:
    clock = FakeClock()
    limiter: RateLimiter[str] = RateLimiter(clock, base_delay=0.001, qps=10, burst=2)
    delays = [limiter.delay(f"k{i}") for i in range(4)]
    assert delays[:2] == [0.001, 0.001]
    assert delays[2] == pytest.approx(0.1)
    assert delays[3] == pytest.approx(0.2)
    limiter.forget("k0")
    assert limiter.failures("k0") == 0


def test_bad_configuration_is_rejected() -> None:
    clock = FakeClock()
    with pytest.raises(ValueError, match="workers must be at least 1"):
        WorkQueue(lambda key: None, clock=clock, workers=0)  # type: ignore[arg-type,return-value]
    with pytest.raises(ValueError, match="rate limiter"):
        RateLimiter(clock, qps=0)


async def test_real_clock_timers_fire() -> None:
    clock = RealClock()
    ran = asyncio.Event()

    async def process(key: str) -> None:
        ran.set()

    queue: WorkQueue[str] = WorkQueue(process, clock=clock, workers=1)  # type: ignore[arg-type]
    queue.start()
    try:
        queue.schedule("a", clock.now() + 0.001)
        await asyncio.wait_for(ran.wait(), 30)  # bounds a hang only
    finally:
        await queue.stop()


async def test_workers_let_the_event_loop_run_between_keys_that_need_no_io(monkeypatch) -> None:
    from extender.controllers import workqueue

    monkeypatch.setattr(workqueue, "SLICE_S", 0.0)   # yield after every key
    clock = FakeClock()
    turns_at_run: list[int] = []
    turn = 0

    async def instant(key: str) -> None:
        turns_at_run.append(turn)

    async def ticker() -> None:
        nonlocal turn
        while True:
            turn += 1
            await asyncio.sleep(0)

    queue: WorkQueue[str] = WorkQueue(instant, clock=clock, workers=1, rate_limiter=RateLimiter(clock))
    for index in range(50):
        queue.schedule(f"k{index}", clock.now())
    ticking = asyncio.create_task(ticker())
    queue.start()
    await drain(queue)
    ticking.cancel()
    await queue.stop()
    assert len(turns_at_run) == 50 and len(set(turns_at_run)) == 50   # one key per turn
