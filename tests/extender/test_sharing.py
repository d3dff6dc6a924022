"""The cache stores equal parts of its objects once (extender.sharing), without changing what they say."""

from __future__ import annotations

import copy

import dra_objects as o
import orjson

from allocator import FeatureGates
from extender.cache import ClusterCache
from extender.sharing import ObjectSharer


def json_of(raw: dict) -> dict:
    return orjson.loads(orjson.dumps(raw))


def test_equal_device_values_of_different_slices_are_one_object_and_the_slices_say_the_same() -> None:
    cache = ClusterCache(FeatureGates())
    first, second = o.gpu_slice("node-1", 2), o.gpu_slice("node-2", 2)
    expected = [json_of(first), json_of(second)]
    cache.apply("ResourceSlice", "ADDED", first)
    cache.apply("ResourceSlice", "ADDED", second)
    stored = [cache.raw("ResourceSlice", "node-1-gpu"), cache.raw("ResourceSlice", "node-2-gpu")]
    assert [json_of(raw) for raw in stored] == expected   # type: ignore[arg-type]
    one, two = (raw["spec"]["devices"][0] for raw in stored)   # type: ignore[index]
    assert one["attributes"]["model"] is two["attributes"]["model"]
    assert one["capacity"] is two["capacity"]
    assert one["name"] is two["name"] and stored[0]["apiVersion"] is stored[1]["apiVersion"]   # type: ignore[index]
    assert cache.stats()["objects"]["ResourceSlice"] == 2 and not cache.stats()["invalid"]


def test_claims_of_one_shape_share_their_spec_and_allocations_keep_their_content() -> None:
    cache = ClusterCache(FeatureGates())
    claims = [o.claim("a"), o.claim("b")]
    o.allocate(claims[0], "node-1", ["gpu-0"])
    expected = [json_of(raw) for raw in claims]
    for raw in claims:
        cache.apply("ResourceClaim", "ADDED", raw)
    stored = [cache.raw("ResourceClaim", "default/a"), cache.raw("ResourceClaim", "default/b")]
    assert [json_of(raw) for raw in stored] == expected   # type: ignore[arg-type]
    assert stored[0]["spec"] is stored[1]["spec"]   # type: ignore[index]
    assert cache.stats()["allocatedClaims"] == 1 and not cache.stats()["invalid"]


def test_values_equal_in_python_but_not_in_json_stay_apart() -> None:
    sharer = ObjectSharer()
    values = [{"int": 1}, {"bool": True}, {"int": 1.0}, {"string": "1"}]
    shared = [sharer.value(copy.deepcopy(value)) for value in values]
    assert [orjson.dumps(value) for value in shared] == [orjson.dumps(value) for value in values]
    assert sharer.value({"int": 1}) is shared[0]


def test_the_tables_are_bounded() -> None:
    sharer = ObjectSharer(max_entries=10)
    for index in range(100):
        sharer.string(f"uuid-{index}")
        sharer.value({"string": f"uuid-{index}"})
    assert len(sharer._strings) <= 10 and len(sharer._values) <= 10
    kept = sharer.string("uuid-99")
    assert sharer.string("".join(["uuid-", "99"])) is kept


def test_values_json_cannot_encode_are_kept_as_they_are() -> None:
    odd = {"int": 2**70}
    assert ObjectSharer().value(odd) is odd
