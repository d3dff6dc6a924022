"""List-type attributes (DRAListTypeAttributes): matchAttribute intersects, distinctAttribute is disjoint."""

from __future__ import annotations

from .builders import (
    CAPACITY,
    CLASS_A,
    DRIVER_A,
    LIST_ATTRS,
    NODE_1,
    Case,
    Version,
    allocation,
    cel,
    claim,
    device,
    device_class,
    distinct,
    features,
    local,
    match,
    request,
    resource_slice,
    result,
)

CLASS = device_class(CLASS_A, DRIVER_A)
# The standard attribute KEP-6072 defines; as a fully qualified name it is looked up as written.
NUMA_NODE = "resource.kubernetes.io/numaNode"
ON = features(LIST_ATTRS)
DISTINCT_ON = features(LIST_ATTRS, CAPACITY)
ATTRIBUTE_FOR_KEY = {
    "stringAttribute": "driver-a/stringAttribute",
    "numa": "driver-a/numa",
    "boolAttribute": "driver-a/boolAttribute",
    "driverVersion": "driver-a/driverVersion",
    NUMA_NODE: NUMA_NODE,
}


def values_slice(key: str, *values: object) -> dict:
    return resource_slice(
        "slice-1",
        NODE_1,
        "pool-1",
        DRIVER_A,
        *(
            {"name": f"device-{i}", "attributes": {key: v}}
            if isinstance(v, dict)
            else device(f"device-{i}", attrs={key: v})
            for i, v in enumerate(values, 1)
        ),
    )


def picked(*indexes: int) -> list[dict]:
    return [allocation(local(), *(result("req-0", DRIVER_A, "pool-1", f"device-{i}") for i in indexes))]


def case(
    name: str,
    kind: str,
    key: str,
    values: list[object],
    count: int,
    chosen: tuple[int, ...] | None,
    gates: frozenset[str] | None = None,
    **kw: object,
) -> Case:
    constraint = (match if kind == "match" else distinct)(ATTRIBUTE_FOR_KEY[key])
    return Case(
        name,
        features=gates if gates is not None else (ON if kind == "match" else DISTINCT_ON),
        claims=[claim("claim-0", request("req-0", CLASS_A, count), constraints=[constraint])],
        classes=[CLASS],
        slices=[values_slice(key, *values)],
        expect=picked(*chosen) if chosen else None,
        **kw,
    )


S = "stringAttribute"
V = Version
PREFIX = "list-attributes-match-constaint-"
DPREFIX = "list-attributes-distinct-constraint-"

CASES = [
    case(PREFIX + "scalar-string-values", "match", S, ["value1", "value1"], 2, (1, 2)),
    case(
        PREFIX + "list-of-string-values-with-common-elements",
        "match",
        S,
        [["value1", "value2", "value3"], ["value2", "value3", "value4"]],
        2,
        (1, 2),
    ),
    case(
        PREFIX + "list-of-string-values-with-partially-common-elements",
        "match",
        S,
        [["value1", "value2"], ["value2", "value3"], ["value3", "value1"]],
        3,
        None,
    ),
    Case(
        # Upstream names both requests req-0; names are unique in valid claims, so the second is req-1.
        PREFIX + "list-of-string-values-without-common-elements",
        features=ON,
        claims=[
            claim(
                "claim-0", request("req-0"), request("req-1"), constraints=[match("driver-a/stringAttribute")]
            )
        ],
        classes=[CLASS],
        slices=[values_slice(S, ["value1", "value2"], ["value3", "value4"])],
    ),
    case(
        PREFIX + "mixed-scalar-and-list-of-string-values-with-common-elements",
        "match",
        S,
        ["value1", ["value1", "value2"]],
        2,
        (1, 2),
    ),
    case(
        PREFIX + "mixed-scalar-and-list-of-string-values-with-partially-common-elements",
        "match",
        S,
        ["value1", ["value1", "value2"], ["value2", "value3"]],
        3,
        None,
    ),
    case(
        PREFIX + "mixed-scalar-and-list-of-string-values-without-common-elements",
        "match",
        S,
        ["value1", ["value2", "value3"]],
        2,
        None,
    ),
    case(
        PREFIX + "list-of-int-values-with-common-elements", "match", "numa", [[0, 1, 2], [1, 2, 3]], 2, (1, 2)
    ),
    case(
        PREFIX + "list-of-bool-values-with-common-elements",
        "match",
        "boolAttribute",
        [[True, False], [True]],
        2,
        (1, 2),
    ),
    case(
        PREFIX + "list-of-version-values-with-common-elements",
        "match",
        "driverVersion",
        [[V("1.0.0"), V("1.1.0"), V("2.0.0")], [V("1.1.0"), V("2.0.0"), V("2.1.0")]],
        2,
        (1, 2),
    ),
    # KEP-6072: devices on overlapping NUMA node lists share node 4; disjoint lists never match.
    case(
        "numanode-matchattribute-overlapping-lists-are-co-placed",
        "match",
        NUMA_NODE,
        [[4], [4, 5, 6, 7]],
        2,
        (1, 2),
    ),
    case(
        "numanode-matchattribute-disjoint-lists-are-not-allocated",
        "match",
        NUMA_NODE,
        [[0], [4, 5, 6, 7]],
        2,
        None,
    ),
    case(
        # The common set narrows to {value1} with device-2 and must widen back to {value1, value2}
        # when device-2 is given up, so that device-3 and device-4 fit with device-1.
        "list-attributes-match-constraint-backtrack-needs-intersection-restore",
        "match",
        S,
        [["value1", "value2"], ["value1"], ["value2"], ["value2"]],
        3,
        (1, 3, 4),
    ),
    case(
        PREFIX + "with-empty-or-unknown-type",
        "match",
        S,
        [{}, {"strings": []}],
        2,
        None,
        error="unsupported attribute value",
        error_field="attributes",
    ),
    case(
        "list-attributes-disabled-match-constraint-with-lists",
        "match",
        S,
        [["value1", "value2", "value3"], ["value2", "value3", "value4"]],
        2,
        None,
        gates=features(),
    ),
    case(DPREFIX + "scalar-string-values-all-distinct", "distinct", S, ["value1", "value2"], 2, (1, 2)),
    case(DPREFIX + "scalar-string-values-not-distinct", "distinct", S, ["value1", "value1"], 2, None),
    # The 1.37.1 distinctAttribute cases of one request again, with list-type attributes on.
    case(
        DPREFIX + "single-request-count-3-not-distinct",
        "distinct",
        S,
        ["value1", "value2", "value1"],
        3,
        None,
    ),
    case(
        DPREFIX + "single-request-count-3-all-distinct",
        "distinct",
        S,
        ["value1", "value2", "value3"],
        3,
        (1, 2, 3),
    ),
    case(
        DPREFIX + "list-of-string-values-all-distinct",
        "distinct",
        S,
        [["value1", "value2"], ["value2", "value3"], ["value3", "value4"]],
        2,
        (1, 3),
    ),
    case(
        DPREFIX + "list-of-string-values-with-common-elements",
        "distinct",
        S,
        [["value1", "value2", "value3"], ["value2", "value4", "value5"]],
        2,
        None,
    ),
    case(
        DPREFIX + "mixed-scalar-and-list-all-distinct",
        "distinct",
        S,
        ["value1", ["value1", "value2"], ["value2", "value3"]],
        2,
        (1, 3),
    ),
    case(
        DPREFIX + "mixed-scalar-and-list-with-common-elements",
        "distinct",
        S,
        ["value1", ["value1", "value2"]],
        2,
        None,
    ),
    case(
        DPREFIX + "list-of-int-values-all-distinct", "distinct", "numa", [[0, 1], [1, 2], [2, 3]], 2, (1, 3)
    ),
    case(
        DPREFIX + "list-of-bool-values-all-distinct",
        "distinct",
        "boolAttribute",
        [[True], [True, False], [False]],
        2,
        (1, 3),
    ),
    case(
        DPREFIX + "list-of-version-values-all-distinct",
        "distinct",
        "driverVersion",
        [[V("1.0.0"), V("1.1.0")], [V("1.1.0"), V("2.0.0")], [V("2.0.0"), V("2.1.0")]],
        2,
        (1, 3),
    ),
    case(
        "list-attributes-distinct-constaint-with-empty-or-unknown-type",
        "distinct",
        "driverVersion",
        [{"versions": []}, {}],
        2,
        None,
        error="unsupported attribute value",
        error_field="attributes",
    ),
    Case(
        # Each device leaves its values taken when given up unless removal forgets them: device-3,
        # device-4 and device-0 (listed last) are the only pairwise disjoint three.
        DPREFIX + "backtrack-needs-remove",
        features=DISTINCT_ON,
        claims=[
            claim(
                "claim-0",
                *(request(f"req-{i}") for i in range(3)),
                constraints=[distinct(ATTRIBUTE_FOR_KEY[S], "req-0", "req-1", "req-2")],
            )
        ],
        classes=[CLASS],
        slices=[
            resource_slice(
                "slice-1",
                NODE_1,
                "pool-1",
                DRIVER_A,
                *(
                    device(name, attrs={S: values})
                    for name, values in (
                        ("device-1", ["value1", "value2", "value3"]),
                        ("device-2", ["value3", "value4", "value5"]),
                        ("device-3", ["value1", "value2"]),
                        ("device-4", ["value3", "value4"]),
                        ("device-0", ["value5", "value6"]),
                    )
                ),
            )
        ],
        expect=[
            allocation(
                local(),
                *(
                    result(f"req-{i}", DRIVER_A, "pool-1", name)
                    for i, name in enumerate(("device-3", "device-4", "device-0"))
                ),
            )
        ],
    ),
    case(
        "list-attributes-disabled-distinct-constraint-with-lists",
        "distinct",
        S,
        [["value1", "value2", "value3"], ["value2", "value3", "value4"]],
        2,
        None,
        gates=features(CAPACITY),
    ),
]


def _kind(value: str) -> dict:
    return cel(f'device.attributes["driver-a"].kind == "{value}"')


CASES += [
    Case(
        # req-1 first narrows the common set to {b}, which req-2's device lacks. When req-1 backtracks,
        # the set must widen back to {a, b} so that device-3 {a} fits. Upstream kept the narrowed set.
        "list-attributes-match-intersection-restored-on-backtrack",
        features=ON,
        claims=[
            claim(
                "claim-0",
                request("req-0", CLASS_A, 1, _kind("y")),
                request("req-1", CLASS_A, 1, _kind("y")),
                request("req-2", CLASS_A, 1, _kind("z")),
                constraints=[match("driver-a/stringAttribute")],
            )
        ],
        classes=[CLASS],
        slices=[
            resource_slice(
                "slice-1",
                NODE_1,
                "pool-1",
                DRIVER_A,
                device("device-1", attrs={S: ["a", "b"], "kind": "y"}),
                device("device-2", attrs={S: ["b"], "kind": "y"}),
                device("device-3", attrs={S: ["a"], "kind": "y"}),
                device("device-4", attrs={S: ["a"], "kind": "z"}),
            )
        ],
        expect=[
            allocation(
                local(),
                result("req-0", DRIVER_A, "pool-1", "device-1"),
                result("req-1", DRIVER_A, "pool-1", "device-3"),
                result("req-2", DRIVER_A, "pool-1", "device-4"),
            )
        ],
        fixes_upstream_bug="kubernetes/kubernetes#140326",
    ),
]
