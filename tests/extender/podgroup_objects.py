"""PodGroups and their pods, shaped as a 1.37 API server serializes them (scheduling.k8s.io/v1beta1)."""

from __future__ import annotations

from typing import Any

import dra_objects as o

GROUP_CLAIM = "gpus"  # the name of the shared claim inside the PodGroup and its pods


def pod_group(name: str, *, claim_name: str | None = None, template: str | None = None,
              generated: str | None = None, namespace: str = "default", min_count: int = 1) -> dict[str, Any]:
    """A PodGroup sharing one claim: by `claim_name`, or through `template` (then `generated`, when
    set, is the name the resourceclaim controller recorded in status.resourceClaimStatuses)."""
    entry: dict[str, Any] = {"name": GROUP_CLAIM}
    if claim_name is not None:
        entry["resourceClaimName"] = claim_name
    if template is not None:
        entry["resourceClaimTemplateName"] = template
    status: dict[str, Any] = {}
    if generated is not None:
        status["resourceClaimStatuses"] = [{"name": GROUP_CLAIM, "resourceClaimName": generated}]
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace, "uid": o._uid("podgroup", namespace, name),
                     "resourceVersion": "1", "generation": 1,
                     "creationTimestamp": "2026-11-24T10:00:00Z"},
        "spec": {
            "schedulingPolicy": {"gang": {"minCount": min_count}},
            "resourceClaims": [entry],
            "disruptionMode": {"single": {}},
        },
        "status": status,
    }


def member(name: str, group: str | None, *, claim_name: str | None = None, template: str | None = None,
           generated: str | None = None, namespace: str = "default") -> dict[str, Any]:
    """A pending pod whose single claim entry is named like the PodGroup's; `group` None: no group."""
    pod = o.pod(name, [], namespace=namespace)
    entry: dict[str, Any] = {"name": GROUP_CLAIM}
    if claim_name is not None:
        entry["resourceClaimName"] = claim_name
    if template is not None:
        entry["resourceClaimTemplateName"] = template
    pod["spec"]["resourceClaims"] = [entry]
    pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": GROUP_CLAIM}]}
    if group is not None:
        pod["spec"]["schedulingGroup"] = {"podGroupName": group}
    if generated is not None:
        pod["status"]["resourceClaimStatuses"] = [{"name": GROUP_CLAIM, "resourceClaimName": generated}]
    return pod


def owned_by_group(claim: dict[str, Any], group: dict[str, Any]) -> dict[str, Any]:
    """`claim` as the resourceclaim controller generates it for `group` from a template."""
    claim["metadata"]["ownerReferences"] = [{
        "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup", "name": group["metadata"]["name"],
        "uid": group["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]
    claim["metadata"]["annotations"] = {"resource.kubernetes.io/pod-claim-name": GROUP_CLAIM}
    return claim


def group_reference(group: dict[str, Any]) -> dict[str, Any]:
    return {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": group["metadata"]["name"],
            "uid": group["metadata"]["uid"]}
