"""DRAOptionalNodeOperations: devices of a slice that skips node operations, and the node's
status.declaredFeatures."""

from __future__ import annotations

from typing import Any

import pytest
from allocator_objects import allocate, claim_obj, dev, inventory, picked, req, slice_obj

from allocator import (
    OPTIONAL_NODE_OPERATIONS,
    InvalidObjectError,
    Node,
    allocation_skips_node_operations,
    takes_skipped_node_operations,
)

GATE = {"DRAOptionalNodeOperations": True}
DECLARING = Node.named("node-1", declared_features=(OPTIONAL_NODE_OPERATIONS,))
PLAIN = Node.named("node-1")


def skipping_inventory(*skipped: str) -> Any:
    return inventory([slice_obj("s", [dev("d0")], skipNodeOperations=list(skipped))])


def test_the_node_model_reads_declared_features() -> None:
    assert takes_skipped_node_operations(DECLARING) and not takes_skipped_node_operations(PLAIN)
    assert DECLARING.labels_key == PLAIN.labels_key  # the same pool view
    assert DECLARING.verdict_key != PLAIN.verdict_key  # but not the same verdicts
    with pytest.raises(InvalidObjectError, match=r"status\.declaredFeatures"):
        Node.from_api(
            {"metadata": {"name": "n"}, "status": {"declaredFeatures": "DRAOptionalNodeOperations"}}
        )


def test_with_the_gate_and_a_declaring_node_the_result_says_what_is_skipped() -> None:
    outcome = allocate(skipping_inventory("*"), claim_obj("c", req("r")), node=DECLARING, gates=GATE)
    assert outcome.allocations[0]["devices"]["results"][0]["skipNodeOperations"] == ["*"]


def test_a_node_that_does_not_declare_the_feature_cannot_take_the_device() -> None:
    outcome = allocate(skipping_inventory("*"), claim_obj("c", req("r")), node=PLAIN, gates=GATE)
    assert not outcome.success
    assert outcome.reasons[0].rejected == {"node operations": 1}
    message = outcome.reasons[0].message
    assert "1 skipping node operations without DRAOptionalNodeOperations enabled" in message


@pytest.mark.parametrize(
    ("gates", "usable"),
    [
        # Upstream's incubating allocator (no alpha gate on) ignores skipNodeOperations ...
        ({}, True),
        # ... its experimental one (any alpha allocator gate on) refuses the devices without this gate.
        ({"DRAListTypeAttributes": True}, False),
        ({"DRADerivedAttributes": True}, False),
    ],
)
def test_without_the_gate_it_depends_on_upstreams_variant(gates: dict[str, bool], usable: bool) -> None:
    outcome = allocate(skipping_inventory("*"), claim_obj("c", req("r")), node=DECLARING, gates=gates)
    assert outcome.success is usable
    if usable:
        assert "skipNodeOperations" not in outcome.allocations[0]["devices"]["results"][0]


def test_equal_devices_in_slices_that_skip_and_that_do_not_are_not_alike() -> None:
    # d0 and d1 differ only in their slice's skipNodeOperations: the search must not skip d1 as "the
    # same as d0, which failed".
    inv = inventory(
        [
            slice_obj("s0", [dev("d0")], pool="p", count=2, skipNodeOperations=["*"]),
            slice_obj("s1", [dev("d1")], pool="p", count=2),
        ]
    )
    assert picked(allocate(inv, claim_obj("c", req("r")), node=PLAIN, gates=GATE)) == ["r=d1"]


def test_allocation_results_that_skip_node_operations() -> None:
    results = [{"request": "r", "driver": "d", "pool": "p", "device": "x", "skipNodeOperations": ["*"]}]
    assert allocation_skips_node_operations({"devices": {"results": results}})
    assert not allocation_skips_node_operations({"devices": {"results": [{"request": "r"}]}})
    assert not allocation_skips_node_operations(None)
