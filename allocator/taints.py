"""Device taints and request tolerations."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """Upstream's ToleratesTaint: effect, key, then operator (Exists, or Equal/empty comparing values)."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if key and key != taint.get("key"):
        return False
    operator = toleration.get("operator") or ""
    if operator == "Exists":
        return True
    if operator in ("", "Equal"):
        return (toleration.get("value") or "") == (taint.get("value") or "")
    return False


def untolerated(
    blocking_taints: Sequence[Mapping[str, Any]], tolerations: Sequence[Mapping[str, Any]]
) -> bool:
    """True if some NoSchedule/NoExecute taint is not tolerated."""
    return any(not any(tolerates(t, taint) for t in tolerations) for taint in blocking_taints)
