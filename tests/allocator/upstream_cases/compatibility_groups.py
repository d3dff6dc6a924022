"""DRADeviceCompatibilityGroups (alpha, v0.37.1): devices drawing from one counter set must share a
compatibility group; with the gate off, slices declaring groups are ignored and their pools are
incomplete."""

from __future__ import annotations

from .builders import (
    CAPACITY,
    CLASS_A,
    COMPATIBILITY,
    DRIVER_A,
    NODE_1,
    PARTITIONABLE,
    PRIORITIZED,
    TAINTS,
    Case,
    allocation,
    claim,
    class_allowing_multiple,
    counter_slice,
    device,
    device_class,
    features,
    first_available,
    local,
    request,
    resource_slice,
    result,
    sub,
    taint,
)

CAP = "capacity-0"
ON = features(PARTITIONABLE, COMPATIBILITY)
OFF = features(PARTITIONABLE)
CLASSES = [device_class(CLASS_A, DRIVER_A)]


def grouped(
    name: str,
    group: str | None,
    amount: str = "2",
    counter_set: str = "counter-set-1",
    taints: tuple[dict, ...] = (),
) -> dict:
    """A device drawing `amount` of capacity-0 from one counter set, declaring one group (or none)."""
    return device(
        name,
        counters={counter_set: {CAP: amount}},
        groups={counter_set: [group]} if group else None,
        taints=taints,
    )


def pool_of(
    *devs: dict,
    pool: str = "pool-1",
    sets: tuple[str, ...] = ("counter-set-1",),
    names: tuple[str, str] = ("slice-1", "slice-2"),
) -> list[dict]:
    """A device slice and a counter slice (4 of capacity-0 per counter set) of one pool."""
    return [
        resource_slice(names[0], NODE_1, pool, DRIVER_A, *devs, count=2),
        counter_slice(names[1], NODE_1, pool, DRIVER_A, {s: {CAP: "4"} for s in sets}),
    ]


def got(request_name: str, device_name: str, pool: str = "pool-1") -> dict:
    return result(request_name, DRIVER_A, pool, device_name)


def two_requests() -> dict:
    return claim("claim-0", request("req-0"), request("req-1"))


CASES = [
    Case(
        "compatibility-groups-compatible",
        features=ON,
        claims=[two_requests()],
        classes=CLASSES,
        slices=pool_of(grouped("device-1", "mig"), grouped("device-2", "mig")),
        expect=[allocation(local(), got("req-0", "device-1"), got("req-1", "device-2"))],
    ),
    Case(
        "compatibility-groups-incompatible",
        features=ON,
        claims=[two_requests()],
        classes=CLASSES,
        slices=pool_of(grouped("device-1", "mig"), grouped("device-2", "vgpu")),
    ),
    Case(
        # device-1's taint rejects it after it narrowed counter-set-1 to "mig": that must be undone,
        # or device-2 ("vgpu") would be refused too.
        "compatibility-groups-taint-rollback",
        features=features(PARTITIONABLE, COMPATIBILITY, TAINTS),
        claims=[claim("claim-0", request("req-0"))],
        classes=CLASSES,
        slices=pool_of(
            grouped("device-1", "mig", taints=(taint("taint-key", "taint-value", "NoSchedule"),)),
            grouped("device-2", "vgpu"),
        ),
        expect=[allocation(local(), got("req-0", "device-2"))],
    ),
    Case(
        "compatibility-groups-incompatible-with-allocated-peer",
        features=ON,
        claims=[claim("claim-0", request("req-0"))],
        allocated=[(DRIVER_A, "pool-1", "device-1")],
        classes=CLASSES,
        slices=pool_of(grouped("device-1", "mig", "1"), grouped("device-2", "vgpu", "1")),
    ),
    Case(
        "compatibility-groups-compatible-with-allocated-peer",
        features=ON,
        claims=[claim("claim-0", request("req-0"))],
        allocated=[(DRIVER_A, "pool-1", "device-1")],
        classes=CLASSES,
        slices=pool_of(grouped("device-1", "mig", "1"), grouped("device-2", "mig", "1")),
        expect=[allocation(local(), got("req-0", "device-2"))],
    ),
    Case(
        # Gate off: the slice declaring groups is ignored, pool-1 is incomplete; pool-2 is usable.
        "compatibility-groups-disabled-skips-grouped-pool",
        features=OFF,
        claims=[claim("claim-0", request("req-0"))],
        classes=CLASSES,
        slices=[
            *pool_of(grouped("device-1", "mig")),
            *pool_of(
                grouped("device-2", None, counter_set="counter-set-2"),
                pool="pool-2",
                sets=("counter-set-2",),
                names=("slice-3", "slice-4"),
            ),
        ],
        expect=[allocation(local(), got("req-0", "device-2", "pool-2"))],
    ),
    Case(
        # Gate off: device-2 declares no groups, but its pool is incomplete without slice-1.
        "compatibility-groups-disabled-skips-ungrouped-device-in-grouped-pool",
        features=OFF,
        claims=[claim("claim-0", request("req-0"))],
        classes=CLASSES,
        slices=[
            resource_slice("slice-1", NODE_1, "pool-1", DRIVER_A, grouped("device-1", "mig", "1"), count=3),
            resource_slice("slice-2", NODE_1, "pool-1", DRIVER_A, grouped("device-2", None, "1"), count=3),
            counter_slice("slice-3", NODE_1, "pool-1", DRIVER_A, {"counter-set-1": {CAP: "4"}}, count=3),
        ],
    ),
    Case(
        "compatibility-groups-multiple-counter-sets",
        features=ON,
        claims=[two_requests()],
        classes=CLASSES,
        slices=pool_of(
            grouped("device-1", "mig"),
            grouped("device-2", "vgpu", counter_set="counter-set-2"),
            sets=("counter-set-1", "counter-set-2"),
        ),
        expect=[allocation(local(), got("req-0", "device-1"), got("req-1", "device-2"))],
    ),
    Case(
        # device-2 draws from both counter sets; it disagrees with device-1 on counter-set-1, in
        # either order (the order with device-2 first must undo its narrowing of both sets).
        "compatibility-groups-multiple-counter-sets-spanning-device",
        features=ON,
        claims=[two_requests()],
        classes=CLASSES,
        slices=pool_of(
            grouped("device-1", "mig", "1"),
            device(
                "device-2",
                counters={"counter-set-1": {CAP: "1"}, "counter-set-2": {CAP: "1"}},
                groups={"counter-set-1": ["vgpu"], "counter-set-2": ["vgpu"]},
            ),
            sets=("counter-set-1", "counter-set-2"),
        ),
    ),
    Case(
        # subReq-0 needs two "mig" devices next to req-0's, only one is left: its narrowing is undone
        # before subReq-1 is tried.
        "compatibility-groups-with-prioritized-list",
        features=features(PARTITIONABLE, COMPATIBILITY, PRIORITIZED),
        claims=[
            claim(
                "claim-0",
                request("req-0"),
                first_available("req-1", sub("subReq-0", CLASS_A, 2), sub("subReq-1", CLASS_A, 1)),
            )
        ],
        classes=CLASSES,
        slices=pool_of(
            grouped("device-1", "mig", "1"), grouped("device-2", "mig", "1"), grouped("device-3", "vgpu", "1")
        ),
        expect=[allocation(local(), got("req-0", "device-1"), got("req-1/subReq-1", "device-2"))],
    ),
    Case(
        # req-1 does not fit on device-1 any more (capacity), device-2 declares "vgpu": device-3.
        "compatibility-groups-with-consumable-capacity",
        features=features(PARTITIONABLE, COMPATIBILITY, CAPACITY),
        claims=[
            claim(
                "claim-0",
                request("req-0", CLASS_A, 1, capacity={CAP: "1"}),
                request("req-1", CLASS_A, 1, capacity={CAP: "1"}),
            )
        ],
        classes=[class_allowing_multiple(CLASS_A, DRIVER_A, True)],
        slices=pool_of(
            *(
                device(
                    name,
                    counters={"counter-set-1": {CAP: "1"}},
                    capacity_from_counters=True,
                    groups={"counter-set-1": [group]},
                    multiple=True,
                )
                for name, group in (("device-1", "mig"), ("device-2", "vgpu"), ("device-3", "mig"))
            )
        ),
        expect=[
            allocation(
                local(),
                result("req-0", DRIVER_A, "pool-1", "device-1", shared=True, consumed={CAP: "1"}),
                result("req-1", DRIVER_A, "pool-1", "device-3", shared=True, consumed={CAP: "1"}),
            )
        ],
    ),
    Case(
        "compatibility-groups-multiple-claims",
        features=ON,
        claims=[claim("claim-0", request("req-0")), claim("claim-1", request("req-0"))],
        classes=CLASSES,
        slices=pool_of(grouped("device-1", "mig", "1"), grouped("device-2", "mig", "1")),
        expect=[
            allocation(local(), got("req-0", "device-1")),
            allocation(local(), got("req-0", "device-2")),
        ],
    ),
    Case(
        "compatibility-groups-multiple-claims-incompatible",
        features=ON,
        claims=[claim("claim-0", request("req-0")), claim("claim-1", request("req-0"))],
        classes=CLASSES,
        slices=pool_of(grouped("device-1", "mig", "1"), grouped("device-2", "vgpu", "1")),
    ),
]
