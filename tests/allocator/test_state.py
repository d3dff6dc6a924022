"""Allocated state: exclusive and shared use, admin access, in-flight overlays."""

from __future__ import annotations

from allocator_objects import DRIVER, allocated_claim, claim_obj, req

from allocator import AllocatedState, ResourceClaim, allocation_use

DEVICE = (DRIVER, "pool", "gpu-0")


def shared_claim(name: str, amount: str) -> ResourceClaim:
    raw = claim_obj(name, req("r"))
    result = {"request": "r", "driver": DRIVER, "pool": "pool", "device": "nic", "shareID": f"id-{name}"}
    raw["status"] = {"allocation": {"devices": {"results": [{**result, "consumedCapacity": {"bw": amount}}]}}}
    return ResourceClaim.from_api(raw)


def test_add_and_remove_claims() -> None:
    state = AllocatedState()
    state.add_claim(allocated_claim("a", DEVICE))
    assert state.owner_of(*DEVICE) == "default/a" and state.is_allocated(DEVICE)
    state.remove_claim("uid-a")
    assert state.owner_of(*DEVICE) is None and not state.is_allocated(DEVICE)


def test_admin_results_are_not_in_use() -> None:
    state = AllocatedState()
    state.add_claim(allocated_claim("a", DEVICE, admin=True))
    assert not state.is_allocated(DEVICE)


def test_deallocated_claim_update_drops_its_devices() -> None:
    state = AllocatedState()
    state.add_claim(allocated_claim("a", DEVICE))
    state.add_claim(ResourceClaim.from_api(claim_obj("a", req("r"))))  # same uid, allocation removed
    assert not state.is_allocated(DEVICE)


def test_shared_capacity_aggregates() -> None:
    state = AllocatedState()
    state.add_claim(shared_claim("a", "2G"))
    state.add_claim(shared_claim("b", "3G"))
    nic = (DRIVER, "pool", "nic")
    assert str(state.capacity[nic]["bw"]) == "5G"
    assert nic not in state.devices and state.is_allocated(nic)
    assert state.owner_of(*nic) == "default/a"
    state.remove_claim("uid-a")
    assert str(state.capacity[nic]["bw"]) == "3G"


def test_in_flight_overlay_leaves_the_base_untouched() -> None:
    state = AllocatedState()
    state.add_claim(shared_claim("a", "2G"))
    pending = ResourceClaim.from_api(claim_obj("p", req("r")))
    result = {"request": "r", "driver": DRIVER, "pool": "pool", "device": "gpu-0"}
    shared = {"request": "r", "driver": DRIVER, "pool": "pool", "device": "nic", "shareID": "s"}
    results = [result, {**shared, "consumedCapacity": {"bw": "1G"}}]
    in_flight = allocation_use(pending.key, {"devices": {"results": results}})
    overlay = state.with_in_flight([("uid-p", in_flight)])
    assert overlay.owner_of(*DEVICE) == "default/p"
    assert str(overlay.capacity[(DRIVER, "pool", "nic")]["bw"]) == "3G"
    assert state.owner_of(*DEVICE) is None
    assert str(state.capacity[(DRIVER, "pool", "nic")]["bw"]) == "2G"
    assert state.with_in_flight([]) is state


def test_in_flight_view_reads_through_to_later_changes_of_the_state() -> None:
    state = AllocatedState()
    other = (DRIVER, "pool", "gpu-1")
    state.add_claim(allocated_claim("a", other))
    pending = ResourceClaim.from_api(claim_obj("p", req("r")))
    result = {"request": "r", "driver": DRIVER, "pool": "pool", "device": "gpu-0"}
    view = state.with_in_flight([("uid-p", allocation_use(pending.key, {"devices": {"results": [result]}}))])
    assert view.owner_of(*DEVICE) == "default/p" and view.owner_of(*other) == "default/a"
    state.remove_claim("uid-a")   # freed after the view was made: free in the view too
    state.add_claim(allocated_claim("b", (DRIVER, "pool", "gpu-2")))
    assert not view.is_allocated(other) and view.owner_of(DRIVER, "pool", "gpu-2") == "default/b"
    assert view.is_allocated(DEVICE) and not state.is_allocated(DEVICE), "the view never writes through"


def test_view_owner_of_a_shared_device_survives_the_sharer_leaving_the_state() -> None:
    state = AllocatedState()
    state.add_claim(shared_claim("a", "2G"))
    nic = (DRIVER, "pool", "nic")
    pending = ResourceClaim.from_api(claim_obj("p", req("r")))
    shared = {"request": "r", "driver": DRIVER, "pool": "pool", "device": "nic", "shareID": "s",
              "consumedCapacity": {"bw": "1G"}}
    view = state.with_in_flight([("uid-p", allocation_use(pending.key, {"devices": {"results": [shared]}}))])
    state.remove_claim("uid-a")   # the view's layer still lists uid-a among the sharers of the nic
    assert view.owner_of(*nic) in ("default/p", None)


def test_a_view_of_a_view_keeps_every_layer() -> None:
    state = AllocatedState()
    state.add_claim(allocated_claim("a", DEVICE))
    first = ResourceClaim.from_api(claim_obj("p", req("r")))
    gpu1 = {"request": "r", "driver": DRIVER, "pool": "pool", "device": "gpu-1"}
    view = state.with_in_flight([("uid-p", allocation_use(first.key, {"devices": {"results": [gpu1]}}))])
    gpu2 = {"request": "r", "driver": DRIVER, "pool": "pool", "device": "gpu-2"}
    # uid-p is recorded in `view`, so this one is a full copy of it: nothing of `state` may be lost.
    again = view.with_in_flight([("uid-p", allocation_use(first.key, {"devices": {"results": [gpu2]}}))])
    assert again.owner_of(*DEVICE) == "default/a"
    assert again.is_allocated((DRIVER, "pool", "gpu-2")) and not again.is_allocated((DRIVER, "pool", "gpu-1"))


def test_a_view_without_some_claims_keeps_every_other_layer() -> None:
    """Preempt's question (would evicting these pods free enough?) is asked of a view with
    allocations in flight: the devices the state below it records stay in use."""
    state = AllocatedState()
    state.add_claim(allocated_claim("a", DEVICE))
    state.add_claim(allocated_claim("b", (DRIVER, "pool", "gpu-1")))
    pending = ResourceClaim.from_api(claim_obj("p", req("r")))
    gpu2 = {"request": "r", "driver": DRIVER, "pool": "pool", "device": "gpu-2"}
    view = state.with_in_flight([("uid-p", allocation_use(pending.key, {"devices": {"results": [gpu2]}}))])
    freed = view.without({"uid-b"})
    assert freed.owner_of(*DEVICE) == "default/a" and freed.owner_of(DRIVER, "pool", "gpu-2") == "default/p"
    assert not freed.is_allocated((DRIVER, "pool", "gpu-1"))
    assert view.owner_of(DRIVER, "pool", "gpu-1") == "default/b", "the view itself is unchanged"


def test_changes_count_what_is_recorded_and_removed() -> None:
    state = AllocatedState()
    state.add_claim(allocated_claim("a", DEVICE))
    recorded = state.changes
    state.remove_claim("uid-unknown")
    assert state.changes == recorded, "nothing removed, nothing changed"
    state.remove_claim("uid-a")
    assert state.changes > recorded


def test_in_flight_allocation_replacing_a_recorded_one_hides_the_recorded_devices() -> None:
    state = AllocatedState()
    state.add_claim(allocated_claim("p", DEVICE))   # recorded under uid-p
    replacement = {"request": "r", "driver": DRIVER, "pool": "pool", "device": "gpu-1"}
    claim = ResourceClaim.from_api(claim_obj("p", req("r")))
    view = state.with_in_flight(
        [("uid-p", allocation_use(claim.key, {"devices": {"results": [replacement]}}))])
    assert not view.is_allocated(DEVICE) and view.owner_of(DRIVER, "pool", "gpu-1") == "default/p"
    assert state.owner_of(*DEVICE) == "default/p" and not state.is_allocated((DRIVER, "pool", "gpu-1"))


def test_raw_allocation_counts_every_readable_device_of_a_claim_we_reject() -> None:
    state = AllocatedState()
    results = [
        {"request": "r", "driver": DRIVER, "pool": "pool", "device": "gpu-0", "newField": {"x": 1}},
        {"request": "r", "driver": DRIVER, "pool": "pool", "device": "gpu-1", "adminAccess": True},
        {"request": "r", "driver": DRIVER, "pool": "pool", "device": "nic", "shareID": "s",
         "consumedCapacity": {"bw": "2G"}},
    ]
    reading = state.add_raw_allocation("uid-x", "default/x", {"devices": {"results": results}, "odd": 1})
    assert reading.devices == 2 and reading.problems == ()
    assert state.owner_of(*DEVICE) == "default/x"
    assert not state.is_allocated((DRIVER, "pool", "gpu-1")), "admin access never blocks a device"
    assert str(state.capacity[(DRIVER, "pool", "nic")]["bw"]) == "2G"
    state.remove_claim("uid-x")
    assert not state.is_allocated(DEVICE) and not state.is_allocated((DRIVER, "pool", "nic"))


def test_raw_allocation_skips_and_names_what_it_cannot_read() -> None:
    state = AllocatedState()
    results = [
        {"request": "r", "driver": DRIVER, "device": "gpu-7"},              # no pool: unknown device
        "not an object",
        {"request": "r", "driver": DRIVER, "pool": "pool", "device": "gpu-0"},
        {"request": "r", "driver": DRIVER, "pool": "pool", "device": "nic", "shareID": "s",
         "consumedCapacity": {"bw": "lots", "slots": "1"}},
    ]
    reading = state.add_raw_allocation("uid-x", "default/x", {"devices": {"results": results}})
    assert reading.devices == 2
    assert len(reading.problems) == 3
    assert reading.problems[0].startswith("status.allocation.devices.results[0]: pool missing")
    assert reading.problems[1].startswith("status.allocation.devices.results[1]: must be an object")
    assert reading.problems[2].startswith("status.allocation.devices.results[3].consumedCapacity[bw]:")
    assert state.is_allocated(DEVICE)
    nic = (DRIVER, "pool", "nic")
    assert state.is_allocated(nic) and set(state.capacity[nic]) == {"slots"}
    # Nothing readable at all: nothing recorded, and it says why.
    for allocation in ("garbage", {"devices": {"results": "nope"}}):
        reading = state.add_raw_allocation("uid-x", "default/x", allocation)
        assert reading.devices == 0 and len(reading.problems) == 1
        assert not state.is_allocated(DEVICE), "a new reading replaces the old one"


def test_raw_allocation_of_a_claim_later_seen_valid_is_replaced() -> None:
    state = AllocatedState()
    raw = {"devices": {"results": [{"request": "r", "driver": DRIVER, "pool": "pool", "device": "gpu-1"}]}}
    state.add_raw_allocation("uid-a", "default/a", raw)
    state.add_claim(allocated_claim("a", DEVICE))
    assert state.is_allocated(DEVICE) and not state.is_allocated((DRIVER, "pool", "gpu-1"))


def test_allocated_flags_agree_with_is_allocated_through_every_layer() -> None:
    state = AllocatedState()
    state.add_claim(allocated_claim("a", DEVICE))
    state.add_claim(shared_claim("b", "1G"))
    gpu1, gpu2, nic, free = ((DRIVER, "pool", name) for name in ("gpu-1", "gpu-2", "nic", "gpu-9"))
    first = ResourceClaim.from_api(claim_obj("p", req("r")))
    second = ResourceClaim.from_api(claim_obj("q", req("r")))
    result = {"request": "r", "driver": DRIVER, "pool": "pool"}
    view = state.with_in_flight(
        [("uid-p", allocation_use(first.key, {"devices": {"results": [{**result, "device": "gpu-1"}]}}))])
    layered = view.with_in_flight(
        [("uid-q", allocation_use(second.key, {"devices": {"results": [{**result, "device": "gpu-2"}]}}))])
    keys = (free, DEVICE, gpu1, gpu2, nic)
    for current in (state, view, layered):
        assert current.allocated_flags(keys) == tuple(current.is_allocated(key) for key in keys)
    assert layered.allocated_flags(keys) == (False, True, True, True, True)
    assert state.allocated_flags((free, gpu1)) == (False, False) and state.allocated_flags(()) == ()


def test_allocated_flags_of_a_state_without_shared_allocations() -> None:
    state = AllocatedState()
    assert state.allocated_flags((DEVICE,)) == (False,)
    state.add_claim(allocated_claim("a", DEVICE))
    free = (DRIVER, "pool", "gpu-9")
    assert state.allocated_flags((free, DEVICE, free)) == (False, True, False)


def test_a_view_made_in_bulk_counts_what_recording_each_claim_would() -> None:
    """with_in_flight fills a view's layers in bulk when its claims are distinct and new; the view must
    answer as a copy of the state with each in-flight claim recorded one after the other."""
    state = AllocatedState()
    state.add_claim(allocated_claim("a", DEVICE))
    state.add_claim(shared_claim("s", "1G"))
    result = {"request": "r", "driver": DRIVER, "pool": "pool"}
    nic = {**result, "device": "nic", "consumedCapacity": {"bw": "2G"}}
    allocations = {
        "uid-p": {"devices": {"results": [{**result, "device": "gpu-1"}, {**result, "device": "gpu-2"}]}},
        "uid-q": {"devices": {"results": [{**nic, "shareID": "q"}]}},
        "uid-r": {"devices": {"results": [{**result, "device": "gpu-3"}, {**nic, "shareID": "r"}]}},
        "uid-t": {"devices": {"results": [{**result, "device": "gpu-4", "adminAccess": True}]}},
    }
    items = [(uid, allocation_use(f"default/{uid[4:]}", allocation))
             for uid, allocation in allocations.items()]
    view = state.with_in_flight(items)
    expected = state.copy()
    for uid, use in items:
        expected._add(uid, use)
    keys = tuple((DRIVER, "pool", name) for name in ("gpu-0", "gpu-1", "gpu-2", "gpu-3", "gpu-4", "nic"))
    flags = view.allocated_flags(keys)
    assert flags == expected.allocated_flags(keys) == (True, True, True, True, False, True)
    assert [view.owner_of(*key) for key in keys] == [expected.owner_of(*key) for key in keys]
    nic_use = view.capacity[(DRIVER, "pool", "nic")]
    assert {name: str(value) for name, value in nic_use.items()} == {"bw": "5G"}
    assert state.changes != view.changes and not state.is_allocated((DRIVER, "pool", "gpu-1"))
