"""Node selector semantics."""

from __future__ import annotations

import pytest

from allocator import Node, node_matches_selector
from allocator.nodes import NodeSelectorError, go_int64, node_matches

NODE = Node.named("node-1", {"region": "eu", "gpus": "4", "slots": "1_0", "count": "+7"})


def term(*expressions: dict, fields: list | None = None) -> dict:
    body: dict = {"matchExpressions": list(expressions)}
    if fields:
        body["matchFields"] = fields
    return {"nodeSelectorTerms": [body]}


@pytest.mark.parametrize(
    ("requirement", "expected"),
    [
        ({"key": "region", "operator": "In", "values": ["eu", "us"]}, True),
        ({"key": "region", "operator": "NotIn", "values": ["eu"]}, False),
        ({"key": "zone", "operator": "NotIn", "values": ["a"]}, True),
        ({"key": "region", "operator": "Exists"}, True),
        ({"key": "zone", "operator": "DoesNotExist"}, True),
        ({"key": "gpus", "operator": "Gt", "values": ["3"]}, True),
        ({"key": "gpus", "operator": "Lt", "values": ["4"]}, False),
        ({"key": "region", "operator": "Gt", "values": ["3"]}, False),
        # Integers as Go's strconv.ParseInt reads them: a sign, no underscore or space.
        ({"key": "slots", "operator": "Gt", "values": ["1"]}, False),
        ({"key": "count", "operator": "Gt", "values": ["6"]}, True),
        ({"key": "gpus", "operator": "Gt", "values": ["-1"]}, True),
    ],
)
def test_operators(requirement: dict, expected: bool) -> None:
    assert node_matches_selector(NODE, term(requirement)) is expected


def test_terms_are_ored_and_fields_match_the_name() -> None:
    by_name = term(fields=[{"key": "metadata.name", "operator": "In", "values": ["node-1"]}])
    assert node_matches_selector(NODE, by_name)
    other = {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "region", "operator": "In", "values": ["us"]}]}]
    }
    assert not node_matches_selector(NODE, other)
    both = {"nodeSelectorTerms": other["nodeSelectorTerms"] + by_name["nodeSelectorTerms"]}
    assert node_matches_selector(NODE, both)
    assert not node_matches_selector(NODE, {"nodeSelectorTerms": [{}]})


def test_bad_selectors_raise() -> None:
    with pytest.raises(NodeSelectorError, match="unknown operator"):
        node_matches_selector(NODE, term({"key": "region", "operator": "Like", "values": ["e"]}))
    with pytest.raises(NodeSelectorError, match="needs an integer"):
        node_matches_selector(NODE, term({"key": "gpus", "operator": "Gt", "values": ["many"]}))
    with pytest.raises(NodeSelectorError, match="needs an integer"):
        node_matches_selector(NODE, term({"key": "gpus", "operator": "Gt", "values": [" 3"]}))


@pytest.mark.parametrize(("text", "number"), [
    ("42", 42), ("-7", -7), ("+7", 7), ("007", 7), ("9223372036854775807", 2**63 - 1),
    ("9223372036854775808", None), ("-9223372036854775809", None), ("1_0", None), (" 1", None), ("1.0", None),
    ("", None), ("\u0663", None),
])
def test_integers_are_read_as_go_reads_them(text: str, number: int | None) -> None:
    assert go_int64(text) == number


def test_node_matches_precedence() -> None:
    assert node_matches(NODE, node_name="node-1", all_nodes=False, node_selector=None)
    assert not node_matches(NODE, node_name="node-2", all_nodes=True, node_selector=None)
    assert node_matches(NODE, node_name="", all_nodes=True, node_selector=None)
    assert not node_matches(NODE, node_name="", all_nodes=False, node_selector=None)
