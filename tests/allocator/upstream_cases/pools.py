"""Pool gathering: multi-node pools, generations, incomplete, obsolete and invalid pools.

Upstream publishes some pools as several slices sharing one object name; names are unique in a
real cluster, so those get a/b suffixes here (sorting by name keeps upstream's device order).
"""

from __future__ import annotations

from .builders import (
    CLASS_A,
    DRIVER_A,
    NODE_1,
    NODE_2,
    PARTITIONABLE,
    PRIORITIZED,
    Case,
    all_devices,
    allocation,
    claim,
    counter_slice,
    device,
    device_class,
    features,
    first_available,
    local,
    memory_at_least,
    request,
    resource_slice,
    result,
    simple_claim,
    sub,
)

CLASS = device_class(CLASS_A, DRIVER_A)
INVALID = "invalid resource pools were encountered"
ON = features(PARTITIONABLE)


def pool_slice(
    name: str, node_name: str, *device_names: str, generation: int = 1, count: int = 2, pool: str = "pool-1"
) -> dict:
    return resource_slice(
        name,
        node_name,
        pool,
        DRIVER_A,
        *(device(d) for d in device_names),
        count=count,
        generation=generation,
    )


def moved(old_node: str, new_node: str, *, complete: bool) -> list[dict]:
    """Generation 1 on old_node, generation 2 (complete or only its first slice) on new_node."""
    new = [
        pool_slice("slice-2a", new_node, "device-1", generation=2),
        pool_slice("slice-2b", new_node, "device-2", generation=2),
    ]
    return [
        pool_slice("slice-1a", old_node, "device-1"),
        pool_slice("slice-1b", old_node, "device-2"),
        *(new if complete else new[:1]),
    ]


def _one(device_name: str = "device-1", pool: str = "pool-1") -> list[dict]:
    return [allocation(local(), result("req-0", DRIVER_A, pool, device_name))]


CASES = [
    Case(
        # Only the node's own slice of a pool spanning two nodes counts for All.
        "allocation-mode-all-with-multi-host-resource-pool",
        claims=[claim("claim-0", all_devices("req-0"))],
        classes=[CLASS],
        slices=[pool_slice("slice-1", NODE_1, "device-1"), pool_slice("slice-2", NODE_2, "device-2")],
        expect=_one(),
    ),
    Case(
        # A newer generation exists elsewhere: the node's older slice is obsolete.
        "multi-host-resource-pool-with-stale-slice-for-current-node",
        claims=[simple_claim()],
        classes=[CLASS],
        slices=[
            pool_slice("slice-1", NODE_1, "device-1"),
            pool_slice("slice-2", NODE_2, "device-2", generation=2),
        ],
    ),
    # Moving a pool between nodes is not supported well upstream: a complete old generation on this
    # node is still used, which is what a scheduler that had not seen the update would do anyway.
    Case(
        "multi-host-resource-pool-complete-update-from-node-1-to-node-2",
        claims=[simple_claim()],
        classes=[CLASS],
        slices=moved(NODE_1, NODE_2, complete=True),
        expect=_one(),
    ),
    Case(
        "multi-host-resource-pool-complete-update-from-node-2-to-node-1",
        claims=[simple_claim()],
        classes=[CLASS],
        slices=moved(NODE_2, NODE_1, complete=True),
        expect=_one(),
    ),
    Case(
        "multi-host-resource-pool-incomplete-update-from-node-1-to-node-2",
        claims=[simple_claim()],
        classes=[CLASS],
        slices=moved(NODE_1, NODE_2, complete=False),
        expect=_one(),
    ),
    Case(
        "multi-host-resource-pool-incomplete-update-from-node-2-to-node-1",
        claims=[simple_claim()],
        classes=[CLASS],
        slices=moved(NODE_2, NODE_1, complete=False),
    ),
    Case(
        # Upstream's counter sets here have no counters; the API requires some, so one is given.
        "partitionable-devices-same-counter-set-name-in-different-resource-slices",
        features=ON,
        claims=[simple_claim()],
        classes=[CLASS],
        slices=[
            pool_slice("slice-1", NODE_1, "device-1", count=4),
            counter_slice(
                "slice-2", NODE_1, "pool-1", DRIVER_A, {"counter-set-1": {"memory": "1Gi"}}, count=4
            ),
            pool_slice("slice-3", NODE_1, "device-2", count=4),
            counter_slice(
                "slice-4", NODE_1, "pool-1", DRIVER_A, {"counter-set-1": {"memory": "1Gi"}}, count=4
            ),
        ],
        node_error=INVALID,
    ),
    Case(
        "partitionable-devices-device-counter-consumption-references-unknown-counter-set",
        features=ON,
        claims=[simple_claim()],
        classes=[CLASS],
        slices=[
            resource_slice(
                "slice-1",
                NODE_1,
                "pool-1",
                DRIVER_A,
                device("device-1", counters={"counter-set-2": {"memory": "1Gi"}}),
                count=2,
            ),
            counter_slice("slice-2", NODE_1, "pool-1", DRIVER_A, {"counter-set-1": {"memory": "1Gi"}}),
        ],
        node_error=INVALID,
    ),
    Case(
        "partitionable-devices-device-counter-consumption-references-unknown-counter-in-counter-set",
        features=ON,
        claims=[simple_claim()],
        classes=[CLASS],
        slices=[
            resource_slice(
                "slice-1",
                NODE_1,
                "pool-1",
                DRIVER_A,
                device("device-1", counters={"counter-set-1": {"memory": "8Gi"}}),
                count=2,
            ),
            counter_slice("slice-2", NODE_1, "pool-1", DRIVER_A, {"counter-set-1": {"other-memory": "8Gi"}}),
        ],
        node_error=INVALID,
    ),
    Case(
        "partitionable-devices-device-counter-consumption-references-counter-set-in-other-pool",
        features=ON,
        claims=[simple_claim()],
        classes=[CLASS],
        slices=[
            resource_slice(
                "slice-1",
                NODE_1,
                "pool-1",
                DRIVER_A,
                device("device-1", counters={"counter-set-1": {"memory": "8Gi"}}),
            ),
            counter_slice(
                "slice-2", NODE_1, "pool-2", DRIVER_A, {"counter-set-1": {"memory": "8Gi"}}, count=1
            ),
        ],
        node_error=INVALID,
    ),
    Case(
        # device-3 on node-2 is allocated and draws from the same counter set as this node's devices.
        "partitionable-devices-devices-on-different-nodes-consume-same-counter-set",
        features=features(PARTITIONABLE, PRIORITIZED),
        claims=[
            claim(
                "claim-0",
                first_available(
                    "req-0",
                    sub("subReq-0", CLASS_A, 1, memory_at_least("6Gi")),
                    sub("subReq-1", CLASS_A, 1, memory_at_least("2Gi")),
                ),
            )
        ],
        classes=[CLASS],
        allocated=[(DRIVER_A, "pool-1", "device-3")],
        slices=[
            counter_slice(
                "slice-1", NODE_1, "pool-1", DRIVER_A, {"counter-set-1": {"memory": "8Gi"}}, count=3
            ),
            resource_slice(
                "slice-2",
                NODE_1,
                "pool-1",
                DRIVER_A,
                device(
                    "device-1", counters={"counter-set-1": {"memory": "6Gi"}}, capacity_from_counters=True
                ),
                device(
                    "device-2", counters={"counter-set-1": {"memory": "2Gi"}}, capacity_from_counters=True
                ),
                count=3,
            ),
            resource_slice(
                "slice-3",
                NODE_2,
                "pool-1",
                DRIVER_A,
                device("device-3", counters={"counter-set-1": {"memory": "6Gi"}}),
                count=3,
            ),
        ],
        expect=[allocation(local(), result("req-0/subReq-1", DRIVER_A, "pool-1", "device-2"))],
    ),
    Case(
        # A slice for another node references a missing counter set: the whole pool is invalid.
        "partitionable-devices-validation-error-on-non-targeting-slice",
        features=ON,
        claims=[simple_claim()],
        classes=[CLASS],
        slices=[
            counter_slice(
                "slice-1", NODE_1, "pool-1", DRIVER_A, {"counter-set-1": {"memory": "8Gi"}}, count=3
            ),
            resource_slice(
                "slice-2",
                NODE_1,
                "pool-1",
                DRIVER_A,
                device(
                    "device-1", counters={"counter-set-1": {"memory": "6Gi"}}, capacity_from_counters=True
                ),
                count=3,
            ),
            resource_slice(
                "slice-3",
                NODE_2,
                "pool-1",
                DRIVER_A,
                device("device-3", counters={"counter-set-2": {"memory": "6Gi"}}),
                count=3,
            ),
        ],
        node_error=INVALID,
    ),
    Case(
        "different-resourceslices-in-pool-can-target-different-nodes",
        claims=[simple_claim()],
        classes=[CLASS],
        slices=[pool_slice("slice-1", NODE_2, "device-1"), pool_slice("slice-2", NODE_1, "device-2")],
        expect=_one("device-2"),
    ),
    Case(
        "invalid-pool-is-ok-if-devices-can-be-allocated-from-other",
        claims=[simple_claim()],
        classes=[CLASS],
        slices=[
            pool_slice("slice-1", NODE_1, "device-1"),
            pool_slice("slice-2", NODE_1, "device-1"),
            pool_slice("slice-3", NODE_1, "device-2", pool="pool-2", count=1),
        ],
        expect=_one("device-2", "pool-2"),
    ),
    Case(
        "invalid-pool-is-error-if-no-other-device-can-be-allocated",
        claims=[simple_claim()],
        classes=[CLASS],
        allocated=[(DRIVER_A, "pool-2", "device-2")],
        slices=[
            pool_slice("slice-1", NODE_1, "device-1"),
            pool_slice("slice-2", NODE_1, "device-1"),
            pool_slice("slice-3", NODE_1, "device-2", pool="pool-2", count=1),
        ],
        node_error=INVALID,
    ),
    Case(
        "no-allocation-from-incomplete-pools",
        claims=[claim("claim-0", request("req-0"))],
        classes=[CLASS],
        slices=[pool_slice("slice-1", NODE_1, "device-1")],
    ),
]
