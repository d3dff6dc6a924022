"""Allocated state: exclusive and shared use, admin access, in-flight overlays."""

from __future__ import annotations

from allocator_objects import DRIVER, allocated_claim, claim_obj, req

from allocator import AllocatedState, ResourceClaim

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
    overlay = state.with_in_flight(
        [("uid-p", pending, {"devices": {"results": [result, {**shared, "consumedCapacity": {"bw": "1G"}}]}})]
    )
    assert overlay.owner_of(*DEVICE) == "default/p"
    assert str(overlay.capacity[(DRIVER, "pool", "nic")]["bw"]) == "3G"
    assert state.owner_of(*DEVICE) is None
    assert str(state.capacity[(DRIVER, "pool", "nic")]["bw"]) == "2G"
    assert state.with_in_flight([]) is state
