"""The process heap: giving the C allocator's free pages back to the system, and keeping the cyclic
garbage collector off while the cache takes in many objects that all stay alive."""

from __future__ import annotations

import contextlib
import ctypes
import gc
from collections.abc import Iterator


def return_free_memory() -> None:
    """Ask the C allocator to return its free pages (glibc's malloc_trim; elsewhere nothing happens).
    Reading a whole kind (the initial lists, a re-list) leaves part of the heap free but held."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return
    trim(0)


_pause_holders = 0
_paused_by_us = False


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic collector off while the block runs; blocks running at once (several kinds re-listed
    together) share one pause. When the last ends, everything alive is frozen (`gc.freeze`), then the
    collector is back on. A collector someone else turned off is left as it is.

    For blocks that make many objects that stay alive (the first lists, a re-list, the node views):
    collecting meanwhile walks them again and again and frees nothing (at 20,000 nodes collections of
    generation 1 and 2 held the event loop for 100-150 ms each), and, not frozen, they would all be
    walked by the first collections afterwards. The price: cyclic garbage made during the block (tens
    of objects per collection under filter load) is frozen with the rest, never freed."""
    global _pause_holders, _paused_by_us
    if _pause_holders == 0 and gc.isenabled():
        gc.disable()
        _paused_by_us = True
    _pause_holders += 1
    try:
        yield
    finally:
        _pause_holders -= 1
        if _pause_holders == 0 and _paused_by_us:
            _paused_by_us = False
            gc.freeze()
            gc.enable()
