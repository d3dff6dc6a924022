"""The event loop the servers run on: uvloop when it is installed (the `fast` extra), else asyncio's.

uvloop is a drop-in asyncio loop whose transports, TLS included, are written in Cython. On the e2e
benchmark the extender spends much of its CPU in asyncio's pure-Python TLS transport (kube-scheduler
and the API server are both HTTPS peers), which is where uvloop is fastest. Nothing in the code
depends on which loop runs it; tests run on asyncio's own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def _uvloop() -> Any | None:
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop


def name() -> str:
    return "uvloop" if _uvloop() is not None else "asyncio"


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run `main` to completion on a new loop, as asyncio.run does."""
    uvloop = _uvloop()
    if uvloop is None:
        return asyncio.run(main)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)
