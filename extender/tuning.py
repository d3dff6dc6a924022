"""Process tuning once the cache is synced: the garbage collector, the C allocator's free pages, and
every node's view of its pools built ahead of the first filters.

Why each step pays is in docs/operations.md ("Memory and pauses").
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import Callable

from allocator import AllocationError
from common.heap import collector_paused, return_free_memory
from extender.kube.informer import ClusterWatcher
from extender.plugin.filtercache import FilterCache
from extender.state.cache import ClusterCache

# The allocator makes many short-lived objects per node: collecting every 700 allocations (the default)
# costs more than it frees, and full collections over the synced cache would pause the event loop.
GC_THRESHOLDS = (20_000, 20, 20)


def tune_gc_after_sync() -> None:
    """Move everything alive now (the synced cache) out of the collector's sight and collect less often;
    give the memory the initial lists left free back to the system. Not collected first: the lists
    leave no cyclic garbage to find, and a collection walking the whole synced heap held the event
    loop (the fence, /readyz) meanwhile."""
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    return_free_memory()


# The initial lists allocate millions of objects that all stay alive: collecting while they arrive
# only walks a growing heap again and again, with nothing to free. The collector is off until the
# cache is synced, but for at most this long (an API server that never answers must not leave it off).
SYNC_GC_PAUSE_S = 120.0


async def _tune_gc_when_ready(watcher: ClusterWatcher | None) -> None:
    if watcher is None:
        tune_gc_after_sync()
        return
    # Tuned inside the pause, before the collector is back on: enabled first, its next automatic
    # collection would walk everything the lists made before tuning moves it out of sight. Past the
    # limit the pause ends (freezing what is listed so far) and the tuning waits for the sync.
    with collector_paused():
        synced = await watcher.wait_ready(SYNC_GC_PAUSE_S)
        if synced:
            tune_gc_after_sync()
    if not synced:
        await watcher.wait_ready()
        tune_gc_after_sync()


# Nodes whose view of their pools is built per turn of the event loop when warming them after the sync.
WARM_BATCH = 250


async def warm_node_views(cache: ClusterCache, filter_cache: FilterCache | None = None) -> None:
    """Build every node's view of its pools now, a batch per turn of the event loop, and the filter
    cache's per-node memos with them, so that the first filters after a start do not build them all. A
    filter still builds any view a later change invalidates."""
    names = cache.node_names()
    for first in range(0, len(names), WARM_BATCH):
        for name in names[first:first + WARM_BATCH]:
            node = cache.node(name)
            if node is not None:
                with contextlib.suppress(AllocationError):  # a filter reports it for that node
                    cache.inventory.node_pools(node, cache.features)
                    if filter_cache is not None:
                        filter_cache.warm(node)
        await asyncio.sleep(0)


# How long the warm-up waits for this replica's fence to finish (a standby never begins a term).
FENCE_WAIT_S = 30.0


async def _until(done: Callable[[], bool], limit_s: float) -> None:
    loop = asyncio.get_running_loop()
    until = loop.time() + limit_s
    while not done() and loop.time() < until:
        await asyncio.sleep(0.05)


async def after_sync(cache: ClusterCache, watcher: ClusterWatcher | None,
                     filter_cache: FilterCache | None = None, *,
                     fenced: Callable[[], bool] | None = None) -> None:
    """Once synced: tune the collector, warm the node views with the collector paused, which moves the
    views out of its sight too (built after the freeze, they would otherwise sit in the young
    generations and be walked again by the next collections of generation 1), and return free pages
    once more."""
    await _tune_gc_when_ready(watcher)
    if fenced is not None:
        # The fence's read of every claim comes first: no filter is answered before it is done, and
        # warming meanwhile only took turns with it.
        await _until(fenced, FENCE_WAIT_S)
    with collector_paused():
        await warm_node_views(cache, filter_cache)
    return_free_memory()
