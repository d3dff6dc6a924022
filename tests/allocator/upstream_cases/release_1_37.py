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
]
