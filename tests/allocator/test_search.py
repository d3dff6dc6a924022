"""The device search: order, modes, constraints, sharing, limits, pruning and failure reasons."""

from __future__ import annotations

import pytest
from allocator_objects import (
    DRIVER,
    allocate,
    allocated_claim,
    claim_obj,
    class_obj,
    dev,
    first_available,
    inventory,
    picked,
    req,
    slice_obj,
)

from allocator import (
    AllocatedState,
    AllocationError,
    AllocationTimeout,
    Node,
    NodeAllocationError,
    allocation_use,
)

FOUR = slice_obj("s1", [dev(f"gpu-{i}", attrs={"index": i, "root": f"r{i // 2}"}) for i in range(4)])


def test_first_fit_in_listed_order() -> None:
    outcome = allocate(inventory([FOUR]), claim_obj("c", req("a", 2), req("b")))
    assert outcome.success
    assert picked(outcome) == ["a=gpu-0", "a=gpu-1", "b=gpu-2"]
    assert outcome.allocations[0]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == [
        "node-1"
    ]


def test_devices_in_use_are_skipped_and_reported() -> None:
    state = AllocatedState()
    state.add_claim(allocated_claim("other", (DRIVER, "node-1", "gpu-0"), (DRIVER, "node-1", "gpu-1")))
    outcome = allocate(inventory([FOUR]), claim_obj("c", req("a", 2)), state=state)
    assert picked(outcome) == ["a=gpu-2", "a=gpu-3"]
    failed = allocate(inventory([FOUR]), claim_obj("c", req("a", 3)), state=state)
    assert not failed.success
    (reason,) = failed.reasons
    assert (reason.needed, reason.considered, reason.rejected, reason.in_use_by) == (
        3,
        4,
        {"in use": 2},
        {"default/other": 2},
    )
    assert failed.summary() == "claim default/c: request a: needs 3 devices, 2 match (2 in use)"


def test_admin_access_ignores_allocated_devices_but_not_its_own_claim() -> None:
    state = AllocatedState()
    state.add_claim(allocated_claim("other", *[(DRIVER, "node-1", f"gpu-{i}") for i in range(4)]))
    outcome = allocate(inventory([FOUR]), claim_obj("c", req("a", 4, adminAccess=True)), state=state)
    assert picked(outcome) == [f"a=gpu-{i}" for i in range(4)]
    assert all(r["adminAccess"] is True for r in outcome.allocations[0]["devices"]["results"])
    assert not allocate(inventory([FOUR]), claim_obj("c", req("a", 5, adminAccess=True)), state=state).success


def test_admin_allocations_do_not_count_as_in_use() -> None:
    state = AllocatedState()
    state.add_claim(allocated_claim("admin", (DRIVER, "node-1", "gpu-0"), admin=True))
    assert picked(allocate(inventory([FOUR]), claim_obj("c", req("a")), state=state)) == ["a=gpu-0"]


def test_all_mode_takes_every_matching_device_and_fails_if_one_is_in_use() -> None:
    inv = inventory([FOUR])
    outcome = allocate(inv, claim_obj("c", req("a", allocationMode="All")))
    assert picked(outcome) == [f"a=gpu-{i}" for i in range(4)]
    state = AllocatedState()
    state.add_claim(allocated_claim("other", (DRIVER, "node-1", "gpu-3")))
    assert not allocate(inv, claim_obj("c", req("a", allocationMode="All")), state=state).success


def test_all_mode_with_no_devices_fails() -> None:
    inv = inventory([FOUR], classes=[class_obj("gpu", 'device.driver == "other"')])
    outcome = allocate(inv, claim_obj("c", req("a", allocationMode="All")))
    assert not outcome.success and outcome.reasons


def test_all_mode_on_incomplete_pool_is_a_hard_error() -> None:
    incomplete = slice_obj("s1", [dev("gpu-0")], count=2)
    with pytest.raises(
        AllocationError, match=r"asks for all devices, but resource pool gpu\.example\.com/node-1"
    ):
        allocate(inventory([incomplete]), claim_obj("c", req("a", allocationMode="All")))


def test_combinations_not_permutations_step_count() -> None:
    # Upstream (incubating): request 5 of 4 devices takes 16 allocateOne invocations.
    outcome = allocate(inventory([FOUR]), claim_obj("c", req("a", 5)), prune=False)
    assert not outcome.success
    assert outcome.steps == 16


def test_first_available_falls_back_and_reports_rank() -> None:
    claim = claim_obj("c", first_available("gpu", req("big", 8), req("small", 2)))
    outcome = allocate(inventory([FOUR]), claim)
    assert picked(outcome) == ["gpu/small=gpu-0", "gpu/small=gpu-1"]
    assert outcome.subrequest_ranks == [{"gpu": 1}]


def test_first_available_backtracks_across_claims() -> None:
    # Claim 1 first takes 3 devices, leaving 1 for claim 2 which needs 2: backtrack to claim 1's
    # second choice (1 device).
    c1 = claim_obj("c1", first_available("gpu", req("three", 3), req("one", 1)))
    c2 = claim_obj("c2", req("two", 2))
    outcome = allocate(inventory([FOUR]), c1, c2)
    assert picked(outcome, 0) == ["gpu/one=gpu-0"]
    assert picked(outcome, 1) == ["two=gpu-1", "two=gpu-2"]
    assert outcome.subrequest_ranks == [{"gpu": 1}, {}]


def test_match_attribute_backtracks_to_a_consistent_group() -> None:
    devices = [dev("a", attrs={"root": "x"}), dev("b", attrs={"root": "y"}), dev("c", attrs={"root": "y"})]
    claim = claim_obj("c", req("r", 2), constraints=[{"matchAttribute": f"{DRIVER}/root"}])
    assert picked(allocate(inventory([slice_obj("s", devices)]), claim)) == ["r=b", "r=c"]


def test_match_attribute_missing_attribute_rejects() -> None:
    devices = [dev("a"), dev("b", attrs={"root": "y"})]
    claim = claim_obj("c", req("r", 2), constraints=[{"matchAttribute": f"{DRIVER}/root"}])
    outcome = allocate(inventory([slice_obj("s", devices)]), claim)
    assert not outcome.success
    assert outcome.reasons[0].rejected == {"constraint": 1}


def test_constraint_applies_only_to_named_requests() -> None:
    devices = [dev("a", attrs={"root": "x"}), dev("b", attrs={"root": "y"}), dev("c", attrs={"root": "x"})]
    claim = claim_obj(
        "c",
        req("r1"),
        req("r2"),
        req("r3"),
        constraints=[{"matchAttribute": f"{DRIVER}/root", "requests": ["r1", "r3"]}],
    )
    assert picked(allocate(inventory([slice_obj("s", devices)]), claim)) == ["r1=a", "r2=b", "r3=c"]


def test_distinct_attribute_compares_against_every_chosen_device() -> None:
    # Upstream bug #140438 accepted values 1,2,1 within one request; we do not.
    devices = [dev(f"d{i}", attrs={"numa": v}) for i, v in enumerate([1, 2, 1, 3])]
    claim = claim_obj("c", req("r", 3), constraints=[{"distinctAttribute": f"{DRIVER}/numa"}])
    assert picked(allocate(inventory([slice_obj("s", devices)]), claim)) == ["r=d0", "r=d1", "r=d3"]


def test_distinct_attribute_without_solution() -> None:
    devices = [dev(f"d{i}", attrs={"numa": v}) for i, v in enumerate([1, 1, 2])]
    claim = claim_obj("c", req("r", 3), constraints=[{"distinctAttribute": f"{DRIVER}/numa"}])
    assert not allocate(inventory([slice_obj("s", devices)]), claim).success


def test_taints_block_unless_tolerated() -> None:
    taint = {"key": "broken", "value": "ecc", "effect": "NoSchedule"}
    devices = [dev("a", taints=[taint]), dev("b", taints=[{**taint, "effect": "None"}])]
    inv = inventory([slice_obj("s", devices)])
    assert picked(allocate(inv, claim_obj("c", req("r")))) == ["r=b"]
    tolerating = req("r", 2, tolerations=[{"key": "broken", "operator": "Exists"}])
    outcome = allocate(inv, claim_obj("c", tolerating))
    assert picked(outcome) == ["r=a", "r=b"]
    assert outcome.allocations[0]["devices"]["results"][0]["tolerations"] == [
        {"key": "broken", "operator": "Exists"}
    ]
    blocked = allocate(inv, claim_obj("c", req("r", 2)))
    assert blocked.reasons[0].rejected == {"taint": 1}
    assert picked(allocate(inv, claim_obj("c", req("r", 2)), gates={"DRADeviceTaints": False})) == [
        "r=a",
        "r=b",
    ]


def test_device_taint_rules_apply() -> None:
    rule = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": "drain"},
        "spec": {
            "deviceSelector": {"driver": DRIVER, "device": "gpu-0"},
            "taint": {"key": "k", "effect": "NoExecute"},
        },
    }
    inv = inventory([FOUR], rules=[rule])
    assert picked(allocate(inv, claim_obj("c", req("a")))) == ["a=gpu-1"]
    inv.remove_taint_rule("drain")
    assert picked(allocate(inv, claim_obj("c", req("a")))) == ["a=gpu-0"]


def _partitioned(counter: str = "40Gi") -> list:
    counters = {"name": "gpu-0-counters", "counters": {"memory": {"value": "40Gi"}}}
    uses = lambda amount: [{"counterSet": "gpu-0-counters", "counters": {"memory": {"value": amount}}}]  # noqa: E731
    return [
        slice_obj("counters", [], sharedCounters=[counters], count=2),
        slice_obj(
            "devices",
            [
                dev("whole", consumesCounters=uses(counter), attrs={"kind": "whole"}),
                dev("half-0", consumesCounters=uses("20Gi"), attrs={"kind": "half"}),
                dev("half-1", consumesCounters=uses("20Gi"), attrs={"kind": "half"}),
            ],
            count=2,
        ),
    ]


def test_shared_counters_limit_partitions() -> None:
    inv = inventory(_partitioned())
    assert picked(allocate(inv, claim_obj("c", req("a")))) == ["a=whole"]
    assert picked(allocate(inv, claim_obj("c", req("a", 2)))) == ["a=half-0", "a=half-1"]
    state = AllocatedState()
    state.add_claim(allocated_claim("other", (DRIVER, "node-1", "half-0")))
    outcome = allocate(inv, claim_obj("c", req("a", 2)), state=state)
    assert not outcome.success
    assert outcome.reasons[0].rejected == {"in use": 1, "counters": 1}


def test_counters_are_returned_when_a_later_check_rejects_the_device() -> None:
    # Upstream bug #140436: "b" passes the counter check, then the constraint rejects it, and its
    # counters stayed consumed, so "c" no longer fitted and the claim failed.
    counters = {"name": "set", "counters": {"memory": {"value": "40Gi"}}}
    uses = [{"counterSet": "set", "counters": {"memory": {"value": "20Gi"}}}]
    devices = [
        dev(name, consumesCounters=uses, attrs={"kind": kind})
        for name, kind in (("a", "p"), ("b", "q"), ("c", "p"))
    ]
    inv = inventory(
        [
            slice_obj("counters", [], sharedCounters=[counters], count=2),
            slice_obj("devices", devices, count=2),
        ]
    )
    claim = claim_obj("c", req("r", 2), constraints=[{"matchAttribute": f"{DRIVER}/kind"}])
    assert picked(allocate(inv, claim)) == ["r=a", "r=c"]


def test_partitionable_gate_off_ignores_counter_slices_and_consuming_devices() -> None:
    outcome = allocate(
        inventory(_partitioned()), claim_obj("c", req("a")), gates={"DRAPartitionableDevices": False}
    )
    assert not outcome.success


def test_consumable_capacity_shares_a_device() -> None:
    shared = dev(
        "nic",
        allowMultipleAllocations=True,
        capacity={
            "bandwidth": {"value": "10G", "requestPolicy": {"default": "1G", "validRange": {"min": "1G"}}}
        },
    )
    inv = inventory([slice_obj("s", [shared])])
    claim = claim_obj("c", req("a", capacity={"requests": {"bandwidth": "4G"}}), req("b"))
    outcome = allocate(inv, claim)
    results = outcome.allocations[0]["devices"]["results"]
    assert [r["device"] for r in results] == ["nic", "nic"]
    assert [r["consumedCapacity"] for r in results] == [{"bandwidth": "4G"}, {"bandwidth": "1G"}]
    assert results[0]["shareID"] != results[1]["shareID"] and len(results[0]["shareID"]) == 36
    too_much = claim_obj("c", req("a", capacity={"requests": {"bandwidth": "11G"}}))
    assert not allocate(inv, too_much).success


def test_allocated_shared_capacity_is_respected() -> None:
    shared = dev("nic", allowMultipleAllocations=True, capacity={"bandwidth": {"value": "10G"}})
    raw = claim_obj("other", req("r"))
    result = {"request": "r", "driver": DRIVER, "pool": "node-1", "device": "nic", "shareID": "x"}
    raw["status"] = {
        "allocation": {"devices": {"results": [{**result, "consumedCapacity": {"bandwidth": "8G"}}]}}
    }
    from allocator import ResourceClaim

    state = AllocatedState()
    state.add_claim(ResourceClaim.from_api(raw))
    inv = inventory([slice_obj("s", [shared])])
    assert allocate(
        inv, claim_obj("c", req("a", capacity={"requests": {"bandwidth": "2G"}})), state=state
    ).success
    assert not allocate(
        inv, claim_obj("c", req("a", capacity={"requests": {"bandwidth": "3G"}})), state=state
    ).success


def test_binding_conditions_are_copied_and_pools_with_them_come_last() -> None:
    bound = slice_obj(
        "a-slice",
        [dev("x", bindingConditions=["ready"], bindingFailureConditions=["failed"], bindsToNode=True)],
        pool="a-pool",
    )
    plain = slice_obj("b-slice", [dev("y")], pool="b-pool")
    inv = inventory([bound, plain])
    assert picked(allocate(inv, claim_obj("c", req("r")))) == ["r=y"]
    outcome = allocate(inv, claim_obj("c", req("r", 2)))
    x = outcome.allocations[0]["devices"]["results"][1]
    assert (x["bindingConditions"], x["bindingFailureConditions"]) == (["ready"], ["failed"])
    off = allocate(inv, claim_obj("c", req("r", 2)), gates={"DRADeviceBindingConditions": False})
    assert off.reasons[0].rejected == {"binding conditions": 1}


def test_result_limit_of_32_devices() -> None:
    many = slice_obj("s", [dev(f"d{i}") for i in range(40)])
    with pytest.raises(AllocationError, match="request r: adding 33 devices exceeds the claim limit of 32, "
                       "with 0 already accounted for"):
        allocate(inventory([many]), claim_obj("c", req("r", 33)))
    # The request that pushes the claim over the limit is the one named.
    with pytest.raises(AllocationError, match="request second: adding 20 devices exceeds the claim limit "
                       "of 32, with 20 already accounted for"):
        allocate(inventory([many]), claim_obj("c", req("first", 20), req("second", 20)))
    # firstAvailable: the 32-device option is skipped once the first request used 1 device.
    claim = claim_obj("c", req("one"), first_available("more", req("all32", 32), req("some", 2)))
    assert len(picked(allocate(inventory([many]), claim))) == 3


def test_feature_gate_errors_use_upstream_wording() -> None:
    inv = inventory([FOUR])
    with pytest.raises(
        AllocationError, match="has subrequests, but the DRAPrioritizedList feature is disabled"
    ):
        allocate(inv, claim_obj("c", first_available("r", req("s"))), gates={"DRAPrioritizedList": False})
    with pytest.raises(AllocationError, match="admin access is requested, but the feature is disabled"):
        allocate(inv, claim_obj("c", req("r", adminAccess=True)), gates={"DRAAdminAccess": False})
    capacity = req("r", capacity={"requests": {"memory": "1Gi"}})
    with pytest.raises(AllocationError, match="has capacity requests, but the DRAConsumableCapacity feature"):
        allocate(inv, claim_obj("c", capacity), gates={"DRAConsumableCapacity": False})


def test_unknown_class_and_selector_errors() -> None:
    with pytest.raises(AllocationError, match=r'could not retrieve device class nope: .*"nope" not found'):
        allocate(inventory([FOUR]), claim_obj("c", req("r", cls="nope")))
    broken = inventory([FOUR], classes=[class_obj("gpu", "device.attributes[")])
    with pytest.raises(AllocationError, match="class gpu: selector #0: CEL compile error"):
        allocate(broken, claim_obj("c", req("r")))


def test_selectors_from_class_and_request() -> None:
    inv = inventory([FOUR], classes=[class_obj("gpu", f'device.driver == "{DRIVER}"')])
    selective = req("r", selectors=[{"cel": {"expression": f'device.attributes["{DRIVER}"].index >= 2'}}])
    outcome = allocate(inv, claim_obj("c", selective))
    assert picked(outcome) == ["r=gpu-2"]
    none = req("r", 3, selectors=[{"cel": {"expression": f'device.attributes["{DRIVER}"].index >= 2'}}])
    failed = allocate(inv, claim_obj("c", none))
    assert failed.reasons[0].rejected == {"request selector": 2}


def test_invalid_pool_is_a_node_local_error() -> None:
    duplicate = slice_obj("s", [dev("gpu-0"), dev("gpu-0")])
    with pytest.raises(NodeAllocationError, match="invalid resource pools were encountered") as info:
        allocate(inventory([duplicate]), claim_obj("c", req("r")))
    assert info.value.outcome.reasons[0].rejected == {"invalid pool": 2}


def test_deadline_stops_the_search() -> None:
    with pytest.raises(AllocationTimeout, match="timed out trying to allocate devices"):
        allocate(inventory([FOUR]), claim_obj("c", req("a", 5)), deadline_s=0.0)


def test_in_flight_allocations_count() -> None:
    from allocator import ResourceClaim

    other = ResourceClaim.from_api(claim_obj("other", req("r")))
    result = {"request": "r", "driver": DRIVER, "pool": "node-1", "device": "gpu-0"}
    in_flight = allocation_use(other.key, {"devices": {"results": [result]}})
    state = AllocatedState().with_in_flight([("uid-other", in_flight)])
    assert picked(allocate(inventory([FOUR]), claim_obj("c", req("a")), state=state)) == ["a=gpu-1"]


def test_no_solution_with_constraint_is_fast() -> None:
    twelve = slice_obj("s", [dev(f"d{i:02d}", attrs={"index": i, "root": "r0"}) for i in range(12)])
    constraint = [{"matchAttribute": f"{DRIVER}/root"}]
    for claim in (
        claim_obj("c", req("r", 13), constraints=constraint),
        claim_obj("c", *[req(f"r{i}") for i in range(13)], constraints=constraint),
    ):
        outcome = allocate(inventory([twelve]), claim)
        assert not outcome.success
        assert outcome.steps < 200  # exhaustive search: every subset of 12 devices


def test_identical_devices_are_tried_once_per_slot() -> None:
    # 12 identical devices, 4 requests of 3 plus one more device than exists: without pruning the
    # search would try every combination.
    same = slice_obj("s", [dev(f"d{i:02d}", attrs={"root": "r0"}) for i in range(12)])
    claim = claim_obj("c", *[req(f"r{i}", 3) for i in range(4)], req("extra"))
    pruned = allocate(inventory([same]), claim)
    assert not pruned.success and pruned.steps < 100


def test_pruning_never_changes_the_answer() -> None:
    devices = [dev(f"d{i}", attrs={"root": f"r{i % 3}", "numa": i % 2}) for i in range(12)]
    inv = inventory([slice_obj("s", devices)])
    claim = claim_obj(
        "c",
        req("a", 2),
        req("b", 2),
        constraints=[
            {"matchAttribute": f"{DRIVER}/root"},
            {"distinctAttribute": f"{DRIVER}/numa", "requests": ["b"]},
        ],
    )
    with_pruning = allocate(inv, claim)
    without = allocate(inv, claim, prune=False)
    assert with_pruning.success
    assert picked(with_pruning) == picked(without)
    assert with_pruning.steps <= without.steps


def test_claims_on_other_nodes_are_not_visible() -> None:
    outcome = allocate(inventory([FOUR]), claim_obj("c", req("a")), node=Node.named("node-2"))
    assert not outcome.success
    assert outcome.reasons[0].considered == 0


def test_many_claims_and_devices_do_not_exhaust_the_stack() -> None:
    many = slice_obj("s", [dev(f"d{i:03d}") for i in range(128)])
    claims = [claim_obj(f"c{i}", req("r", 32)) for i in range(4)]
    outcome = allocate(inventory([many]), *claims)
    assert outcome.success
    assert picked(outcome, 3)[-1] == "r=d127"


def test_device_holding_shares_is_not_handed_out_exclusively() -> None:
    # The slice no longer allows multiple allocations, but a claim still holds a share.
    from allocator import ResourceClaim

    raw = claim_obj("other", req("r"))
    share = {"request": "r", "driver": DRIVER, "pool": "node-1", "device": "nic", "shareID": "x"}
    raw["status"] = {"allocation": {"devices": {"results": [{**share, "consumedCapacity": {"bw": "1G"}}]}}}
    state = AllocatedState()
    state.add_claim(ResourceClaim.from_api(raw))
    inv = inventory([slice_obj("s", [dev("nic", capacity={"bw": {"value": "10G"}})])])
    outcome = allocate(inv, claim_obj("c", req("a")), state=state)
    assert not outcome.success
    assert outcome.reasons[0].in_use_by == {"default/other": 1}


def test_match_attribute_groups_bound_the_search() -> None:
    # 24 distinguishable devices in two PCIe roots of 12; 13 devices on one root cannot exist.
    # Plain depth-first search tries every subset of a root (minutes); the group bound stops it.
    devices = [dev(f"d{i:02d}", attrs={"index": i, "root": f"r{i // 12}"}) for i in range(24)]
    inv = inventory([slice_obj("s", devices)])
    constraint = [{"matchAttribute": f"{DRIVER}/root"}]
    for claim in (
        claim_obj("c", req("r", 13), constraints=constraint),
        claim_obj("c", *[req(f"r{i}") for i in range(13)], constraints=constraint),
    ):
        outcome = allocate(inv, claim)
        assert not outcome.success
        assert outcome.steps < 250


def test_distinct_attribute_values_bound_the_search() -> None:
    devices = [dev(f"d{i:02d}", attrs={"index": i, "numa": i % 3}) for i in range(15)]
    claim = claim_obj(
        "c", *[req(f"r{i}") for i in range(4)], constraints=[{"distinctAttribute": f"{DRIVER}/numa"}]
    )
    outcome = allocate(inventory([slice_obj("s", devices)]), claim)
    assert not outcome.success and outcome.steps < 120  # 1831 without pruning


def test_a_claim_impossible_on_its_own_stops_the_whole_search() -> None:
    # The first claim has C(24, 6) choices; the second can never be satisfied, whatever it leaves.
    devices = [dev(f"d{i:02d}", attrs={"index": i, "root": f"r{i // 12}"}) for i in range(24)]
    first = claim_obj("a", req("r", 6))
    second = claim_obj("b", req("r", 13), constraints=[{"matchAttribute": f"{DRIVER}/root"}])
    outcome = allocate(inventory([slice_obj("s", devices)]), first, second)
    assert not outcome.success and outcome.steps < 100
    # Nothing chosen by the abandoned attempt leaks into the reasons.
    assert [r.rejected for r in outcome.reasons] == [{"constraint": 12}]


def test_selection_results_follow_class_updates() -> None:
    from allocator import DeviceClass

    inv = inventory([FOUR])
    assert picked(allocate(inv, claim_obj("c", req("a")))) == ["a=gpu-0"]
    inv.upsert_class(DeviceClass.from_api(class_obj("gpu", f'device.attributes["{DRIVER}"].index == 3')))
    assert picked(allocate(inv, claim_obj("c", req("a")))) == ["a=gpu-3"]
    selective = req("a", selectors=[{"cel": {"expression": f'device.attributes["{DRIVER}"].index > 5'}}])
    assert not allocate(inv, claim_obj("c", selective)).success
