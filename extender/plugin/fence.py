"""Nothing a bind left half-written outlives it, and nothing a previous process (or leader) still has in
flight can land on top of this one's allocations.

Why a fence is needed. An allocation is two writes of one claim: our finalizer (main resource), then
status.allocation with the resourceVersion the finalizer write returned. A process killed between
sending the status write and seeing its answer may still have it in flight (a slow API server, a proxy
holding it): it can land after a new process has read the cluster and given the same device to another
claim. Nothing in the API server relates two claims, so that write would succeed.

The fence. Such a write is always sent at a version of its claim that has our finalizer and no
allocation, and it can only apply while the claim keeps that version. Before its first allocation, a
new process (at start, or on becoming the leader) reads every claim from the API server (a quorum
read, taken after the previous writer stopped sending) and writes each claim that has our finalizer and
no allocation at the version it read, removing the finalizer. From then on every write the previous
process may still have in flight for that claim conflicts. A claim whose allocation landed meanwhile
is simply allocated (the fence's write conflicts, a fresh read shows it). Why this is enough: the status
write is sent only after the finalizer write's answer, so its claim version existed before the previous
writer stopped (crashed, or passed its renew deadline: see authority.py), hence before the quorum read.

Measured against the alternatives (docs/operations.md, "Crash-safe binds"): waiting out the API server's
request timeout (60 s) after every start and failover stops all allocation for a minute; a webhook
comparing every allocation with every other claim's sees only what its own replica's cache holds (a
standby serves the webhook too) and adds a call to every claim status write. The fence costs one list of
the claims per start or failover and one write per half-written claim (none after a clean stop).

The sweeper. The same finalizer removal for claims found half-written later: an undo whose last write
failed, a late finalizer write of a dead process (it lands with no status write after it), the resource
claim controller's deallocation interrupted between its two writes. Only claims no bind of ours is
writing, and only after they stayed so for a grace period (another scheduler's bind passes through that
state for milliseconds).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from common.objects import metadata_of
from extender.plugin.authority import Authority
from extender.plugin.claimwriter import ClaimWriter, half_written
from extender.state.cache import ClaimWatch, ClusterCache

log = logging.getLogger(__name__)

RETRY_FIRST_S = 0.2
RETRY_MAX_S = 5.0
# A claim must stay half-written this long before the sweeper writes it: longer than any bind takes
# between its finalizer write and its status write (ours is known anyway; another scheduler's is not).
SWEEP_GRACE_S = 10.0
SWEEP_INTERVAL_S = 2.0
# Half-written claims the fence writes at once.
FENCE_CONCURRENCY = 32


class ClaimFence:
    """Reads every claim and fences off the half-written ones; then this replica's term begins."""

    def __init__(self, cache: ClusterCache, writer: ClaimWriter, authority: Authority, *,
                 clock: Callable[[], float] = time.monotonic, retry_first_s: float = RETRY_FIRST_S) -> None:
        self.cache = cache
        self.writer = writer
        self.authority = authority
        self._clock = clock
        self._retry_first = retry_first_s
        self.runs = 0
        self.fenced = 0          # claims written by the fences so far
        self.last_seconds: float | None = None

    async def run(self) -> int:
        """Fence until done (retrying through API errors), then begin a term; returns the term."""
        started = self._clock()
        delay = self._retry_first
        while True:
            self.authority.reason = "fencing: reading every claim from the API server"
            try:
                left = await self._fence_once()
            except Exception as error:  # an API error: retried, the term cannot begin without it
                left = -1
                self.authority.reason = f"fencing: listing the claims failed: {error}"
                log.warning("fence: listing the claims failed (retrying in %.1f s): %s", delay, error)
            if left == 0:
                break
            if left > 0:
                self.authority.reason = f"fencing: {left} half-written claim(s) could not be written yet"
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_MAX_S)
        self.runs += 1
        self.last_seconds = self._clock() - started
        term = self.authority.begin()
        log.info("fence done in %.3f s (%d half-written claim(s) fenced so far): term %d begins",
                 self.last_seconds, self.fenced, term)
        return term

    async def _fence_once(self) -> int:
        # Page by page, keeping only the half-written claims: at tens of thousands of claims, all of them
        # decoded at once stood beside the whole cache.
        half: list[dict] = []
        async for claims in self.writer.claim_pages():
            # What the quorum read shows goes into the cache before anything is allocated from it: a
            # standby's watch may still lag behind the allocations the previous leader wrote. (The cache
            # skips versions it has already, and never goes back to an older one.)
            for raw in claims:
                meta = metadata_of(raw)
                cached = self.cache.claim_version(str(meta.get("namespace")), str(meta.get("name")))
                version = meta.get("resourceVersion")
                if cached is None or cached != version:
                    raw.setdefault("kind", "ResourceClaim")
                    raw.setdefault("apiVersion", "resource.k8s.io/v1")
                    self.cache.apply("ResourceClaim", "MODIFIED", raw)
                if half_written(raw):
                    half.append(raw)
        # Concurrently: after a crash mid-burst dozens of claims may be half-written, and each write
        # waits for the API server (seconds when it is slow), while no allocation can happen meanwhile.
        slots = asyncio.Semaphore(FENCE_CONCURRENCY)

        async def clear(raw: dict) -> bool:
            async with slots:
                return await self.writer.clear_half_written(raw)

        settled = await asyncio.gather(*(clear(raw) for raw in half))
        self.fenced += sum(settled)
        return len(settled) - sum(settled)

    def describe(self) -> dict[str, Any]:
        return {"runs": self.runs, "claimsFenced": self.fenced, "lastSeconds": self.last_seconds}


class HalfWrittenSweeper:
    """Removes our finalizer from claims that stayed half-written (see the module's docstring)."""

    def __init__(self, cache: ClusterCache, writer: ClaimWriter, authority: Authority, *,
                 clock: Callable[[], float] = time.monotonic, grace_s: float = SWEEP_GRACE_S) -> None:
        self.cache = cache
        self.writer = writer
        self.authority = authority
        self._clock = clock
        self.grace_s = grace_s
        self._candidates = ClaimWatch(cache, half_written, clock=clock).claims  # UID -> (key, since)
        self.swept = 0

    async def sweep_once(self) -> int:
        """Write the claims that stayed half-written past the grace period; returns how many were settled."""
        if self.authority.term is None:
            return 0
        now = self._clock()
        due = [(uid, key) for uid, (key, since) in self._candidates.items()
               if now - since >= self.grace_s and not self.writer.writing(uid)]
        settled = 0
        for uid, key in due:
            raw = self.cache.raw("ResourceClaim", key)
            if raw is None or metadata_of(raw).get("uid") != uid or not half_written(raw):
                self._candidates.pop(uid, None)
                continue
            if self.writer.writing(uid) or self.authority.term is None:
                continue
            if await self.writer.clear_half_written(raw):
                settled += 1
                self.swept += 1
                self._candidates.pop(uid, None)
        return settled

    def describe(self) -> dict[str, Any]:
        return {"halfWritten": len(self._candidates), "swept": self.swept}


Duty = Callable[[], Awaitable[Any]]


class Stewardship:
    """This replica's terms: `begin` fences and then, while the term lasts, runs each duty every
    `interval_s` (the sweeper, the repair of bound pods); `end` stops them and the term."""

    def __init__(self, cache: ClusterCache, fence: ClaimFence, duties: Sequence[Duty], *,
                 interval_s: float = SWEEP_INTERVAL_S) -> None:
        self.cache = cache
        self.fence = fence
        self.authority = fence.authority
        self.duties = list(duties)
        self.interval_s = interval_s
        self._task: asyncio.Task[None] | None = None

    def begin(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="dra-extender-term")

    async def end(self, reason: str) -> None:
        self.authority.end(reason)
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _run(self) -> None:
        while not self.cache.ready:
            self.authority.reason = "waiting for the cluster cache to sync"
            await asyncio.sleep(0.05)
        await self.fence.run()
        while True:
            await asyncio.sleep(self.interval_s)
            for duty in self.duties:
                try:
                    await duty()
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("a duty of this replica's term failed; it runs again in %.1f s",
                                  self.interval_s)
