"""cel-go's strings extension (version 2, as the Kubernetes environment declares it): what both
engines share of ``indexOf`` and ``lastIndexOf`` with an offset.

Offsets count code points. A negative offset fails; past the end of the text an empty substring is
found at the end and any other substring nowhere (cel-go 0.29; earlier releases failed there).
"""

from __future__ import annotations


def index_of(text: str, sub: str, offset: int | None = None) -> int:
    """Where ``sub`` first occurs in ``text`` from ``offset`` on; raises IndexError for a negative one."""
    start = 0 if offset is None else _checked(offset)
    if not sub:
        return min(start, len(text))
    return text.find(sub, start) if start < len(text) else -1


def last_index_of(text: str, sub: str, offset: int | None = None) -> int:
    """Where ``sub`` last occurs in ``text`` starting at ``offset`` or before; raises IndexError for a
    negative offset."""
    if offset is None:
        return text.rfind(sub)
    start = _checked(offset)
    if not sub:
        return min(start, len(text))
    if start >= len(text):
        return -1
    start = min(start, len(text) - len(sub))
    return text.rfind(sub, 0, start + len(sub)) if start >= 0 else -1


def _checked(offset: int) -> int:
    if offset < 0:
        raise IndexError(f"index out of range: {offset}")
    return offset
