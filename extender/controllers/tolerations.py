"""Toleration arithmetic for NoExecute device taints: when must a pod using a tainted device go?"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from allocator import tolerates
from extender.controllers.clock import parse_time

NO_EXECUTE = "NoExecute"


def counts_for_eviction(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    # Deliberate difference from upstream's eviction controller, which only honours tolerations whose
    # effect is literally NoExecute: an empty effect means "all effects" in the API, and the allocator
    # let the claim onto the tainted device because of exactly this toleration. Evicting the pod at
    # once would repeat upstream issue #134434 (pods that tolerate the taint evicted when scheduled).
    return tolerates(toleration, taint)


def taint_time_added(taint: Mapping[str, Any]) -> float:
    """The taint's timeAdded; a taint without one (the API server always sets it) counts from the epoch."""
    text = taint.get("timeAdded")
    return parse_time(text) if text else 0.0


def eviction_time(taint: Mapping[str, Any], tolerations: Iterable[Mapping[str, Any]]) -> float | None:
    """When a pod holding a device with this NoExecute taint must be evicted; None means never.

    No matching toleration: at timeAdded. Matching tolerations: timeAdded plus the smallest
    tolerationSeconds (negative counts as 0); one matching toleration without tolerationSeconds
    tolerates the taint forever.
    """
    if taint.get("effect") != NO_EXECUTE:
        return None
    added = taint_time_added(taint)
    shortest: float | None = None
    for toleration in tolerations:
        if not isinstance(toleration, Mapping) or not counts_for_eviction(toleration, taint):
            continue
        seconds = toleration.get("tolerationSeconds")
        if seconds is None:
            return None
        if isinstance(seconds, bool) or not isinstance(seconds, int | float):
            raise ValueError(f"invalid tolerationSeconds {seconds!r} in toleration {dict(toleration)}")
        seconds = max(0.0, float(seconds))
        shortest = seconds if shortest is None else min(shortest, seconds)
    return added + (shortest or 0.0)


def earliest(times: Iterable[float | None]) -> float | None:
    """The earliest of several eviction times (None entries mean "never")."""
    real = [t for t in times if t is not None]
    return min(real) if real else None
