"""DRADeviceCompatibilityGroups: the intersection rules, parsing with the API server's error texts,
pools with the gate off, the search's rollback, and what an explanation says."""

from __future__ import annotations

import pytest
from allocator_objects import (
    DRIVER,
    allocate,
    allocated_claim,
    claim_obj,
    dev,
    inventory,
    picked,
    req,
    slice_obj,
)

from allocator import AllocatedState, FeatureGates, InvalidObjectError, Node, ResourceSlice
from allocator.compatibility import _NONE, admits, fold
from allocator.pools import COMPLETE, INCOMPLETE

ON = {"DRADeviceCompatibilityGroups": True}
MIG, VGPU, BOTH, NONE = frozenset({"mig"}), frozenset({"vgpu"}), frozenset({"mig", "vgpu"}), frozenset()


def part(name: str, *groups: str, counter_set: str = "gpu-0", **fields: object) -> dict:
    use: dict = {"counterSet": counter_set, "counters": {"memory": {"value": "1"}}}
    if groups:
        use["compatibilityGroups"] = list(groups)
    return dev(name, consumesCounters=[use], **fields)


def counters(name: str = "counters", count: int = 2, sets: tuple[str, ...] = ("gpu-0",)) -> dict:
    shared = [{"name": s, "counters": {"memory": {"value": "8"}}} for s in sets]
    return slice_obj(name, [], pool="pool", count=count, sharedCounters=shared)


def devices(*devs: dict, name: str = "devices", count: int = 2) -> dict:
    return slice_obj(name, list(devs), pool="pool", count=count)


# --- the rules ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("current", "groups", "admitted"),
    [
        (_NONE, MIG, True),  # nobody draws from the counter set yet
        (_NONE, NONE, True),
        (None, NONE, True),  # members without groups take only devices without groups
        (None, MIG, False),
        (MIG, NONE, False),
        (MIG, BOTH, True),
        (MIG, VGPU, False),
        (NONE, MIG, False),  # allocated peers that disagree leave nothing in common
        (NONE, NONE, False),
    ],
)
def test_admits(current: frozenset[str] | None, groups: frozenset[str], admitted: bool) -> None:
    assert admits(current, groups) is admitted


def test_fold_narrows_and_keeps_the_no_group_state() -> None:
    assert fold(_NONE, BOTH) == BOTH
    assert fold(_NONE, NONE) is None
    assert fold(BOTH, VGPU) == VGPU
    assert fold(None, NONE) is None
    # Allocated peers are folded in unchecked: upstream's order dependence is kept.
    assert fold(None, MIG) is None
    assert fold(MIG, NONE) == MIG


# --- parsing --------------------------------------------------------------------------------------


def parse_groups(*groups: object) -> ResourceSlice:
    use = {"counterSet": "gpu-0", "counters": {"memory": {"value": "1"}}, "compatibilityGroups": list(groups)}
    return ResourceSlice.from_api(slice_obj("s", [dev("d", consumesCounters=[use])]))


def test_groups_are_parsed_per_counter_set() -> None:
    parsed = parse_groups("mig", "vgpu")
    assert parsed.devices[0].compatibility_groups == (("gpu-0", BOTH),)
    assert parsed.uses_compatibility_groups
    plain = ResourceSlice.from_api(slice_obj("s", [part("d")]))
    assert plain.devices[0].compatibility_groups == ()
    assert not plain.uses_compatibility_groups


PATH = "spec.devices[0].consumesCounters[0].compatibilityGroups"
LABEL = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start "
    "and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)


@pytest.mark.parametrize(
    ("groups", "message"),
    [
        (("a", "b", "c"), f"{PATH}: Too many: 3: must have at most 2 items"),
        (("Mig",), f'{PATH}[0]: Invalid value: "Mig": {LABEL}'),
        (("a", "m.ig"), f'{PATH}[1]: Invalid value: "m.ig": must not contain dots'),
        (("x" * 64,), f'{PATH}[0]: Invalid value: "{"x" * 64}": must be no more than 63 bytes'),
        (("mig", "mig"), f'{PATH}[1]: Duplicate value: "mig"'),
        ((7,), f"{PATH}[0]: must be a string, got 7"),
    ],
)
def test_invalid_groups_are_refused_with_the_api_servers_words(
    groups: tuple[object, ...], message: str
) -> None:
    with pytest.raises(InvalidObjectError) as caught:
        parse_groups(*groups)
    assert str(caught.value) == f"ResourceSlice s: {message}"


# --- pools with the gate off ----------------------------------------------------------------------


def test_gate_off_ignores_grouped_slices_and_leaves_their_pool_incomplete() -> None:
    inv = inventory(
        [devices(part("a", "mig"), count=3), devices(part("b"), name="more", count=3), counters(count=3)]
    )
    (pool,) = inv.node_pools(Node.named("node-1"), FeatureGates()).pools
    assert pool.status == INCOMPLETE
    assert pool.groups_ignored == 1
    outcome = allocate(inv, claim_obj("c", req("r")))
    assert not outcome.success
    assert outcome.reasons[0].rejected == {"groups ignored": 2}
    assert "DRADeviceCompatibilityGroups is off" in outcome.reasons[0].message

    (pool,) = inv.node_pools(Node.named("node-1"), FeatureGates(ON)).pools
    assert pool.status == COMPLETE
    assert picked(allocate(inv, claim_obj("c", req("r")), gates=ON)) == ["r=a"]


# --- the search -----------------------------------------------------------------------------------


def test_groups_only_matter_within_one_counter_set() -> None:
    inv = inventory(
        [devices(part("a", "mig"), part("b", "vgpu", counter_set="gpu-1")), counters(sets=("gpu-0", "gpu-1"))]
    )
    assert picked(allocate(inv, claim_obj("c", req("r", 2)), gates=ON)) == ["r=a", "r=b"]


def test_backtracking_gives_the_narrowing_back() -> None:
    # c declares both groups: it joins a ("mig").
    inv = inventory([devices(part("a", "mig"), part("b", "vgpu"), part("c", "mig", "vgpu")), counters()])
    assert picked(allocate(inv, claim_obj("c", req("r", 2)), gates=ON)) == ["r=a", "r=c"]
    # a ("mig") first finds no second "mig": the search undoes a and pairs b and c ("vgpu").
    inv = inventory([devices(part("a", "mig"), part("b", "vgpu"), part("c", "vgpu")), counters()])
    assert picked(allocate(inv, claim_obj("c", req("r", 2)), gates=ON)) == ["r=b", "r=c"]


def test_devices_without_groups_only_go_together() -> None:
    inv = inventory([devices(part("a"), part("b", "mig"), part("c")), counters()])
    assert picked(allocate(inv, claim_obj("c", req("r", 2)), gates=ON)) == ["r=a", "r=c"]


def test_allocated_peer_limits_what_can_join_and_explains_it() -> None:
    inv = inventory([devices(part("a", "mig"), part("b", "vgpu")), counters()])
    state = AllocatedState()
    state.add_claim(allocated_claim("peer", (DRIVER, "pool", "a")))
    outcome = allocate(inv, claim_obj("c", req("r")), state=state, gates=ON)
    assert not outcome.success
    (reason,) = outcome.reasons
    assert reason.rejected == {"in use": 1, "compatibility groups": 1}
    assert "sharing no compatibility group with allocated devices on a counter set" in reason.message
    assert "compatibility groups" in outcome.rejection_keys()
    # Without the gate the slice is ignored instead.
    assert allocate(inv, claim_obj("c", req("r")), state=state).reasons[0].rejected == {"groups ignored": 2}


def test_devices_that_exclude_each_other_are_named_in_the_explanation() -> None:
    inv = inventory([devices(part("a", "mig"), part("b", "vgpu")), counters()])
    outcome = allocate(inv, claim_obj("c", req("r0"), req("r1")), gates=ON)
    assert not outcome.success
    assert "draw from one counter set but share no compatibility group" in outcome.reasons[0].message


def test_admin_access_on_an_allocated_device_is_compared_with_itself() -> None:
    inv = inventory([devices(part("a", "mig")), counters()])
    state = AllocatedState()
    state.add_claim(allocated_claim("peer", (DRIVER, "pool", "a")))
    outcome = allocate(inv, claim_obj("c", req("r", adminAccess=True)), state=state, gates=ON)
    assert picked(outcome) == ["r=a"]


def test_pool_summary_says_why_a_grouped_pool_is_unusable() -> None:
    inv = inventory([devices(part("a", "mig")), counters()])
    (off,) = inv.describe_pools()
    assert (off["status"], off["reason"]) == (
        INCOMPLETE,
        "1 of 2 slices declare compatibility groups, ignored while DRADeviceCompatibilityGroups is off",
    )
    (on,) = inv.describe_pools(FeatureGates(ON))
    assert (on["status"], on["reason"]) == (COMPLETE, "")
