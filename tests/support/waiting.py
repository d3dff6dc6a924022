"""Waiting, in async tests, for what another task or the fake API server does next."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def wait_until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Until `condition()` holds; the timeout only bounds a hang (a loaded machine is slow)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        assert loop.time() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)
