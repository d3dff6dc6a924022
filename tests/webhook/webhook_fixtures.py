"""AdmissionReview payloads shaped like kube-apiserver sends them, and small object builders."""

from __future__ import annotations

import base64
import itertools
import uuid
from typing import Any

import orjson

from webhook.admission import AdmissionHandler

KINDS = {
    "pods": ("", "Pod"),
    "resourceclaims": ("resource.k8s.io", "ResourceClaim"),
    "resourceclaimtemplates": ("resource.k8s.io", "ResourceClaimTemplate"),
    "devicetaintrules": ("resource.k8s.io", "DeviceTaintRule"),
}
OPTIONS = {
    "CREATE": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
    "UPDATE": {"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1", "fieldManager": "kube-scheduler"},
}
_serial = itertools.count()


def admission_review(
    operation: str,
    resource: str,
    obj: dict | None,
    *,
    old: dict | None = None,
    sub_resource: str = "",
    dry_run: bool = False,
    username: str = "system:kube-scheduler",
) -> dict:
    group, kind = KINDS[resource]
    version = "v1"
    meta = (obj or old or {}).get("metadata") or {}
    request: dict[str, Any] = {
        "uid": str(uuid.uuid4()),
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": resource},
        "requestKind": {"group": group, "version": version, "kind": kind},
        "requestResource": {"group": group, "version": version, "resource": resource},
        "name": meta.get("name", ""),
        "operation": operation,
        "userInfo": {
            "username": username,
            "uid": "2f1f6fd5-8c2b-4b44-9a52-2f7f1d9c1a10",
            "groups": ["system:authenticated"],
            "extra": {"authentication.kubernetes.io/credential-id": ["X509SHA256=00ff"]},
        },
        "object": obj,
        "oldObject": old,
        "dryRun": dry_run,
        "options": OPTIONS.get(operation),
    }
    if sub_resource:
        request["subResource"] = sub_resource
        request["requestSubResource"] = sub_resource
    if meta.get("namespace"):
        request["namespace"] = meta["namespace"]
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def status_update(old_claim: dict, new_claim: dict, *, dry_run: bool = False) -> dict:
    return admission_review(
        "UPDATE", "resourceclaims", new_claim, old=old_claim, sub_resource="status", dry_run=dry_run
    )


def decide(handler: AdmissionHandler, webhook: str, review: dict) -> dict:
    """The response of a review that must be answered with HTTP 200; checks the uid echo."""
    status, body = handler.handle(webhook, orjson.dumps(review))  # type: ignore[arg-type]
    assert status == 200, body
    answer = orjson.loads(body)
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    assert answer["response"]["uid"] == review["request"]["uid"]
    return answer["response"]


def patch_of(response: dict) -> list[dict]:
    if "patch" not in response:
        return []
    assert response["patchType"] == "JSONPatch"
    return orjson.loads(base64.b64decode(response["patch"]))


def uid() -> str:
    return str(uuid.uuid4())


def meta(name: str, namespace: str | None = "ns", **extra: Any) -> dict:
    result: dict[str, Any] = {"name": name, "uid": uid(), "resourceVersion": str(next(_serial) + 1), **extra}
    if namespace is not None:
        result["namespace"] = namespace
    return result


def exact_request(name: str, *, selectors: tuple[str, ...] = (), tolerations: list | None = None) -> dict:
    exactly: dict[str, Any] = {
        "deviceClassName": "gpu.example.com",
        "allocationMode": "ExactCount",
        "count": 1,
    }
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    if tolerations is not None:
        exactly["tolerations"] = tolerations
    return {"name": name, "exactly": exactly}


def first_available(name: str, *subrequests: dict) -> dict:
    return {"name": name, "firstAvailable": list(subrequests)}


def subrequest(name: str, *, selectors: tuple[str, ...] = (), tolerations: list | None = None) -> dict:
    sub = exact_request(name, selectors=selectors, tolerations=tolerations)["exactly"]
    return {"name": name, **sub}


def claim(name: str, *requests: dict, namespace: str = "ns", **meta_extra: Any) -> dict:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": meta(name, namespace, **meta_extra),
        "spec": {"devices": {"requests": list(requests)}},
    }


def result(request: str, device: str = "gpu-0", **extra: Any) -> dict:
    return {"request": request, "driver": "gpu.example.com", "pool": "node-1", "device": device, **extra}


def allocation(*results: dict) -> dict:
    return {
        "devices": {"results": list(results)},
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}
            ]
        },
    }


def with_status(claim_obj: dict, *, allocation: dict | None = None, reserved_for: list | None = None) -> dict:
    status: dict[str, Any] = {}
    if allocation is not None:
        status["allocation"] = allocation
    if reserved_for is not None:
        status["reservedFor"] = reserved_for
    new = {**claim_obj, "metadata": dict(claim_obj["metadata"]), "status": status}
    new["metadata"]["resourceVersion"] = str(next(_serial) + 1)
    return new


def pod(name: str, *claim_refs: dict, namespace: str = "ns", status: dict | None = None) -> dict:
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta(name, namespace),
        "spec": {"containers": [{"name": "c", "image": "busybox"}], "resourceClaims": list(claim_refs)},
    }
    if status is not None:
        obj["status"] = status
    return obj


def consumer(pod_obj: dict) -> dict:
    return {"resource": "pods", "name": pod_obj["metadata"]["name"], "uid": pod_obj["metadata"]["uid"]}


def resource_slice(
    name: str, devices: list[dict], *, driver: str = "gpu.example.com", pool: str = "node-1"
) -> dict:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": meta(name, None),
        "spec": {
            "driver": driver,
            "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1},
            "nodeName": pool,
            "devices": devices,
        },
    }


def gpu(name: str, **attributes: Any) -> dict:
    typed = {k: {"int" if isinstance(v, int) else "string": v} for k, v in attributes.items()}
    return {"name": name, "attributes": typed, "capacity": {"memory": {"value": "80Gi"}}}


def apply_patch(obj: Any, patch: list[dict]) -> Any:
    """Apply the add/remove operations the webhook emits (RFC 6902 on object members and list indices)."""
    doc = orjson.loads(orjson.dumps(obj))
    for op in patch:
        *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        target = doc
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        key: Any = int(last) if isinstance(target, list) else last
        if op["op"] == "add":
            target[key] = op["value"]
        elif op["op"] == "remove":
            del target[key]
        else:
            raise AssertionError(f"unexpected patch op {op}")
    return doc
