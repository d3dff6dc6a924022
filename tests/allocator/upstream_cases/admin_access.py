"""Admin access: ignores other claims' use of a device, never twice in one claim, gated by a feature."""

from __future__ import annotations

from .builders import (
    ADMIN,
    CLASS_A,
    DRIVER_A,
    NODE_1,
    Case,
    all_devices,
    allocation,
    claim,
    device_class,
    devices,
    features,
    local,
    one_device_slice,
    request,
    resource_slice,
    result,
    simple_claim,
)

CLASS = device_class(CLASS_A, DRIVER_A)
TWO_DEVICES = resource_slice("slice-1", NODE_1, "pool-1", DRIVER_A, *devices(2, 1))
SLICE = one_device_slice("slice-1", NODE_1, "pool-1", DRIVER_A)


def _admin(name: str = "claim-0", count: int = 1) -> dict:
    return claim(name, request("req-0", CLASS_A, count, admin=True))


CASES = [
    Case(
        "all-devices-some-allocated-admin-access",
        features=features(ADMIN),
        claims=[claim("claim-0", all_devices("req-0", admin=True))],
        allocated=[(DRIVER_A, "pool-1", "device-1")],
        classes=[CLASS],
        slices=[TWO_DEVICES],
        expect=[
            allocation(
                local(),
                result("req-0", DRIVER_A, "pool-1", "device-1", admin=True),
                result("req-0", DRIVER_A, "pool-1", "device-2", admin=True),
            )
        ],
    ),
    Case(
        # The second request wants all devices, but the first already took one for this claim.
        "all-devices-some-allocating-admin-access",
        features=features(ADMIN),
        claims=[claim("claim-0", request("req-0", admin=True), all_devices("req-1", admin=True))],
        classes=[CLASS],
        slices=[TWO_DEVICES],
    ),
    Case(
        "count-devices-some-allocated-admin-access",
        features=features(ADMIN),
        claims=[_admin(count=2)],
        allocated=[(DRIVER_A, "pool-1", "device-1")],
        classes=[CLASS],
        slices=[TWO_DEVICES],
        expect=[
            allocation(
                local(),
                result("req-0", DRIVER_A, "pool-1", "device-1", admin=True),
                result("req-0", DRIVER_A, "pool-1", "device-2", admin=True),
            )
        ],
    ),
    Case(
        "separate-claims-share-device-admin-access",
        features=features(ADMIN),
        claims=[_admin("claim-0"), _admin("claim-1")],
        classes=[CLASS],
        slices=[TWO_DEVICES],
        expect=[
            allocation(local(), result("req-0", DRIVER_A, "pool-1", "device-1", admin=True)),
            allocation(local(), result("req-0", DRIVER_A, "pool-1", "device-1", admin=True)),
        ],
    ),
    Case(
        "admin-access-claims-device-allocating-for-non-admin-access",
        features=features(ADMIN),
        claims=[simple_claim(), _admin("claim-1")],
        classes=[CLASS],
        slices=[TWO_DEVICES],
        expect=[
            allocation(local(), result("req-0", DRIVER_A, "pool-1", "device-1")),
            allocation(local(), result("req-0", DRIVER_A, "pool-1", "device-1", admin=True)),
        ],
    ),
    Case(
        "admin-access-disabled",
        claims=[_admin()],
        classes=[CLASS],
        slices=[SLICE],
        error="claim claim-0, request req-0: admin access is requested, but the feature is disabled",
    ),
    Case(
        "admin-access-enabled",
        features=features(ADMIN),
        claims=[_admin()],
        allocated=[(DRIVER_A, "pool-1", "device-1"), (DRIVER_A, "pool-1", "device-2")],
        classes=[CLASS],
        slices=[SLICE],
        expect=[allocation(local(), result("req-0", DRIVER_A, "pool-1", "device-1", admin=True))],
    ),
]
