"""Bind's refusals: a bind kube-scheduler could not have asked for is refused before anything is reserved
or written.

Bind writes with dra-extender's own rights (pods/binding, resourceclaims/status, resourceclaims/binding),
so whoever can call it could otherwise place any pending pod on any node, past kube-scheduler's filters
and whatever admission decided on the strength of them. kube-scheduler only binds a pod of one of its
profiles, still unbound, to a node that passed its NodeAffinity and TaintToleration filters. Bind checks
the same on the cached pod and node:

- the pod is the one asked for (its UID), names a scheduler we serve (`--scheduler-names`; a pod that
  names none has the API server's default, `default-scheduler`) and is not bound yet;
- the node is known, matches the pod's `nodeSelector` and required node affinity (k8s.io/component-helpers
  `nodeaffinity.GetRequiredNodeAffinity(pod).Match`: terms ORed, a term that cannot be evaluated matches
  nothing, `matchFields` on `metadata.name`), and the pod tolerates each of its NoSchedule and NoExecute
  taints (`FindMatchingUntoleratedTaint` with the TaintToleration filter's predicate; `Lt`/`Gt`
  tolerations only with TaintTolerationComparisonOperators, as there), and it is not cordoned
  (`spec.unschedulable`) unless the pod tolerates the `node.kubernetes.io/unschedulable:NoSchedule`
  taint (the NodeUnschedulable filter: the node controller adds that taint only some time later).

Deliberate difference: a node tainted or relabelled between kube-scheduler's filter and its bind is
refused here (kube-scheduler retries the pod), where kube-scheduler would have bound it.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any, NamedTuple

from allocator import Node, tolerates
from allocator.cel.formatlib import label_value, qualified_name
from allocator.nodes import NodeSelectorError, go_int64, term_matches
from common.claimrefs import pod_key, pod_uid
from extender.state.cache import ClusterCache

DEFAULT_SCHEDULER = "default-scheduler"  # what the API server sets when a pod names no scheduler
TAINT_COMPARISONS = "TaintTolerationComparisonOperators"
BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
REQUIRED_AFFINITY = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
# Every reason a refusal is counted under (the metric's label values).
REASONS = ("unknown-pod", "uid", "scheduler-name", "already-bound", "unknown-node", "node-affinity", "taint",
           "cordoned")
UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
# A toleration's Lt/Gt value and the taint's: canonical decimal integers (no sign, no leading zero).
_CANONICAL_DECIMAL = re.compile(r"0|-?[1-9][0-9]*")


class Refusal(NamedTuple):
    reason: str  # one of REASONS
    message: str


class BindChecks:
    def __init__(self, cache: ClusterCache, scheduler_names: Collection[str] = (DEFAULT_SCHEDULER,)) -> None:
        self.cache = cache
        self.scheduler_names = frozenset(scheduler_names)
        self.comparisons = cache.features.enabled(TAINT_COMPARISONS)

    def refusal(self, pod: dict, *, uid: str, node_name: str) -> Refusal | None:
        """Why `pod` (the cached copy) must not be bound to `node_name`, or None when it may be."""
        key = pod_key(pod)
        if uid and pod_uid(pod) and pod_uid(pod) != uid:
            return Refusal("uid", f"pod {key} has UID {pod_uid(pod)}, not {uid}")
        spec = pod.get("spec")
        spec = spec if isinstance(spec, dict) else {}
        scheduler = spec.get("schedulerName") or DEFAULT_SCHEDULER
        if scheduler not in self.scheduler_names:
            served = ", ".join(sorted(self.scheduler_names))
            return Refusal("scheduler-name", f"pod {key} is for scheduler {scheduler!r}; dra-extender binds "
                                             f"only pods of {served} (--scheduler-names)")
        if spec.get("nodeName"):
            return Refusal("already-bound", f"pod {key} is already bound to node {spec['nodeName']}")
        node = self.cache.node(node_name)
        if node is None:
            return Refusal("unknown-node", f"node {node_name} is not known to dra-extender")
        mismatch = node_affinity_mismatch(spec, node)
        if mismatch:
            return Refusal("node-affinity", f"pod {key} cannot go to node {node_name}: {mismatch}")
        taint = untolerated_taint(node, spec.get("tolerations"), comparisons=self.comparisons)
        if taint is not None:
            return Refusal("taint", f"pod {key} cannot go to node {node_name}: it does not tolerate the "
                                    f"node's taint {describe_taint(taint)}")
        if _cordoned(node) and not any(
                toleration_tolerates(toleration, UNSCHEDULABLE_TAINT, comparisons=self.comparisons)
                for toleration in _usable(spec.get("tolerations"))):
            return Refusal("cordoned", f"pod {key} cannot go to node {node_name}: the node is cordoned "
                                       "(spec.unschedulable) and the pod does not tolerate "
                                       f"{describe_taint(UNSCHEDULABLE_TAINT)}")
        return None


def node_affinity_mismatch(spec: Mapping[str, Any], node: Node) -> str:
    """Which of the pod's `nodeSelector` and required node affinity `node` fails, or ""."""
    selector = spec.get("nodeSelector")
    if selector is not None and not isinstance(selector, dict):
        return "spec.nodeSelector is not a map"
    for label, value in (selector or {}).items():
        if label not in node.labels or node.labels[label] != value:
            return f"the node does not have the label {label}={value} of spec.nodeSelector"
    affinity = spec.get("affinity")
    node_affinity = affinity.get("nodeAffinity") if isinstance(affinity, dict) else None
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") \
        if isinstance(node_affinity, dict) else None
    if required is None:
        return ""
    terms = required.get("nodeSelectorTerms") if isinstance(required, dict) else None
    if any(_term_matches(term, node) for term in (terms if isinstance(terms, list) else ())):
        return ""
    return f"the node matches none of the terms of {REQUIRED_AFFINITY}"


def _term_matches(term: Any, node: Node) -> bool:
    """One term; a term that cannot be evaluated (malformed, or what labels.NewRequirement and the field
    selector refuse, such as a value that is no label value) matches no node instead of failing the
    others."""
    if not isinstance(term, dict):
        return False
    expressions, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
    if not (isinstance(expressions, list) and all(map(_label_requirement, expressions))
            and isinstance(fields, list) and all(map(_field_requirement, fields))):
        return False
    try:
        return term_matches(term, node)
    except NodeSelectorError:
        return False


def _values(requirement: Any) -> list[str] | None:
    """The requirement's values, or None when it is no object of a string key, operator and values."""
    if not isinstance(requirement, dict):
        return None
    values = requirement.get("values") or []
    if not (isinstance(requirement.get("key"), str) and isinstance(requirement.get("operator"), str)
            and isinstance(values, list) and all(isinstance(value, str) for value in values)):
        return None
    return values


def _label_requirement(requirement: Any) -> bool:
    values = _values(requirement)
    return (values is not None and not qualified_name(requirement["key"])
            and not any(label_value(value) for value in values))


def _field_requirement(requirement: Any) -> bool:
    values = _values(requirement)
    return values is not None and len(values) == 1


def untolerated_taint(node: Node, tolerations: Any, *, comparisons: bool) -> dict[str, Any] | None:
    """The first NoSchedule or NoExecute taint of `node` that no toleration of the pod tolerates."""
    spec = node.raw.get("spec")
    taints = spec.get("taints") if isinstance(spec, dict) else None
    if not isinstance(taints, list):
        return None
    usable = _usable(tolerations)
    for taint in taints:
        if isinstance(taint, dict) and taint.get("effect") in BLOCKING_EFFECTS and not any(
                toleration_tolerates(toleration, taint, comparisons=comparisons) for toleration in usable):
            return taint
    return None


def _usable(tolerations: Any) -> list[dict[str, Any]]:
    return [t for t in tolerations if isinstance(t, dict)] if isinstance(tolerations, list) else []


def _cordoned(node: Node) -> bool:
    spec = node.raw.get("spec")
    return isinstance(spec, dict) and spec.get("unschedulable") is True


def toleration_tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any], *,
                         comparisons: bool) -> bool:
    """core/v1 Toleration.ToleratesTaint: effect, key, then the operator; Lt and Gt compare the values as
    integers, and only with `comparisons` (otherwise they tolerate nothing)."""
    operator = toleration.get("operator")
    if operator not in ("Lt", "Gt"):
        return tolerates(toleration, taint)
    if not comparisons or not tolerates({**toleration, "operator": "Exists"}, taint):
        return False
    limit, value = _decimal(toleration.get("value")), _decimal(taint.get("value"))
    if limit is None or value is None:
        return False
    return value < limit if operator == "Lt" else value > limit


def _decimal(text: Any) -> int | None:
    if not isinstance(text, str) or not _CANONICAL_DECIMAL.fullmatch(text):
        return None
    return go_int64(text)


def describe_taint(taint: Mapping[str, Any]) -> str:
    value = taint.get("value")
    return f"{taint.get('key')}{'=' + str(value) if value else ''}:{taint.get('effect')}"
