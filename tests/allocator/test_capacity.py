"""Consumable capacity math: defaults, rounding to request policies, and fit."""

from __future__ import annotations

import pytest
from allocator_objects import dev, slice_obj

from allocator import ResourceSlice
from allocator.capacity import CapacityError, consumed_capacity, fits, undefined_requests
from allocator.quantity import Quantity

DRIVER = "nic.example.com"


def device(policy: dict | None = None, value: str = "10Gi"):
    capacity: dict = {"value": value}
    if policy:
        capacity["requestPolicy"] = policy
    raw = slice_obj("s", [dev("d", allowMultipleAllocations=True, capacity={"bw": capacity})], driver=DRIVER)
    return ResourceSlice.from_api(raw).devices[0]


def q(text: str) -> Quantity:
    return Quantity.parse(text)


def consumed(policy: dict | None, request: str | None) -> str:
    requests = {"bw": q(request)} if request else None
    return str(consumed_capacity(requests, device(policy), DRIVER)["bw"])


def test_defaults() -> None:
    assert consumed(None, None) == "10Gi"  # no policy, no request: the whole capacity
    assert consumed({"default": "1Gi"}, None) == "1Gi"
    assert consumed(None, "3Gi") == "3Gi"


def test_rounding_to_policy() -> None:
    assert consumed({"validRange": {"min": "1Gi", "step": "2Gi"}}, "2Gi") == "3Gi"
    assert consumed({"validRange": {"min": "1Gi"}}, "512Mi") == "1Gi"
    assert consumed({"validValues": ["1Gi", "4Gi"], "default": "1Gi"}, "2Gi") == "4Gi"


def test_fit_against_policy_and_usage() -> None:
    d = device({"default": "1Gi", "validRange": {"min": "1Gi", "max": "4Gi"}})
    assert fits({"bw": q("4Gi")}, d, DRIVER, multiple=True, already=None, allocating=None)
    assert not fits({"bw": q("5Gi")}, d, DRIVER, multiple=True, already=None, allocating=None)
    assert not fits({"bw": q("4Gi")}, d, DRIVER, multiple=True, already={"bw": q("7Gi")}, allocating=None)
    assert fits({"bw": q("3Gi")}, d, DRIVER, multiple=True, already={"bw": q("4Gi")},
                allocating={"bw": q("3Gi")})
    assert not fits({"bw": q("3Gi")}, d, DRIVER, multiple=True, already={"bw": q("4Gi")},
                    allocating={"bw": q("4Gi")})


def test_request_names_with_and_without_domain() -> None:
    d = device()
    assert undefined_requests({f"{DRIVER}/bw": q("1")}, d, DRIVER) == []
    assert undefined_requests({"other.example.com/bw": q("1"), "x": q("1")}, d, DRIVER) == [
        "other.example.com/bw",
        "x",
    ]
    assert consumed_capacity({f"{DRIVER}/bw": q("2Gi")}, d, DRIVER)["bw"] == q("2Gi")


def consumed_gated(policy: dict, request: str, fractional: bool) -> str:
    consumed = consumed_capacity({"bw": q(request)}, device(policy, "10"), DRIVER, fractional=fractional)
    return str(consumed["bw"])


FRACTIONAL_RANGE = {"validRange": {"min": "100m", "step": "1500m"}}


def test_fractional_range_uses_milli_units_with_the_gate() -> None:
    # 100m + 1500m * ceil((1100m - 100m) / 1500m) = 1600m
    assert consumed_gated(FRACTIONAL_RANGE, "1.1", fractional=True) == "1600m"


def test_fractional_range_uses_whole_units_without_the_gate() -> None:
    # Bounds and request rounded up to whole units first: 1 + 2 * ceil((2 - 1) / 2) = 3
    assert consumed_gated(FRACTIONAL_RANGE, "1.1", fractional=False) == "3"


def test_range_with_a_sub_milli_step_falls_back_to_whole_units() -> None:
    assert consumed_gated({"validRange": {"min": "1", "step": "1u"}}, "1500m", fractional=True) == "2"


def test_a_request_finer_than_milli_cannot_be_rounded_on_a_milli_range() -> None:
    with pytest.raises(CapacityError, match="not a representable milli value"):
        consumed_gated(FRACTIONAL_RANGE, "1.0001", fractional=True)


def test_step_violation_is_judged_in_the_same_units() -> None:
    policy = {"validRange": {"min": "100m", "step": "1500m", "max": "5"}}
    shared = device(policy, "10")
    assert fits({"bw": q("1600m")}, shared, DRIVER, multiple=True, already=None, allocating=None,
                fractional=True)
    capped = device({"validRange": {"min": "100m", "step": "1500m", "max": "4"}}, "10")
    assert not fits({"bw": q("4")}, capped, DRIVER, multiple=True, already=None, allocating=None,
                    fractional=True)  # 4600m is above the maximum


@pytest.mark.parametrize(
    ("policy", "amount", "fractional", "problem"),
    [
        # whole units: the request, or what it rounds up to, past int64 (upstream aborts, not skips)
        ({"validRange": {"min": "2", "step": "2"}}, "9223372036854775808", False, "exceeds MaxInt64"),
        ({"validRange": {"min": "2", "step": "2"}}, "9223372036854775807", False, "passes MaxInt64"),
        # milli units: past the int64 range of milli values
        ({"validRange": {"min": "500m", "step": "250m"}}, "9223372036854775807", True, "not a representable"),
        ({"validRange": {"min": "500m", "step": "250m"}}, "9223372036854775.806", True, "milli-value range"),
    ],
)
def test_range_arithmetic_past_int64_is_an_error(
    policy: dict, amount: str, fractional: bool, problem: str
) -> None:
    with pytest.raises(CapacityError, match="cannot be represented") as caught:
        consumed_capacity({"bw": q(amount)}, device(policy, value="1E"), DRIVER, fractional=fractional)
    assert problem in str(caught.value)


def test_range_arithmetic_up_to_int64_is_exact() -> None:
    policy = {"validRange": {"min": "1", "step": "2"}}
    consumed = consumed_capacity({"bw": q("9223372036854775806")}, device(policy), DRIVER, fractional=False)
    assert str(consumed["bw"]) == (
        "9223372036854775807"
    )
