"""Builders for the raw objects the controller tests create on the fake API server."""

from __future__ import annotations

import uuid
from typing import Any

from extender.kube.events import format_time

DRIVER = "gpu.example.com"


def taint(
    key: str, *, effect: str = "NoExecute", value: str | None = None, added: float | None = None
) -> dict:
    result: dict[str, Any] = {"key": key, "effect": effect}
    if value is not None:
        result["value"] = value
    if added is not None:
        result["timeAdded"] = format_time(added)
    return result


def toleration(
    key: str = "",
    *,
    operator: str = "Exists",
    effect: str = "NoExecute",
    seconds: int | None = None,
    value: str | None = None,
) -> dict:
    result: dict[str, Any] = {"operator": operator}
    if key:
        result["key"] = key
    if effect:
        result["effect"] = effect
    if value is not None:
        result["value"] = value
    if seconds is not None:
        result["tolerationSeconds"] = seconds
    return result


def resource_slice(
    name: str,
    devices: dict[str, list[dict]],
    *,
    pool: str = "node-1",
    driver: str = DRIVER,
    generation: int = 1,
) -> dict:
    """devices: name -> taints."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": driver,
            "nodeName": pool,
            "pool": {"name": pool, "generation": generation, "resourceSliceCount": 1},
            "devices": [
                {"name": dev, **({"taints": taints} if taints else {})} for dev, taints in devices.items()
            ],
        },
    }


def pod(
    name: str,
    *,
    namespace: str = "default",
    claims: list[str] = (),
    node: str | None = "node-1",
    uid: str | None = None,
    template_claims: dict[str, str] | None = None,
) -> dict:
    """claims: names of ResourceClaims used directly; template_claims: pod claim name -> generated claim."""
    refs = [{"name": f"c{i}", "resourceClaimName": claim} for i, claim in enumerate(claims)]
    statuses = []
    for pod_claim, generated in (template_claims or {}).items():
        refs.append({"name": pod_claim, "resourceClaimTemplateName": "template"})
        statuses.append({"name": pod_claim, "resourceClaimName": generated})
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": uid or str(uuid.uuid4())},
        "spec": {"containers": [{"name": "main", "image": "busybox"}], "resourceClaims": refs},
        "status": {"phase": "Running", "resourceClaimStatuses": statuses},
    }
    if node:
        body["spec"]["nodeName"] = node
    return body


def claim(
    name: str,
    *,
    namespace: str = "default",
    devices: list[str] = ("gpu-0",),
    pool: str = "node-1",
    driver: str = DRIVER,
    tolerations: list[dict] = (),
    reserved_for: list[dict] = (),
    owner: dict | None = None,
) -> dict:
    results = [
        {
            "request": "gpu",
            "driver": driver,
            "pool": pool,
            "device": device,
            **({"tolerations": list(tolerations)} if tolerations else {}),
        }
        for device in devices
    ]
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": str(uuid.uuid4())}
    if owner is not None:
        meta["ownerReferences"] = [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
                "controller": True,
            }
        ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": meta,
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
        "status": {"allocation": {"devices": {"results": results}}, "reservedFor": list(reserved_for)},
    }


def consumer(pod_obj: dict) -> dict:
    return {"resource": "pods", "name": pod_obj["metadata"]["name"], "uid": pod_obj["metadata"]["uid"]}


def rule(
    name: str,
    *,
    selector: dict | None,
    effect: str = "NoExecute",
    added: float | None = None,
    key: str = "example.com/broken",
) -> dict:
    spec: dict[str, Any] = {"taint": taint(key, effect=effect, added=added)}
    if selector is not None:
        spec["deviceSelector"] = selector
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": name},
        "spec": spec,
    }


def node(name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": str(uuid.uuid4()), "labels": {"kubernetes.io/hostname": name}},
    }


def device_class(name: str = "gpu") -> dict:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name, "uid": str(uuid.uuid4())},
        "spec": {},
    }


def pending_claim(name: str, *, namespace: str = "default") -> dict:
    """An unallocated claim for one device of class "gpu"."""
    raw = claim(name, namespace=namespace)
    raw["status"] = {}
    return raw
