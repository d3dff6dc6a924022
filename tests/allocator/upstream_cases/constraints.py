"""matchAttribute and distinctAttribute constraints."""

from __future__ import annotations

from .builders import (
    CLASS_A,
    CLASS_B,
    DRIVER_A,
    DRIVER_B,
    NODE_1,
    Case,
    Version,
    all_devices,
    allocation,
    claim,
    device,
    device_class,
    local,
    match,
    one_device_slice,
    request,
    resource_slice,
    result,
    simple_claim,
)

INT_ATTR = "driver-a/numa"
VERSION_ATTR = "driver-a/driverVersion"
STRING_ATTR = "driver-a/stringAttribute"
BOOL_ATTR = "driver-a/boolAttribute"
CLASSES = [device_class(CLASS_A, DRIVER_A), device_class(CLASS_B, DRIVER_B)]


def _two_devices(attr: str, first: object, second: object) -> dict:
    return resource_slice(
        "slice-1",
        NODE_1,
        "pool-1",
        DRIVER_A,
        device("device-1", attrs={attr: first}),
        device("device-2", attrs={attr: second}),
    )


def _mismatch(name: str, qualified: str, attr: str, first: object, second: object) -> Case:
    return Case(
        name,
        claims=[claim("claim-0", request("req-0", CLASS_A, 2), constraints=[match(qualified)])],
        classes=CLASSES,
        slices=[_two_devices(attr, first, second)],
    )


_ALL_ATTRS = {
    "driverVersion": Version("1.0.0"),
    "numa": 1,
    "stringAttribute": "stringAttributeValue",
    "boolAttribute": True,
}

CASES = [
    Case(
        "with-constraint",
        claims=[
            claim(
                "claim-0",
                request("req-0"),
                request("req-1"),
                constraints=[match(INT_ATTR), match(VERSION_ATTR), match(STRING_ATTR), match(BOOL_ATTR)],
            )
        ],
        classes=CLASSES[:1],
        slices=[
            resource_slice(
                "slice-1",
                NODE_1,
                "pool-1",
                DRIVER_A,
                device("device-1", attrs=_ALL_ATTRS),
                device("device-2", attrs=_ALL_ATTRS),
            )
        ],
        expect=[
            allocation(
                local(),
                result("req-0", DRIVER_A, "pool-1", "device-1"),
                result("req-1", DRIVER_A, "pool-1", "device-2"),
            )
        ],
    ),
    Case(
        "with-constraint-non-existent-attribute",
        claims=[simple_claim(constraints=[match("driver-a/NonExistentAttribute")])],
        classes=CLASSES[:1],
        slices=[one_device_slice("slice-1", NODE_1, "pool-1", DRIVER_A)],
    ),
    _mismatch("with-constraint-not-matching-int-attribute", INT_ATTR, "numa", 1, 2),
    Case(
        # In All mode a constraint violation is a hard error, not a reason to try other devices.
        "with-constraint-not-matching-int-attribute-all-devices",
        claims=[claim("claim-0", all_devices("req-0"), constraints=[match(INT_ATTR)])],
        classes=CLASSES,
        slices=[_two_devices("numa", 1, 2)],
        error="claim claim-0, request req-0: cannot add device driver-a/pool-1/device-2 because a claim "
        "constraint would not be satisfied",
    ),
    _mismatch(
        "with-constraint-not-matching-string-attribute",
        STRING_ATTR,
        "stringAttribute",
        "stringAttributeValue",
        "stringAttributeValue2",
    ),
    _mismatch("with-constraint-not-matching-bool-attribute", BOOL_ATTR, "boolAttribute", True, False),
    _mismatch(
        "with-constraint-not-matching-version-attribute",
        VERSION_ATTR,
        "driverVersion",
        Version("1.0.0"),
        Version("2.0.0"),
    ),
    Case(
        "with-constraint-for-request",
        claims=[
            claim("claim-0", request("req-0"), request("req-1"), constraints=[match(VERSION_ATTR, "req-0")])
        ],
        classes=CLASSES,
        slices=[_two_devices("driverVersion", Version("1.0.0"), Version("2.0.0"))],
        expect=[
            allocation(
                local(),
                result("req-0", DRIVER_A, "pool-1", "device-1"),
                result("req-1", DRIVER_A, "pool-1", "device-2"),
            )
        ],
    ),
    Case(
        # device-1 fails the claim-wide string constraint with every other device: backtrack.
        "with-constraint-for-request-retry",
        claims=[
            claim(
                "claim-0",
                request("req-0"),
                request("req-1"),
                constraints=[match(VERSION_ATTR, "req-0"), match(STRING_ATTR)],
            )
        ],
        classes=CLASSES,
        slices=[
            resource_slice(
                "slice-1",
                NODE_1,
                "pool-1",
                DRIVER_A,
                device("device-1", attrs={"driverVersion": Version("1.0.0"), "stringAttribute": "a"}),
                device("device-2", attrs={"driverVersion": Version("2.0.0"), "stringAttribute": "b"}),
                device("device-3", attrs={"driverVersion": Version("3.0.0"), "stringAttribute": "b"}),
            )
        ],
        expect=[
            allocation(
                local(),
                result("req-0", DRIVER_A, "pool-1", "device-2"),
                result("req-1", DRIVER_A, "pool-1", "device-3"),
            )
        ],
    ),
]
