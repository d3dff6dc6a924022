"""Property: search pruning never changes the answer, only shortens the search."""

from __future__ import annotations

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

device_attrs = st.fixed_dictionaries({"root": st.integers(0, 2), "numa": st.integers(0, 1)})
TAINT = {"key": "t", "effect": "NoSchedule"}
COUNTERS = {"name": "cs", "counters": {"mem": {"value": "4"}}}


def device(index: int, attrs: dict, tainted: bool, memory: int, shared: bool) -> dict:
    fields: dict = {"attrs": attrs}
    if shared:
        fields["allowMultipleAllocations"] = True
        fields["capacity"] = {"bw": {"value": "3"}}
    if tainted:
        fields["taints"] = [TAINT]
    if memory:
        fields["consumesCounters"] = [{"counterSet": "cs", "counters": {"mem": {"value": str(memory)}}}]
    return dev(f"d{index}", **fields)


@st.composite
def scenarios(draw: st.DrawFn) -> tuple:
    attrs = draw(st.lists(device_attrs, min_size=1, max_size=9))
    devices = [
        device(
            i,
            a,
            draw(st.booleans()) and draw(st.booleans()),
            draw(st.sampled_from([0, 0, 1, 2])),
            draw(st.integers(0, 3)) == 0,
        )
        for i, a in enumerate(attrs)
    ]
    used = draw(st.sets(st.integers(0, len(devices) - 1), max_size=2))
    claims = []
    for c in range(draw(st.integers(1, 2))):
        requests = []
        for r in range(draw(st.integers(1, 3))):
            extra = {}
            if draw(st.booleans()):
                extra["tolerations"] = [{"key": "t", "operator": "Exists"}]
            if draw(st.integers(0, 5)) == 0:
                extra["adminAccess"] = True
            if draw(st.booleans()):
                extra["capacity"] = {"requests": {"bw": str(draw(st.integers(1, 2)))}}
            if draw(st.booleans()):
                requests.append(req(f"r{r}", draw(st.integers(1, 3)), **extra))
            else:
                subs = [req(f"s{k}", draw(st.integers(1, 3))) for k in range(draw(st.integers(1, 2)))]
                requests.append(first_available(f"r{r}", *subs))
        constraints = []
        if draw(st.booleans()):
            constraints.append({"matchAttribute": f"{DRIVER}/root"})
        if draw(st.booleans()):
            constraints.append({"distinctAttribute": f"{DRIVER}/numa", "requests": ["r0"]})
        claims.append(claim_obj(f"c{c}", *requests, constraints=constraints))
    return devices, sorted(used), claims


def without_share_ids(allocations: list[dict]) -> list[dict]:
    return [
        {
            **a,
            "devices": {**a["devices"], "results": [{**r, "shareID": None} for r in a["devices"]["results"]]},
        }
        for a in allocations
    ]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_pruning_keeps_the_first_solution(scenario: tuple) -> None:
    devices, used, claims = scenario
    inv = inventory(
        [slice_obj("s", devices, count=2), slice_obj("t", [], sharedCounters=[COUNTERS], count=2)]
    )
    state = AllocatedState()
    if used:
        state.add_claim(allocated_claim("other", *[(DRIVER, "node-1", f"d{i}") for i in used]))
    pruned = allocate(inv, *claims, state=state)
    exhaustive = allocate(inv, *claims, state=state, prune=False)
    assert pruned.success == exhaustive.success
    assert without_share_ids(pruned.allocations) == without_share_ids(exhaustive.allocations)
    assert pruned.subrequest_ranks == exhaustive.subrequest_ranks
    assert pruned.steps <= exhaustive.steps
