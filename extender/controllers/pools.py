"""ResourceSlices indexed by (driver, pool): which devices are published, and their NoExecute taints.

Only slices of a pool's newest generation count, as in upstream's eviction controller; completeness
does not matter here (a taint is a taint even while the driver republishes).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from common.objects import metadata_of
from extender.controllers.tolerations import NO_EXECUTE

PoolId = tuple[str, str]  # (driver, pool)
DeviceId = tuple[str, str, str]  # (driver, pool, device)


def slice_pool(raw: Mapping[str, Any]) -> tuple[PoolId, int] | None:
    """(driver, pool) and pool generation of a ResourceSlice, or None when it names no pool."""
    spec = raw.get("spec") or {}
    pool = spec.get("pool") or {}
    driver, name = spec.get("driver"), pool.get("name")
    if not isinstance(driver, str) or not isinstance(name, str) or not driver or not name:
        return None
    generation = pool.get("generation") or 0
    return (driver, name), generation if isinstance(generation, int) else 0


class _Slice(NamedTuple):
    """What the index keeps of a slice: not the slice itself, which the cache stores packed."""

    generation: int
    devices: tuple[str, ...]  # names, in the slice's order
    taints: dict[str, list[dict]]  # device name -> its NoExecute taints, for tainted devices only


def _indexed(raw: Mapping[str, Any], generation: int) -> _Slice:
    names: list[str] = []
    taints: dict[str, list[dict]] = {}
    for device in (raw.get("spec") or {}).get("devices") or []:
        if not isinstance(device, dict) or not isinstance(device.get("name"), str):
            continue
        names.append(device["name"])
        found = [t for t in device.get("taints") or []
                 if isinstance(t, dict) and t.get("effect") == NO_EXECUTE]
        if found:
            taints.setdefault(device["name"], []).extend(found)
    return _Slice(generation, tuple(names), taints or _NO_TAINTS)


_NO_TAINTS: dict[str, list[dict]] = {}


@dataclass
class _Pool:
    slices: dict[str, _Slice] = field(default_factory=dict)
    max_generation: int = 0

    def recompute(self) -> None:
        self.max_generation = max(indexed.generation for indexed in self.slices.values())

    def current(self) -> Iterator[_Slice]:
        return (indexed for indexed in self.slices.values() if indexed.generation == self.max_generation)


class PoolIndex:
    def __init__(self) -> None:
        self._pools: dict[PoolId, _Pool] = {}
        self._pool_of_slice: dict[str, PoolId] = {}

    def upsert(self, raw: dict) -> set[PoolId]:
        """Add or replace a slice; returns the pools whose contents changed (a slice may move pools)."""
        name = str(metadata_of(raw).get("name") or "")
        touched = self.remove(name)
        located = slice_pool(raw)
        if located is None:
            return touched
        pool_id, generation = located
        pool = self._pools.setdefault(pool_id, _Pool())
        pool.slices[name] = _indexed(raw, generation)
        pool.recompute()
        self._pool_of_slice[name] = pool_id
        return touched | {pool_id}

    def remove(self, name: str) -> set[PoolId]:
        pool_id = self._pool_of_slice.pop(name, None)
        if pool_id is None:
            return set()
        pool = self._pools[pool_id]
        del pool.slices[name]
        if pool.slices:
            pool.recompute()
        else:
            del self._pools[pool_id]
        return {pool_id}

    def clear(self) -> None:
        self._pools.clear()
        self._pool_of_slice.clear()

    def has_pool(self, pool_id: PoolId) -> bool:
        return pool_id in self._pools

    def device_names(self, pool_id: PoolId) -> Iterator[str]:
        """The names of the devices in the pool's newest generation."""
        pool = self._pools.get(pool_id)
        if pool is None:
            return
        for indexed in pool.current():
            yield from indexed.devices

    def pool_ids(self) -> list[PoolId]:
        return list(self._pools)


    def no_execute_taints(self, device: DeviceId) -> list[dict]:
        pool = self._pools.get((device[0], device[1]))
        if pool is None:
            return []
        return [taint for indexed in pool.current() for taint in indexed.taints.get(device[2], ())]
