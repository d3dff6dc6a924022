"""matchAttribute and distinctAttribute constraints."""

from __future__ import annotations

from .builders import (
    CAPACITY,
    CLASS_A,
    CLASS_B,
    DRIVER_A,
    DRIVER_B,
    NODE_1,
    PRIORITIZED,
    Case,
    Version,
    all_devices,
    allocation,
    cel,
    claim,
    class_allowing_multiple,
    device,
    device_class,
    distinct,
    features,
    first_available,
    local,
    match,
    one_device_slice,
    range_policy,
    request,
    resource_slice,
    result,
    simple_claim,
    sub,
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


def _multi(name: str, **attrs: object) -> dict:
    return device(name, attrs=attrs or None, multiple=True)


def _shared(request_name: str, device_name: str, consumed: dict[str, str] | None = None) -> dict:
    return result(request_name, DRIVER_A, "pool-1", device_name, shared=True, consumed=consumed)


def _bool_first(name: str) -> dict:
    return first_available(
        name, sub("subReq-0", CLASS_A, 1, cel('device.attributes["driver-a"].boolAttribute')), sub("subReq-1")
    )


# distinctAttribute needs upstream's incubating allocator, which the table selects with ConsumableCapacity.
DISTINCT_ON = features(CAPACITY)

CASES += [
    Case(
        "with-distinct-constraints",
        features=DISTINCT_ON,
        claims=[
            claim(
                "claim-0",
                request("req-0"),
                request("req-1"),
                request("req-2"),
                request("req-3"),
                constraints=[
                    distinct(BOOL_ATTR, "req-0", "req-1"),
                    distinct(VERSION_ATTR, "req-0", "req-1", "req-2"),
                    distinct(INT_ATTR, "req-0", "req-1", "req-2", "req-3"),
                ],
            )
        ],
        classes=CLASSES[:1],
        slices=[
            resource_slice(
                "slice-1",
                NODE_1,
                "pool-1",
                DRIVER_A,
                _multi("device-1", driverVersion=Version("1.0.0"), numa=0, boolAttribute=True),
                _multi("device-2", driverVersion=Version("1.0.1"), numa=1, boolAttribute=False),
                _multi("device-3", driverVersion=Version("1.0.2"), numa=2, boolAttribute=True),
                _multi("device-4", driverVersion=Version("1.0.0"), numa=3, boolAttribute=True),
            )
        ],
        expect=[
            allocation(
                local(),
                _shared("req-0", "device-1"),
                _shared("req-1", "device-2"),
                _shared("req-2", "device-3"),
                _shared("req-3", "device-4"),
            )
        ],
    ),
    Case(
        "with-distinct-constraints-attribute-not-set",
        features=DISTINCT_ON,
        claims=[claim("claim-0", request("req-0"), constraints=[distinct(BOOL_ATTR, "req-0")])],
        classes=CLASSES[:1],
        slices=[resource_slice("slice-1", NODE_1, "pool-1", DRIVER_A, _multi("device-1"))],
    ),
    Case(
        # An attribute with no value set at all.
        "with-distinct-constraints-unknown-type-attribute",
        features=DISTINCT_ON,
        claims=[claim("claim-0", request("req-0"), constraints=[distinct(BOOL_ATTR, "req-0")])],
        classes=CLASSES[:1],
        slices=[
            resource_slice(
                "slice-1",
                NODE_1,
                "pool-1",
                DRIVER_A,
                {"name": "device-1", "attributes": {"boolAttribute": {}}, "allowMultipleAllocations": True},
            )
        ],
        error="unsupported attribute value",
        error_field="attributes",
    ),
    Case(
        # The constraint covers req-0 and req-1 only, so req-2 may reuse device-1.
        "with-distinct-constraints-with-subrequests",
        features=features(CAPACITY, PRIORITIZED),
        claims=[
            claim(
                "claim-0",
                _bool_first("req-0"),
                _bool_first("req-1"),
                _bool_first("req-2"),
                constraints=[distinct(BOOL_ATTR, "req-0", "req-1")],
            )
        ],
        classes=CLASSES[:1],
        slices=[
            resource_slice(
                "slice-1",
                NODE_1,
                "pool-1",
                DRIVER_A,
                _multi("device-1", boolAttribute=True),
                _multi("device-2", boolAttribute=False),
            )
        ],
        expect=[
            allocation(
                local(),
                _shared("req-0/subReq-0", "device-1"),
                _shared("req-1/subReq-1", "device-2"),
                _shared("req-2/subReq-0", "device-1"),
            )
        ],
    ),
    Case(
        # The single shared device would serve both requests, but they must differ.
        "distinct-constraint-one-multi-allocatable-device-with-distinct-constraint",
        features=DISTINCT_ON,
        claims=[
            claim(
                "claim-0",
                request("req-0", capacity={"capacity-0": "1"}),
                request("req-1", capacity={"capacity-0": "1"}),
                constraints=[distinct(STRING_ATTR)],
            )
        ],
        classes=[class_allowing_multiple(CLASS_A, DRIVER_A, True)],
        slices=[
            resource_slice(
                "slice-1",
                NODE_1,
                "pool-1",
                DRIVER_A,
                device(
                    "device-1",
                    attrs={"stringAttribute": "stringAttributeValue"},
                    capacity={"capacity-0": range_policy("2")},
                    multiple=True,
                ),
            )
        ],
    ),
    Case(
        "distinct-constraint-two-multi-allocatable-devices-with-distinct-constraint",
        features=DISTINCT_ON,
        claims=[
            claim(
                "claim-0",
                request("req-0", capacity={"capacity-0": "2"}),
                request("req-1", capacity={"capacity-0": "2"}),
                constraints=[distinct(STRING_ATTR)],
            )
        ],
        classes=[class_allowing_multiple(CLASS_A, DRIVER_A, True)],
        slices=[
            resource_slice(
                f"slice-{i}",
                NODE_1,
                "pool-1",
                DRIVER_A,
                device(
                    f"device-{i}",
                    attrs={"stringAttribute": f"stringAttributeValue{i}"},
                    capacity={"capacity-0": range_policy("4")},
                    multiple=True,
                ),
                count=2,
            )
            for i in (1, 2)
        ],
        expect=[
            allocation(
                local(),
                _shared("req-0", "device-1", {"capacity-0": "2"}),
                _shared("req-1", "device-2", {"capacity-0": "2"}),
            )
        ],
    ),
    Case(
        # Upstream remembers one value per request name, so a request taking several devices only
        # compares against its last pick and accepts numa 1, 2, 1. We compare every device.
        "distinct-attribute-within-one-request",
        features=DISTINCT_ON,
        claims=[claim("claim-0", request("req-0", CLASS_A, 3), constraints=[distinct(INT_ATTR)])],
        classes=CLASSES[:1],
        slices=[
            resource_slice(
                "slice-1",
                NODE_1,
                "pool-1",
                DRIVER_A,
                device("device-1", attrs={"numa": 1}),
                device("device-2", attrs={"numa": 2}),
                device("device-3", attrs={"numa": 1}),
            )
        ],
        fixes_upstream_bug="kubernetes/kubernetes#140438",
    ),
]
