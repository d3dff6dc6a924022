"""Core NodeSelector semantics (node affinity), as used by ResourceSlices and allocation results."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from allocator.model import Node


class NodeSelectorError(ValueError):
    """A node selector that cannot be evaluated (unknown operator, bad Gt/Lt value, unsupported field)."""


# What Go's strconv.ParseInt(text, 10, 64) takes: ASCII digits with an optional sign, nothing else
# (Python's int() also takes spaces, underscores and other scripts' digits).
_GO_DECIMAL = re.compile(r"[+-]?[0-9]+")
_INT64 = range(-(2**63), 2**63)


def go_int64(text: str) -> int | None:
    """`text` as Go's strconv.ParseInt(text, 10, 64) reads it; None where that fails."""
    if not _GO_DECIMAL.fullmatch(text):
        return None
    number = int(text)
    return number if number in _INT64 else None


def _integer_operand(values: list[str], operator: str) -> int:
    if len(values) != 1:
        raise NodeSelectorError(f"operator {operator} needs exactly one value, got {len(values)}")
    number = go_int64(str(values[0]))
    if number is None:
        raise NodeSelectorError(f"operator {operator} needs an integer value, got {values[0]!r}")
    return number


def _requirement_matches(requirement: Mapping[str, Any], values_by_key: Mapping[str, str]) -> bool:
    key = requirement.get("key", "")
    operator = requirement.get("operator", "")
    values = list(requirement.get("values") or [])
    present = key in values_by_key
    actual = values_by_key.get(key)
    if operator == "In":
        if not values:
            raise NodeSelectorError(f"key {key}: operator In needs at least one value")
        return present and actual in values
    if operator == "NotIn":
        if not values:
            raise NodeSelectorError(f"key {key}: operator NotIn needs at least one value")
        return not present or actual not in values
    if operator in ("Exists", "DoesNotExist"):
        if values:
            raise NodeSelectorError(f"key {key}: operator {operator} takes no values")
        return present if operator == "Exists" else not present
    if operator in ("Gt", "Lt"):
        bound = _integer_operand(values, operator)
        if not present:
            return False
        number = go_int64(actual or "")
        if number is None:
            return False
        return number > bound if operator == "Gt" else number < bound
    raise NodeSelectorError(f"key {key}: unknown operator {operator!r}")


def term_matches(term: Mapping[str, Any], node: Node) -> bool:
    """One NodeSelectorTerm: its requirements ANDed; an empty term matches no node. Raises
    NodeSelectorError for a term that cannot be evaluated."""
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not expressions and not fields:
        return False  # an empty term matches no node
    for requirement in expressions:
        if not _requirement_matches(requirement, node.labels):
            return False
    for requirement in fields:
        if requirement.get("key") != "metadata.name":
            raise NodeSelectorError(f"unsupported field selector key {requirement.get('key')!r}")
        if requirement.get("operator") not in ("In", "NotIn"):
            raise NodeSelectorError(
                f"field selector metadata.name: unsupported operator {requirement.get('operator')!r}"
            )
        if not _requirement_matches(requirement, {"metadata.name": node.name}):
            return False
    return True


def node_matches_selector(node: Node, node_selector: Mapping[str, Any]) -> bool:
    """True if any term matches (terms are ORed, requirements inside a term ANDed). A term that cannot be
    evaluated fails the whole selector (NodeSelectorError), as for ResourceSlices upstream."""
    return any(term_matches(term, node) for term in node_selector.get("nodeSelectorTerms") or [])


def node_matches(
    node: Node | None, *, node_name: str, all_nodes: bool, node_selector: Mapping[str, Any] | None
) -> bool:
    """Node selection of a slice or device: nodeName, then allNodes, then nodeSelector."""
    if node_name:
        return node is not None and node.name == node_name
    if all_nodes:
        return True
    if node_selector is not None:
        return node is not None and node_matches_selector(node, node_selector)
    return False


# DRAOptionalNodeOperations: the feature gate and, in a node's status.declaredFeatures, the node's word
# that its kubelet knows when it may skip node operations.
OPTIONAL_NODE_OPERATIONS = "DRAOptionalNodeOperations"


def takes_skipped_node_operations(node: Node) -> bool:
    """Whether devices whose slice skips node operations may be used on ``node`` (gate aside)."""
    return node.declares(OPTIONAL_NODE_OPERATIONS)


def allocation_skips_node_operations(allocation: Mapping[str, Any] | None) -> bool:
    """Whether an allocation result holds a device that skips node operations (it then only works on a
    node that declares DRAOptionalNodeOperations, whatever the gates: upstream's Filter checks it)."""
    results = ((allocation or {}).get("devices") or {}).get("results") or ()
    return any(isinstance(r, dict) and r.get("skipNodeOperations") for r in results)
