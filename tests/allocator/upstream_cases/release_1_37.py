"""Cases new in the v0.37.1 table (Kubernetes 1.37.1): per-request claim-limit checks, claim configs
matched once and cleared when they cover every request, and fractional capacity ranges."""

from __future__ import annotations

from .builders import (
    CAPACITY,
    CLASS_A,
    CLASS_B,
    DRIVER_A,
    DRIVER_B,
    FRACTIONAL,
    NODE_1,
    PRIORITIZED,
    Case,
    allocation,
    claim,
    claim_config,
    class_allowing_multiple,
    device,
    device_class,
    devices,
    distinct,
    features,
    first_available,
    from_claim,
    local,
    request,
    resource_slice,
    result,
    results,
    sub,
)

CLASSES = [device_class(CLASS_A, DRIVER_A), device_class(CLASS_B, DRIVER_B)]
MAX_RESULTS = 32
HALF_OF_INT64 = 2**62  # math.MaxInt/2 + 1
CAP = "capacity-0"


def slice_of(count: int) -> dict:
    return resource_slice("slice-1", NODE_1, "pool-1", DRIVER_A, *devices(count))


def fractional_device() -> dict:
    """One shareable device with 1 of capacity-0 and the range min 200m, step 100m, max 1."""
    policy = {"default": "200m", "validRange": {"min": "200m", "step": "100m", "max": "1"}}
    return device("device-1", capacity={CAP: {"value": "1", "requestPolicy": policy}}, multiple=True)


def fractional_case(name: str, gates: frozenset[str], amount: str, consumed: str) -> Case:
    return Case(
        name,
        features=gates,
        claims=[claim("claim-0", request("req-0", CLASS_A, 1, capacity={CAP: amount}))],
        classes=[class_allowing_multiple(CLASS_A, DRIVER_A, True)],
        slices=[resource_slice("slice-1", NODE_1, "pool-1", DRIVER_A, fractional_device())],
        expect=[
            allocation(
                local(),
                result("req-0", DRIVER_A, "pool-1", "device-1", shared=True, consumed={CAP: consumed}),
            )
        ],
    )


def subrequest_config_case(name: str, names: tuple[str, ...], kept: bool) -> Case:
    """req-0 picks its first subrequest, req-1 is plain; one claim config names ``names``, and the
    result keeps that list unless it covers every request."""
    return Case(
        name,
        features=features(PRIORITIZED),
        claims=[
            claim(
                "claim-0",
                first_available("req-0", sub("subReq-0", CLASS_A), sub("subReq-1", CLASS_B)),
                request("req-1", CLASS_A, 1),
                config=[claim_config(DRIVER_A, "scoped", *names)],
            )
        ],
        classes=CLASSES,
        slices=[slice_of(2)],
        expect=[
            allocation(
                local(),
                result("req-0/subReq-0", DRIVER_A, "pool-1", "device-0"),
                result("req-1", DRIVER_A, "pool-1", "device-1"),
                config=[from_claim(DRIVER_A, "scoped", *(names if kept else ()))],
            )
        ],
    )


def distinct_case(
    name: str,
    attribute: str,
    values: list[object | None],
    wanted: list[int] | None,
    counts: tuple[int, ...] = (3,),
) -> Case:
    """Devices device-1.. with ``values`` of ``attribute`` (None: unset) under one distinctAttribute
    constraint over every request (req-0 wants counts[0], req-1 counts[1], ...); ``wanted`` lists the
    devices expected in order (by number), None for "does not fit"."""
    devs = [
        device(f"device-{i}", attrs=None if v is None else {attribute: v}) for i, v in enumerate(values, 1)
    ]
    names = [f"req-{i}" for i in range(len(counts))]
    requests_in_order = [req for req, n in zip(names, counts, strict=True) for _ in range(n)]
    expected = [
        result(req, DRIVER_A, "pool-1", f"device-{number}")
        for req, number in zip(requests_in_order, wanted or [], strict=False)
    ]
    constraint = distinct(f"{DRIVER_A}/{attribute}", *(names if len(names) > 1 else ()))
    return Case(
        name,
        features=features(CAPACITY),
        claims=[
            claim(
                "claim-0",
                *(request(r, CLASS_A, n) for r, n in zip(names, counts, strict=True)),
                constraints=[constraint],
            )
        ],
        classes=CLASSES,
        slices=[resource_slice("slice-1", NODE_1, "pool-1", DRIVER_A, *devs)],
        expect=None if wanted is None else [allocation(local(), *expected)],
    )


CASES = [
    Case(
        "exact-count-total-overflows-claim-limit",
        claims=[
            claim(
                "claim-0", request("req-0", CLASS_A, HALF_OF_INT64), request("req-1", CLASS_A, HALF_OF_INT64)
            )
        ],
        classes=CLASSES,
        error="exceeds the claim limit",
    ),
    Case(
        "exact-count-total-would-wrap-to-zero",
        claims=[claim("claim-0", *(request(f"req-{i}", CLASS_A, HALF_OF_INT64) for i in range(4)))],
        classes=CLASSES,
        error="exceeds the claim limit",
    ),
    Case(
        # req-0 fits on its own: the error names req-1, which pushes the claim over.
        "exact-count-sum-exceeds-claim-limit",
        claims=[claim("claim-0", request("req-0", CLASS_A, 20), request("req-1", CLASS_A, 20))],
        classes=CLASSES,
        error="request req-1: adding 20 devices exceeds the claim limit",
    ),
    Case(
        "exact-count-sum-exactly-fills-claim-limit",
        claims=[
            claim(
                "claim-0",
                request("req-0", CLASS_A, MAX_RESULTS // 2),
                request("req-1", CLASS_A, MAX_RESULTS // 2),
            )
        ],
        classes=CLASSES,
        slices=[slice_of(MAX_RESULTS)],
        expect=[
            allocation(
                local(),
                *results("req-0", DRIVER_A, "pool-1", MAX_RESULTS // 2),
                *results("req-1", DRIVER_A, "pool-1", MAX_RESULTS // 2, MAX_RESULTS // 2),
            )
        ],
    ),
    Case(
        "prioritized-list-minimum-sum-exceeds-claim-limit",
        features=features(PRIORITIZED),
        claims=[
            claim(
                "claim-0",
                request("req-0", CLASS_A, 20),
                first_available("req-1", sub("subReq-0", CLASS_A, 20), sub("subReq-1", CLASS_A, 24)),
            )
        ],
        classes=CLASSES,
        error="request req-1: adding 20 devices exceeds the claim limit",
    ),
    Case(
        # A claim config naming two of three requests is kept once, with its request list.
        "with-claim-config-for-two-requests",
        claims=[
            claim(
                "claim-0",
                *(request(f"req-{i}", CLASS_A, 1) for i in range(3)),
                config=[claim_config(DRIVER_A, "deviceAttribute", "req-0", "req-1")],
            )
        ],
        classes=CLASSES,
        slices=[slice_of(3)],
        expect=[
            allocation(
                local(),
                *(result(f"req-{i}", DRIVER_A, "pool-1", f"device-{i}") for i in range(3)),
                config=[from_claim(DRIVER_A, "deviceAttribute", "req-0", "req-1")],
            )
        ],
    ),
    subrequest_config_case(
        "claim-config-scoped-to-subrequests-of-one-request", ("req-0/subReq-0", "req-0/subReq-1"), True
    ),
    # Covers req-0 through its chosen subrequest and req-1 by name: every request, so it names none.
    subrequest_config_case(
        "claim-config-covering-all-requests-is-cleared", ("req-0/subReq-0", "req-1"), False
    ),
    # Without the gate the range arithmetic is in whole units (200m and 100m round up to 1).
    fractional_case("consumable-capacity-fractional-range-gate-disabled", features(CAPACITY), "200m", "1"),
    # With it, milli units: 250m lies between 200m and the next step, 300m.
    fractional_case(
        "consumable-capacity-fractional-range-gate-enabled-round-up",
        features(CAPACITY, FRACTIONAL),
        "250m",
        "300m",
    ),
    # distinctAttribute over all devices of one request, and across requests (1.37.1 tests what
    # our DistinctAttribute always did, upstream #140438).
    distinct_case(
        "distinct-constraint-single-request-count-3-not-distinct",
        "stringAttribute",
        ["value1", "value2", "value1"],
        None,
    ),
    distinct_case(
        "distinct-constraint-single-request-count-3-all-distinct",
        "stringAttribute",
        ["value1", "value2", "value3"],
        [1, 2, 3],
    ),
    distinct_case(
        "distinct-constraint-two-requests-with-count-not-distinct",
        "stringAttribute",
        ["value1", "value2", "value1"],
        None,
        counts=(2, 1),
    ),
    distinct_case(
        "distinct-constraint-single-request-multiple-devices-attribute-not-set",
        "numa",
        [None, None, None],
        None,
    ),
    distinct_case(
        "distinct-constraint-single-request-not-enough-distinct-values", "numa", [1, 2, 2, 2], None
    ),
    distinct_case(
        "distinct-constraint-single-request-multiple-devices-attribute-set", "numa", [1, 2, 1, 3], [1, 2, 4]
    ),
]
