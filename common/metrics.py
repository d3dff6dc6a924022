"""The one way components register Prometheus metrics: each component's metrics are a MetricSet, put on
a registry with `Set.on(registry)`. Whoever composes the components (extender.wiring) chooses the
registries, so one port can serve several components, and tests can run many servers side by side.

`on` creates the set the first time and returns that same set afterwards: asking twice never
registers a series twice (prometheus_client refuses that with "Duplicated timeseries").
"""

from __future__ import annotations

import weakref
from typing import Self

from prometheus_client import CollectorRegistry

_SETS: weakref.WeakKeyDictionary[CollectorRegistry, dict[type[MetricSet], MetricSet]] = (
    weakref.WeakKeyDictionary()
)


class MetricSet:
    """Base of a component's metrics: subclasses create their collectors on `registry` in __init__."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    @classmethod
    def on(cls, registry: CollectorRegistry) -> Self:
        """This set's metrics on `registry`, registered at the first call."""
        sets = _SETS.setdefault(registry, {})
        found = sets.get(cls)
        if found is None:
            found = sets[cls] = cls(registry)
        assert isinstance(found, cls)
        return found
