"""Partitionable devices: shared counters in counter-set slices, consumed by devices of the pool."""

from __future__ import annotations

from typing import Any

from .builders import (
    CLASS_A,
    CLASS_B,
    DRIVER_A,
    DRIVER_B,
    NODE_1,
    NODE_2,
    PARTITIONABLE,
    PER_DEVICE,
    PRIORITIZED,
    REGION_1,
    TAINTS,
    Case,
    all_devices,
    allocation,
    cel,
    claim,
    counter_slice,
    device,
    device_class,
    features,
    first_available,
    label_selector,
    local,
    match,
    memory_at_least,
    node,
    request,
    resource_slice,
    result,
    results,
    sub,
    taint,
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

# Upstream gives these pools a slice count of 1 although they have two slices.
_UNDERSIZED = [
    counters("slice-2", "pool-1", count=1, counter_set_1={"memory": "18Gi"}),
]

CASES += [
    Case(
        # The allocated device-2 uses 16Gi of 18Gi: device-1 (4Gi) no longer fits.
        "partitionable-devices-no-capacity-available",
        features=ON,
        claims=[claim("claim-0", request("req-0"))],
        classes=[CLASS],
        slices=[
            devices_slice(
                "slice-1",
                "pool-1",
                part("device-1", counter_set_1={"memory": "4Gi"}),
                part("device-2", counter_set_1={"memory": "16Gi"}),
                count=1,
            ),
            *_UNDERSIZED,
        ],
        allocated=[(DRIVER_A, "pool-1", "device-2")],
    ),
    Case(
        # Counters are already overdrawn by an allocated device.
        "partitionable-devices-overallocated-capacity-pool",
        features=ON,
        claims=[claim("claim-0", request("req-0"))],
        classes=[CLASS],
        slices=[
            devices_slice(
                "slice-1",
                "pool-1",
                part("device-1", counter_set_1={"memory": "4Gi"}),
                part("device-2", counter_set_1={"memory": "20Gi"}),
                count=1,
            ),
            *_UNDERSIZED,
        ],
        allocated=[(DRIVER_A, "pool-1", "device-2")],
    ),
    Case(
        "partitionable-devices-disabled-device-consumes-counters",
        claims=[claim("claim-0", request("req-0"))],
        classes=[CLASS],
        slices=[
            devices_slice(
                "slice-1",
                "pool-1",
                part("device-1", from_counters=False, counter_set_1={"memory": "4Gi"}),
                count=1,
            ),
            *_UNDERSIZED,
        ],
    ),
    Case(
        "partitionable-devices-disabled-other-device-do-not-consume-counters",
        claims=[claim("claim-0", request("req-0"))],
        classes=[CLASS],
        slices=[
            devices_slice(
                "slice-1",
                "pool-1",
                part("device-1", from_counters=False, counter_set_1={"memory": "4Gi"}),
                device("device-2"),
            ),
            counters("slice-2", "pool-1", counter_set_1={"memory": "18Gi"}),
        ],
        expect=[allocation(local(), result("req-0", DRIVER_A, "pool-1", "device-2"))],
    ),
    Case(
        "partitionable-devices-disabled-per-device-node-selection",
        claims=[claim("claim-0", request("req-0"))],
        classes=[CLASS],
        slices=[
            resource_slice("slice-1", PER_DEVICE, "pool-1", DRIVER_A, device("device-2", node_name=NODE_1))
        ],
    ),
    Case(
        # device-2 would be preferred (6Gi) but is on node-2.
        "partitionable-devices-per-device-node-selection-nodename",
        features=features(PARTITIONABLE, PRIORITIZED),
        claims=[
            claim(
                "claim-0",
                first_available(
                    "req-0",
                    sub("subReq-0", CLASS_A, 1, memory_at_least("6Gi")),
                    sub("subReq-1", CLASS_A, 1, memory_at_least("4Gi")),
                ),
            )
        ],
        classes=[CLASS],
        slices=[
            resource_slice(
                "slice-1",
                PER_DEVICE,
                "pool-1",
                DRIVER_A,
                device(
                    "device-1",
                    counters={"counter-set-1": {"memory": "4Gi"}},
                    capacity_from_counters=True,
                    node_name=NODE_1,
                ),
                device(
                    "device-2",
                    counters={"counter-set-1": {"memory": "6Gi"}},
                    capacity_from_counters=True,
                    node_name=NODE_2,
                ),
                count=2,
            ),
            counter_slice("slice-2", PER_DEVICE, "pool-1", DRIVER_A, {"counter-set-1": {"memory": "18Gi"}}),
        ],
        expect=[allocation(local(), result("req-0/subReq-1", DRIVER_A, "pool-1", "device-1"))],
    ),
    Case(
        "partitionable-devices-per-device-node-selection-node-selector",
        features=features(PARTITIONABLE, PRIORITIZED),
        claims=[claim("claim-0", request("req-0"))],
        classes=[CLASS],
        slices=[
            resource_slice(
                "slice-1",
                PER_DEVICE,
                "pool-1",
                DRIVER_A,
                device(
                    "device-1",
                    counters={"counter-set-1": {"memory": "4Gi"}},
                    capacity_from_counters=True,
                    node_selector=label_selector("region", REGION_1),
                ),
                count=2,
            ),
            counter_slice("slice-2", PER_DEVICE, "pool-1", DRIVER_A, {"counter-set-1": {"memory": "18Gi"}}),
        ],
        expect=[
            allocation(label_selector("region", REGION_1), result("req-0", DRIVER_A, "pool-1", "device-1"))
        ],
    ),
    Case(
        # A device with its own nodeName pins the whole result to the node.
        "partitionable-devices-per-device-node-selection-node-selector-multiple-devices",
        features=features(PARTITIONABLE, PRIORITIZED),
        claims=[claim("claim-0", request("req-0", CLASS_A, 3), request("req-1", CLASS_B, 3))],
        classes=[CLASS, device_class(CLASS_B, DRIVER_B)],
        slices=[
            resource_slice(
                "slice-1",
                PER_DEVICE,
                "pool-1",
                DRIVER_A,
                device(
                    "device-1",
                    counters={"counter-set-1": {"memory": "4Gi"}},
                    capacity_from_counters=True,
                    node_selector=label_selector("region", REGION_1),
                ),
                device(
                    "device-2",
                    counters={"counter-set-1": {"memory": "4Gi"}},
                    capacity_from_counters=True,
                    node_name=NODE_1,
                ),
                device(
                    "device-3",
                    counters={"counter-set-1": {"memory": "4Gi"}},
                    capacity_from_counters=True,
                    all_nodes=True,
                ),
                count=2,
            ),
            counter_slice("slice-2", PER_DEVICE, "pool-1", DRIVER_A, {"counter-set-1": {"memory": "18Gi"}}),
            resource_slice(
                "slice-3",
                NODE_1,
                "pool-2",
                DRIVER_B,
                *(
                    device(
                        f"device-{i}",
                        counters={"counter-set-2": {"memory": "4Gi"}},
                        capacity_from_counters=True,
                    )
                    for i in (1, 2, 3)
                ),
                count=2,
            ),
            counter_slice("slice-4", NODE_1, "pool-2", DRIVER_B, {"counter-set-2": {"memory": "12Gi"}}),
        ],
        expect=[
            allocation(
                local(),
                *results("req-0", DRIVER_A, "pool-1", 3, 1),
                *results("req-1", DRIVER_B, "pool-2", 3, 1),
            )
        ],
    ),
    Case(
        # device-1 is the only "special" one; req-0 must leave it for req-1.
        "partitionable-devices-with-attribute-selector",
        features=ON,
        claims=[
            claim(
                "claim-0",
                request("req-0", CLASS_A, 2),
                request("req-1", CLASS_A, 1, cel('device.attributes["driver-a"].special')),
            )
        ],
        classes=[CLASS],
        slices=[
            devices_slice(
                "slice-1",
                "pool-1",
                *(
                    device(
                        f"device-{i}",
                        attrs={"special": i == 1},
                        counters={"counter-set-1": {f"cpu{i}": "1"}, "counter-set-2": {"mem": "10Gi"}},
                    )
                    for i in (1, 2, 3)
                ),
            ),
            counters(
                "slice-2",
                "pool-1",
                counter_set_1={"cpu1": "1", "cpu2": "1", "cpu3": "1"},
                counter_set_2={"mem": "30Gi"},
            ),
        ],
        expect=[
            allocation(
                local(),
                result("req-0", DRIVER_A, "pool-1", "device-2"),
                result("req-0", DRIVER_A, "pool-1", "device-3"),
                result("req-1", DRIVER_A, "pool-1", "device-1"),
            )
        ],
    ),
]

CASES += [
    Case(
        # device-1 passes the counter check but its taint rejects it. Upstream kept its 4Gi counted
        # (leaving 4Gi of 8Gi), so device-2 (8Gi) no longer fitted; the counters are released.
        "partitionable-devices-counters-released-after-taint-rejection",
        features=features(PARTITIONABLE, TAINTS),
        claims=[claim("claim-0", request("req-0"))],
        classes=[CLASS],
        slices=[
            devices_slice(
                "slice-1",
                "pool-1",
                device(
                    "device-1",
                    counters={"counter-set-1": {"memory": "4Gi"}},
                    taints=[taint("taint-key", "taint-value", "NoSchedule")],
                ),
                part("device-2", counter_set_1={"memory": "8Gi"}),
            ),
            counters("slice-2", "pool-1", counter_set_1={"memory": "8Gi"}),
        ],
        expect=[allocation(local(), result("req-0", DRIVER_A, "pool-1", "device-2"))],
        fixes_upstream_bug="kubernetes/kubernetes#140436",
    ),
    Case(
        # The same leak through a constraint rejection: device-1 fails matchAttribute with device-0.
        "partitionable-devices-counters-released-after-constraint-rejection",
        features=ON,
        claims=[claim("claim-0", request("req-0"), request("req-1"), constraints=[match("driver-a/numa")])],
        classes=[CLASS],
        slices=[
            devices_slice(
                "slice-1",
                "pool-1",
                device("device-0", attrs={"numa": 0}, counters={"counter-set-1": {"memory": "2Gi"}}),
                device("device-1", attrs={"numa": 1}, counters={"counter-set-1": {"memory": "4Gi"}}),
                device("device-2", attrs={"numa": 0}, counters={"counter-set-1": {"memory": "6Gi"}}),
            ),
            counters("slice-2", "pool-1", counter_set_1={"memory": "8Gi"}),
        ],
        expect=[
            allocation(
                local(),
                result("req-0", DRIVER_A, "pool-1", "device-0"),
                result("req-1", DRIVER_A, "pool-1", "device-2"),
            )
        ],
        fixes_upstream_bug="kubernetes/kubernetes#140436",
    ),
]


def consumer(name: str, counter_set: str, counter: str, amount: str, **kw: Any) -> dict:
    """A device consuming one counter of one counter set (upstream's "c"/"d" counters)."""
    return device(name, counters={counter_set: {counter: amount}}, **kw)


def counter_pool(
    driver: str,
    devs: list[dict],
    counter_set: str,
    counter: str,
    amount: str,
    names: tuple[str, str] = ("slice-1", "slice-2"),
) -> list[dict]:
    return [
        resource_slice(names[0], NODE_1, "pool-1", driver, *devs, count=2),
        counter_slice(names[1], NODE_1, "pool-1", driver, {counter_set: {counter: amount}}),
    ]


# New in the v0.37.1 table.
CASES += [
    Case(
        "all-devices-with-consumed-counters",
        features=ON,
        claims=[claim("claim-0", all_devices("req-0"))],
        classes=[CLASS],
        slices=[
            devices_slice(
                "slice-1", "pool-1", device("device-1", counters={"counter-set-1": {"memory": "4Gi"}})
            ),
            counters("slice-2", "pool-1", counter_set_1={"memory": "8Gi"}),
        ],
        expect=[allocation(local(), result("req-0", DRIVER_A, "pool-1", "device-1"))],
    ),
    Case(
        # device-2 takes the only counter, then fails the constraint: "all" makes that a hard error
        # (and the counter it took is given back on the way).
        "partitionable-all-mode-constraint-must-error-with-reserved-counter",
        features=ON,
        claims=[claim("claim-0", all_devices("req-0"), constraints=[match("driver-a/numa")])],
        classes=[CLASS],
        slices=counter_pool(
            DRIVER_A,
            [
                device("device-1", attrs={"numa": 1}),
                consumer("device-2", "counter-set-1", "c", "1", attrs={"numa": 2}),
            ],
            "counter-set-1",
            "c",
            "1",
        ),
        error="claim claim-0, request req-0: cannot add device driver-a/pool-1/device-2 because a claim "
        "constraint would not be satisfied",
    ),
    Case(
        # Counters far above int64 (as quantities): device-1 holds 9e18 of 10e18, device-2 needs 1.
        "partitionable-devices-counter-quantities-are-not-modified",
        features=ON,
        claims=[claim("claim-0", request("req-0"))],
        allocated=[(DRIVER_A, "pool-1", "device-1")],
        classes=[CLASS],
        slices=counter_pool(
            DRIVER_A,
            [
                consumer("device-1", "counter-set-1", "c", "9000000000000000000"),
                consumer("device-2", "counter-set-1", "c", "1"),
            ],
            "counter-set-1",
            "c",
            "10000000000000000000",
        ),
        expect=[allocation(local(), result("req-0", DRIVER_A, "pool-1", "device-2"))],
    ),
    Case(
        # Two drivers with a pool of the same name: each has its own counters.
        "partitionable-devices-counter-cache-scoped-by-pool-ID",
        features=ON,
        claims=[claim("claim-0", request("req-0")), claim("claim-1", request("req-1", CLASS_B))],
        classes=[CLASS, device_class(CLASS_B, DRIVER_B)],
        slices=[
            *counter_pool(
                DRIVER_A, [consumer("device-1", "counter-set-1", "c", "1")], "counter-set-1", "c", "1"
            ),
            *counter_pool(
                DRIVER_B,
                [consumer("device-2", "counter-set-1", "c", "2")],
                "counter-set-1",
                "c",
                "2",
                names=("slice-3", "slice-4"),
            ),
        ],
        expect=[
            allocation(local(), result("req-0", DRIVER_A, "pool-1", "device-1")),
            allocation(local(), result("req-1", DRIVER_B, "pool-1", "device-2")),
        ],
    ),
    Case(
        # driver-b's device-2 needs 2 of its own counter d (1 available): it must not be checked
        # against driver-a's counter set of the same pool name.
        "partitionable-devices-counter-cache-not-crossed-between-driver-schemas",
        features=ON,
        claims=[claim("claim-0", request("req-0")), claim("claim-1", request("req-1", CLASS_B))],
        classes=[CLASS, device_class(CLASS_B, DRIVER_B)],
        slices=[
            *counter_pool(
                DRIVER_A, [consumer("device-1", "counter-set-1", "c", "1")], "counter-set-1", "c", "1"
            ),
            *counter_pool(
                DRIVER_B,
                [consumer("device-2", "counter-set-2", "d", "2")],
                "counter-set-2",
                "d",
                "1",
                names=("slice-3", "slice-4"),
            ),
        ],
    ),
    Case(
        "partitionable-devices-taint-releases-counter",
        features=features(PARTITIONABLE, TAINTS),
        claims=[claim("claim-0", request("req-0"))],
        classes=[CLASS],
        slices=counter_pool(
            DRIVER_A,
            [
                consumer(
                    "device-1",
                    "counter-set-1",
                    "c",
                    "1",
                    taints=[taint("taint-key", "taint-value", "NoSchedule")],
                ),
                consumer("device-2", "counter-set-1", "c", "1"),
            ],
            "counter-set-1",
            "c",
            "1",
        ),
        expect=[allocation(local(), result("req-0", DRIVER_A, "pool-1", "device-2"))],
    ),
    Case(
        "partitionable-devices-constraint-releases-counter",
        features=ON,
        claims=[
            claim("claim-0", request("req-0", CLASS_A, 2), constraints=[match("driver-a/stringAttribute")])
        ],
        classes=[CLASS],
        slices=counter_pool(
            DRIVER_A,
            [
                consumer(f"device-{i}", "counter-set-1", "c", "1", attrs={"stringAttribute": colour})
                for i, colour in ((1, "red"), (2, "blue"), (3, "blue"))
            ],
            "counter-set-1",
            "c",
            "2",
        ),
        expect=[
            allocation(
                local(),
                result("req-0", DRIVER_A, "pool-1", "device-2"),
                result("req-0", DRIVER_A, "pool-1", "device-3"),
            )
        ],
    ),
    Case(
        # device-1 (allocated, on node-1) already took 6Gi of the 8Gi: on node-2, device-2 (6Gi) does
        # not fit any more, device-3 (2Gi) does.
        "partitionable-devices-devices-consume-counter-set-in-different-nodes",
        features=ON,
        claims=[claim("claim-0", request("req-0"))],
        allocated=[(DRIVER_A, "pool-1", "device-1")],
        classes=[CLASS],
        node=node(NODE_2, REGION_1),
        slices=[
            counter_slice(
                "slice-1", NODE_1, "pool-1", DRIVER_A, {"counter-set-1": {"memory": "8Gi"}}, count=3
            ),
            resource_slice(
                "slice-2",
                NODE_1,
                "pool-1",
                DRIVER_A,
                part("device-1", counter_set_1={"memory": "6Gi"}),
                count=3,
            ),
            resource_slice(
                "slice-3",
                NODE_2,
                "pool-1",
                DRIVER_A,
                part("device-2", counter_set_1={"memory": "6Gi"}),
                part("device-3", counter_set_1={"memory": "2Gi"}),
                count=3,
            ),
        ],
        expect=[allocation(local(NODE_2), result("req-0", DRIVER_A, "pool-1", "device-3"))],
    ),
]
