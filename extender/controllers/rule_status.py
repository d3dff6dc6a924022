"""The EvictionInProgress condition of a DeviceTaintRule, worded exactly like upstream's controller."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from common.objects import metadata_of

CONDITION_TYPE = "EvictionInProgress"
NO_EXECUTE = "NoExecute"
NONE = "None"


def _count(n: int, one: str, many: str) -> str:
    return one if n == 1 else f"{n} {many}"


def _namespaces(n: int) -> str:
    return "1 namespace" if n == 1 else f"{n} different namespaces"


def eviction_condition(
    rule: Mapping[str, Any],
    *,
    pending_pods: int,
    pending_namespaces: int,
    evicted_pods: int,
    published_devices: int = 0,
    allocated_devices: int = 0,
) -> dict[str, Any]:
    """The condition (without lastTransitionTime). For effect None, the counts are the simulation's:
    what would happen with NoExecute."""
    effect = ((rule.get("spec") or {}).get("taint") or {}).get("effect")
    status, message = "False", ""
    if effect == NO_EXECUTE:
        if pending_pods > 0:
            status, reason = "True", "PodsPendingEviction"
            message = (
                _count(pending_pods, "1 pod needs", "pods need")
                + " to be evicted in "
                + _namespaces(pending_namespaces)
                + "."
            )
        elif evicted_pods > 0:
            reason = "Completed"
        else:
            reason = "NotStarted"
    elif effect == NONE:
        reason = "NoEffect"
        message = (
            _count(published_devices, "1 published device", "published devices")
            + " selected. "
            + _count(allocated_devices, "1 allocated device", "allocated devices")
            + " selected. "
            + _count(pending_pods, "1 pod", "pods")
            + " would be evicted in "
            + _namespaces(pending_namespaces)
            + " if the effect was NoExecute. This information will not be updated again. "
            "Recreate the DeviceTaintRule to trigger an update."
        )
    else:
        reason = "OtherEffect"
        message = "Eviction only happens for the NoExecute effect."
    if evicted_pods > 0:
        message = (
            (message + " " if message else "")
            + _count(evicted_pods, "1 pod", "pods")
            + " evicted since starting the controller."
        )
    return {
        "type": CONDITION_TYPE,
        "status": status,
        "reason": reason,
        "message": message,
        "observedGeneration": metadata_of(rule).get("generation") or 0,
    }


def current_condition(rule: Mapping[str, Any]) -> dict[str, Any] | None:
    for condition in (rule.get("status") or {}).get("conditions") or []:
        if isinstance(condition, dict) and condition.get("type") == CONDITION_TYPE:
            return condition
    return None


def same_condition(a: Mapping[str, Any] | None, b: Mapping[str, Any]) -> bool:
    """Equal apart from lastTransitionTime."""
    return a is not None and all(a.get(k) == v for k, v in b.items() if k != "lastTransitionTime")
