"""Basic allocation: slices, pools, classes, All mode, node selectors, configs, malformed input.

Upstream sometimes gives two slices the same object name; in a real cluster slice names are unique
(and our Inventory is keyed by name), so those slices get distinct names here. Pools are ordered by
(driver, pool), so the renaming cannot change which device is picked.
"""

from __future__ import annotations

from .builders import (
    ALL_NODES,
    BINDING,
    CLASS_A,
    CLASS_B,
    DRIVER_A,
    DRIVER_B,
    NODE_1,
    NODE_2,
    REGION_2,
    Case,
    all_devices,
    allocation,
    cel,
    claim,
    claim_config,
    device,
    device_class,
    devices,
    features,
    from_claim,
    from_class,
    label_selector,
    local,
    memory_at_least,
    node,
    one_device_slice,
    request,
    resource_slice,
    result,
    simple_claim,
)

CLASS = device_class(CLASS_A, DRIVER_A)
CLASS_2 = device_class(CLASS_B, DRIVER_B)
SLICE = one_device_slice("slice-1", NODE_1, "pool-1", DRIVER_A)
TWO_DEVICES = resource_slice("slice-1", NODE_1, "pool-1", DRIVER_A, *devices(2, 1))


def _small_and_large_claim_requests() -> list[dict]:
    return [
        request("req-0", CLASS_A, 1, memory_at_least("1Gi")),
        request("req-1", CLASS_A, 1, memory_at_least("2Gi")),
    ]


_LARGE_FIRST = resource_slice(
    "slice-1",
    NODE_1,
    "pool-1",
    DRIVER_A,
    device("device-2", capacity={"memory": "2Gi"}),
    device("device-1", capacity={"memory": "1Gi"}),
)

CASES = [
    Case("empty", expect=[]),
    Case(
        "simple",
        claims=[simple_claim()],
        classes=[CLASS],
        slices=[SLICE],
        expect=[allocation(local(), result("req-0", DRIVER_A, "pool-1", "device-1"))],
    ),
    Case(
        "other-node",
        claims=[simple_claim()],
        classes=[CLASS],
        slices=[
            one_device_slice("slice-1", NODE_1, "pool-1", DRIVER_B),
            one_device_slice("slice-2", NODE_2, "pool-2", DRIVER_A),
        ],
        node=node(NODE_2, REGION_2),
        expect=[allocation(local(NODE_2), result("req-0", DRIVER_A, "pool-2", "device-1"))],
    ),
    Case(
        "small-and-large",
        claims=[claim("claim-0", *_small_and_large_claim_requests())],
        classes=[CLASS],
        slices=[
            resource_slice(
                "slice-1",
                NODE_1,
                "pool-1",
                DRIVER_A,
                device("device-1", capacity={"memory": "1Gi"}),
                device("device-2", capacity={"memory": "2Gi"}),
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
        # The large device is listed first and taken by the small request; undoing that is required.
        "small-and-large-backtrack-requests",
        claims=[claim("claim-0", *_small_and_large_claim_requests())],
        classes=[CLASS],
        slices=[_LARGE_FIRST],
        expect=[
            allocation(
                local(),
                result("req-0", DRIVER_A, "pool-1", "device-1"),
                result("req-1", DRIVER_A, "pool-1", "device-2"),
            )
        ],
    ),
    Case(
        "small-and-large-backtrack-claims",
        claims=[
            claim("claim-0", request("req-0", CLASS_A, 1, memory_at_least("1Gi"))),
            claim("claim-1", request("req-1", CLASS_A, 1, memory_at_least("2Gi"))),
        ],
        classes=[CLASS],
        slices=[_LARGE_FIRST],
        expect=[
            allocation(local(), result("req-0", DRIVER_A, "pool-1", "device-1")),
            allocation(local(), result("req-1", DRIVER_A, "pool-1", "device-2")),
        ],
    ),
    Case(
        "devices-split-across-different-slices",
        claims=[simple_claim(count=2)],
        classes=[CLASS],
        slices=[
            one_device_slice("slice-1", NODE_1, "pool-1", DRIVER_A),
            one_device_slice("slice-2", NODE_1, "pool-2", DRIVER_A),
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
        # A newer generation exists but is incomplete: the pool is skipped.
        "obsolete-slice",
        claims=[simple_claim()],
        classes=[CLASS],
        slices=[
            resource_slice("slice-1-obsolete", NODE_1, "pool-1", DRIVER_A, device("device-1"), count=2),
            resource_slice(
                "slice-1-new", NODE_1, "pool-1", DRIVER_A, device("device-2"), count=2, generation=2
            ),
        ],
    ),
    Case(
        # Two identical slices under different names: duplicate device names make the pool invalid.
        "duplicate-slice",
        claims=[simple_claim()],
        classes=[CLASS],
        slices=[
            one_device_slice("slice-1", NODE_1, "pool-1", DRIVER_A, count=2),
            one_device_slice("slice-1-2", NODE_1, "pool-1", DRIVER_A, count=2),
        ],
        node_error="invalid resource pools were encountered",
    ),
    Case("no-slices", claims=[simple_claim()], classes=[CLASS]),
    Case(
        "not-enough-suitable-devices",
        claims=[simple_claim(), simple_claim(req="req-1")],
        classes=[CLASS],
        slices=[SLICE],
    ),
    Case(
        "no-classes",
        claims=[simple_claim()],
        slices=[SLICE],
        error="could not retrieve device class class-a",
    ),
    Case(
        "unknown-class",
        claims=[simple_claim(cls="unknown-class")],
        classes=[CLASS],
        slices=[SLICE],
        error="could not retrieve device class unknown-class",
    ),
    Case(
        "empty-class",
        claims=[simple_claim(cls="")],
        classes=[CLASS],
        slices=[SLICE],
        error="claim claim-0, request req-0: missing device class name (unsupported request type?)",
        error_field="deviceClassName",
    ),
    Case("no-claims-to-allocate", classes=[CLASS], slices=[SLICE], expect=[]),
    Case(
        "all-devices-single",
        claims=[claim("claim-0", all_devices("req-0"))],
        classes=[CLASS],
        slices=[SLICE],
        expect=[allocation(local(), result("req-0", DRIVER_A, "pool-1", "device-1"))],
    ),
    Case(
        "all-devices-many",
        claims=[claim("claim-0", all_devices("req-0"))],
        classes=[CLASS],
        slices=[
            one_device_slice("slice-1", NODE_1, "pool-1", DRIVER_A),
            one_device_slice("slice-2", NODE_1, "pool-2", DRIVER_A),
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
        "all-devices-of-the-incomplete-pool",
        claims=[claim("claim-0", all_devices("req-0"))],
        classes=[CLASS],
        slices=[one_device_slice("slice-1", NODE_1, "pool-1", DRIVER_A, count=2)],
        error="claim claim-0, request req-0: asks for all devices, but resource pool driver-a/pool-1 is "
        "currently being updated",
    ),
    Case(
        "all-devices-plus-another",
        claims=[
            claim("claim-0", all_devices("req-0")),
            claim("claim-1", request("req-0", CLASS_B)),
        ],
        classes=[CLASS, CLASS_2],
        slices=[
            one_device_slice("slice-1", NODE_1, "pool-1", DRIVER_A),
            one_device_slice("slice-1b", NODE_1, "pool-1", DRIVER_B),
        ],
        expect=[
            allocation(local(), result("req-0", DRIVER_A, "pool-1", "device-1")),
            allocation(local(), result("req-0", DRIVER_B, "pool-1", "device-1")),
        ],
    ),
    Case(
        "all-devices-plus-another-reversed",
        claims=[
            claim("claim-1", request("req-0", CLASS_B)),
            claim("claim-0", all_devices("req-0")),
        ],
        classes=[CLASS, CLASS_2],
        slices=[
            one_device_slice("slice-1", NODE_1, "pool-1", DRIVER_A),
            one_device_slice("slice-1b", NODE_1, "pool-1", DRIVER_B),
        ],
        expect=[
            allocation(local(), result("req-0", DRIVER_B, "pool-1", "device-1")),
            allocation(local(), result("req-0", DRIVER_A, "pool-1", "device-1")),
        ],
    ),
    Case(
        "all-devices-many-plus-another",
        claims=[
            claim("claim-0", all_devices("req-0")),
            claim("claim-1", request("req-0", CLASS_B)),
        ],
        classes=[CLASS, CLASS_2],
        slices=[TWO_DEVICES, one_device_slice("slice-1b", NODE_1, "pool-1", DRIVER_B)],
        expect=[
            allocation(
                local(),
                result("req-0", DRIVER_A, "pool-1", "device-1"),
                result("req-0", DRIVER_A, "pool-1", "device-2"),
            ),
            allocation(local(), result("req-0", DRIVER_B, "pool-1", "device-1")),
        ],
    ),
    Case(
        "all-devices-many-plus-another-reversed",
        claims=[
            claim("claim-1", request("req-0", CLASS_B)),
            claim("claim-0", all_devices("req-0")),
        ],
        classes=[CLASS, CLASS_2],
        slices=[TWO_DEVICES, one_device_slice("slice-1b", NODE_1, "pool-1", DRIVER_B)],
        expect=[
            allocation(local(), result("req-0", DRIVER_B, "pool-1", "device-1")),
            allocation(
                local(),
                result("req-0", DRIVER_A, "pool-1", "device-1"),
                result("req-0", DRIVER_A, "pool-1", "device-2"),
            ),
        ],
    ),
    Case(
        "all-devices-no-solution",
        claims=[claim("claim-1", request("req-0")), claim("claim-0", all_devices("req-0"))],
        classes=[CLASS],
        slices=[SLICE],
    ),
    Case(
        "all-devices-no-solution-reversed",
        claims=[claim("claim-0", all_devices("req-0")), claim("claim-1", request("req-0"))],
        classes=[CLASS],
        slices=[SLICE],
    ),
    Case(
        "all-devices-slice-without-devices",
        claims=[claim("claim-0", all_devices("req-0"))],
        classes=[CLASS],
        slices=[resource_slice("slice-1", NODE_1, "pool-1", DRIVER_A)],
    ),
    Case("all-devices-no-slices", claims=[claim("claim-0", all_devices("req-0"))], classes=[CLASS]),
    Case(
        # All matching devices, one of which is already in use: the request cannot be satisfied.
        "all-devices-some-allocated",
        claims=[claim("claim-0", all_devices("req-0"))],
        allocated=[(DRIVER_A, "pool-1", "device-1")],
        classes=[CLASS],
        slices=[TWO_DEVICES],
    ),
    Case(
        "network-attached-device",
        claims=[simple_claim()],
        classes=[CLASS],
        slices=[one_device_slice("slice-1", label_selector("region", "region-1"), "pool-1", DRIVER_A)],
        expect=[
            allocation(label_selector("region", "region-1"), result("req-0", DRIVER_A, "pool-1", "device-1"))
        ],
    ),
    Case(
        "unsuccessful-allocation-network-attached-device",
        claims=[simple_claim()],
        classes=[CLASS],
        slices=[one_device_slice("slice-1", label_selector("region", "region-1"), "pool-1", DRIVER_A)],
        node=node(NODE_2, REGION_2),
    ),
    Case(
        # The result's node selector is the union of the requirements of all slices used.
        "many-network-attached-devices",
        claims=[simple_claim(count=4)],
        classes=[CLASS],
        slices=[
            one_device_slice("slice-1", label_selector("region", "region-1"), "pool-1", DRIVER_A),
            one_device_slice("slice-2", ALL_NODES, "pool-2", DRIVER_A),
            one_device_slice("slice-3", label_selector("planet", "earth"), "pool-3", DRIVER_A),
            one_device_slice("slice-4", local(NODE_1), "pool-4", DRIVER_A),
        ],
        expect=[
            allocation(
                {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "region", "operator": "In", "values": ["region-1"]},
                                {"key": "planet", "operator": "In", "values": ["earth"]},
                            ],
                            "matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE_1]}],
                        }
                    ]
                },
                result("req-0", DRIVER_A, "pool-1", "device-1"),
                result("req-0", DRIVER_A, "pool-2", "device-1"),
                result("req-0", DRIVER_A, "pool-3", "device-1"),
                result("req-0", DRIVER_A, "pool-4", "device-1"),
            )
        ],
    ),
    Case(
        # Once any node-local device is used, the selector pins the node.
        "local-and-network-attached-devices",
        claims=[simple_claim(count=2)],
        classes=[CLASS],
        slices=[
            one_device_slice("slice-1", label_selector("region", "region-1"), "pool-1", DRIVER_A),
            one_device_slice("slice-2", NODE_1, "pool-2", DRIVER_A),
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
        "several-different-drivers",
        claims=[simple_claim(), simple_claim(cls=CLASS_B)],
        classes=[CLASS, CLASS_2],
        slices=[TWO_DEVICES, one_device_slice("slice-1b", NODE_1, "pool-1", DRIVER_B)],
        expect=[
            allocation(local(), result("req-0", DRIVER_A, "pool-1", "device-1")),
            allocation(local(), result("req-0", DRIVER_B, "pool-1", "device-1")),
        ],
    ),
    Case(
        "already-allocated-devices",
        claims=[simple_claim()],
        allocated=[(DRIVER_A, "pool-1", "device-1"), (DRIVER_A, "pool-1", "device-2")],
        classes=[CLASS],
        slices=[SLICE],
    ),
    Case(
        "with-class-device-config",
        claims=[simple_claim()],
        classes=[device_class(CLASS_A, DRIVER_A, config="classAttribute")],
        slices=[SLICE],
        expect=[
            allocation(
                local(),
                result("req-0", DRIVER_A, "pool-1", "device-1"),
                config=[from_class(DRIVER_A, "classAttribute")],
            )
        ],
    ),
    Case(
        # Requests sharing a class share one config entry that names all of them.
        "with-class-device-config-with-multiple-request-and-configs",
        claims=[claim("claim-0", request("req-0"), request("req-1"), request("req-2", CLASS_B))],
        classes=[
            device_class(CLASS_A, DRIVER_A, config="classAttribute-A"),
            device_class(CLASS_B, DRIVER_B, config="classAttribute-B"),
        ],
        slices=[
            resource_slice("slice-1", NODE_1, "pool-1", DRIVER_A, *devices(2)),
            one_device_slice("slice-2", NODE_1, "pool-1", DRIVER_B),
        ],
        expect=[
            allocation(
                local(),
                result("req-0", DRIVER_A, "pool-1", "device-0"),
                result("req-1", DRIVER_A, "pool-1", "device-1"),
                result("req-2", DRIVER_B, "pool-1", "device-1"),
                config=[
                    from_class(DRIVER_A, "classAttribute-A", "req-0", "req-1"),
                    from_class(DRIVER_B, "classAttribute-B", "req-2"),
                ],
            )
        ],
    ),
    Case(
        "claim-with-device-config",
        claims=[simple_claim(config=[claim_config(DRIVER_A, "deviceAttribute")])],
        classes=[CLASS],
        slices=[SLICE],
        expect=[
            allocation(
                local(),
                result("req-0", DRIVER_A, "pool-1", "device-1"),
                config=[from_claim(DRIVER_A, "deviceAttribute")],
            )
        ],
    ),
    Case(
        "unknown-selector",
        claims=[
            claim(
                "claim-0",
                {
                    "name": "req-0",
                    "exactly": {
                        "deviceClassName": CLASS_A,
                        "allocationMode": "ExactCount",
                        "count": 1,
                        "selectors": [{}],
                    },
                },
            )
        ],
        classes=[CLASS],
        slices=[SLICE],
        error="CEL expression empty (unsupported selector type?)",
        error_field="selectors",
    ),
    Case(
        "unknown-allocation-mode",
        claims=[
            claim(
                "claim-0",
                {
                    "name": "req-0",
                    "exactly": {
                        "deviceClassName": CLASS_A,
                        "allocationMode": "future-mode",
                        "count": 1,
                    },
                },
            )
        ],
        classes=[CLASS],
        slices=[SLICE],
        error="unsupported count mode future-mode",
        error_field="allocationMode",
    ),
    Case(
        "unknown-constraint",
        claims=[simple_claim(constraints=[{}])],
        classes=[CLASS],
        slices=[SLICE],
        error="empty constraint (unsupported constraint type?)",
        error_field="constraints",
    ),
    Case(
        "invalid-CEL-one-device",
        claims=[claim("claim-0", request("req-0", CLASS_A, 1, {"cel": {"expression": "noSuchVar"}}))],
        classes=[CLASS],
        slices=[SLICE],
        error="undeclared reference",
    ),
    Case(
        "invalid-CEL-one-device-class",
        claims=[simple_claim()],
        classes=[device_class(CLASS_A, DRIVER_A, selector={"cel": {"expression": "noSuchVar"}})],
        slices=[SLICE],
        error="undeclared reference",
    ),
    Case(
        "invalid-CEL-all-devices",
        claims=[claim("claim-0", all_devices("req-0", CLASS_A, {"cel": {"expression": "noSuchVar"}}))],
        classes=[CLASS],
        slices=[SLICE],
        error="undeclared reference",
    ),
]


def _five_of_four(name: str, *slices: dict) -> Case:
    # Upstream counts 16 allocateOne calls for the combinations search (65 for permutations).
    return Case(name, claims=[simple_claim(count=5)], classes=[CLASS], slices=list(slices), steps=16)


def _typed(name: str, kind: str, **kw: object) -> dict:
    return device(name, attrs={"type": kind}, **kw)


_TYPE_X = cel('device.attributes["driver-a"].type == "X"')

CASES += [
    _five_of_four(
        "check-combinations-within-single-request-single-pool-single-slice",
        resource_slice("slice-1", NODE_1, "pool-1", DRIVER_A, *devices(4, 1)),
    ),
    _five_of_four(
        "check-combinations-within-single-request-single-pool-multiple-slices",
        resource_slice("slice-1", NODE_1, "pool-1", DRIVER_A, *devices(2, 1), count=2),
        resource_slice("slice-2", NODE_1, "pool-1", DRIVER_A, *devices(2, 3), count=2),
    ),
    _five_of_four(
        "check-combinations-within-single-request-multiple-pools-multiple-slices",
        resource_slice("slice-1", NODE_1, "pool-1", DRIVER_A, device("device-1"), count=2),
        resource_slice("slice-2", NODE_1, "pool-1", DRIVER_A, device("device-2"), count=2),
        resource_slice("slice-3", NODE_1, "pool-2", DRIVER_A, *devices(2, 3)),
    ),
    _five_of_four(
        "check-combinations-within-single-request-many-pools",
        *(
            resource_slice(f"slice-{i}", NODE_1, f"pool-{i}", DRIVER_A, device(f"device-{i}"))
            for i in (1, 2, 3, 4)
        ),
    ),
    Case(
        # {device-1, device-2} for req-1 leaves nothing for req-2; combinations skip {device-2, device-1}.
        "check-combinations-with-backtracking",
        claims=[claim("claim-0", request("req-1", CLASS_A, 2), request("req-2", CLASS_A, 1, _TYPE_X))],
        classes=[CLASS],
        slices=[
            resource_slice(
                "slice-1",
                NODE_1,
                "pool-1",
                DRIVER_A,
                _typed("device-1", "X"),
                _typed("device-2", "Y"),
                _typed("device-3", "Y"),
            )
        ],
        expect=[
            allocation(
                local(),
                result("req-1", DRIVER_A, "pool-1", "device-2"),
                result("req-1", DRIVER_A, "pool-1", "device-3"),
                result("req-2", DRIVER_A, "pool-1", "device-1"),
            )
        ],
        steps=12,
    ),
    Case(
        # The binding condition puts pool-2 last, as upstream intends.
        "check-combinations-with-backtracking-across-slices-and-pools",
        features=features(BINDING),
        claims=[claim("claim-0", request("req-1", CLASS_A, 2), request("req-2", CLASS_A, 1, _TYPE_X))],
        classes=[CLASS],
        slices=[
            resource_slice("slice-1", NODE_1, "pool-1", DRIVER_A, _typed("device-1", "X"), count=2),
            resource_slice("slice-2", NODE_1, "pool-1", DRIVER_A, _typed("device-2", "Y"), count=2),
            resource_slice(
                "slice-3", NODE_1, "pool-2", DRIVER_A, _typed("device-3", "Y", binding=["IsPrepare"])
            ),
        ],
        expect=[
            allocation(
                local(),
                result("req-1", DRIVER_A, "pool-1", "device-2"),
                result("req-1", DRIVER_A, "pool-2", "device-3", binding=["IsPrepare"]),
                result("req-2", DRIVER_A, "pool-1", "device-1"),
            )
        ],
        steps=12,
    ),
]
