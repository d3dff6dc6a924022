"""The cache's Pods, ResourceClaims and ResourceSlices kept packed: one tuple per object instead of
many dicts.

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

Claims are packed the same way, with their spec kept whole (CLAIM_SECTIONS). The cache's parsed claim,
`PackedClaim`, holds the store's tuple instead of the dicts and gives `raw` as a copy; what hot paths
read of a claim is parsed (allocator.model.ResourceClaim), so they do not unpack it. Nodes likewise
(`PackedNode`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping
from functools import partial
from typing import Any, NamedTuple, cast

from allocator import Node, ResourceClaim

# Top-level keys whose object values are flattened into the tuple: a Pod's or a slice's. A claim's spec
# is one object for every claim of a template, whose identity reuses its parse: claims keep it whole.
SECTIONS = frozenset({"metadata", "spec", "status"})
CLAIM_SECTIONS = frozenset({"metadata", "status"})
# Distinct layouts kept for sharing; a stream of unusual shapes empties the table (packed Pods keep
# their own layout alive, so nothing stored changes).
MAX_LAYOUTS = 4096
# Packed lists kept for sharing (`PackedStore._shared`); unique ones (the claims a pod names) pass
# through, emptying the table now and then.
MAX_SHARED_LISTS = 4096


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
             listed: tuple[tuple[str, int], ...], flattened_keys: frozenset[str]) -> tuple[Entry, ...]:
    """A layout's entries from `pack`'s shape: the top-level keys, the keys of each flattened key's
    object in order (None where that key's value is not an object), and (section, position) of the
    values packed item by item."""
    flattened = iter(sections)
    entries: list[Entry] = []
    for key in keys:
        inner = next(flattened) if key in flattened_keys else None
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
    `sections`: the top-level keys whose objects are flattened. `listed`: (section, key) of the lists
    whose objects are packed too, such as ("spec", "devices")."""

    __slots__ = ("_item_layouts", "_layouts", "_listed", "_lists", "_packed", "_sections", "_shared_lists")

    def __init__(self, listed: frozenset[tuple[str, str]] = frozenset(), *,
                 sections: frozenset[str] = SECTIONS,
                 shared: frozenset[tuple[str, str]] = frozenset()) -> None:
        """`shared`: those of `listed` that are often equal on many objects (a workload's claim references,
        which the sharer made one list): equal packed ones are kept as one tuple."""
        if not {section for section, _ in listed} <= sections:
            raise ValueError(f"listed {sorted(listed)}: only lists in the sections {sorted(sections)}")
        if not shared <= listed:
            raise ValueError(f"shared {sorted(shared)}: only lists that are listed {sorted(listed)}")
        self._shared_lists = shared
        self._lists: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        self._sections = sections
        self._packed: dict[str, tuple[Any, ...]] = {}
        self._layouts: dict[tuple[Any, ...], Layout] = {}
        self._item_layouts: dict[tuple[Any, ...], Layout] = {}
        # section -> the keys listed in it, in a fixed order (a shape names their positions in that order)
        self._listed: dict[str, tuple[str, ...]] = {}
        for section, key in sorted(listed):
            self._listed[section] = (*self._listed.get(section, ()), key)

    def pack(self, obj: dict) -> tuple[Any, ...]:
        values: list[Any] = []
        # The shape is found with plain tuples (made in C): Sections are made only for a new layout.
        sections: list[tuple[Any, ...] | None] = []
        listed: list[tuple[str, int]] = []
        flattened = self._sections
        for key, value in obj.items():
            if key in flattened:
                if type(value) is dict:
                    keys = tuple(value)
                    sections.append(keys)
                    start = len(values)
                    values.extend(value.values())
                    for name in self._listed.get(key, ()):
                        items = self._packed_list(value.get(name))
                        if items is not None:
                            if (key, name) in self._shared_lists:
                                items = self._shared(items)
                            position = keys.index(name)
                            values[start + position] = items
                            listed.append((key, position))
                    continue
                sections.append(None)
            values.append(value)
        shape = (tuple(obj), tuple(sections), tuple(listed))
        layout = self._layouts.get(shape)
        if layout is None:
            if len(self._layouts) >= MAX_LAYOUTS:
                self._layouts.clear()
            layout = self._layouts[shape] = Layout(_entries(*shape, flattened))
        return (layout, *values)

    def _packed_list(self, value: Any) -> tuple[Any, ...] | None:
        """A list of objects as a tuple of packed items; None for anything else (kept as it is), empty
        lists included."""
        if type(value) is not list or not value:
            return None
        items = []
        for item in value:
            if type(item) is not dict:
                return None
            keys = tuple(item)
            layout = self._item_layouts.get(keys)
            if layout is None:
                if len(self._item_layouts) >= MAX_LAYOUTS:
                    self._item_layouts.clear()
                layout = self._item_layouts[keys] = Layout(keys)
            items.append((layout, *item.values()))
        return tuple(items)

    def _shared(self, items: tuple[Any, ...]) -> tuple[Any, ...]:
        """The one tuple kept for packed lists equal to `items`, when they hold strings only: 1, 1.0 and
        True are equal keys but not the same JSON."""
        if not all(type(value) is str for item in items for value in item[1:]):
            return items
        found = self._lists.get(items)
        if found is not None:
            return found
        if len(self._lists) >= MAX_SHARED_LISTS:
            self._lists.clear()
        self._lists[items] = items
        return items

    def packed_copy(self) -> dict[str, tuple[Any, ...]]:
        """Key -> packed object of every object stored, a shallow copy: for a reader that unpacks them
        later (a dict's copy is about five times cheaper than a list of its items)."""
        return self._packed.copy()

    def packed(self, key: str) -> tuple[Any, ...]:
        """The packed form of `self[key]`, for a PackedClaim to hold (KeyError when there is none)."""
        return self._packed[key]

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

    def clear(self) -> None:
        """At once (MutableMapping's clear unpacks and deletes one object at a time)."""
        self._packed.clear()
        self._lists.clear()

    def __contains__(self, key: object) -> bool:
        return key in self._packed

    def __iter__(self) -> Iterator[str]:
        return iter(self._packed)

    def __len__(self) -> int:
        return len(self._packed)


class _HoldsPacked:
    """A parsed object that holds the store's packed tuple rather than the dicts it was parsed from, so
    the object is not kept twice: `raw` is a copy, a new dict on every read."""

    # Each subclass declares the `_packed` slot itself: a slot here would clash with the parsed class's
    # own slots (two bases cannot both lay out their instances), hence the ignores below.
    __slots__ = ()
    _packed: dict[str, Any] | tuple[Any, ...]

    @property
    def raw(self) -> dict[str, Any]:
        packed = self._packed
        return packed if isinstance(packed, dict) else PackedStore.unpack(packed)

    @raw.setter
    def raw(self, value: dict[str, Any]) -> None:
        self._packed = value   # type: ignore[misc]   # while parsing; then `keep`

    def keep(self, packed: tuple[Any, ...]) -> None:
        """Hold `packed`, the store's form of the object this was parsed from, instead of it."""
        self._packed = packed   # type: ignore[misc]


class PackedClaim(_HoldsPacked, ResourceClaim):
    """A claim as the cache keeps it. Code on hot paths reads the parsed fields (`spec`,
    `resource_version`, `reserved_uids`, `allocation`), not `raw`."""

    __slots__ = ("_packed",)

    def parsed_from(self, raw: dict[str, Any]) -> bool:
        return self._packed is raw


class PackedNode(_HoldsPacked, Node):
    """A Node as the cache keeps it. Filters read its parsed fields (`labels`, `allocatable`); `raw` is
    for bind's checks and the headroom gauges."""

    __slots__ = ("_packed",)
