"""Constraint bookkeeping, including list-type attributes and exact restore on backtracking."""

from __future__ import annotations

from allocator_objects import DRIVER, allocate, claim_obj, dev, inventory, picked, req, slice_obj

from allocator import ResourceSlice
from allocator.constraints import DistinctAttribute, MatchAttribute, lookup_attribute

LISTS = {"DRAListTypeAttributes": True}


def devices(*values: object) -> list:
    raw = slice_obj("s", [dev(f"d{i}", attrs={"numa": v}) for i, v in enumerate(values)])
    return list(ResourceSlice.from_api(raw).devices)


def test_lookup_uses_driver_domain_for_bare_names() -> None:
    (device,) = devices(1)
    assert lookup_attribute(device, DRIVER, f"{DRIVER}/numa").value == 1
    assert lookup_attribute(device, DRIVER, "other.example.com/numa") is None


def test_match_intersection_is_restored_on_remove() -> None:
    a, b, c = devices([0, 1, 2], [1, 2], [0, 3])
    match = MatchAttribute(frozenset(), f"{DRIVER}/numa", list_semantics=True)
    assert match.add(a, DRIVER, "r", None)
    assert match.add(b, DRIVER, "r", None)  # intersection {1, 2}
    assert not match.add(c, DRIVER, "r", None)  # {0, 3} misses {1, 2}
    match.remove("r", None)  # back to {0, 1, 2}; upstream kept {1, 2} (PR #140326)
    assert match.add(c, DRIVER, "r", None)


def test_scalar_match_takes_a_list_value_only_first() -> None:
    # As upstream 1.37.1 without the gate: a list value may start the match, nothing matches it later.
    a, b, c = devices([0, 1], 1, [0, 1])
    match = MatchAttribute(frozenset(), f"{DRIVER}/numa", list_semantics=False)
    assert match.add(a, DRIVER, "r", None)
    assert not match.add(b, DRIVER, "r", None)
    assert not match.add(c, DRIVER, "r", None)


def test_scalar_distinct_takes_a_list_value_only_first() -> None:
    a, b, c = devices([0, 1], 1, [2, 3])
    distinct = DistinctAttribute(frozenset(), f"{DRIVER}/numa", list_semantics=False)
    assert distinct.add(a, DRIVER, "r", None)
    assert distinct.add(b, DRIVER, "r", None)
    assert not distinct.add(c, DRIVER, "r", None)


def test_distinct_lists_must_be_disjoint() -> None:
    a, b, c = devices([0, 1], [1, 2], [2, 3])
    distinct = DistinctAttribute(frozenset(), f"{DRIVER}/numa", list_semantics=True)
    assert distinct.add(a, DRIVER, "r", None)
    assert not distinct.add(b, DRIVER, "r", None)
    assert distinct.add(c, DRIVER, "r", None)


def test_constraint_scope_by_request_and_subrequest() -> None:
    match = MatchAttribute(frozenset({"a", "b/x"}), f"{DRIVER}/numa", list_semantics=False)
    assert match.applies("a", None) and match.applies("a", "y") and match.applies("b", "x")
    assert not match.applies("b", "y") and not match.applies("c", None)


def test_list_match_in_the_search_backtracks_with_the_right_intersection() -> None:
    # d0 and d1 share only 1; d2 shares 0 with d0 only. Request 2: first solution is d0+d1.
    # For 3 devices none intersect jointly except via backtracking to d0, d2, d3.
    values = [[0, 1], [1, 5], [0, 7], [0, 9]]
    inv = inventory([slice_obj("s", [dev(f"d{i}", attrs={"numa": v}) for i, v in enumerate(values)])])
    claim = claim_obj("c", req("r", 3), constraints=[{"matchAttribute": f"{DRIVER}/numa"}])
    assert picked(allocate(inv, claim, gates=LISTS)) == ["r=d0", "r=d2", "r=d3"]
    assert not allocate(
        inv, claim_obj("c", req("r", 4), constraints=claim["spec"]["devices"]["constraints"]), gates=LISTS
    ).success
