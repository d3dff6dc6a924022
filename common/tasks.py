"""Work on the event loop beside the requests: stopping a background task (cancel it and wait until it
has unwound), and long work done in slices between which the loop runs everything else."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable
from typing import Any


async def cancel_and_wait(task: asyncio.Task[Any] | None) -> None:
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


# Long work on the event loop between two yields, unless its caller says otherwise: a request that
# arrives meanwhile waits about this long.
SLICE_S = 0.005


class SharedSlices:
    """Pieces of work running at once (a re-list reads every kind together): each runs for its share of
    the slice between two yields, so that one turn of the event loop, which runs a slice of each, stays
    about one slice long. With a whole slice each, requests waited for the sum of them."""

    def __init__(self) -> None:
        self.running = 0


async def in_slices(steps: Iterable[object], slice_s: float, shared: SharedSlices | None = None) -> None:
    """Run `steps` (an iterator doing one piece of work per item), yielding to the event loop every
    `slice_s`, or every share of it when `shared` with other work."""
    shared = shared or SharedSlices()
    shared.running += 1
    try:
        until = time.perf_counter() + slice_s / shared.running
        for _ in steps:
            if time.perf_counter() >= until:
                await asyncio.sleep(0)
                until = time.perf_counter() + slice_s / shared.running
    finally:
        shared.running -= 1
