"""Controllers run by `dra-extender serve --controllers=...`: device taint eviction and driver loss.

Entry point (extender.wiring maps serve's flags onto ControllerOptions and calls it):
    handle = await start_controllers(cache, client, ControllerOptions(...), registry=registry)
    handle.driver_lost(); handle.state()        # for /debug/state and explanations
    await handle.stop()

Everything runs on the event loop that calls start; cache events must be applied on that loop.
With leader election (`leader_elect`) they act only between `lead()` and `stand_down()`, which the
composition root calls as this replica gains and loses the Lease (extender/kube/leader.py).

Imports plugin/, state/, kube/, allocator/ and common/; never http/ or the composition root.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from prometheus_client import CollectorRegistry

from common.heap import collector_paused, return_free_memory
from common.objects import metadata_of
from common.tasks import SLICE_S, cancel_and_wait, in_slices
from extender.controllers.claims import ClaimIndex
from extender.controllers.clock import Clock, RealClock
from extender.controllers.driver_loss import DEFAULT_GRACE_PERIOD_S, DriverLossTracker
from extender.controllers.evictor import PodEvictor, PodRef
from extender.controllers.metrics import ControllerMetrics
from extender.controllers.pools import PoolIndex
from extender.controllers.taint_eviction import RuleRef, TaintEvictionController
from extender.controllers.workqueue import RateLimiter, WorkQueue
from extender.kube.client import KubeClient
from extender.kube.events import EventRecorder

log = logging.getLogger(__name__)

TAINT_EVICTION = "taint-eviction"
DRIVER_LOSS = "driver-loss"
CONTROLLER_NAMES = (TAINT_EVICTION, DRIVER_LOSS)
COMPONENT = "dra-extender-controllers"
MAX_STATE_ENTRIES = 100
SEED_KINDS = ("ResourceSlice", "ResourceClaim", "DeviceTaintRule")

Event = tuple[str, str, dict, "dict | None"]


class ControllerCache(Protocol):
    def subscribe(self, callback: Any) -> None: ...
    def objects_taken(self, *kinds: str) -> Callable[[], Iterator[dict]]: ...
    def pod(self, namespace: str, name: str) -> dict | None: ...
    def pods_in_group(self, namespace: str, group_name: str) -> list[dict]: ...


def check_names(names: Iterable[str]) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(name.strip() for name in names if name.strip()))
    unknown = [name for name in names if name not in CONTROLLER_NAMES]
    if unknown:
        raise ValueError(f"unknown controller {', '.join(unknown)}; known: {', '.join(CONTROLLER_NAMES)}")
    return names


@dataclass(frozen=True)
class ControllerOptions:
    """What runs and how; the defaults here are the flags' defaults (extender.flags)."""

    names: tuple[str, ...] = ()
    workers: int = 10
    driver_loss_grace_period: float = DEFAULT_GRACE_PERIOD_S
    evict_on_driver_loss: bool = False
    leader_elect: bool = False  # run only between lead() and stand_down() (the Lease's holder)
    workload_claims: bool = False  # gate DRAWorkloadResourceClaims: claims reserved for PodGroups

    def __post_init__(self) -> None:
        object.__setattr__(self, "names", check_names(self.names))
        if self.evict_on_driver_loss and DRIVER_LOSS not in self.names:
            raise ValueError(f"--evict-on-driver-loss needs --controllers={DRIVER_LOSS}")
        if self.workers < 1:
            raise ValueError(f"--taint-eviction-workers must be at least 1, got {self.workers}")


class _Term:
    """Everything that exists while this replica acts (the whole time without leader election)."""

    def __init__(
        self,
        cache: ControllerCache,
        client: KubeClient,
        clock: Clock,
        options: ControllerOptions,
        metrics: ControllerMetrics,
    ) -> None:
        self._clock = clock
        self.pools = PoolIndex()
        self.claims = ClaimIndex()
        self.recorder = EventRecorder(client, clock, COMPONENT)
        self.queue: WorkQueue[Any] = WorkQueue(
            self._process,
            clock=clock,
            workers=options.workers,
            rate_limiter=RateLimiter(clock),
            name="taint-eviction",
            on_retry=lambda _key, _err: metrics.retries.inc(),
        )
        self.taint: TaintEvictionController | None = None
        self.evictor: PodEvictor | None = None
        if TAINT_EVICTION in options.names or options.evict_on_driver_loss:
            self.evictor = PodEvictor(
                client,
                self.recorder,
                clock,
                metrics,
                schedule=self.queue.schedule,
                cancel=self.queue.cancel,
                on_evicted=self._on_evicted,
            )
        if TAINT_EVICTION in options.names and self.evictor is not None:
            self.taint = TaintEvictionController(
                cache, client, clock, self.evictor, self.pools, self.claims,
                schedule_rule=self.queue.schedule, workload_claims=options.workload_claims,
            )
        self.driver_loss: DriverLossTracker | None = None
        if DRIVER_LOSS in options.names:
            self.driver_loss = DriverLossTracker(
                cache,
                clock,
                self.recorder,
                self.pools,
                self.claims,
                grace_period=options.driver_loss_grace_period,
                evictor=self.evictor if options.evict_on_driver_loss else None,
            )

        # Events that arrive while the term is busy (its seed, a long change worked through in slices),
        # in order; None when it is not.
        self._held: deque[Event] | None = deque()
        self._settled = asyncio.Event()  # set while not busy
        self._job: asyncio.Task[None] | None = None
        self.seeded = False

    @property
    def busy(self) -> bool:
        return self._held is not None

    def seeding(self, cache: ControllerCache) -> Iterator[None]:
        """The initial state, as steps to run in slices (`in_slices`), then the events held meanwhile.

        What the cache holds is taken at this call; every event after it is held by `on_event` and
        applied, in order, once the taken state is in, so that no copy older than an event applied
        wins. The queue and the recorder start after the last held event."""
        objects, pods = cache.objects_taken(*SEED_KINDS), cache.objects_taken("Pod")
        return self._seed(objects(), pods())

    def _seed(self, objects: Iterator[dict], pods: Iterator[dict]) -> Iterator[None]:
        rules: list[dict] = []
        for raw in objects:
            kind = raw.get("kind")
            if kind == "ResourceSlice":
                self.pools.upsert(raw)
            elif kind == "ResourceClaim":
                self.claims.update("ADDED", raw)
            elif kind == "DeviceTaintRule":
                rules.append(raw)
            yield
        if self.taint is not None:
            yield from self.taint.seeding(rules, pods)
        if self.driver_loss is not None:
            yield from self.driver_loss.seeding()
        yield from self._held_events()
        self.seeded = True
        self.recorder.start()
        self.queue.start()

    def _held_events(self) -> Iterator[None]:
        """Apply the held events in order, with the work any of them needs, until none is left; then
        the term is no longer busy (in the same step as the last check)."""
        held = self._held
        while held:
            work = self._apply(*held.popleft())
            if work is not None:
                yield from self._guarded(work)
            yield
        self._held = None
        self._settled.set()

    async def _work_through(self, work: Iterator[None]) -> None:
        # At 20,000 nodes a seed is about 2.5 s of CPU, a rule over a whole driver 0.8-2.3 s: as one
        # step each held every verb that long.
        await in_slices(itertools.chain(self._guarded(work), self._held_events()), SLICE_S)

    def _guarded(self, work: Iterator[None]) -> Iterator[None]:
        try:
            yield from work
        except Exception:
            log.exception("controllers: working through a change failed")

    async def stop(self) -> None:
        job, self._job = self._job, None
        await cancel_and_wait(job)
        if self.driver_loss is not None:
            self.driver_loss.stop()
        await self.queue.stop()
        await self.recorder.stop()
        # The seed froze the term (collector_paused) and it is full of reference cycles, so the
        # collector would never free it: its indexes go by reference counting, now.
        self.pools.clear()
        self.claims.clear()

    def on_event(self, kind: str, event_type: str, new: dict, old: dict | None) -> None:
        if self._held is not None:
            self._held.append((kind, event_type, new, old))
            return
        work = self._apply(kind, event_type, new, old)
        if work is not None:
            self._held = deque()
            self._settled.clear()
            self._job = asyncio.create_task(self._work_through(work), name="controllers-change")

    def _apply(self, kind: str, event_type: str, new: dict, old: dict | None) -> Iterator[None] | None:
        """Handle one event; returns the steps of what is left to do, when it is long."""
        try:
            return self._handle(kind, event_type, new, old)
        except Exception:
            # Never let a controller bug break the cache's apply() for everybody else.
            log.exception("controllers: handling %s %s failed", event_type, kind)
            return None

    def _handle(self, kind: str, event_type: str, new: dict, old: dict | None) -> Iterator[None] | None:
        if kind == "ResourceSlice":
            name = str(metadata_of(new).get("name") or "")
            touched = self.pools.remove(name) if event_type == "DELETED" else self.pools.upsert(new)
            if touched:
                if self.taint is not None:
                    self.taint.on_pools(touched)
                if self.driver_loss is not None:
                    self.driver_loss.on_pools(touched)
        elif kind == "ResourceClaim":
            previous, touched = self.claims.update(event_type, new)
            if self.taint is not None:
                self.taint.on_claim(new, previous or old)
            if self.driver_loss is not None and touched:
                self.driver_loss.on_pools(touched)
        elif kind == "Pod":
            if event_type == "DELETED":
                if self.evictor is not None:
                    self.evictor.forget(PodRef.of(new))
            elif self.taint is not None:
                self.taint.on_pod(new, old)
        elif kind == "DeviceTaintRule" and self.taint is not None:
            return self.taint.on_rule(event_type, new, old)
        return None

    async def _process(self, key: Any) -> float | None:
        if isinstance(key, PodRef) and self.evictor is not None:
            # The change being worked through may cancel or move this eviction: after it, then. (Once
            # set, the event wakes its waiters even if a new change clears it before they run.)
            while self.busy:
                await self._settled.wait()
            return await self.evictor.process(key)
        if isinstance(key, RuleRef) and self.taint is not None:
            return await self.taint.process_rule(key)
        return None

    def _on_evicted(self, ref: PodRef, eviction: Any) -> None:
        if self.taint is not None:
            self.taint.on_evicted(ref, eviction)


class Controllers:
    """The handle `start_controllers` returns."""

    def __init__(
        self,
        cache: ControllerCache,
        client: KubeClient,
        clock: Clock,
        options: ControllerOptions,
        registry: CollectorRegistry,
    ) -> None:
        self.options = options
        self._cache = cache
        self._client = client
        self._clock = clock
        self.metrics = ControllerMetrics.on(registry)
        self._term: _Term | None = None
        self._seeding: asyncio.Task[Exception | None] | None = None  # the term's seed, until it ends
        self.metrics.watch_queue(
            lambda: self._term.queue.depth() if self._term else 0,
            lambda: self._term.queue.in_flight() if self._term else 0,
        )
        self.metrics.watch_driver_lost(
            lambda: self._term.driver_loss.device_count() if self._term and self._term.driver_loss else 0
        )
        cache.subscribe(self._on_event)

    @property
    def active(self) -> bool:
        return self._term is not None

    @property
    def term(self) -> _Term | None:
        return self._term

    def _start_term(self) -> asyncio.Task[Exception | None]:
        """A term begins now (events from here on are its own) and seeds in the task returned."""
        if self._seeding is None:
            term = _Term(self._cache, self._client, self._clock, self.options, self.metrics)
            steps = term.seeding(self._cache)
            self._term = term   # in the step the cache was taken: every event after it is the term's
            self._seeding = asyncio.create_task(self._seed(term, steps), name="controllers-seed")
        return self._seeding

    async def _seed(self, term: _Term, steps: Iterator[None]) -> Exception | None:
        """The term's seed; what failed it is logged and returned, and the term ends."""
        try:
            # The indexes it fills stay alive: the collector's passes over them would free nothing and
            # held the loop for up to 90 ms each at 20,000 nodes.
            with collector_paused():
                await in_slices(steps, SLICE_S)
        except (Exception, asyncio.CancelledError) as err:
            if self._term is term:   # not ended by _stop_term: the seed failed, or start() was cancelled
                self._term, self._seeding = None, None
                await term.stop()
            if isinstance(err, asyncio.CancelledError):
                raise
            log.exception("controllers: their seed failed; they do not act until the next term")
            return err
        return_free_memory()   # the objects unpacked for the seed are gone
        log.info("controllers running: %s", ", ".join(self.options.names))
        return None

    async def _stop_term(self) -> None:
        seeding, self._seeding = self._seeding, None
        term, self._term = self._term, None
        await cancel_and_wait(seeding)
        if term is not None:
            await term.stop()
            log.info("controllers stopped")

    def _on_event(self, kind: str, event_type: str, new: dict, old: dict | None) -> None:
        if self._term is not None:
            self._term.on_event(kind, event_type, new, old)

    def driver_lost(self) -> list[dict[str, Any]]:
        if self._term is None or self._term.driver_loss is None:
            return []
        return self._term.driver_loss.driver_lost()

    def state(self) -> dict[str, Any]:
        term = self._term
        state: dict[str, Any] = {
            "controllers": list(self.options.names),
            "active": term is not None,
            "leader_election": self.options.leader_elect,
        }
        if term is None:
            return state
        state["seeded"] = term.seeded
        state["busy"] = term.busy
        state["queue"] = {"depth": term.queue.depth(), "in_flight": term.queue.in_flight()}
        if term.evictor is not None:
            pending = sorted(term.evictor.pending().items(), key=lambda item: item[1].when)
            state["pending_evictions"] = [
                {
                    "pod": f"{ref.namespace}/{ref.name}",
                    "uid": ref.uid,
                    "at": ev.when,
                    "seconds_left": max(0.0, ev.when - self._clock.now()),
                    "reasons": [str(r) for r in ev.reasons],
                }
                for ref, ev in pending[:MAX_STATE_ENTRIES]
            ]
            state["pending_evictions_total"] = len(pending)
        if term.driver_loss is not None:
            state["driver_lost"] = term.driver_loss.driver_lost()
        return state

    async def start(self) -> None:
        """Without leader election, act at once: returns when seeded (raises what failed the seed);
        with it, wait for lead()."""
        if self.options.names and not self.options.leader_elect:
            error = await self._start_term()
            if error is not None:
                raise error

    async def lead(self) -> None:
        """This replica holds the Lease: act. Returns at once; the seed runs on (see `seeded`)."""
        if self.options.names:
            self._start_term()

    async def seeded(self) -> None:
        """Until the current term's seed has ended, whether it failed or not (the log says)."""
        if self._seeding is not None:
            await asyncio.wait([self._seeding])

    async def stand_down(self) -> None:
        """This replica lost (or gives up) the Lease: stop acting."""
        await self._stop_term()

    async def stop(self) -> None:
        await self._stop_term()


async def start_controllers(
    cache: ControllerCache,
    client: KubeClient,
    options: ControllerOptions,
    *,
    registry: CollectorRegistry,
    clock: Clock | None = None,
) -> Controllers:
    controllers = Controllers(cache, client, clock or RealClock(), options, registry)
    await controllers.start()
    return controllers
