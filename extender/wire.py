"""The scheduler-extender JSON protocol (k8s.io/kube-scheduler/extender/v1) as kube-scheduler speaks it.

The Go structs have no json tags: keys are the capitalised field names, nil values travel as `null`,
and Go's decoder matches keys case-insensitively, so we accept any case and always send the
canonical one. Malformed input raises `BadRequest`, which the server turns into HTTP 400.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson


class BadRequest(ValueError):
    """The request body is not what kube-scheduler sends; the message says what is wrong."""


def _decode_object(body: bytes, what: str) -> dict[str, Any]:
    if not body:
        raise BadRequest(f"{what}: empty request body")
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as error:
        raise BadRequest(f"{what}: body is not valid JSON: {error}") from None
    if not isinstance(value, dict):
        raise BadRequest(f"{what}: body must be a JSON object, got {type(value).__name__}")
    # Go's encoding/json matches field names case-insensitively.
    return {str(key).lower(): item for key, item in value.items()}


def _pod(fields: Mapping[str, Any], what: str) -> dict:
    pod = fields.get("pod")
    if not isinstance(pod, dict):
        raise BadRequest(f"{what}: Pod must be a v1.Pod object")
    meta = pod.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta.get("name"):
        raise BadRequest(f"{what}: Pod.metadata.name is missing")
    if not isinstance(meta.get("namespace", ""), str):
        raise BadRequest(f"{what}: Pod.metadata.namespace must be a string")
    if not isinstance(pod.get("spec", {}) or {}, dict):
        raise BadRequest(f"{what}: Pod.spec must be an object")
    return pod


def _string_list(value: Any, what: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise BadRequest(f"{what} must be a list of strings")
    return value


@dataclass(frozen=True)
class ExtenderArgs:
    """Filter and prioritize input. With nodeCacheCapable only names come; otherwise full Nodes."""

    pod: dict
    node_names: list[str]
    node_objects: dict[str, dict] | None  # name -> v1.Node when kube-scheduler sent a NodeList

    @property
    def node_cache_capable(self) -> bool:
        return self.node_objects is None


def parse_extender_args(body: bytes, verb: str) -> ExtenderArgs:
    fields = _decode_object(body, verb)
    pod = _pod(fields, verb)
    node_list = fields.get("nodes")
    names = fields.get("nodenames")
    if node_list is not None:
        if not isinstance(node_list, dict) or not isinstance(node_list.get("items") or [], list):
            raise BadRequest(f"{verb}: Nodes must be a v1.NodeList object with items")
        objects: dict[str, dict] = {}
        for index, node in enumerate(node_list.get("items") or []):
            name = node.get("metadata", {}).get("name") if isinstance(node, dict) else None
            if not isinstance(name, str) or not name:
                raise BadRequest(f"{verb}: Nodes.items[{index}].metadata.name is missing")
            objects[name] = node
        return ExtenderArgs(pod, list(objects), objects)
    if names is None:
        raise BadRequest(f"{verb}: neither NodeNames nor Nodes is set")
    return ExtenderArgs(pod, _string_list(names, f"{verb}: NodeNames"), None)


def encode_filter_result(
    args: ExtenderArgs,
    passed: list[str],
    failed: Mapping[str, str],
    unresolvable: Mapping[str, str],
    error: str = "",
) -> bytes:
    """ExtenderFilterResult. `NodeNames` is always a list in nodeCacheCapable mode: kube-scheduler
    treats null NodeNames and null Nodes as "no node fits"."""
    if args.node_objects is None:
        nodes: dict | None = None
        names: list[str] | None = passed
    else:
        nodes = {"metadata": {}, "items": [args.node_objects[name] for name in passed]}
        names = None
    return orjson.dumps(
        {
            "Nodes": nodes,
            "NodeNames": names,
            "FailedNodes": dict(failed),
            "FailedAndUnresolvableNodes": dict(unresolvable),
            "Error": error,
        }
    )


def encode_host_priorities(scores: Mapping[str, int]) -> bytes:
    """HostPriorityList: a bare JSON array."""
    return orjson.dumps([{"Host": host, "Score": int(score)} for host, score in scores.items()])


@dataclass(frozen=True)
class BindingArgs:
    pod_name: str
    pod_namespace: str
    pod_uid: str
    node: str


def parse_binding_args(body: bytes) -> BindingArgs:
    fields = _decode_object(body, "bind")
    values = {}
    for key, canonical in (("podname", "PodName"), ("podnamespace", "PodNamespace"),
                           ("poduid", "PodUID"), ("node", "Node")):
        value = fields.get(key)
        if not isinstance(value, str) or (not value and key != "podnamespace"):
            raise BadRequest(f"bind: {canonical} must be a non-empty string")
        values[key] = value
    return BindingArgs(values["podname"], values["podnamespace"], values["poduid"], values["node"])


def encode_binding_result(error: str) -> bytes:
    return orjson.dumps({"Error": error})


@dataclass(frozen=True)
class PreemptionArgs:
    pod: dict
    victims: dict[str, dict]  # node -> MetaVictims {"Pods": [{"UID": ...}], "NumPDBViolations": n}


def _meta_victims(node: str, value: Any, full_pods: bool) -> dict:
    if value is None:
        return {"Pods": [], "NumPDBViolations": 0}
    if not isinstance(value, dict):
        raise BadRequest(f"preempt: victims for node {node} must be an object")
    fields = {str(key).lower(): item for key, item in value.items()}
    pods = fields.get("pods") or []
    if not isinstance(pods, list) or not all(isinstance(pod, dict) for pod in pods):
        raise BadRequest(f"preempt: victims for node {node}: Pods must be a list of objects")
    uids = []
    for pod in pods:
        if full_pods:
            uid = (pod.get("metadata") or {}).get("uid")
        else:
            uid = next((item for key, item in pod.items() if str(key).lower() == "uid"), None)
        if not isinstance(uid, str):
            raise BadRequest(f"preempt: a victim on node {node} has no UID")
        uids.append({"UID": uid})
    violations = fields.get("numpdbviolations") or 0
    if not isinstance(violations, int):
        raise BadRequest(f"preempt: NumPDBViolations for node {node} must be an integer")
    return {"Pods": uids, "NumPDBViolations": violations}


def parse_preemption_args(body: bytes) -> PreemptionArgs:
    """Accepts NodeNameToMetaVictims (nodeCacheCapable) or NodeNameToVictims (full pods)."""
    fields = _decode_object(body, "preempt")
    pod = _pod(fields, "preempt")
    meta = fields.get("nodenametometavictims")
    full = fields.get("nodenametovictims")
    source, full_pods = (meta, False) if meta is not None else (full, True)
    if source is None:
        return PreemptionArgs(pod, {})
    if not isinstance(source, dict):
        raise BadRequest("preempt: NodeNameToMetaVictims must be an object keyed by node name")
    victims = {node: _meta_victims(node, value, full_pods) for node, value in source.items()}
    return PreemptionArgs(pod, victims)


def encode_preemption_result(victims: Mapping[str, dict]) -> bytes:
    return orjson.dumps({"NodeNameToMetaVictims": dict(victims)})
