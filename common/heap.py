"""Giving the C allocator's free pages back to the system."""

from __future__ import annotations

import ctypes


def return_free_memory() -> None:
    """Ask the C allocator to return its free pages (glibc's malloc_trim; elsewhere nothing happens).
    Reading a whole kind (the initial lists, a re-list) leaves part of the heap free but held."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return
    trim(0)
