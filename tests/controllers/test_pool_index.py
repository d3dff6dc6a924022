"""The controllers' index of ResourceSlices by pool (extender.controllers.pools)."""

from __future__ import annotations

from typing import Any

from extender.controllers.pools import PoolIndex


def slice_(name: str, pool: str, generation: int, devices: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name},
            "spec": {"driver": "gpu.example.com", "pool": {"name": pool, "generation": generation,
                                                          "resourceSliceCount": 1}, "devices": devices}}


NO_EXECUTE = {"key": "broken", "value": "yes", "effect": "NoExecute"}
NO_SCHEDULE = {"key": "busy", "effect": "NoSchedule"}
P, Q = ("gpu.example.com", "p"), ("gpu.example.com", "q")


def all_devices(index: PoolIndex) -> list[tuple[str, str, str]]:
    return [(*pool, name) for pool in index.pool_ids() for name in index.device_names(pool)]


def test_only_the_newest_generation_of_a_pool_counts() -> None:
    index = PoolIndex()
    assert index.upsert(slice_("old", "p", 1, [{"name": "a", "taints": [NO_EXECUTE]}])) == {P}
    index.upsert(slice_("new", "p", 2, [{"name": "b"}, {"name": "c", "taints": [NO_SCHEDULE, NO_EXECUTE]}]))
    assert all_devices(index) == [("gpu.example.com", "p", "b"), ("gpu.example.com", "p", "c")]
    assert index.no_execute_taints(("gpu.example.com", "p", "a")) == []
    assert index.no_execute_taints(("gpu.example.com", "p", "c")) == [NO_EXECUTE]
    assert index.no_execute_taints(("gpu.example.com", "p", "b")) == []
    assert index.no_execute_taints(("gpu.example.com", "other", "c")) == []
    assert index.remove("new") == {("gpu.example.com", "p")}
    assert index.no_execute_taints(("gpu.example.com", "p", "a")) == [NO_EXECUTE]
    assert index.remove("old") == {("gpu.example.com", "p")} and not index.has_pool(("gpu.example.com", "p"))
    assert index.remove("old") == set()


def test_the_index_keeps_what_it_answers_not_the_slice() -> None:
    # The cache stores slices packed; an index holding the dicts would keep every device's dict alive.
    index = PoolIndex()
    raw = slice_("s", "p", 1, [{"name": "a", "taints": [NO_EXECUTE]}, "not a device", {"name": 7}])
    index.upsert(raw)
    raw["spec"]["devices"].clear()
    raw["spec"]["pool"]["name"] = "elsewhere"
    assert all_devices(index) == [("gpu.example.com", "p", "a")]
    assert index.no_execute_taints(("gpu.example.com", "p", "a")) == [NO_EXECUTE]


def test_a_slice_that_moves_pools_touches_both() -> None:
    index = PoolIndex()
    index.upsert(slice_("s", "p", 1, [{"name": "a"}]))
    assert index.upsert(slice_("s", "q", 1, [{"name": "a"}])) == {P, Q}
    assert all_devices(index) == [("gpu.example.com", "q", "a")]
    assert index.upsert({"metadata": {"name": "s"}, "spec": {}}) == {("gpu.example.com", "q")}
    assert all_devices(index) == []
