"""Property: the search finds a solution exactly when a brute-force enumeration does, and every
solution it returns satisfies counts, exclusivity and constraints."""

from __future__ import annotations

from itertools import combinations, product

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

from allocator import AllocatedState

ROOT, NUMA = f"{DRIVER}/root", f"{DRIVER}/numa"


@st.composite
def scenarios(draw: st.DrawFn) -> tuple:
    attrs = draw(st.lists(st.tuples(st.integers(0, 1), st.integers(0, 2)), min_size=1, max_size=6))
    used = draw(st.sets(st.integers(0, len(attrs) - 1), max_size=2))
    claims = []
    for _ in range(draw(st.integers(1, 2))):
        requests = [
            [(f"s{k}", draw(st.integers(1, 2))) for k in range(draw(st.integers(1, 2)))]
            for _ in range(draw(st.integers(1, 2)))
        ]
        claims.append((requests, draw(st.booleans()), draw(st.booleans())))
    return attrs, used, claims


def to_api(index: int, requests: list, match: bool, distinct: bool) -> dict:
    raw_requests = [
        req(f"r{r}", subs[0][1])
        if len(subs) == 1
        else first_available(f"r{r}", *[req(n, k) for n, k in subs])
        for r, subs in enumerate(requests)
    ]
    constraints = ([{"matchAttribute": ROOT}] if match else []) + (
        [{"distinctAttribute": NUMA}] if distinct else []
    )
    return claim_obj(f"c{index}", *raw_requests, constraints=constraints)


def satisfies(devices: list[tuple[int, int]], match: bool, distinct: bool) -> bool:
    roots = {root for root, _ in devices}
    numas = [numa for _, numa in devices]
    return (not match or len(roots) <= 1) and (not distinct or len(numas) == len(set(numas)))


def brute_force(attrs: list, free: set[int], claims: list) -> bool:
    if not claims:
        return True
    (requests, match, distinct), rest = claims[0], claims[1:]
    for counts in product(*[[count for _, count in subs] for subs in requests]):
        total = sum(counts)
        for chosen in combinations(sorted(free), total):
            if satisfies([attrs[i] for i in chosen], match, distinct) and brute_force(
                attrs, free - set(chosen), rest
            ):
                return True
    return False


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_search_agrees_with_brute_force(scenario: tuple) -> None:
    attrs, used, claims = scenario
    devices = [dev(f"d{i}", attrs={"root": r, "numa": n}) for i, (r, n) in enumerate(attrs)]
    state = AllocatedState()
    if used:
        state.add_claim(allocated_claim("other", *[(DRIVER, "node-1", f"d{i}") for i in used]))
    outcome = allocate(
        inventory([slice_obj("s", devices)]), *[to_api(i, *c) for i, c in enumerate(claims)], state=state
    )
    free = set(range(len(attrs))) - used
    assert outcome.success == brute_force(attrs, free, claims)
    if not outcome.success:
        return
    taken: list[int] = []
    for allocation, (requests, match, distinct) in zip(outcome.allocations, claims, strict=True):
        indices = [int(r["device"][1:]) for r in allocation["devices"]["results"]]
        assert satisfies([attrs[i] for i in indices], match, distinct)
        per_request: dict[str, int] = {}
        for result in allocation["devices"]["results"]:
            per_request[result["request"]] = per_request.get(result["request"], 0) + 1
        for r, subs in enumerate(requests):
            assert any(per_request.get(f"r{r}" if len(subs) == 1 else f"r{r}/{n}") == k for n, k in subs)
        taken.extend(indices)
    assert len(taken) == len(set(taken)) and not set(taken) & used
