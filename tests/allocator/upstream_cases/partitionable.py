"""Partitionable devices: shared counters in counter-set slices, consumed by devices of the pool."""

from __future__ import annotations

from .builders import (
    CLASS_A,
    DRIVER_A,
    NODE_1,
    PARTITIONABLE,
    PRIORITIZED,
    Case,
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
    sub,
)

CLASS = device_class(CLASS_A, DRIVER_A)
ON = features(PARTITIONABLE)


def part(name: str, *, from_counters: bool = True, **counter_sets: dict[str, str]) -> dict:
    """A device consuming counters; keyword names are counter sets ("counter_set_1" -> "counter-set-1")."""
    counters = {set_name.replace("_", "-"): values for set_name, values in counter_sets.items()}
    return device(name, counters=counters, capacity_from_counters=from_counters)


def devices_slice(name: str, pool: str, *devs: dict, count: int = 2) -> dict:
    return resource_slice(name, NODE_1, pool, DRIVER_A, *devs, count=count)


def counters(name: str, pool: str, count: int = 2, **counter_sets: dict[str, str]) -> dict:
    sets = {set_name.replace("_", "-"): values for set_name, values in counter_sets.items()}
    return counter_slice(name, NODE_1, pool, DRIVER_A, sets, count=count)


def _two_requests() -> dict:
    return claim("claim-0", request("req-0"), request("req-1"))


def _memory_choice() -> dict:
    return claim(
        "claim-0",
        request("req-0"),
        first_available(
            "req-1",
            sub("subReq-0", CLASS_A, 1, memory_at_least("6Gi")),
            sub("subReq-1", CLASS_A, 1, memory_at_least("4Gi")),
        ),
    )


MEM_4_6_4 = [
    part("device-1", counter_set_1={"memory": "4Gi"}),
    part("device-2", counter_set_1={"memory": "6Gi"}),
    part("device-3", counter_set_1={"memory": "4Gi"}),
]

CASES = [
    Case(
        "partitionable-devices-single-device",
        features=ON,
        claims=[claim("claim-0", request("req-0"))],
        classes=[CLASS],
        slices=[
            devices_slice(
                "slice-1", "pool-1", part("device-1", from_counters=False, counter_set_1={"memory": "4Gi"})
            ),
            counters("slice-2", "pool-1", counter_set_1={"memory": "8Gi"}),
        ],
        expect=[allocation(local(), result("req-0", DRIVER_A, "pool-1", "device-1"))],
    ),
    Case(
        # device-2 (6Gi) would fit subReq-0, but with device-1 (4Gi) it exceeds the 8Gi counter.
        "partitionable-devices-prioritized-list",
        features=features(PARTITIONABLE, PRIORITIZED),
        claims=[_memory_choice()],
        classes=[CLASS],
        slices=[
            devices_slice("slice-1", "pool-1", *MEM_4_6_4),
            counters("slice-2", "pool-1", counter_set_1={"memory": "8Gi"}),
        ],
        expect=[
            allocation(
                local(),
                result("req-0", DRIVER_A, "pool-1", "device-1"),
                result("req-1/subReq-1", DRIVER_A, "pool-1", "device-3"),
            )
        ],
    ),
    Case(
        "partitionable-devices-multiple-devices",
        features=ON,
        claims=[_two_requests()],
        classes=[CLASS],
        slices=[
            devices_slice("slice-1", "pool-1", *MEM_4_6_4),
            counters("slice-2", "pool-1", counter_set_1={"memory": "8Gi"}),
        ],
        expect=[
            allocation(
                local(),
                result("req-0", DRIVER_A, "pool-1", "device-1"),
                result("req-1", DRIVER_A, "pool-1", "device-3"),
            )
        ],
    ),
    Case(
        "partitionable-devices-multiple-capacity-pools",
        features=features(PARTITIONABLE, PRIORITIZED),
        claims=[_memory_choice()],
        classes=[CLASS],
        slices=[
            devices_slice(
                "slice-1",
                "pool-1",
                part("device-1", counter_set_1={"memory": "4Gi"}, counter_set_2={"cpus": "4"}),
                part("device-2", counter_set_1={"memory": "6Gi"}, counter_set_2={"cpus": "6"}),
                part("device-3", counter_set_1={"memory": "4Gi"}, counter_set_2={"cpus": "4"}),
            ),
            counters("slice-2", "pool-1", counter_set_1={"memory": "18Gi"}, counter_set_2={"cpus": "8"}),
        ],
        expect=[
            allocation(
                local(),
                result("req-0", DRIVER_A, "pool-1", "device-1"),
                result("req-1/subReq-1", DRIVER_A, "pool-1", "device-3"),
            )
        ],
    ),
    Case(
        "partitionable-devices-multiple-counters",
        features=ON,
        claims=[_two_requests()],
        classes=[CLASS],
        slices=[
            devices_slice(
                "slice-1",
                "pool-1",
                part(
                    "device-1",
                    counter_set_1={"memory": "4Gi", "cpus": "6"},
                    counter_set_2={"cpus": "4", "memory": "2Gi"},
                ),
                part(
                    "device-2",
                    counter_set_1={"memory": "6Gi", "cpus": "4"},
                    counter_set_2={"cpus": "6", "memory": "6Gi"},
                ),
                part(
                    "device-3",
                    counter_set_1={"memory": "4Gi", "cpus": "4"},
                    counter_set_2={"cpus": "4", "memory": "4Gi"},
                ),
            ),
            counters(
                "slice-2",
                "pool-1",
                counter_set_1={"cpus": "8", "memory": "18Gi"},
                counter_set_2={"cpus": "12", "memory": "18Gi"},
            ),
        ],
        expect=[
            allocation(
                local(),
                result("req-0", DRIVER_A, "pool-1", "device-2"),
                result("req-1", DRIVER_A, "pool-1", "device-3"),
            )
        ],
    ),
    Case(
        # Allocated devices consume counters too: pool-1 has too little left, pool-2 fits.
        "partitionable-devices-multiple-pools",
        features=ON,
        claims=[_two_requests()],
        classes=[CLASS],
        slices=[
            devices_slice(
                "slice-1",
                "pool-1",
                part("device-1", counter_set_1={"cpus": "6", "memory": "4Gi"}),
                part("device-2", counter_set_1={"cpus": "4", "memory": "6Gi"}),
                part("device-3", counter_set_1={"cpus": "4", "memory": "4Gi"}),
            ),
            counters("slice-2", "pool-1", counter_set_1={"cpus": "8", "memory": "18Gi"}),
            devices_slice(
                "slice-3",
                "pool-2",
                part("device-1", counter_set_1={"cpus": "6", "memory": "4Gi"}),
                part("device-2", counter_set_1={"cpus": "1", "memory": "7Gi"}),
                part("device-3", counter_set_1={"cpus": "1", "memory": "7Gi"}),
            ),
            counters("slice-4", "pool-2", counter_set_1={"cpus": "8", "memory": "18Gi"}),
        ],
        allocated=[
            (DRIVER_A, "pool-1", "device-2"),
            (DRIVER_A, "pool-1", "device-3"),
            (DRIVER_A, "pool-2", "device-1"),
        ],
        expect=[
            allocation(
                local(),
                result("req-0", DRIVER_A, "pool-2", "device-2"),
                result("req-1", DRIVER_A, "pool-2", "device-3"),
            )
        ],
    ),
    Case(
        "partitionable-devices-unused-counters-in-counter-set",
        features=ON,
        claims=[claim("claim-0", request("req-0", CLASS_A, 2))],
        classes=[CLASS],
        slices=[
            devices_slice(
                "slice-1",
                "pool-1",
                part("device-1", from_counters=False, counter_set_1={"memory": "5Gi"}),
                part("device-2", from_counters=False, counter_set_1={"memory": "4Gi"}),
                part("device-3", from_counters=False, counter_set_1={"memory": "4Gi"}),
            ),
            counters("slice-2", "pool-1", counter_set_1={"memory": "8Gi", "unused": "1Gi"}),
        ],
        expect=[
            allocation(
                local(),
                result("req-0", DRIVER_A, "pool-1", "device-2"),
                result("req-0", DRIVER_A, "pool-1", "device-3"),
            )
        ],
    ),
]
