"""Mutating rule: copy the request's tolerations into every result of a new allocation.

A result without the tolerations of its request is evaluated against device taints as if the pod tolerated
nothing, so a pod that tolerates a NoExecute taint would be evicted right after scheduling (an upstream
scheduler bug shipped that way). Whoever wrote the allocation, the results leave here with exactly the
tolerations of the request or subrequest they were allocated for.
"""

from __future__ import annotations

from webhook.claims import request_target
from webhook.review import AdmissionRequest, Decision, mapping, sequence, text


def copy_tolerations(request: AdmissionRequest) -> Decision:
    claim = request.object or {}
    old_status = mapping((request.old_object or {}).get("status"), "oldObject.status")
    allocation = mapping(mapping(claim.get("status"), "status").get("allocation"), "status.allocation")
    if old_status.get("allocation") or not allocation:
        return Decision()
    results_path = "status.allocation.devices.results"
    results = sequence(
        mapping(allocation.get("devices"), "status.allocation.devices").get("results"), results_path
    )
    patch: list[dict] = []
    for i, result in enumerate(results):
        result = mapping(result, f"{results_path}[{i}]")
        target = request_target(claim, text(result.get("request"), f"{results_path}[{i}].request"))
        if target.source is None:
            # Unknown request (the validating webhook denies it) or no subrequest chosen: nothing to copy.
            continue
        wanted = sequence(target.source.get("tolerations"), "tolerations")
        path = f"/status/allocation/devices/results/{i}/tolerations"
        if result.get("tolerations") and not wanted:
            patch.append({"op": "remove", "path": path})
        elif wanted and result.get("tolerations") != wanted:
            patch.append({"op": "add", "path": path, "value": wanted})
    return Decision(patch=patch)
