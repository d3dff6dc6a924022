"""The cache's Pods and ResourceSlices kept packed: one tuple per object instead of many dicts.

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

A ResourceSlice is mostly its devices, a dict each. A store made with `listed` also packs the lists
named there (spec.devices for slices) item by item: each object in such a list becomes a tuple with its
own layout, and reads back as a new dict. A slice with 8 devices takes about half the memory.
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
    """A layout entry for a top-level key whose object is flattened into the tuple. `listed`: the
    positions in `keys` whose values are lists of objects, stored as a tuple of packed items."""

    name: str
    keys: tuple[Any, ...]
    listed: tuple[int, ...] = ()


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


def _entries(keys: tuple[Any, ...], sections: tuple[tuple[Any, ...] | None, ...],
             listed: tuple[tuple[str, int], ...] = ()) -> tuple[Entry, ...]:
    """A layout's entries from `pack`'s shape: the top-level keys, the keys of each SECTIONS key's
    object in order (None where that key's value is not an object), and (section, position) of the
    values packed item by item."""
    flattened = iter(sections)
    entries: list[Entry] = []
    for key in keys:
        inner = next(flattened) if key in SECTIONS else None
        positions = tuple(position for section, position in listed if section == key)
        entries.append(key if inner is None else Section(key, inner, positions))
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
            inner = ", ".join(
                f"{key!r}: [q[0].rebuild(q) for q in p[{position + offset}]]" if offset in entry.listed
                else f"{key!r}: p[{position + offset}]"
                for offset, key in enumerate(entry.keys))
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
            section = dict(zip(entry.keys, packed[position:end], strict=True))
            for offset in entry.listed:
                key = entry.keys[offset]
                section[key] = [PackedStore.unpack(item) for item in section[key]]
            obj[entry.name] = section
            position = end
        else:
            obj[entry] = packed[position]
            position += 1
    return obj


class PackedStore(MutableMapping[str, dict]):
    """A mapping of key -> object, keeping every object packed (see the module's docstring).
    `listed`: (section, key) of the lists whose objects are packed too, such as ("spec", "devices")."""

    __slots__ = ("_item_layouts", "_layouts", "_listed", "_packed")

    def __init__(self, listed: frozenset[tuple[str, str]] = frozenset()) -> None:
        self._packed: dict[str, tuple[Any, ...]] = {}
        self._layouts: dict[tuple[Any, ...], Layout] = {}
        self._item_layouts: dict[tuple[Any, ...], Layout] = {}
        self._listed: dict[str, frozenset[str]] = {}
        for section, key in listed:
            self._listed[section] = self._listed.get(section, frozenset()) | {key}

    def pack(self, obj: dict) -> tuple[Any, ...]:
        values: list[Any] = []
        # The shape is found with plain tuples (made in C): Sections are made only for a new layout.
        sections: list[tuple[Any, ...] | None] = []
        listed: list[tuple[str, int]] = []
        for key, value in obj.items():
            if key in SECTIONS:
                if type(value) is dict:
                    sections.append(tuple(value))
                    if key in self._listed:
                        self._pack_section(key, value, values, listed)
                    else:
                        values.extend(value.values())
                    continue
                sections.append(None)
            values.append(value)
        shape = (tuple(obj), tuple(sections), tuple(listed))
        layout = self._layouts.get(shape)
        if layout is None:
            if len(self._layouts) >= MAX_LAYOUTS:
                self._layouts.clear()
            layout = self._layouts[shape] = Layout(_entries(*shape))
        return (layout, *values)

    def _pack_section(self, name: str, section: dict, values: list[Any],
                      listed: list[tuple[str, int]]) -> None:
        """A section's values onto `values`, the lists named in `listed` of objects only as a tuple of
        packed items (their positions added to `listed`); other lists, empty ones included, as they are."""
        keys = self._listed[name]
        for position, (key, value) in enumerate(section.items()):
            if key in keys and type(value) is list and value and all(type(item) is dict for item in value):
                values.append(tuple(self._pack_item(item) for item in value))
                listed.append((name, position))
            else:
                values.append(value)

    def _pack_item(self, item: dict) -> tuple[Any, ...]:
        keys = tuple(item)
        layout = self._item_layouts.get(keys)
        if layout is None:
            if len(self._item_layouts) >= MAX_LAYOUTS:
                self._item_layouts.clear()
            layout = self._item_layouts[keys] = Layout(keys)
        return (layout, *item.values())

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
