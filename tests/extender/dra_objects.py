"""Builders for the raw Kubernetes objects the extender tests and bench feed into a ClusterCache."""

from __future__ import annotations

import uuid
from typing import Any

DRIVER = "gpu.example.com"
CLASS = "gpu.example.com"


def _uid(*parts: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "/".join(parts)))


def node(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": _uid("node", name), "resourceVersion": "1",
                     "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
    }


def device_class(name: str = CLASS, expression: str | None = None) -> dict[str, Any]:
    """Without `expression` the class selects every device (no CEL involved)."""
    spec = {"selectors": [{"cel": {"expression": expression}}]} if expression else {}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name, "uid": _uid("class", name), "resourceVersion": "1"},
        "spec": spec,
    }


def gpu_slice(node_name: str, devices: int, *, models: list[str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node_name}-gpu", "uid": _uid("slice", node_name), "resourceVersion": "1"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": f"gpu-{index}",
                    "attributes": {
                        "index": {"int": index},
                        "model": {"string": (models or ["A100"])[index % len(models or ["A100"])]},
                        "numa": {"int": index // 5},
                    },
                    "capacity": {"memory": {"value": "80Gi"}},
                }
                for index in range(devices)
            ],
        },
    }


def claim(
    name: str,
    *,
    namespace: str = "default",
    count: int = 1,
    requests: list[dict[str, Any]] | None = None,
    constraints: list[dict[str, Any]] | None = None,
    owner_pod: dict[str, Any] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": _uid("claim", namespace, name),
                            "resourceVersion": "1"}
    if owner_pod is not None:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": owner_pod["metadata"]["name"],
                                    "uid": owner_pod["metadata"]["uid"], "controller": True,
                                    "blockOwnerDeletion": True}]
    devices: dict[str, Any] = {
        "requests": requests or [{"name": "gpu", "exactly": {"deviceClassName": CLASS, "count": count}}]
    }
    if constraints:
        devices["constraints"] = constraints
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": meta,
            "spec": {"devices": devices}, "status": {}}


def pod(name: str, claims: list[str], *, namespace: str = "default", templates: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A pending pod, defaulted like the API server would; `claims` are ResourceClaim names."""
    refs = [{"name": f"c{index}", "resourceClaimName": claim_name} for index, claim_name in enumerate(claims)]
    refs += [{"name": ref, "resourceClaimTemplateName": tpl} for ref, tpl in (templates or {}).items()]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": _uid("pod", namespace, name),
                     "resourceVersion": "1", "annotations": dict(annotations or {})},
        "spec": {
            "schedulerName": "default-scheduler",
            "containers": [{"name": "main", "image": "registry.example.com/app:1",
                            "resources": {"claims": [{"name": ref["name"]} for ref in refs]}}],
            "resourceClaims": refs,
            "restartPolicy": "Always",
        },
        "status": {"phase": "Pending", "qosClass": "BestEffort"},
    }


def cluster(nodes: int, devices_per_node: int) -> list[dict[str, Any]]:
    objs: list[dict[str, Any]] = [device_class()]
    for index in range(nodes):
        name = f"node-{index}"
        objs += [node(name), gpu_slice(name, devices_per_node)]
    return objs


def allocate(claim_raw: dict[str, Any], node_name: str, devices: list[str],
             reserved_for: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Give `claim_raw` an allocation of `devices` (names on `node_name`'s pool) pinned to that node."""
    claim_raw["status"] = {
        "allocation": {
            "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": node_name, "device": device}
                                    for device in devices]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [node_name]}]}]},
        },
        "reservedFor": reserved_for or [],
    }
    finalizers = claim_raw.setdefault("metadata", {}).setdefault("finalizers", [])
    finalizers.append("resource.kubernetes.io/delete-protection")
    return claim_raw
