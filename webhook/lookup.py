"""What the webhook reads from the cluster, and an in-memory implementation built from raw objects.

The rules only need the few questions in `ClusterLookup`; `webhook.cache_lookup` answers them from the
extender's ClusterCache, `StaticClusterLookup` from a list of objects (tests, benchmarks, snapshots).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Protocol

from common.objects import metadata_of, qualified_name


class ClusterLookup(Protocol):
    @property
    def ready(self) -> bool:
        """False until the initial lists arrived; rules that need the cluster are skipped with a warning."""
        ...

    def pod(self, namespace: str, name: str) -> dict | None: ...

    def claim(self, namespace: str, name: str) -> dict | None:
        """The raw ResourceClaim."""
        ...

    def allocated_claims(self) -> Iterable[dict]:
        """Raw ResourceClaims that have status.allocation."""
        ...

    def devices(self) -> Iterable[tuple[str, str, str]]:
        """(driver, pool, device) of every device published in ResourceSlices."""
        ...

    def attribute_names(self) -> frozenset[str]:
        """Fully qualified ("domain/id") names of the attributes devices in the cluster have."""
        ...

    def capacity_names(self) -> frozenset[str]:
        """Fully qualified names of the capacities devices in the cluster have."""
        ...


def slice_devices(resource_slice: dict) -> Iterator[tuple[str, str, dict]]:
    """(driver, pool, device) for each device of a raw ResourceSlice; tolerant of missing fields."""
    spec = resource_slice.get("spec") or {}
    driver = spec.get("driver") or ""
    pool = (spec.get("pool") or {}).get("name") or ""
    for device in spec.get("devices") or []:
        if isinstance(device, dict):
            yield driver, pool, device


class StaticClusterLookup:
    """A fixed view of the cluster from raw objects (kinds other than the ones read here are ignored)."""

    def __init__(self, objects: Iterable[dict] = (), *, ready: bool = True) -> None:
        self._ready = ready
        self._pods: dict[tuple[str, str], dict] = {}
        self._claims: dict[tuple[str, str], dict] = {}
        self._devices: list[tuple[str, str, str]] = []
        attributes: set[str] = set()
        capacities: set[str] = set()
        for obj in objects:
            kind = obj.get("kind")
            meta = metadata_of(obj)
            key = (meta.get("namespace") or "", meta.get("name") or "")
            if kind == "Pod":
                self._pods[key] = obj
            elif kind == "ResourceClaim":
                self._claims[key] = obj
            elif kind == "ResourceSlice":
                for driver, pool, device in slice_devices(obj):
                    self._devices.append((driver, pool, device.get("name") or ""))
                    attributes.update(qualified_name(n, driver) for n in device.get("attributes") or {})
                    capacities.update(qualified_name(n, driver) for n in device.get("capacity") or {})
        self._attributes = frozenset(attributes)
        self._capacities = frozenset(capacities)

    @property
    def ready(self) -> bool:
        return self._ready

    def pod(self, namespace: str, name: str) -> dict | None:
        return self._pods.get((namespace, name))

    def claim(self, namespace: str, name: str) -> dict | None:
        return self._claims.get((namespace, name))

    def allocated_claims(self) -> Iterable[dict]:
        return [c for c in self._claims.values() if (c.get("status") or {}).get("allocation")]

    def devices(self) -> Iterable[tuple[str, str, str]]:
        return self._devices

    def attribute_names(self) -> frozenset[str]:
        return self._attributes

    def capacity_names(self) -> frozenset[str]:
        return self._capacities
