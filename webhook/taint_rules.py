"""Validating rule for devicetaintrules CREATE and UPDATE: no accidental cluster-wide eviction.

An empty device selector matches every device, so a NoExecute rule with one evicts every pod that uses a
device and does not tolerate the taint. That takes an explicit opt-in annotation.
"""

from __future__ import annotations

from allocator import tolerates
from webhook.lookup import ClusterLookup
from webhook.review import AdmissionRequest, Decision, mapping, text

ALLOW_CLUSTER_WIDE_EVICTION = "dra-extender.io/allow-cluster-wide-eviction"
SELECTOR_FIELDS = ("driver", "pool", "device")


def _is_cluster_wide_eviction(rule: dict, path: str) -> bool:
    spec = mapping(rule.get("spec"), f"{path}.spec")
    effect = text(mapping(spec.get("taint"), f"{path}.spec.taint").get("effect"), f"{path}.spec.taint.effect")
    if effect != "NoExecute" or not isinstance(spec.get("deviceSelector"), dict):
        return False  # a missing (nil) selector matches no device
    return not any(spec["deviceSelector"].get(f) for f in SELECTOR_FIELDS)


def evicted_pods(lookup: ClusterLookup, taint: dict) -> int:
    """Pods reserved on a claim with at least one device result that does not tolerate `taint`."""
    pods: set[str] = set()
    for claim in lookup.allocated_claims():
        status = claim.get("status") or {}
        results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
        if any(
            not any(tolerates(t, taint) for t in result.get("tolerations") or [] if isinstance(t, dict))
            for result in results
            if isinstance(result, dict)
        ):
            pods.update(
                str(entry.get("uid"))
                for entry in status.get("reservedFor") or []
                if isinstance(entry, dict) and entry.get("resource") == "pods"
            )
    return len(pods)


def validate_taint_rule(request: AdmissionRequest, lookup: ClusterLookup) -> Decision:
    rule = request.object or {}
    if not _is_cluster_wide_eviction(rule, "object"):
        return Decision()
    annotations = mapping(
        mapping(rule.get("metadata"), "metadata").get("annotations"), "metadata.annotations"
    )
    if annotations.get(ALLOW_CLUSTER_WIDE_EVICTION) == "true":
        return Decision(
            warnings=[f"DeviceTaintRule {request.name}: NoExecute on every device in the cluster"]
        )
    if request.operation == "UPDATE" and _is_cluster_wide_eviction(request.old_object or {}, "oldObject"):
        # Already in force: refusing would not undo the eviction, only block edits of the rule.
        return Decision()
    taint = mapping(mapping(rule.get("spec"), "spec").get("taint"), "spec.taint")
    if lookup.ready:
        impact = (
            f"it would affect all {sum(1 for _ in lookup.devices())} devices "
            f"and evict {evicted_pods(lookup, taint)} pods"
        )
    else:
        impact = "it would affect every device and evict every pod using one (cluster view not synced yet)"
    return Decision.deny(
        f"spec.deviceSelector: an empty selector with effect NoExecute matches every device in the cluster; "
        f'{impact}; set the annotation {ALLOW_CLUSTER_WIDE_EVICTION}: "true" to confirm, '
        "or narrow the selector (driver, pool, device)"
    )
