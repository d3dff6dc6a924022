"""ResourceSlices indexed by (driver, pool): which devices are published, and their NoExecute taints.

Only slices of a pool's newest generation count, as in upstream's eviction controller; completeness
does not matter here (a taint is a taint even while the driver republishes).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

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


@dataclass
class _Pool:
    slices: dict[str, tuple[int, dict]] = field(default_factory=dict)  # name -> (generation, slice)
    max_generation: int = 0

    def recompute(self) -> None:
        self.max_generation = max(generation for generation, _ in self.slices.values())

    def current(self) -> Iterator[dict]:
        return (raw for generation, raw in self.slices.values() if generation == self.max_generation)


class PoolIndex:
    def __init__(self) -> None:
        self._pools: dict[PoolId, _Pool] = {}
        self._pool_of_slice: dict[str, PoolId] = {}
        self._taints: dict[PoolId, dict[str, list[dict]]] = {}  # memo, dropped when the pool changes

    def upsert(self, raw: dict) -> set[PoolId]:
        """Add or replace a slice; returns the pools whose contents changed (a slice may move pools)."""
        name = str(metadata_of(raw).get("name") or "")
        touched = self.remove(name)
        located = slice_pool(raw)
        if located is None:
            return touched
        pool_id, generation = located
        pool = self._pools.setdefault(pool_id, _Pool())
        pool.slices[name] = (generation, raw)
        pool.recompute()
        self._pool_of_slice[name] = pool_id
        self._taints.pop(pool_id, None)
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
        self._taints.pop(pool_id, None)
        return {pool_id}

    def has_pool(self, pool_id: PoolId) -> bool:
        return pool_id in self._pools

    def devices(self, pool_id: PoolId) -> Iterator[tuple[str, dict]]:
        """(device name, device) of the pool's newest generation."""
        pool = self._pools.get(pool_id)
        if pool is None:
            return
        for raw in pool.current():
            for device in (raw.get("spec") or {}).get("devices") or []:
                if isinstance(device, dict) and isinstance(device.get("name"), str):
                    yield device["name"], device

    def all_devices(self) -> Iterator[DeviceId]:
        for pool_id in list(self._pools):
            for name, _ in self.devices(pool_id):
                yield (*pool_id, name)

    def no_execute_taints(self, device: DeviceId) -> list[dict]:
        pool_id: PoolId = (device[0], device[1])
        taints = self._taints.get(pool_id)
        if taints is None:
            taints = {}
            for name, dev in self.devices(pool_id):
                found = [
                    t
                    for t in dev.get("taints") or []
                    if isinstance(t, dict) and t.get("effect") == NO_EXECUTE
                ]
                if found:
                    taints.setdefault(name, []).extend(found)
            self._taints[pool_id] = taints
        return taints.get(device[2], [])
