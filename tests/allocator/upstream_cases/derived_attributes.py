"""v0.37.1 table cases for DRADerivedAttributes: request-scoped attributes computed by CEL and compared by
the claim's constraints (derived-attributes*)."""

from __future__ import annotations

from .builders import (
    CLASS_A,
    CLASS_B,
    DERIVED,
    DRIVER_A,
    DRIVER_B,
    NODE_1,
    PRIORITIZED,
    Case,
    allocation,
    claim,
    device,
    device_class,
    features,
    first_available,
    local,
    match,
    request,
    resource_slice,
    result,
    sub,
)

CLASSES = [device_class(CLASS_A, DRIVER_A), device_class(CLASS_B, DRIVER_B)]
EXAMPLE_DRIVER = "dra.example.com"


def attribute_of(driver: str, name: str) -> str:
    return f'device.attributes["{driver}"]["{name}"]'


CASES = [
    # Two drivers name their NUMA node differently; one derived name lines them up. device-2 (numa-0)
    # comes first but has no partner: the search backs off to device-1 (numa-1).
    Case(
        "derived-attributes",
        features=features(DERIVED),
        claims=[
            claim(
                "claim-0",
                request(
                    "req-0", CLASS_A, 1, derived={"derived/sharedNumaNode": attribute_of(DRIVER_A, "numa")}
                ),
                request(
                    "req-1",
                    CLASS_B,
                    1,
                    derived={"derived/sharedNumaNode": attribute_of(DRIVER_B, "numaNode")},
                ),
                constraints=[match("derived/sharedNumaNode", "req-0", "req-1")],
            )
        ],
        classes=CLASSES,
        slices=[
            resource_slice(
                "slice-1",
                NODE_1,
                "pool-1",
                DRIVER_A,
                device("device-2", attrs={"numa": "numa-0"}),
                device("device-1", attrs={"numa": "numa-1"}),
            ),
            resource_slice(
                "slice-2",
                NODE_1,
                "pool-2",
                DRIVER_B,
                device("device-3", attrs={"numaNode": "numa-1"}),
                device("device-4", attrs={"numaNode": "numa-2"}),
            ),
        ],
        expect=[
            allocation(
                local(),
                result("req-0", DRIVER_A, "pool-1", "device-1"),
                result("req-1", DRIVER_B, "pool-2", "device-3"),
            )
        ],
    ),
    # Each subrequest derives the name from another attribute: the first alternative (foo = "A")
    # cannot match req-1 (baz = "B"), the second (bar = "B") can.
    Case(
        "derived-attributes-with-prioritized-list",
        features=features(DERIVED, PRIORITIZED),
        claims=[
            claim(
                "claim-0",
                first_available(
                    "req-0",
                    sub("subReq-0", CLASS_A, 1, derived={"derived/match": attribute_of(DRIVER_A, "foo")}),
                    sub("subReq-1", CLASS_A, 1, derived={"derived/match": attribute_of(DRIVER_A, "bar")}),
                ),
                request("req-1", CLASS_B, 1, derived={"derived/match": attribute_of(DRIVER_B, "baz")}),
                constraints=[match("derived/match", "req-0", "req-1")],
            )
        ],
        classes=CLASSES,
        slices=[
            resource_slice(
                "slice-1", NODE_1, "pool-1", DRIVER_A, device("device-1", attrs={"foo": "A", "bar": "B"})
            ),
            resource_slice("slice-2", NODE_1, "pool-2", DRIVER_B, device("device-2", attrs={"baz": "B"})),
        ],
        expect=[
            allocation(
                local(),
                result("req-0/subReq-1", DRIVER_A, "pool-1", "device-1"),
                result("req-1", DRIVER_B, "pool-2", "device-2"),
            )
        ],
    ),
    # A derived attribute shadows the device's own attribute of the same name, for its request only:
    # req-0 sees "value-2" on every device, req-1 the devices' own values.
    Case(
        "derived-attributes-override",
        features=features(DERIVED),
        claims=[
            claim(
                "claim-0",
                request("req-0", CLASS_A, 1, derived={f"{EXAMPLE_DRIVER}/myAttr": '"value-2"'}),
                request("req-1", CLASS_A, 1),
                constraints=[match(f"{EXAMPLE_DRIVER}/myAttr", "req-0", "req-1")],
            )
        ],
        classes=[device_class(CLASS_A, EXAMPLE_DRIVER)],
        slices=[
            resource_slice(
                "slice-1",
                NODE_1,
                "pool-1",
                EXAMPLE_DRIVER,
                device("device-1", attrs={"myAttr": "value-1"}),
                device("device-2", attrs={"myAttr": "value-2"}),
            )
        ],
        expect=[
            allocation(
                local(),
                result("req-0", EXAMPLE_DRIVER, "pool-1", "device-1"),
                result("req-1", EXAMPLE_DRIVER, "pool-1", "device-2"),
            )
        ],
    ),
    # A derived attribute that fails on a device aborts the allocation with the CEL error.
    Case(
        "derived-attributes-cel-missing-attribute",
        features=features(DERIVED),
        claims=[
            claim(
                "claim-0",
                request(
                    "req-0", CLASS_A, 1, derived={"derived/missing": attribute_of(DRIVER_A, "missingAttr")}
                ),
                constraints=[match("derived/missing", "req-0")],
            )
        ],
        classes=[device_class(CLASS_A, DRIVER_A)],
        slices=[
            resource_slice(
                "slice-1", NODE_1, "pool-1", DRIVER_A, device("device-1", attrs={"existingAttr": "yes"})
            )
        ],
        error="no such key: missingAttr",
    ),
    # The same expression gives a string on one device and an int on the other: they never match.
    Case(
        "derived-attributes-type-mismatch",
        features=features(DERIVED),
        claims=[
            claim(
                "claim-0",
                request("req-0", CLASS_A, 2, derived={"derived/myAttr": attribute_of(DRIVER_A, "static")}),
                constraints=[match("derived/myAttr", "req-0")],
            )
        ],
        classes=[device_class(CLASS_A, DRIVER_A)],
        slices=[
            resource_slice(
                "slice-1",
                NODE_1,
                "pool-1",
                DRIVER_A,
                device("device-1", attrs={"static": "value"}),
                device("device-2", attrs={"static": 1}),
            )
        ],
    ),
]
