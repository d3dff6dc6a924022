"""Device order: pools by (driver, pool name) with binding-condition pools last, slices by name."""

from __future__ import annotations

from .builders import (
    BINDING,
    CLASS_A,
    DRIVER_A,
    NODE_1,
    Case,
    allocation,
    claim,
    device,
    device_class,
    features,
    local,
    one_device_slice,
    request,
    resource_slice,
    result,
)

CLASS = device_class(CLASS_A, DRIVER_A)
TWO = claim("claim-0", request("req-0", CLASS_A, 2))
BOUND = device("device-1", binding=["IsPrepare"], binding_failure=["BindingFailed"])

CASES = [
    Case(
        "lexicographical-sorting-pools",
        claims=[TWO],
        classes=[CLASS],
        slices=[
            one_device_slice("slice-1", NODE_1, "pool-3", DRIVER_A),
            one_device_slice("slice-2", NODE_1, "pool-2", DRIVER_A),
            one_device_slice("slice-3", NODE_1, "pool-1", DRIVER_A),
        ],
        expect=[
            allocation(
                local(),
                result("req-0", DRIVER_A, "pool-1", "device-1"),
                result("req-0", DRIVER_A, "pool-2", "device-1"),
            )
        ],
    ),
    Case(
        "lexicographical-sorting-pools-with-binding-conditions",
        features=features(BINDING),
        claims=[TWO],
        classes=[CLASS],
        slices=[
            resource_slice("slice-1", NODE_1, "pool-1", DRIVER_A, BOUND),
            resource_slice("slice-3", NODE_1, "pool-3", DRIVER_A, device("device-3")),
            resource_slice("slice-2", NODE_1, "pool-2", DRIVER_A, device("device-2")),
        ],
        expect=[
            allocation(
                local(),
                result("req-0", DRIVER_A, "pool-2", "device-2"),
                result("req-0", DRIVER_A, "pool-3", "device-3"),
            )
        ],
    ),
    Case(
        "lexicographical-sorting-slices",
        claims=[TWO],
        classes=[CLASS],
        slices=[
            resource_slice(f"slice-{i}", NODE_1, "pool-1", DRIVER_A, device(f"device-{i}"), count=3)
            for i in (3, 2, 1)
        ],
        expect=[
            allocation(
                local(),
                result("req-0", DRIVER_A, "pool-1", "device-1"),
                result("req-0", DRIVER_A, "pool-1", "device-2"),
            )
        ],
    ),
    Case(
        # Inside a pool, binding conditions do not move a slice back: slice-1 still comes first.
        "lexicographical-sorting-slices-with-binding-conditions",
        features=features(BINDING),
        claims=[TWO],
        classes=[CLASS],
        slices=[
            resource_slice("slice-1", NODE_1, "pool-1", DRIVER_A, BOUND, count=3),
            resource_slice("slice-3", NODE_1, "pool-1", DRIVER_A, device("device-3"), count=3),
            resource_slice("slice-2", NODE_1, "pool-1", DRIVER_A, device("device-2"), count=3),
        ],
        expect=[
            allocation(
                local(),
                result(
                    "req-0",
                    DRIVER_A,
                    "pool-1",
                    "device-1",
                    binding=["IsPrepare"],
                    binding_failure=["BindingFailed"],
                ),
                result("req-0", DRIVER_A, "pool-1", "device-2"),
            )
        ],
    ),
]
