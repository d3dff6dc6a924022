"""Pruning never hides a hard error the exhaustive search (upstream's) would reach.

A selector that fails at run time on some device aborts upstream's allocation as soon as its search
looks at that device. Our pruning gives up branches without a solution; it must not give up one in
which upstream's search would have looked at such a device. ``prune=False`` is upstream's search,
step for step, so the two must agree: the same error, or the same result.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from allocator_objects import (
    DRIVER,
    allocate,
    allocated_claim,
    claim_obj,
    dev,
    first_available,
    inventory,
    req,
    slice_obj,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from allocator import AllocatedState, AllocationError, AllocationOutcome

# Fails at run time ("no such key") on a device without a numa attribute.
NUMA_ZERO = f'device.attributes["{DRIVER}"].numa == 0'
HAS_NUMA = f'has(device.attributes["{DRIVER}"].numa)'


def selected(expression: str) -> dict[str, Any]:
    return {"selectors": [{"cel": {"expression": expression}}]}


def verdict(*claims: dict[str, Any], state: AllocatedState | None = None, prune: bool) -> tuple[Any, ...]:
    devices = [dev("d0"), *(dev(f"d{i}", attrs={"numa": 0}) for i in range(1, 4))]
    inv = inventory([slice_obj("s", devices)])
    return outcome_of(lambda: allocate(inv, *claims, state=state, prune=prune))


def outcome_of(run: Callable[[], AllocationOutcome]) -> tuple[Any, ...]:
    try:
        outcome = run()
    except AllocationError as error:
        return ("error", str(error))
    shares = [[{**r, "shareID": None} for r in a["devices"]["results"]] for a in outcome.allocations]
    return ("allocated" if outcome.success else "unschedulable", shares)


def test_a_pruned_slot_reaches_a_failing_selector_of_a_later_request() -> None:
    # r0 takes two devices. With d1 and d2, r1 first looks at d0, which it cannot evaluate. Upstream
    # gets there after giving up d0 for r0; pruning r0's second slot (r2 can never be filled) must not
    # skip it.
    claim = claim_obj("c", req("r0", 2), req("r1", 1, **selected(NUMA_ZERO)), req("r2", 5))
    exhaustive = verdict(claim, prune=False)
    assert exhaustive[0] == "error" and "CEL runtime error" in exhaustive[1]
    assert verdict(claim, prune=True) == exhaustive


def test_a_hopeless_claim_still_reaches_a_failing_selector_of_its_later_request() -> None:
    # c0 first takes d0, so c1's r1 cannot see it; once c0 takes d1 instead, c1's r0 (numa devices
    # only) takes d2 and r1 looks at d0. c1 can never be satisfied (r2), which must not end the
    # search before that.
    c0 = claim_obj("c0", req("r0"))
    c1 = claim_obj(
        "c1", req("r0", 1, **selected(HAS_NUMA)), req("r1", 1, **selected(NUMA_ZERO)), req("r2", 5)
    )
    exhaustive = verdict(c0, c1, prune=False)
    assert exhaustive[0] == "error" and "CEL runtime error" in exhaustive[1]
    assert verdict(c0, c1, prune=True) == exhaustive


def test_a_failing_selector_on_a_device_in_use_is_never_reached() -> None:
    # d0 is allocated: no search ever looks at it, so the claim is merely unschedulable.
    state = AllocatedState()
    state.add_claim(allocated_claim("other", (DRIVER, "node-1", "d0")))
    claim = claim_obj("c", req("r0", 2), req("r1", 1, **selected(NUMA_ZERO)), req("r2", 5))
    assert verdict(claim, state=state, prune=True) == verdict(claim, state=state, prune=False)
    assert verdict(claim, state=state, prune=True)[0] == "unschedulable"


@st.composite
def worlds(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[int], list[dict[str, Any]]]:
    devices = []
    for i in range(draw(st.integers(1, 7))):
        attrs: dict[str, int] = {"root": draw(st.integers(0, 1))}
        if draw(st.integers(0, 3)):
            attrs["numa"] = draw(st.integers(0, 1))
        devices.append(dev(f"d{i}", attrs=attrs))
    used = draw(st.sets(st.integers(0, len(devices) - 1), max_size=2))

    def request(name: str) -> dict[str, Any]:
        extra: dict[str, Any] = {}
        choice = draw(st.integers(0, 3))
        if choice == 0:
            extra = selected(NUMA_ZERO)
        elif choice == 1:
            extra = selected(HAS_NUMA)
        return req(name, draw(st.integers(1, 4)), **extra)

    claims = []
    for c in range(draw(st.integers(1, 3))):
        requests = []
        for r in range(draw(st.integers(1, 3))):
            if draw(st.integers(0, 3)):
                requests.append(request(f"r{r}"))
            else:
                requests.append(first_available(f"r{r}", *(request(f"s{k}") for k in range(2))))
        constraints = [{"matchAttribute": f"{DRIVER}/root"}] if draw(st.booleans()) else []
        claims.append(claim_obj(f"c{c}", *requests, constraints=constraints))
    return devices, sorted(used), claims


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds())
def test_pruning_reports_the_error_the_exhaustive_search_reports(
    world: tuple[list[dict[str, Any]], list[int], list[dict[str, Any]]],
) -> None:
    devices, used, claims = world
    inv = inventory([slice_obj("s", devices)])
    state = AllocatedState()
    if used:
        state.add_claim(allocated_claim("other", *[(DRIVER, "node-1", f"d{i}") for i in used]))
    pruned = outcome_of(lambda: allocate(inv, *claims, state=state))
    exhaustive = outcome_of(lambda: allocate(inv, *claims, state=state, prune=False))
    assert pruned == exhaustive


@pytest.mark.parametrize("prune", [True, False])
def test_the_reproducers_differ_from_a_world_without_the_failing_device(prune: bool) -> None:
    # Without d0 (every device has numa) the same claim is simply unschedulable: the error above
    # comes from d0 alone.
    claim = claim_obj("c", req("r0", 2), req("r1", 1, **selected(NUMA_ZERO)), req("r2", 5))
    devices = [dev(f"d{i}", attrs={"numa": 0}) for i in range(1, 4)]
    result = outcome_of(lambda: allocate(inventory([slice_obj("s", devices)]), claim, prune=prune))
    assert result[0] == "unschedulable"
