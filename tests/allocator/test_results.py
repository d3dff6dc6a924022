"""AllocationResult construction: results fields, configs, node selector."""

from __future__ import annotations

import pytest
from allocator_objects import (
    DRIVER,
    allocate,
    claim_obj,
    class_obj,
    dev,
    first_available,
    inventory,
    req,
    slice_obj,
)

from allocator import AllocationError


def opaque(name: str) -> dict:
    return {"opaque": {"driver": DRIVER, "parameters": {"name": name}}}


def test_configs_from_class_then_claim() -> None:
    classes = [
        class_obj("gpu", config=[opaque("class-gpu")]),
        class_obj("other", config=[opaque("class-other")]),
    ]
    inv = inventory([slice_obj("s", [dev(f"d{i}") for i in range(4)])], classes=classes)
    claim = claim_obj(
        "c",
        req("a"),
        req("b"),
        first_available("c", req("x", cls="other")),
        config=[
            opaque("all"),
            {"requests": ["a"], **opaque("only-a")},
            {"requests": ["c/x"], **opaque("sub")},
        ],
    )
    config = allocate(inv, claim).allocations[0]["devices"]["config"]
    assert config == [
        {"source": "FromClass", "requests": ["a", "b"], **opaque("class-gpu")},
        {"source": "FromClass", "requests": ["c/x"], **opaque("class-other")},
        {"source": "FromClaim", **opaque("all")},
        {"source": "FromClaim", "requests": ["a"], **opaque("only-a")},
        {"source": "FromClaim", "requests": ["c/x"], **opaque("sub")},
    ]


def test_result_fields() -> None:
    inv = inventory([slice_obj("s", [dev("d0")])])
    outcome = allocate(inv, claim_obj("c", req("r", adminAccess=True)))
    assert outcome.allocations[0]["devices"] == {
        "results": [{"request": "r", "driver": DRIVER, "pool": "node-1", "device": "d0", "adminAccess": True}]
    }


def selector(key: str, *values: str) -> dict:
    return {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": key, "operator": "In", "values": list(values)}]}]
    }


def test_node_selector_merges_slice_selectors() -> None:
    from allocator import Node

    node = Node.named("node-1", {"region": "eu", "rack": "r1"})
    inv = inventory(
        [
            slice_obj("a", [dev("d0")], pool="p1", node=None, nodeSelector=selector("region", "eu")),
            slice_obj("b", [dev("d1")], pool="p2", node=None, nodeSelector=selector("rack", "r1")),
            slice_obj("c", [dev("d2")], pool="p3", node=None, allNodes=True),
        ]
    )
    outcome = allocate(inv, claim_obj("c", req("r", 3)), node=node)
    assert outcome.allocations[0]["nodeSelector"] == {
        "nodeSelectorTerms": [
            {
                "matchExpressions": [
                    {"key": "region", "operator": "In", "values": ["eu"]},
                    {"key": "rack", "operator": "In", "values": ["r1"]},
                ]
            }
        ]
    }
    # An unlabeled node sees only the allNodes pool, and allNodes adds no node selector.
    unlabeled = allocate(inv, claim_obj("c", req("r")))
    assert unlabeled.allocations[0] == {
        "devices": {"results": [{"request": "r", "driver": DRIVER, "pool": "p3", "device": "d2"}]}
    }


def test_binds_to_node_pins_the_node() -> None:
    inv = inventory([slice_obj("c", [dev("d", bindsToNode=True)], pool="p", node=None, allNodes=True)])
    outcome = allocate(inv, claim_obj("c", req("r")))
    assert outcome.allocations[0]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == [
        "node-1"
    ]


def test_multi_term_slice_selector_is_an_error() -> None:
    two_terms = {"nodeSelectorTerms": selector("region", "eu")["nodeSelectorTerms"] * 2}
    inv = inventory([slice_obj("a", [dev("d0")], pool="p1", node=None, nodeSelector=two_terms)])
    from allocator import Node

    with pytest.raises(AllocationError, match="create NodeSelector for claim c: unsupported ResourceSlice"):
        allocate(inv, claim_obj("c", req("r")), node=Node.named("n", {"region": "eu"}))
