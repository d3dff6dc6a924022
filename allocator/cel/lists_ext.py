"""cel-go's lists extension as Kubernetes 1.37 enables it (ext.Lists version 3): the semantics both
engines share.

Version 3 has ``slice``, ``flatten`` (with and without a depth), ``sort``, ``sortBy`` (a macro over
``@sortByAssociatedKeys``), ``distinct``, ``reverse`` and ``lists.range``; ``first`` and ``last``
come later than the cel-go release Kubernetes 1.37 uses, so they are not declared. The functions
here take plain sequences plus what differs between the engines' values (how to tell a list, the
CEL type name of a value, CEL equality) and raise ListsError with cel-go's message.

Sorting: cel-go sorts with Go's sort.Slice, which is not stable in general but is an insertion sort
for lists of up to 12 elements; Python's stable sort gives the same order there. For longer lists
whose sort keys repeat, sortBy's order of elements with equal keys may differ from upstream's.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

MAX_RANGE_SIZE = 1_000_000  # cel-go's default for lists.range
# The element types whose values cel-go can order (traits.Comparer); Kubernetes' Quantity and
# Semver cannot be sorted.
COMPARABLE_KINDS = frozenset({"int", "uint", "double", "bool", "string", "bytes",
                              "google.protobuf.Timestamp", "google.protobuf.Duration"})
FUNCTIONS = ("slice", "flatten", "sort", "distinct", "reverse")  # member functions besides sortBy


class ListsError(ValueError):
    """A run-time error of the lists extension; its message is cel-go's."""


def slice_of(items: Sequence[Any], start: int, end: int) -> list[Any]:
    if start < 0 or end < 0:
        raise ListsError(f"cannot slice({start}, {end}), negative indexes not supported")
    if start > end:
        raise ListsError(f"cannot slice({start}, {end}), start index must be less than or equal to end index")
    if len(items) < end:
        raise ListsError(f"cannot slice({start}, {end}), list is length {len(items)}")
    return list(items[start:end])


def flattened(items: Sequence[Any], depth: int, is_list: Callable[[Any], bool]) -> list[Any]:
    if depth < 0:
        raise ListsError("level must be non-negative")
    result: list[Any] = []
    for item in items:
        if depth == 0 or not is_list(item):
            result.append(item)
        else:
            result.extend(flattened(item, depth - 1, is_list))
    return result


def list_range(size: int) -> list[int]:
    if size < 0:
        raise ListsError(f"lists.range: size must be non-negative, got {size}")
    if size > MAX_RANGE_SIZE:
        raise ListsError(f"lists.range: size {size} exceeds maximum allowed ({MAX_RANGE_SIZE})")
    return list(range(size))


def reversed_list(items: Sequence[Any]) -> list[Any]:
    return list(reversed(items))


def distinct(items: Sequence[Any], equal: Callable[[Any, Any], bool]) -> list[Any]:
    """The first of each run of CEL-equal elements (1, 1u and 1.0 are one), in list order."""
    kept: list[Any] = []
    for item in items:
        if not any(equal(item, other) for other in kept):
            kept.append(item)
    return kept


def sorted_by_keys(items: Sequence[Any], keys: Sequence[Any], kind_of: Callable[[Any], str],
                   less: Callable[[Any, Any], bool]) -> list[Any]:
    """``items`` ordered by ``keys`` (sort() passes the list as its own keys). The keys must all have
    the first one's CEL type, which must be comparable; ``less`` orders two keys of that type."""
    if len(items) != len(keys):
        raise ListsError("@sortByAssociatedKeys() expected a list of the same size as the associated keys "
                         f"list, but got {len(items)} and {len(keys)} elements respectively")
    if not items:
        return list(items)
    kind = kind_of(keys[0])
    if kind not in COMPARABLE_KINDS:
        raise ListsError("list elements must be comparable")
    if len(keys) > 1 and any(kind_of(key) != kind for key in keys):
        raise ListsError("list elements must have the same type")

    def compare(i: int, j: int) -> int:
        return -1 if less(keys[i], keys[j]) else 1 if less(keys[j], keys[i]) else 0

    order = sorted(range(len(items)), key=functools.cmp_to_key(compare))
    return [items[i] for i in order]
