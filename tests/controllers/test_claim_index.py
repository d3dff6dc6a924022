"""The controllers' index of allocated claims (extender.controllers.claims.ClaimIndex)."""

from __future__ import annotations

import copy
import sys

from ctrl_objects import claim, consumer, pod

from extender.controllers.claims import ClaimIndex

P = ("gpu.example.com", "node-1")


def test_claims_read_back_as_they_were_and_their_results_without_unpacking() -> None:
    index = ClaimIndex()
    owner = pod("p")
    raw = claim("c", devices=["gpu-0", "gpu-1"], reserved_for=[consumer(owner)])
    expected = copy.deepcopy(raw)
    previous, touched = index.update("ADDED", raw)
    assert previous is None and touched == {P}
    assert index.get("default/c") == expected and index.get("default/c") is not index.get("default/c")
    [first, second] = index.results("default/c")
    assert first is raw["status"]["allocation"]["devices"]["results"][0] and second["device"] == "gpu-1"
    assert index.keys() == ["default/c"]
    assert index.devices_in_pool(P) == ["gpu-0", "gpu-1"] and index.in_pool(P) == {"default/c"}
    # The index keeps no dict of the event: the claim is one tuple, its reservedFor entries packed.
    stored = index._claims._packed["default/c"]
    assert not any(type(value) is dict and value is raw["metadata"] for value in stored)
    assert sys.getsizeof(stored) < sum(map(sys.getsizeof, (raw, raw["metadata"], raw["status"])))

    moved = claim("c", devices=["gpu-0"], pool="node-2")
    previous, touched = index.update("MODIFIED", moved)
    assert previous == expected and touched == {P, ("gpu.example.com", "node-2")}
    assert index.in_pool(P) == set() and [r["pool"] for r in index.results("default/c")] == ["node-2"]
    previous, _ = index.update("DELETED", moved)
    assert previous == moved and index.get("default/c") is None and index.results("default/c") == []
    assert index.keys() == [] and index.pools() == []


def test_a_claim_that_loses_its_allocation_leaves_the_index() -> None:
    index = ClaimIndex()
    index.update("ADDED", claim("c"))
    unallocated = claim("c")
    unallocated["status"] = {}
    previous, touched = index.update("MODIFIED", unallocated)
    assert previous is not None and touched == {P}
    assert index.get("default/c") is None and index.results("default/c") == [] and index.pools() == []
