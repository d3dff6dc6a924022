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


# The Pod fields the extender reads, with the JSON type Go's decoder requires of them (None: any).
# kube-scheduler cannot send anything else, so a body that differs is not from it: say what differs
# instead of failing somewhere inside scheduling.
_OBJECT_FIELDS: dict[str, tuple[type, dict[str, Any] | None]] = {
    "metadata": (dict, {"name": (str, None), "namespace": (str, None), "uid": (str, None),
                        "annotations": (dict, str), "labels": (dict, str), "ownerReferences": (list, dict)}),
    "spec": (dict, {"nodeName": (str, None), "schedulerName": (str, None),
                    "resourceClaims": (list, {"name": (str, None), "resourceClaimName": (str, None),
                                              "resourceClaimTemplateName": (str, None)})}),
    "status": (dict, {"resourceClaimStatuses": (list, {"name": (str, None),
                                                       "resourceClaimName": (str, None)})}),
}
_JSON_TYPE: dict[type, str] = {dict: "an object", list: "a list", str: "a string"}


def check_shape(value: Any, fields: Mapping[str, tuple[type, Any]], path: str) -> None:
    """Raise BadRequest naming the first field of `fields` in `value` (an object) of the wrong JSON type.

    `fields` maps a key to (type, inner): inner describes the fields of an object, of each list item
    (a dict of fields, or a type every item must have), or the type of every map value. null is
    always allowed, as Go decodes it to the zero value."""
    for key, (kind, inner) in fields.items():
        item = value.get(key)
        if item is None:
            continue
        where = f"{path}.{key}"
        if not isinstance(item, kind):
            raise BadRequest(f"{where} must be {_JSON_TYPE[kind]}, got {type(item).__name__}")
        if inner is None:
            continue
        # isinstance(item, kind) held: the isinstance tests below only say so to the type checker.
        if kind is list and isinstance(item, list):
            for index, entry in enumerate(item):
                _check_member(entry, inner, f"{where}[{index}]")
        elif isinstance(inner, dict):
            check_shape(item, inner, where)
        elif isinstance(item, dict):
            for name, entry in item.items():
                _check_member(entry, inner, f"{where}[{name!r}]")


def _check_member(entry: Any, inner: Any, where: str) -> None:
    if isinstance(inner, dict):
        if not isinstance(entry, dict):
            raise BadRequest(f"{where} must be an object, got {type(entry).__name__}")
        check_shape(entry, inner, where)
    elif not isinstance(entry, inner):
        raise BadRequest(f"{where} must be {_JSON_TYPE[inner]}, got {type(entry).__name__}")


def _pod(fields: Mapping[str, Any], what: str) -> dict[str, Any]:
    pod = fields.get("pod")
    if not isinstance(pod, dict):
        raise BadRequest(f"{what}: Pod must be a v1.Pod object")
    check_shape(pod, _OBJECT_FIELDS, f"{what}: Pod")
    meta = pod.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta.get("name"):
        raise BadRequest(f"{what}: Pod.metadata.name is missing")
    return pod


def _string_list(value: Any, what: str) -> list[str]:
    # NodeNames holds up to every node's name in each filter and prioritize: str.join refuses any item
    # that is not a str in one pass in C, about 4 times as fast as isinstance() on each.
    if not isinstance(value, list):
        raise BadRequest(f"{what} must be a list of strings")
    try:
        "".join(value)
    except TypeError:
        raise BadRequest(f"{what} must be a list of strings") from None
    return value


# Far above any cluster kube-scheduler supports (5,000 nodes is the tested limit), low enough that one
# request cannot keep the extender busy for long.
MAX_NODES = 50_000


def _check_node_count(nodes: Any, verb: str) -> None:
    if isinstance(nodes, list) and len(nodes) > MAX_NODES:
        raise BadRequest(f"{verb}: {len(nodes)} nodes in one request; at most {MAX_NODES} are accepted")


@dataclass(frozen=True)
class ExtenderArgs:
    """Filter and prioritize input. With nodeCacheCapable only names come; otherwise full Nodes."""

    pod: dict[str, Any]
    node_names: list[str]
    node_objects: dict[str, dict[str, Any]] | None  # name -> v1.Node when kube-scheduler sent a NodeList

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
        objects: dict[str, dict[str, Any]] = {}
        _check_node_count(node_list.get("items") or [], verb)
        for index, node in enumerate(node_list.get("items") or []):
            meta = node.get("metadata") if isinstance(node, dict) else None
            name = meta.get("name") if isinstance(meta, dict) else None
            if not isinstance(name, str) or not name:
                raise BadRequest(f"{verb}: Nodes.items[{index}].metadata.name is missing")
            objects[name] = node
        return ExtenderArgs(pod, list(objects), objects)
    if names is None:
        raise BadRequest(f"{verb}: neither NodeNames nor Nodes is set")
    _check_node_count(names, verb)
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
        nodes: dict[str, Any] | None = None
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
    return orjson.dumps([{"Host": host, "Score": score} for host, score in scores.items()])


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


def encode_filter_error(error: str) -> bytes:
    """An ExtenderFilterResult that only carries `Error` (kube-scheduler reads nothing else then)."""
    return orjson.dumps({"Nodes": None, "NodeNames": None, "FailedNodes": {},
                         "FailedAndUnresolvableNodes": {}, "Error": error})


def encode_binding_result(error: str) -> bytes:
    return orjson.dumps({"Error": error})


@dataclass(frozen=True)
class PreemptionArgs:
    pod: dict[str, Any]
    victims: dict[str, dict[str, Any]]  # node -> MetaVictims {"Pods": [{"UID": ...}], "NumPDBViolations": n}


def _meta_victims(node: str, value: Any, *, full_pods: bool) -> dict[str, Any]:
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
            meta = pod.get("metadata")
            uid = meta.get("uid") if isinstance(meta, dict) else None
        else:
            uid = next((item for key, item in pod.items() if str(key).lower() == "uid"), None)
        if not isinstance(uid, str):
            raise BadRequest(f"preempt: a victim on node {node} has no UID")
        uids.append({"UID": uid})
    violations = fields.get("numpdbviolations") or 0
    if not isinstance(violations, int) or isinstance(violations, bool) or not -(2**63) <= violations < 2**63:
        raise BadRequest(f"preempt: NumPDBViolations for node {node} must be a 64-bit integer")
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
    victims = {node: _meta_victims(node, value, full_pods=full_pods) for node, value in source.items()}
    return PreemptionArgs(pod, victims)


def encode_preemption_result(victims: Mapping[str, dict[str, Any]]) -> bytes:
    return orjson.dumps({"NodeNameToMetaVictims": dict(victims)})
