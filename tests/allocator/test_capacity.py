"""Consumable capacity math: defaults, rounding to request policies, and fit."""

from __future__ import annotations

from allocator_objects import dev, slice_obj

from allocator import ResourceSlice
from allocator.capacity import consumed_capacity, fits, undefined_requests
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
    assert fits({"bw": q("4Gi")}, d, DRIVER, True, None, None)
    assert not fits({"bw": q("5Gi")}, d, DRIVER, True, None, None)
    assert not fits({"bw": q("4Gi")}, d, DRIVER, True, {"bw": q("7Gi")}, None)
    assert fits({"bw": q("3Gi")}, d, DRIVER, True, {"bw": q("4Gi")}, {"bw": q("3Gi")})
    assert not fits({"bw": q("3Gi")}, d, DRIVER, True, {"bw": q("4Gi")}, {"bw": q("4Gi")})


def test_request_names_with_and_without_domain() -> None:
    d = device()
    assert undefined_requests({f"{DRIVER}/bw": q("1")}, d, DRIVER) == []
    assert undefined_requests({"other.example.com/bw": q("1"), "x": q("1")}, d, DRIVER) == [
        "other.example.com/bw",
        "x",
    ]
    assert consumed_capacity({f"{DRIVER}/bw": q("2Gi")}, d, DRIVER)["bw"] == q("2Gi")
