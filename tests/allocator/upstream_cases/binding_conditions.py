"""Binding conditions (copied into results, unselectable without the feature) and bindsToNode."""

from __future__ import annotations

from .builders import (
    BINDING,
    CLASS_A,
    DRIVER_A,
    NODE_1,
    PARTITIONABLE,
    TAINTS,
    Case,
    allocation,
    claim,
    counter_slice,
    device,
    device_class,
    features,
    label_selector,
    local,
    request,
    resource_slice,
    result,
    taint,
    toleration,
)

CLASS = device_class(CLASS_A, DRIVER_A)
ON = features(BINDING)
PARTITIONABLE_ON = features(PARTITIONABLE, BINDING)
KEY1_NO_SCHEDULE = taint("key1", "value1", "NoSchedule")
TOLERATE_KEY1 = toleration("key1", "NoSchedule")


def bound(name: str, suffix: str = "", **kw: object) -> dict:
    return device(name, binding=[f"IsPrepare{suffix}"], binding_failure=[f"BindingFailed{suffix}"], **kw)


def bound_result(request_name: str, name: str, suffix: str = "", **kw: object) -> dict:
    return result(
        request_name,
        DRIVER_A,
        "pool-1",
        name,
        binding=[f"IsPrepare{suffix}"],
        binding_failure=[f"BindingFailed{suffix}"],
        **kw,
    )


def memory(amount: str, counter_set: str = "counter-set-1") -> dict:
    return {"counters": {counter_set: {"memory": amount}}, "capacity_from_counters": True}


def counters_8gi(name: str = "slice-2", counter_set: str = "counter-set-1", count: int = 2) -> dict:
    return counter_slice(name, NODE_1, "pool-1", DRIVER_A, {counter_set: {"memory": "8Gi"}}, count=count)


CASES = [
    Case(
        "device-binding-conditions",
        features=ON,
        claims=[claim("claim-0", request("req-0"))],
        classes=[CLASS],
        slices=[resource_slice("slice-1", NODE_1, "pool-1", DRIVER_A, bound("device-1"))],
        expect=[allocation(local(), bound_result("req-0", "device-1"))],
    ),
    Case(
        "binding-conditions-multiple-devices",
        features=ON,
        claims=[claim("claim-0", request("req-0", CLASS_A, 2), request("req-1"))],
        classes=[CLASS],
        slices=[
            resource_slice(
                "slice-1",
                NODE_1,
                "pool-1",
                DRIVER_A,
                bound("device-1"),
                bound("device-2", "2"),
                bound("device-3", "3"),
            )
        ],
        expect=[
            allocation(
                local(),
                bound_result("req-0", "device-1"),
                bound_result("req-0", "device-2", "2"),
                bound_result("req-1", "device-3", "3"),
            )
        ],
    ),
    Case(
        "binding-conditions-with-and-without",
        features=ON,
        claims=[claim("claim-0", request("req-0"), request("req-1"))],
        classes=[CLASS],
        slices=[resource_slice("slice-1", NODE_1, "pool-1", DRIVER_A, device("device-1"), bound("device-2"))],
        expect=[
            allocation(
                local(), result("req-0", DRIVER_A, "pool-1", "device-1"), bound_result("req-1", "device-2")
            )
        ],
    ),
    Case(
        "binding-conditions-without-feature-gate",
        claims=[claim("claim-0", request("req-0"))],
        classes=[CLASS],
        slices=[resource_slice("slice-1", NODE_1, "pool-1", DRIVER_A, bound("device-1"))],
    ),
    Case(
        # bindsToNode pins the result to the node even though the slice is network-attached.
        "node-restriction",
        features=ON,
        claims=[claim("claim-0", request("req-0"))],
        classes=[CLASS],
        slices=[
            resource_slice(
                "slice-1",
                label_selector("planet", "earth"),
                "pool-1",
                DRIVER_A,
                device("device-1", binds_to_node=True),
            )
        ],
        expect=[allocation(local(), result("req-0", DRIVER_A, "pool-1", "device-1"))],
    ),
    Case(
        "partitionable-devices-with-binding-conditions",
        features=PARTITIONABLE_ON,
        claims=[claim("claim-0", request("req-0"))],
        classes=[CLASS],
        slices=[
            resource_slice(
                "slice-1", NODE_1, "pool-1", DRIVER_A, bound("device-1", **memory("4Gi")), count=2
            ),
            counters_8gi(),
        ],
        expect=[allocation(local(), bound_result("req-0", "device-1"))],
    ),
    Case(
        "partitionable-devices-with-binding-conditions-multiple",
        features=PARTITIONABLE_ON,
        claims=[claim("claim-0", request("req-0", CLASS_A, 2))],
        classes=[CLASS],
        slices=[
            resource_slice(
                "slice-1",
                NODE_1,
                "pool-1",
                DRIVER_A,
                bound("device-1", **memory("4Gi")),
                bound("device-2", "2", **memory("4Gi")),
                count=2,
            ),
            counters_8gi(),
        ],
        expect=[
            allocation(local(), bound_result("req-0", "device-1"), bound_result("req-0", "device-2", "2"))
        ],
    ),
    Case(
        "partitionable-devices-with-binding-conditions-some-devices-no-conditions",
        features=PARTITIONABLE_ON,
        claims=[claim("claim-0", request("req-0", CLASS_A, 3))],
        classes=[CLASS],
        slices=[
            resource_slice(
                "slice-1",
                NODE_1,
                "pool-1",
                DRIVER_A,
                bound("device-1", **memory("2Gi")),
                device("device-2", **memory("2Gi")),
                device("device-3", binding=["IsReady"], binding_failure=["BindingTimeout"], **memory("4Gi")),
                count=2,
            ),
            counters_8gi(),
        ],
        expect=[
            allocation(
                local(),
                bound_result("req-0", "device-1"),
                result("req-0", DRIVER_A, "pool-1", "device-2"),
                result(
                    "req-0",
                    DRIVER_A,
                    "pool-1",
                    "device-3",
                    binding=["IsReady"],
                    binding_failure=["BindingTimeout"],
                ),
            )
        ],
    ),
    Case(
        # Slices are visited by name, so device-2 (slice-2) comes before device-1 (slice-4).
        "partitionable-devices-with-binding-conditions-multi-slices",
        features=PARTITIONABLE_ON,
        claims=[claim("claim-0", request("req-0", CLASS_A, 2))],
        classes=[CLASS],
        slices=[
            resource_slice(
                "slice-4", NODE_1, "pool-1", DRIVER_A, bound("device-1", **memory("4Gi")), count=4
            ),
            counters_8gi("slice-3", count=4),
            resource_slice(
                "slice-2",
                NODE_1,
                "pool-1",
                DRIVER_A,
                device("device-2", **memory("4Gi", "counter-set-2")),
                count=4,
            ),
            counters_8gi("slice-1", "counter-set-2", count=4),
        ],
        expect=[
            allocation(
                local(), result("req-0", DRIVER_A, "pool-1", "device-2"), bound_result("req-0", "device-1")
            )
        ],
    ),
    Case(
        # Upstream gives this pool a slice count of 1 although it has two slices.
        "partitionable-devices-with-binding-conditions-and-taints",
        features=features(PARTITIONABLE, BINDING, TAINTS),
        claims=[claim("claim-0", request("req-0", CLASS_A, 2))],
        classes=[CLASS],
        slices=[
            resource_slice(
                "slice-1",
                NODE_1,
                "pool-1",
                DRIVER_A,
                bound("device-1", taints=[KEY1_NO_SCHEDULE], **memory("4Gi")),
                device("device-2", **memory("4Gi")),
            ),
            counters_8gi(count=1),
        ],
    ),
    Case(
        "partitionable-devices-with-binding-conditions-and-taints-tolerated",
        features=features(PARTITIONABLE, BINDING, TAINTS),
        claims=[claim("claim-0", request("req-0", CLASS_A, 2, tolerations=[TOLERATE_KEY1]))],
        classes=[CLASS],
        slices=[
            resource_slice(
                "slice-1",
                NODE_1,
                "pool-1",
                DRIVER_A,
                bound("device-1", taints=[KEY1_NO_SCHEDULE], **memory("4Gi")),
                device("device-2", **memory("4Gi")),
                count=2,
            ),
            counters_8gi(),
        ],
        expect=[
            allocation(
                local(),
                bound_result("req-0", "device-1", tolerations=[TOLERATE_KEY1]),
                result("req-0", DRIVER_A, "pool-1", "device-2", tolerations=[TOLERATE_KEY1]),
            )
        ],
    ),
]
