"""Answers the webhook's ClusterLookup questions (webhook/lookup.py) from the extender's ClusterCache:
the composition root hands this view to the webhook when both run in one process."""

from __future__ import annotations

from collections.abc import Iterable

from common.objects import qualified_name
from extender.state.cache import ClusterCache


class ClusterCacheLookup:
    """Read-only view over a ClusterCache; device name sets are rebuilt only when the inventory changed."""

    def __init__(self, cache: ClusterCache) -> None:
        self._cache = cache
        self._names_version: object = None
        self._attributes: frozenset[str] = frozenset()
        self._capacities: frozenset[str] = frozenset()

    @property
    def ready(self) -> bool:
        return bool(self._cache.ready)

    def pod(self, namespace: str, name: str) -> dict | None:
        return self._cache.pod(namespace, name)

    def claim(self, namespace: str, name: str) -> dict | None:
        claim = self._cache.claim(namespace, name)
        return None if claim is None else claim.raw

    def allocated_claims(self) -> Iterable[dict]:
        for raw in self._cache.objects("ResourceClaim"):
            if (raw.get("status") or {}).get("allocation"):
                yield raw

    def devices(self) -> Iterable[tuple[str, str, str]]:
        for resource_slice in self._cache.inventory.slices():
            for device in resource_slice.devices:
                yield resource_slice.driver, resource_slice.pool, device.name

    def attribute_names(self) -> frozenset[str]:
        self._refresh_names()
        return self._attributes

    def capacity_names(self) -> frozenset[str]:
        self._refresh_names()
        return self._capacities

    def _refresh_names(self) -> None:
        inventory = self._cache.inventory
        version = getattr(inventory, "version", None)
        if version is not None and version == self._names_version:
            return
        attributes: set[str] = set()
        capacities: set[str] = set()
        for resource_slice in inventory.slices():
            for device in resource_slice.devices:
                attributes.update(qualified_name(n, resource_slice.driver) for n in device.attributes)
                capacities.update(qualified_name(n, resource_slice.driver) for n in device.capacity)
        self._attributes, self._capacities = frozenset(attributes), frozenset(capacities)
        self._names_version = version
