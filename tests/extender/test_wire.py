from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from extender.http.wire import (
    BadRequest,
    encode_binding_result,
    encode_filter_result,
    encode_host_priorities,
    encode_preemption_result,
    parse_binding_args,
    parse_extender_args,
    parse_preemption_args,
)

PAYLOADS = Path(__file__).parent / "payloads"


def payload(name: str) -> bytes:
    return (PAYLOADS / name).read_bytes()


def test_node_cache_capable_filter_round_trip() -> None:
    args = parse_extender_args(payload("filter_node_cache_capable.json"), "filter")
    assert args.node_cache_capable and args.node_names == ["node-1", "node-2", "node-3"]
    assert args.pod["metadata"]["uid"] == "3b20479b-a3d0-5eec-b261-47ef1f760574"
    result = orjson.loads(encode_filter_result(args, [], {"node-1": "why"}, {"node-2": "never"}))
    # Exactly the keys of ExtenderFilterResult, NodeNames a list even when empty, Nodes null.
    assert result == {"Nodes": None, "NodeNames": [], "FailedNodes": {"node-1": "why"},
                      "FailedAndUnresolvableNodes": {"node-2": "never"}, "Error": ""}


def test_full_node_list_filter_returns_the_node_objects() -> None:
    raw = orjson.loads(payload("filter_full_nodes.json"))
    args = parse_extender_args(payload("filter_full_nodes.json"), "filter")
    assert not args.node_cache_capable and args.node_names == ["node-1", "node-2", "node-3"]
    result = orjson.loads(encode_filter_result(args, ["node-3", "node-1"], {}, {}))
    assert result["NodeNames"] is None
    assert result["Nodes"]["items"] == [raw["Nodes"]["items"][2], raw["Nodes"]["items"][0]]


def test_keys_are_matched_case_insensitively_like_go() -> None:
    args = parse_extender_args(b'{"pod": {"metadata": {"name": "p", "namespace": "ns"}}, "nodenames": ["a"]}',
                               "filter")
    assert args.node_names == ["a"]


def test_prioritize_is_a_bare_list() -> None:
    assert orjson.loads(encode_host_priorities({"a": 3, "b": 10})) == [
        {"Host": "a", "Score": 3}, {"Host": "b", "Score": 10}]


def test_bind_round_trip() -> None:
    args = parse_binding_args(payload("bind.json"))
    assert (args.pod_name, args.pod_namespace, args.node) == ("inference", "default", "node-1")
    assert orjson.loads(encode_binding_result("")) == {"Error": ""}


def test_preempt_accepts_empty_victim_lists_and_full_victims() -> None:
    args = parse_preemption_args(payload("preempt_meta_victims.json"))
    assert args.victims["node-2"] == {"Pods": [], "NumPDBViolations": 0}
    assert args.victims["node-1"]["Pods"] == [{"UID": "46dab1d3-83da-5e05-a4be-bc1509d6f4fb"}]
    full = orjson.dumps({"Pod": {"metadata": {"name": "p", "namespace": "ns"}}, "NodeNameToMetaVictims": None,
                         "NodeNameToVictims": {"n": {"Pods": [{"metadata": {"uid": "u1"}}],
                                                     "NumPDBViolations": 1}}})
    assert parse_preemption_args(full).victims == {"n": {"Pods": [{"UID": "u1"}], "NumPDBViolations": 1}}
    assert orjson.loads(encode_preemption_result(args.victims))["NodeNameToMetaVictims"] == args.victims


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"", "empty request body"),
        (b"{not json", "not valid JSON"),
        (b"[]", "must be a JSON object"),
        (b'{"Pod": null, "NodeNames": []}', "Pod must be a v1.Pod object"),
        (b'{"Pod": {"metadata": {}}, "NodeNames": []}', "Pod.metadata.name is missing"),
        (b'{"Pod": {"metadata": {"name": "p"}}, "NodeNames": null}', "neither NodeNames nor Nodes"),
        (b'{"Pod": {"metadata": {"name": "p"}}, "NodeNames": [1]}', "NodeNames must be a list of strings"),
        (b'{"Pod": {"metadata": {"name": "p"}}, "Nodes": {"items": [{}]}}', "Nodes.items[0].metadata.name"),
    ],
)
def test_malformed_filter_bodies(body: bytes, message: str) -> None:
    with pytest.raises(BadRequest, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_extender_args(body, "filter")


@pytest.mark.parametrize(
    "body",
    [b'{"PodName": "p", "PodNamespace": "ns", "PodUID": "u"}', b'{"PodName": 3, "PodUID": "u", "Node": "n"}'],
)
def test_malformed_bind_bodies(body: bytes) -> None:
    with pytest.raises(BadRequest, match="bind: "):
        parse_binding_args(body)
