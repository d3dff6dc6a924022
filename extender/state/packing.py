"""The cache's Pods kept packed: one tuple per Pod instead of four dicts.

A large cluster has more Pods than anything else the cache keeps (80,000 at 20,000 nodes in
bench/scale_bench.py), and a Python dict costs 184 bytes or more even with one key. A stored Pod (as
extender.state.podtransform slims it) is a top-level dict and three small ones, metadata, spec and
status, that hold the values. `PackedStore` keeps each Pod as one tuple: a layout naming the keys in
order (shared by every Pod of the same shape: a few per workload), then the values themselves. The
values are the very objects the Pod held, so what extender.state.sharing shares stays shared.

Reading a Pod unpacks it into new dicts, equal to the one stored, with its values as they were (about
1 us on the 2 GHz bench machine, through a function generated per layout: see `Layout`). A read is
therefore never the stored object itself, and changing it changes nothing stored (the cache never
edits stored objects in place anyway). Only the cache reads the store.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping
from functools import partial
from typing import Any, NamedTuple, cast

# Top-level keys whose object values are flattened into the tuple.
SECTIONS = frozenset({"metadata", "spec", "status"})
# Distinct layouts kept for sharing; a stream of unusual shapes empties the table (packed Pods keep
# their own layout alive, so nothing stored changes).
MAX_LAYOUTS = 4096


class Section(NamedTuple):
    """A layout entry for a top-level key whose object is flattened into the tuple."""

    name: str
    keys: tuple[Any, ...]


# A layout entry: a top-level key whose value is stored as it is, or a Section.
Entry = Any


class Layout:
    """One shape of object: its keys in order, and `rebuild`, which makes such an object from a packed
    tuple. Made once per shape, so its cost does not matter; a rebuild is a Pod read's whole cost."""

    __slots__ = ("entries", "rebuild")

    def __init__(self, entries: tuple[Entry, ...]) -> None:
        self.entries = entries
        self.rebuild: Callable[[tuple[Any, ...]], dict] = (
            _compiled(entries) if all(type(key) is str for key in _keys(entries))
            else partial(_rebuild, entries))


def _entries(keys: tuple[Any, ...], sections: tuple[tuple[Any, ...] | None, ...]) -> tuple[Entry, ...]:
    """A layout's entries from `pack`'s shape: the top-level keys, and the keys of each SECTIONS key's
    object in order (None where that key's value is not an object)."""
    flattened = iter(sections)
    entries: list[Entry] = []
    for key in keys:
        inner = next(flattened) if key in SECTIONS else None
        entries.append(key if inner is None else Section(key, inner))
    return tuple(entries)


def _keys(entries: tuple[Entry, ...]) -> Iterator[Any]:
    for entry in entries:
        if type(entry) is Section:
            yield entry.name
            yield from entry.keys
        else:
            yield entry


def _compiled(entries: tuple[Entry, ...]) -> Callable[[tuple[Any, ...]], dict]:
    """A function returning the object as one dict display, under a quarter of the time of `_rebuild`'s
    loop (a Pod read 1.2 us instead of 5.5 on the 2 GHz bench machine). Only for str keys, written as
    their repr(), which is always a plain string literal; nothing else of the object goes in the code."""
    parts, position = [], 1
    for entry in entries:
        if type(entry) is Section:
            inner = ", ".join(f"{key!r}: p[{position + offset}]" for offset, key in enumerate(entry.keys))
            parts.append(f"{entry.name!r}: {{{inner}}}")
            position += len(entry.keys)
        else:
            parts.append(f"{entry!r}: p[{position}]")
            position += 1
    return cast(Callable[[tuple[Any, ...]], dict],
                eval(f"lambda p: {{{', '.join(parts)}}}", {"__builtins__": {}}))


def _rebuild(entries: tuple[Entry, ...], packed: tuple[Any, ...]) -> dict:
    """`Layout.rebuild` for keys that are not all str (objects read from YAML snapshots may have them)."""
    obj: dict[Any, Any] = {}
    position = 1
    for entry in entries:
        if type(entry) is Section:
            end = position + len(entry.keys)
            obj[entry.name] = dict(zip(entry.keys, packed[position:end], strict=True))
            position = end
        else:
            obj[entry] = packed[position]
            position += 1
    return obj


class PackedStore(MutableMapping[str, dict]):
    """A mapping of key -> object, keeping every object packed (see the module's docstring)."""

    __slots__ = ("_layouts", "_packed")

    def __init__(self) -> None:
        self._packed: dict[str, tuple[Any, ...]] = {}
        self._layouts: dict[tuple[tuple[Any, ...], tuple[tuple[Any, ...] | None, ...]], Layout] = {}

    def pack(self, obj: dict) -> tuple[Any, ...]:
        values: list[Any] = []
        # The shape is found with plain tuples (made in C): Sections are made only for a new layout.
        sections: list[tuple[Any, ...] | None] = []
        for key, value in obj.items():
            if key in SECTIONS:
                if type(value) is dict:
                    sections.append(tuple(value))
                    values.extend(value.values())
                    continue
                sections.append(None)
            values.append(value)
        shape = (tuple(obj), tuple(sections))
        layout = self._layouts.get(shape)
        if layout is None:
            if len(self._layouts) >= MAX_LAYOUTS:
                self._layouts.clear()
            layout = self._layouts[shape] = Layout(_entries(*shape))
        return (layout, *values)

    @staticmethod
    def unpack(packed: tuple[Any, ...]) -> dict:
        return cast(Layout, packed[0]).rebuild(packed)

    def __getitem__(self, key: str) -> dict:
        return self.unpack(self._packed[key])

    def get(self, key: str, default: Any = None) -> Any:
        packed = self._packed.get(key)
        return default if packed is None else self.unpack(packed)

    def __setitem__(self, key: str, obj: dict) -> None:
        self._packed[key] = self.pack(obj)

    def __delitem__(self, key: str) -> None:
        del self._packed[key]

    def __contains__(self, key: object) -> bool:
        return key in self._packed

    def __iter__(self) -> Iterator[str]:
        return iter(self._packed)

    def __len__(self) -> int:
        return len(self._packed)
