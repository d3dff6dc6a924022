"""Device taints and request tolerations (NoSchedule and NoExecute block, None does not)."""

from __future__ import annotations

from .builders import (
    ADMIN,
    CLASS_A,
    CLASS_B,
    DRIVER_A,
    DRIVER_B,
    NODE_1,
    PRIORITIZED,
    TAINTS,
    Case,
    all_devices,
    allocation,
    claim,
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
    toleration,
)

CLASSES = [device_class(CLASS_A, DRIVER_A), device_class(CLASS_B, DRIVER_B)]
NO_SCHEDULE = taint("taint-key", "taint-value", "NoSchedule")
NO_EXECUTE = taint("taint-key", "taint-value-2", "NoExecute")
NO_EFFECT = taint("taint-key", "taint-value", "None")
TOLERATE_NO_SCHEDULE = toleration("taint-key", "NoSchedule")
TOLERATE_NO_EXECUTE = toleration("taint-key", "NoExecute", operator="Equal", value="taint-value-2")
ON = features(TAINTS)


def tainted(*devices_taints: tuple[str, list[dict]]) -> dict:
    return resource_slice(
        "slice-1", NODE_1, "pool-1", DRIVER_A, *(device(name, taints=t) for name, t in devices_taints)
    )


TWO_TAINTED = tainted(("device-1", [NO_SCHEDULE]), ("device-2", [NO_EXECUTE]))
ONE_TWICE_TAINTED = tainted(("device-1", [NO_SCHEDULE, NO_EXECUTE]))
ONE_NO_SCHEDULE = tainted(("device-1", [NO_SCHEDULE]))


def _tolerating(*tolerations: dict) -> dict:
    return claim("claim-0", request("req-0", tolerations=tolerations))


def _b_then_a() -> dict:
    return claim("claim-0", first_available("req-0", sub("subReq-0", CLASS_B), sub("subReq-1", CLASS_A)))


def _admin() -> dict:
    return claim("claim-0", request("req-0", admin=True))


CASES = [
    Case("tainted-two-devices", features=ON, claims=[_tolerating()], classes=CLASSES, slices=[TWO_TAINTED]),
    Case(
        "tainted-one-device-two-taints",
        features=ON,
        claims=[_tolerating()],
        classes=CLASSES,
        slices=[ONE_TWICE_TAINTED],
    ),
    Case(
        # Only device-2's taint is tolerated; the toleration is copied into the result.
        "tainted-two-devices-tolerated",
        features=ON,
        claims=[_tolerating(TOLERATE_NO_EXECUTE)],
        classes=CLASSES,
        slices=[TWO_TAINTED],
        expect=[
            allocation(
                local(), result("req-0", DRIVER_A, "pool-1", "device-2", tolerations=[TOLERATE_NO_EXECUTE])
            )
        ],
    ),
    Case(
        "tainted-two-devices-prioritized-list-tolerated",
        features=features(TAINTS, PRIORITIZED),
        claims=[
            claim(
                "claim-0",
                first_available("req-0", sub("subReq-0"), sub("subReq-1", tolerations=[TOLERATE_NO_EXECUTE])),
            )
        ],
        classes=CLASSES,
        slices=[TWO_TAINTED],
        expect=[
            allocation(
                local(),
                result("req-0/subReq-1", DRIVER_A, "pool-1", "device-2", tolerations=[TOLERATE_NO_EXECUTE]),
            )
        ],
    ),
    Case(
        "tainted-no-effect",
        features=ON,
        claims=[_tolerating()],
        classes=CLASSES,
        slices=[tainted(("device-1", [NO_EFFECT]))],
        expect=[allocation(local(), result("req-0", DRIVER_A, "pool-1", "device-1"))],
    ),
    Case(
        "tainted-one-device-two-taints-both-tolerated",
        features=ON,
        claims=[_tolerating(TOLERATE_NO_SCHEDULE, TOLERATE_NO_EXECUTE)],
        classes=CLASSES,
        slices=[ONE_TWICE_TAINTED],
        expect=[
            allocation(
                local(),
                result(
                    "req-0",
                    DRIVER_A,
                    "pool-1",
                    "device-1",
                    tolerations=[TOLERATE_NO_SCHEDULE, TOLERATE_NO_EXECUTE],
                ),
            )
        ],
    ),
    Case(
        "tainted-disabled",
        claims=[_tolerating()],
        classes=CLASSES,
        slices=[ONE_TWICE_TAINTED],
        expect=[allocation(local(), result("req-0", DRIVER_A, "pool-1", "device-1"))],
    ),
    Case(
        "tainted-prioritized-list",
        features=features(TAINTS, PRIORITIZED),
        claims=[_b_then_a()],
        classes=CLASSES,
        slices=[ONE_NO_SCHEDULE],
    ),
    Case(
        "tainted-prioritized-list-disabled",
        features=features(PRIORITIZED),
        claims=[_b_then_a()],
        classes=CLASSES,
        slices=[ONE_NO_SCHEDULE],
        expect=[allocation(local(), result("req-0/subReq-1", DRIVER_A, "pool-1", "device-1"))],
    ),
    Case(
        # Admin access does not bypass taints.
        "tainted-admin-access",
        features=features(TAINTS, ADMIN),
        claims=[_admin()],
        allocated=[(DRIVER_A, "pool-1", "device-1"), (DRIVER_A, "pool-1", "device-2")],
        classes=CLASSES,
        slices=[ONE_NO_SCHEDULE],
    ),
    Case(
        "tainted-admin-access-disabled",
        features=features(ADMIN),
        claims=[_admin()],
        allocated=[(DRIVER_A, "pool-1", "device-1"), (DRIVER_A, "pool-1", "device-2")],
        classes=CLASSES,
        slices=[ONE_NO_SCHEDULE],
        expect=[allocation(local(), result("req-0", DRIVER_A, "pool-1", "device-1", admin=True))],
    ),
    Case(
        "tainted-all-devices-single",
        features=ON,
        claims=[claim("claim-0", all_devices("req-0"))],
        classes=CLASSES,
        slices=[ONE_NO_SCHEDULE],
    ),
    Case(
        "tainted-all-devices-single-disabled",
        claims=[claim("claim-0", all_devices("req-0"))],
        classes=CLASSES,
        slices=[ONE_NO_SCHEDULE],
        expect=[allocation(local(), result("req-0", DRIVER_A, "pool-1", "device-1"))],
    ),
]
