"""The 32-results-per-claim limit."""

from __future__ import annotations

from .builders import (
    CLASS_A,
    DRIVER_A,
    NODE_1,
    Case,
    allocation,
    claim,
    device_class,
    devices,
    local,
    request,
    resource_slice,
    results,
)

CLASS = device_class(CLASS_A, DRIVER_A)
MAX_RESULTS = 32

CASES = [
    Case(
        "too-many-devices-single-request",
        claims=[claim("claim-0", request("req-0", CLASS_A, 500))],
        classes=[CLASS],
        error="exceeds the claim limit",
    ),
    # Exactly at the limit is fine; with no devices the claim simply does not fit.
    Case(
        "many-devices-okay",
        claims=[claim("claim-0", request("req-0", CLASS_A, MAX_RESULTS))],
        classes=[CLASS],
    ),
    Case(
        "too-many-devices-total",
        claims=[claim("claim-0", request("req-0", CLASS_A, MAX_RESULTS), request("req-1"))],
        classes=[CLASS],
        slices=[resource_slice("slice-1", NODE_1, "pool-1", DRIVER_A, *devices(MAX_RESULTS + 1))],
        error="exceeds the claim limit",
    ),
    # Upstream's case of this name checks the same thing as too-many-devices-single-request.
    Case(
        "all-devices-invalid-CEL",
        claims=[claim("claim-0", request("req-0", CLASS_A, 500))],
        classes=[CLASS],
        error="exceeds the claim limit",
    ),
]

CASES += [
    Case(
        "max-number-devices",
        claims=[claim("claim-0", request("req-0", CLASS_A, MAX_RESULTS))],
        classes=[CLASS],
        slices=[resource_slice("slice-1", NODE_1, "pool-1", DRIVER_A, *devices(MAX_RESULTS))],
        expect=[allocation(local(), *results("req-0", DRIVER_A, "pool-1", MAX_RESULTS))],
    ),
]
