"""The cache's Pods kept packed: one tuple per Pod instead of four dicts.

A large cluster has more Pods than anything else the cache keeps (80,000 at 20,000 nodes in
bench/scale_bench.py), and a Python dict costs 184 bytes or more even with one key. A stored Pod (as
extender.state.podtransform slims it) is a top-level dict and three small ones, metadata, spec and
status, that hold the values. `PackedStore` keeps each Pod as one tuple: a layout naming the keys in
order (shared by every Pod of the same shape: a few per workload), then the values themselves. The
values are the very objects the Pod held, so what extender.state.sharing shares stays shared.

Reading a Pod unpacks it into new dicts (about 2 us), equal to the one stored, with its values as they
were. A read is therefore never the stored object itself, and changing it changes nothing stored (the
cache never edits stored objects in place anyway). Only the cache reads the store.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from typing import Any

# Top-level keys whose object values are flattened into the tuple.
SECTIONS = frozenset({"metadata", "spec", "status"})
# Distinct layouts kept for sharing; a stream of unusual shapes empties the table (packed Pods keep
# their own layout alive, so nothing stored changes).
MAX_LAYOUTS = 4096

# A layout entry: a top-level key whose value is stored as it is, or (key, keys of its object).
Layout = tuple[str | tuple[str, tuple[str, ...]], ...]


class PackedStore(MutableMapping[str, dict]):
    """A mapping of key -> object, keeping every object packed (see the module's docstring)."""

    __slots__ = ("_layouts", "_packed")

    def __init__(self) -> None:
        self._packed: dict[str, tuple[Any, ...]] = {}
        self._layouts: dict[Layout, Layout] = {}

    def pack(self, obj: dict) -> tuple[Any, ...]:
        shape: list[str | tuple[str, tuple[str, ...]]] = []
        values: list[Any] = []
        for key, value in obj.items():
            if key in SECTIONS and type(value) is dict:
                shape.append((key, tuple(value)))
                values.extend(value.values())
            else:
                shape.append(key)
                values.append(value)
        layout = tuple(shape)
        found = self._layouts.get(layout)
        if found is None:
            if len(self._layouts) >= MAX_LAYOUTS:
                self._layouts.clear()
            found = self._layouts[layout] = layout
        return (found, *values)

    @staticmethod
    def unpack(packed: tuple[Any, ...]) -> dict:
        obj: dict[str, Any] = {}
        position = 1
        for entry in packed[0]:
            if type(entry) is str:
                obj[entry] = packed[position]
                position += 1
            else:
                key, keys = entry
                end = position + len(keys)
                obj[key] = dict(zip(keys, packed[position:end], strict=True))
                position = end
        return obj

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
