"""v0.37.1 table cases for DRAOptionalNodeOperations: devices of a slice that skips node operations go
only to a node that declares the feature, and their results say what is skipped
(optional-node-operations*)."""

from __future__ import annotations

from .builders import (
    DRIVER_A,
    NODE_1,
    NODE_OPERATIONS,
    REGION_1,
    Case,
    allocation,
    device_class,
    features,
    local,
    node,
    one_device_slice,
    result,
    simple_claim,
)

SKIP_ALL = "*"
DECLARED = "DRAOptionalNodeOperations"


def skipping_case(name: str, declared: tuple[str, ...], fits: bool) -> Case:
    return Case(
        name,
        features=features(NODE_OPERATIONS),
        claims=[simple_claim()],
        classes=[device_class()],
        slices=[one_device_slice("slice-1", NODE_1, "pool-1", DRIVER_A, skip_node_operations=[SKIP_ALL])],
        node=node(NODE_1, REGION_1, *declared),
        expect=[
            allocation(
                local(), result("req-0", DRIVER_A, "pool-1", "device-1", skip_node_operations=[SKIP_ALL])
            )
        ]
        if fits
        else None,
    )


CASES = [
    skipping_case("optional-node-operations", (DECLARED,), True),
    skipping_case("optional-node-operations-missing-feature", (), False),
]
