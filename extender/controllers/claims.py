"""Helpers over raw ResourceClaims and Pods shared by the eviction and driver-loss controllers."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any

from extender.controllers.pools import DeviceId
from extender.podclaims import (
    ClaimsNotReady,
    InvalidPodError,
    allocation_of,
    claim_name_for,
    claim_references,
    is_controlled_by,
    pod_uid,
    reserved_for,
)

log = logging.getLogger(__name__)


def claim_key(raw: Mapping[str, Any]) -> str:
    meta = raw.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def allocated_results(raw: Mapping[str, Any]) -> list[dict]:
    """The device results of an allocated claim ([] when not allocated)."""
    allocation = allocation_of(raw) or {}
    results = (allocation.get("devices") or {}).get("results") or []
    return [r for r in results if isinstance(r, dict)]


def result_device(result: Mapping[str, Any]) -> DeviceId | None:
    driver, pool, device = result.get("driver"), result.get("pool"), result.get("device")
    if all(isinstance(v, str) and v for v in (driver, pool, device)):
        return driver, pool, device  # type: ignore[return-value]
    return None


def consumers(claim: Mapping[str, Any], pods: Any) -> Iterator[dict]:
    """The live pods in the claim's reservedFor. A consumer whose pod is gone or was replaced (other UID)
    is skipped and the rest are still visited; upstream returned at the first such entry (fixed in
    kubernetes PR #135686), leaving the remaining pods of a shared claim on a broken device."""
    namespace = (claim.get("metadata") or {}).get("namespace") or ""
    for entry in reserved_for(claim):
        if (
            not isinstance(entry, dict)
            or (entry.get("resource") or "pods") != "pods"
            or entry.get("apiGroup")
        ):
            continue
        pod = pods.pod(namespace, str(entry.get("name") or ""))
        if pod is None or pod_uid(pod) != entry.get("uid"):
            continue
        yield pod


def pod_claim_keys(pod: Mapping[str, Any], claims: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Keys of the claims in `claims` that belong to this pod (template claims must be owned by it)."""
    namespace = (pod.get("metadata") or {}).get("namespace") or ""
    keys: list[str] = []
    try:
        refs = claim_references(pod)
    except InvalidPodError as err:
        log.debug("ignoring pod: %s", err)
        return keys
    for ref in refs:
        try:
            name, must_own = claim_name_for(pod, ref)
        except (ClaimsNotReady, InvalidPodError):
            continue
        if name is None:
            continue
        key = f"{namespace}/{name}"
        claim = claims.get(key)
        if claim is None or (must_own and not is_controlled_by(claim, pod_uid(pod))):
            continue
        keys.append(key)
    return keys
