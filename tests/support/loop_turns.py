"""Counting event-loop turns another request gets while a long check runs (tests of yielding)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class Turns:
    count = 0


@asynccontextmanager
async def loop_turns() -> AsyncIterator[Turns]:
    """While the block runs, a concurrent task counts every turn the event loop gives it."""
    turns = Turns()
    done = asyncio.Event()

    async def other_request() -> None:
        while not done.is_set():
            turns.count += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(other_request())
    try:
        yield turns
    finally:
        done.set()
        await task
