"""List + watch of the kinds the extender needs, feeding a WatchSink (the extender's ClusterCache).

Per kind: list, then watch from the list's resourceVersion, resuming from the last version seen
(events and bookmarks) whenever the server ends a stream. A 410 Gone means the version fell out of
the server's history: the kind is listed again and its contents replaced, so deletions that
happened meanwhile are seen. Other errors back off exponentially with jitter and resume the watch.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import random
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp

from allocator import FeatureGates
from common.claimrefs import WORKLOAD_CLAIMS
from common.heap import collector_paused, return_free_memory
from common.objects import list_metadata_of, metadata_of
from common.tasks import SharedSlices, in_slices
from extender.kube.client import ApiError, KubeClient

log = logging.getLogger(__name__)


class Replacing(Protocol):
    """The complete contents of one kind, arriving object by object (a re-list)."""

    def add(self, raw: dict[str, Any]) -> None: ...

    def finish(self) -> None: ...

    def finishing(self) -> Iterable[None]: ...


class WatchSink(Protocol):
    """What list+watch feeds (the extender's ClusterCache): whole contents after a list, then changes."""

    ready: bool

    def apply(self, kind: str, event_type: str, raw: object) -> None: ...

    def replace(self, kind: str, items: Iterable[dict[str, Any]]) -> None: ...

    def replacing(self, kind: str) -> Replacing: ...


@dataclass(frozen=True)
class WatchedKind:
    kind: str
    path: str
    # An optional kind whose API is not served (older cluster, feature gate off) counts as empty.
    optional: bool = False


DEFAULT_KINDS = (
    WatchedKind("Node", "/api/v1/nodes"),
    WatchedKind("Pod", "/api/v1/pods"),
    WatchedKind("DeviceClass", "/apis/resource.k8s.io/v1/deviceclasses"),
    WatchedKind("ResourceSlice", "/apis/resource.k8s.io/v1/resourceslices"),
    WatchedKind("ResourceClaim", "/apis/resource.k8s.io/v1/resourceclaims"),
    WatchedKind("ResourceClaimTemplate", "/apis/resource.k8s.io/v1/resourceclaimtemplates"),
    WatchedKind("DeviceTaintRule", "/apis/resource.k8s.io/v1/devicetaintrules", optional=True),
)
# With the DRAWorkloadResourceClaims gate. Optional: a cluster that does not serve
# scheduling.k8s.io/v1beta1 has no PodGroups, and pods naming one wait (their PodGroup is "not found").
POD_GROUPS = WatchedKind("PodGroup", "/apis/scheduling.k8s.io/v1beta1/podgroups", optional=True)


def watched_kinds(features: FeatureGates) -> tuple[WatchedKind, ...]:
    """The kinds to list and watch with these feature gates."""
    return (*DEFAULT_KINDS, POD_GROUPS) if features.enabled(WORKLOAD_CLAIMS) else DEFAULT_KINDS


@dataclass
class Backoff:
    """Exponential delay with equal jitter: half fixed, half random, so restarts do not synchronize."""

    initial_s: float = 0.5
    max_s: float = 30.0
    _current: float = 0.0

    def next(self) -> float:
        self._current = self.initial_s if self._current == 0 else min(self._current * 2, self.max_s)
        return self._current / 2 + random.uniform(0, self._current / 2)

    def reset(self) -> None:
        self._current = 0.0

    def hold_at_max(self) -> None:
        self._current = self.max_s


@dataclass
class KindHealth:
    listed: bool = False
    available: bool = True
    resource_version: str | None = None
    last_event_time: float | None = None
    events: int = 0
    bookmarks: int = 0
    lists: int = 0
    restarts: int = 0
    errors: int = 0
    last_error: str | None = None
    backoff: Backoff = field(default_factory=Backoff)

    def as_dict(self, now: float) -> dict[str, Any]:
        return {
            "listed": self.listed,
            "available": self.available,
            "resourceVersion": self.resource_version,
            "lastEventTime": _rfc3339(self.last_event_time) if self.last_event_time else None,
            "lastEventAgeSeconds": round(now - self.last_event_time, 3) if self.last_event_time else None,
            "events": self.events,
            "bookmarks": self.bookmarks,
            "lists": self.lists,
            "restarts": self.restarts,
            "errors": self.errors,
            "lastError": self.last_error,
        }


def _rfc3339(epoch_s: float) -> str:
    return datetime.datetime.fromtimestamp(epoch_s, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


INITIAL_EVENTS_END = "k8s.io/initial-events-end"


@dataclass(frozen=True)
class ListStrategy:
    """How a kind's contents are read before watching it: "paged" (pages of `page_size` objects, the
    default), "list" (one response) or "watchlist" (a watch's initial events, the WatchList protocol).

    Pages bound what is decoded at once (one list per kind raises the peak and fragments the heap;
    docs/operations.md has the figures). WatchList bounds it as well, but a server without it (gate
    off, before 1.34) would not end the initial events, so serve does not use it;
    bench/api_encoding_bench.py measures all three on a real kube-apiserver."""

    mode: str = "paged"
    page_size: int = 500
    # A page is decoded in one step of the event loop (500 of bench/scale_bench.py's slices, 659 KiB:
    # 4 ms warm, up to 13 ms in a re-list): once a page shows the kind's objects are large, the next ask
    # for fewer, about this many bytes a page.
    page_bytes: int = 512 * 1024

    def __post_init__(self) -> None:
        if self.mode not in ("list", "paged", "watchlist"):
            raise ValueError(f"unknown list strategy {self.mode!r}; expected list, paged or watchlist")
        if self.page_size < 1 or self.page_bytes < 1:
            raise ValueError("page size must be positive")


class _Relist(Exception):
    """The watch cannot resume from the version it has; list again."""


def _handed_over(items: list[Any]) -> Iterator[Any]:
    """The items of a list response, each dropped from the list as it is handed to the cache: the cache
    keeps a slim or shared copy, and the decoded original can be freed at once rather than after the
    whole list (a list of 20,000 full pods would otherwise stay alive beside the cache's copies)."""
    for index, item in enumerate(items):
        items[index] = None
        yield item


# Work done on the event loop between two yields while a list's objects go into the cache: a page of
# 500 large objects at once held every request waiting for tens of ms, in a re-list as in the first.
LIST_SLICE_S = 0.005


async def _apply_in_slices(replacement: Replacing, items: list[Any],
                           shared: SharedSlices | None = None) -> None:
    """Hand `items` to `replacement` (see _handed_over), a slice at a time (`in_slices`)."""
    def adding() -> Iterator[None]:
        for raw in _handed_over(items):
            replacement.add(raw)
            yield

    await in_slices(adding(), LIST_SLICE_S, shared)


class ClusterWatcher:
    def __init__(
        self,
        client: KubeClient,
        cache: WatchSink,
        *,
        kinds: tuple[WatchedKind, ...] = DEFAULT_KINDS,
        on_restart: Callable[[str], None] | None = None,
        watch_timeout_s: tuple[float, float] = (300.0, 600.0),
        backoff_initial_s: float = 0.5,
        backoff_max_s: float = 30.0,
        list_strategy: ListStrategy = ListStrategy(),
        fail_fast: bool = False,
    ) -> None:
        self.client = client
        # A command run by a person stops at the first refusal (401, 403) instead of retrying it: the
        # refusal is kept in `failure` and wait_ready returns at once. A server retries (RBAC may be
        # fixed while it runs).
        self.fail_fast = fail_fast
        self.failure: str | None = None
        # Objects of each kind read by its list so far: progress of a long initial sync.
        self.listed_items: dict[str, int] = {k.kind: 0 for k in kinds}
        self._list_strategy = list_strategy
        self.cache = cache
        self.kinds = kinds
        self._on_restart = on_restart
        self._watch_timeout = watch_timeout_s
        self._health = {
            k.kind: KindHealth(backoff=Backoff(backoff_initial_s, backoff_max_s)) for k in kinds
        }
        self._tasks: list[asyncio.Task[None]] = []
        self._list_slices = SharedSlices()
        self._ready = asyncio.Event()
        self._settled = asyncio.Event()  # ready, or failed for good (fail_fast)

    # ---- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        if self._tasks:
            raise RuntimeError("ClusterWatcher already started")
        self._tasks = [asyncio.create_task(self._run(k), name=f"watch {k.kind}") for k in self.kinds]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []

    @property
    def ready(self) -> bool:
        return self._ready.is_set()

    async def wait_ready(self, timeout_s: float | None = None) -> bool:
        """Whether the initial lists are done within `timeout_s`; False at once on a refusal when
        `fail_fast` (see `failure`)."""
        try:
            await asyncio.wait_for(self._settled.wait(), timeout_s)
        except TimeoutError:
            return False
        return self.ready

    def health(self) -> dict[str, Any]:
        now = time.time()
        return {"ready": self.ready, "kinds": {kind: h.as_dict(now) for kind, h in self._health.items()}}

    # ---- per kind -----------------------------------------------------------------------------

    async def _run(self, watched: WatchedKind) -> None:
        health = self._health[watched.kind]
        while True:
            try:
                if health.resource_version is None:
                    await self._list(watched, health)
                started = time.monotonic()
                if await self._watch(watched, health) or time.monotonic() - started > 1.0:
                    # The server ended the stream (its timeout): resume from the last version at once.
                    continue
                # An empty stream that ended at once (a proxy closing it?) must not become a busy loop.
            except _Relist as why:
                self._restarted(watched.kind, health, str(why))
                health.resource_version = None
                continue
            except ApiError as err:
                if err.not_found and watched.optional:
                    self._unavailable(watched, health)
                elif self.fail_fast and err.status in (401, 403):
                    self.failure = f"{watched.kind}: {err.status} {err.reason}: {err.message}"
                    self._settled.set()
                    return
                else:
                    self._failed(watched.kind, health, f"{err.status} {err.reason}: {err.message}")
            except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as err:
                self._failed(watched.kind, health, f"{type(err).__name__}: {err}")
            except Exception as err:
                # Never let one kind's task die silently; start over from a fresh list.
                log.exception("watch %s: unexpected error", watched.kind)
                self._failed(watched.kind, health, f"{type(err).__name__}: {err}")
                health.resource_version = None
            await asyncio.sleep(health.backoff.next())

    async def _list(self, watched: WatchedKind, health: KindHealth) -> None:
        # The first lists have the collector off already (extender/tuning.py); a re-list gets the same.
        with collector_paused() if health.lists else contextlib.nullcontext():
            if self._list_strategy.mode == "watchlist":
                version = await self._watch_list(watched)
            else:
                version = await self._list_pages(watched)
        health.resource_version = version
        health.lists += 1
        if health.lists > 1:
            # The kind's old objects the re-list replaced are freed by now.
            return_free_memory()
        health.available = True
        health.last_event_time = time.time()
        health.backoff.reset()
        self._listed(watched.kind, health)

    async def _list_pages(self, watched: WatchedKind) -> str:
        """The whole collection, in one response or in pages of `page_size` (limit and continue); each
        part goes to the cache as it arrives. Returns the list's resourceVersion."""
        replacement = self.cache.replacing(watched.kind)
        self.listed_items[watched.kind] = 0
        strategy = self._list_strategy
        limit = strategy.page_size if strategy.mode == "paged" else None
        version: str | None = None
        async for listing in self.client.pages(watched.path, limit=limit, page_bytes=strategy.page_bytes):
            items = listing.get("items")
            version = list_metadata_of(listing).get("resourceVersion")
            if not isinstance(items, list) or not isinstance(version, str):
                raise ValueError(f"list of {watched.path} returned no items or resourceVersion")
            self.listed_items[watched.kind] += len(items)
            del listing
            await _apply_in_slices(replacement, items, self._list_slices)
            del items
        if version is None:   # not reached: pages yields at least one response
            raise ValueError(f"list of {watched.path} returned nothing")
        await in_slices(replacement.finishing(), LIST_SLICE_S, self._list_slices)
        return version

    async def _watch_list(self, watched: WatchedKind) -> str:
        """The whole collection as a watch's initial events (WatchList: sendInitialEvents=true), up to
        the bookmark that ends them; returns its resourceVersion. The stream is then closed and the
        usual watch resumes from that version."""
        replacement = self.cache.replacing(watched.kind)
        events = self.client.watch(watched.path, None, sendInitialEvents=True,
                                   resourceVersionMatch="NotOlderThan", timeout_seconds=600)
        try:
            async for event in events:
                obj = event["object"]
                if event.get("type") == "BOOKMARK":
                    meta = metadata_of(obj)
                    if (meta.get("annotations") or {}).get(INITIAL_EVENTS_END) == "true":
                        version = meta.get("resourceVersion")
                        if not isinstance(version, str) or not version:
                            raise ValueError(f"watch-list of {watched.path}: a bookmark without version")
                        await in_slices(replacement.finishing(), LIST_SLICE_S, self._list_slices)
                        return version
                elif event.get("type") in ("ADDED", "MODIFIED"):
                    replacement.add(obj)
        finally:
            await events.aclose()
        raise ValueError(f"watch-list of {watched.path} ended before its initial events did")

    async def _watch(self, watched: WatchedKind, health: KindHealth) -> int:
        """Follow one watch stream until the server ends it; returns the number of events received."""
        timeout = int(random.uniform(*self._watch_timeout))
        received = 0
        try:
            events = self.client.watch(watched.path, health.resource_version, timeout_seconds=timeout)
            async for event in events:
                event_type = event.get("type")
                obj = event["object"]
                version = metadata_of(obj).get("resourceVersion")
                if event_type in ("ADDED", "MODIFIED", "DELETED"):
                    self.cache.apply(watched.kind, event_type, obj)
                    health.events += 1
                elif event_type == "BOOKMARK":
                    health.bookmarks += 1
                else:
                    log.warning("watch %s: ignoring event of type %r", watched.path, event_type)
                    continue
                if isinstance(version, str) and version:
                    health.resource_version = version
                health.last_event_time = time.time()
                health.backoff.reset()
                received += 1
        except ApiError as err:
            if err.gone:
                raise _Relist(f"410 Gone: {err.message}") from err
            raise
        return received

    # ---- bookkeeping --------------------------------------------------------------------------

    def _listed(self, kind: str, health: KindHealth) -> None:
        if not health.listed:
            health.listed = True
            if all(h.listed for h in self._health.values()):
                self.cache.ready = True
                self._ready.set()
                self._settled.set()
                log.info("cluster cache ready: initial lists done")

    def _unavailable(self, watched: WatchedKind, health: KindHealth) -> None:
        if health.available:
            log.info("%s is not served (%s); treating it as empty", watched.kind, watched.path)
        health.available = False
        self.cache.replace(watched.kind, [])
        self._listed(watched.kind, health)
        # Checked again at the slowest backoff pace: the API may be enabled later.
        health.backoff.hold_at_max()

    def _restarted(self, kind: str, health: KindHealth, why: str) -> None:
        health.restarts += 1
        log.info("watch %s restarts: %s", kind, why, extra={"kind": kind})
        if self._on_restart is not None:
            self._on_restart(kind)

    def _failed(self, kind: str, health: KindHealth, message: str) -> None:
        health.errors += 1
        health.last_error = message
        log.warning("watch %s failed: %s", kind, message, extra={"kind": kind})
        self._restarted(kind, health, message)
