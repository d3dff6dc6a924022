"""Object model: parsing, defaults, and errors that name kind, object and field."""

from __future__ import annotations

import sys

import pytest
from allocator_objects import claim_obj, class_obj, dev, first_available, req, slice_obj

from allocator import (
    DeviceClass,
    DeviceTaintRule,
    FeatureGates,
    InvalidObjectError,
    Node,
    ResourceClaim,
    ResourceSlice,
    parse_object,
)


def test_parse_object_dispatches_by_kind_and_ignores_others() -> None:
    assert isinstance(parse_object(class_obj()), DeviceClass)
    assert isinstance(parse_object(slice_obj("s", [dev("d")])), ResourceSlice)
    assert isinstance(parse_object(claim_obj("c", req("r"))), ResourceClaim)
    assert isinstance(parse_object({"kind": "Node", "metadata": {"name": "n"}}), Node)
    assert parse_object({"kind": "Pod", "metadata": {"name": "p"}}) is None


def test_slice_fields_are_parsed_once() -> None:
    raw = slice_obj(
        "s",
        [dev("d", attrs={"index": 3, "model": "A100", "fast": True}, capacity={"memory": {"value": "80Gi"}})],
        generation=4,
    )
    parsed = ResourceSlice.from_api(raw)
    assert (parsed.name, parsed.driver, parsed.pool, parsed.pool_generation) == (
        "s",
        "gpu.example.com",
        "node-1",
        4,
    )
    device = parsed.devices[0]
    assert device.attributes["index"].value == 3 and device.attributes["index"].type == "int"
    assert device.attributes["fast"].value is True
    assert str(device.capacity["memory"].value) == "80Gi"
    # Neither keeps the dict it was parsed from (the cache stores slices packed): only what CEL reads.
    assert not hasattr(parsed, "raw") and not hasattr(device, "raw")
    assert device._content.cel_input == (raw["spec"]["devices"][0]["attributes"],
                                         raw["spec"]["devices"][0]["capacity"], None)


def test_devices_of_one_model_keep_one_parsed_content_and_only_their_name_each() -> None:
    model = {"attrs": {"model": "A100"}, "capacity": {"memory": {"value": "80Gi"}},
             "taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}], "allowMultipleAllocations": True}
    first = ResourceSlice.from_api(slice_obj("s1", [dev("gpu-0", **model)])).devices[0]
    second = ResourceSlice.from_api(slice_obj("s2", [dev("gpu-1", **model)], node="node-2")).devices[0]
    other = ResourceSlice.from_api(slice_obj("s3", [dev("gpu-2", attrs={"model": "H100"})])).devices[0]
    assert (first.name, second.name) == ("gpu-0", "gpu-1")
    for field in ("attributes", "capacity", "taints", "allow_multiple_allocations", "consumes_counters",
                  "node_allocatable", "binding_conditions", "signature"):
        assert getattr(first, field) is getattr(second, field), field
    assert first.allow_multiple_allocations is True and other.allow_multiple_allocations is False
    assert first.taints[0]["effect"] == "NoSchedule" and other.taints == ()
    assert other.attributes["model"].value == "H100" and first.signature != other.signature
    # 160,000 devices at 20,000 nodes: each keeps five pointers of its own (72 bytes on CPython 3.11 with
    # its headers), not twenty (184).
    assert sys.getsizeof(first) <= 80


def test_a_claim_takes_the_parsed_spec_of_another_only_for_the_very_same_spec_object() -> None:
    raw = claim_obj("c", req("r"))
    first = ResourceClaim.from_api(raw)
    later = {**raw, "metadata": {**raw["metadata"], "resourceVersion": "9"}, "status": {"reservedFor": []}}
    again = ResourceClaim.from_api(later, spec_of=first)
    assert again.requests is first.requests and again.constraints is first.constraints
    assert again.config is first.config and again.raw is later
    equal_copy = {**raw, "spec": {"devices": {"requests": [req("r")]}}}
    assert equal_copy["spec"] == raw["spec"]
    assert ResourceClaim.from_api(equal_copy, spec_of=first).requests is not first.requests
    with pytest.raises(InvalidObjectError, match="count"):
        ResourceClaim.from_api(claim_obj("c", req("r", 0)), spec_of=first)


def test_claim_defaults() -> None:
    claim = ResourceClaim.from_api(claim_obj("c", {"name": "r", "exactly": {"deviceClassName": "gpu"}}))
    (request,) = claim.requests
    assert request.exactly is not None
    assert (request.exactly.allocation_mode, request.exactly.count) == ("ExactCount", 1)
    assert (claim.key, claim.namespace, claim.allocation, claim.deleting) == (
        "default/c",
        "default",
        None,
        False,
    )
    # Not reserved: the one shared empty tuple, not a list per claim.
    other = ResourceClaim.from_api(claim_obj("d", req("r")))
    assert claim.reserved_uids == () and claim.reserved_uids is other.reserved_uids
    subs = ResourceClaim.from_api(claim_obj("c", first_available("r", req("a"), req("b", 2)))).requests[0]
    assert [s.name for s in subs.first_available] == ["a", "b"]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            slice_obj("s", [dev("d", capacity={"memory": {"value": "lots"}})]),
            "spec.devices[0].capacity[memory].value",
        ),
        (slice_obj("s", [dev("d", attributes={"x": {"int": "1"}})]), "spec.devices[0].attributes[x].int"),
        (slice_obj("s", [dev("d", attributes={"x": {}})]), "spec.devices[0].attributes[x]"),
        (
            slice_obj("s", [dev("d", attributes={"v": {"version": "1.2"}})]),
            "spec.devices[0].attributes[v].version",
        ),
        (slice_obj("s", [{"attributes": {}}]), "spec.devices[0].name"),
        (slice_obj("s", [dev("d")], count=0), "spec.pool.resourceSliceCount"),
        ({"kind": "ResourceSlice", "metadata": {"name": "s"}, "spec": {"pool": {}}}, "spec.driver"),
        (claim_obj("c", {"name": "r"}), "spec.devices.requests[0]: exactly one of"),
        (claim_obj("c", req("r", count=0)), "spec.devices.requests[0].exactly.count"),
        ({"kind": "Node", "metadata": {}}, "metadata.name"),
        (
            {"kind": "DeviceTaintRule", "metadata": {"name": "t"}, "spec": {"taint": {"key": "k"}}},
            "spec.taint.effect",
        ),
    ],
)
def test_errors_name_kind_object_and_field(raw: dict, message: str) -> None:
    with pytest.raises(InvalidObjectError) as info:
        parse_object(raw)
    text = str(info.value)
    assert message in text
    assert text.startswith(raw["kind"])


def test_claim_error_names_namespace_and_name() -> None:
    with pytest.raises(
        InvalidObjectError, match=r"^ResourceClaim default/c: spec\.devices\.requests\[0\]\.exactly"
    ):
        ResourceClaim.from_api(claim_obj("c", {"name": "r", "exactly": "gpu"}))


def test_selectors_without_cel_are_left_to_the_allocator() -> None:
    claim = ResourceClaim.from_api(claim_obj("c", req("r", selectors=[{}])))
    assert claim.requests[0].exactly.selectors == (None,)


def test_taint_rule_matching() -> None:
    rule = DeviceTaintRule.from_api(
        {
            "kind": "DeviceTaintRule",
            "metadata": {"name": "t"},
            "spec": {"deviceSelector": {"pool": "p"}, "taint": {"key": "k", "effect": "NoSchedule"}},
        }
    )
    assert rule.matches("any", "p", "d") and not rule.matches("any", "q", "d")
    no_selector = DeviceTaintRule.from_api(
        {
            "kind": "DeviceTaintRule",
            "metadata": {"name": "t"},
            "spec": {"taint": {"key": "k", "effect": "NoSchedule"}},
        }
    )
    assert not no_selector.matches("any", "p", "d")


def test_feature_gates() -> None:
    gates = FeatureGates()
    assert gates.enabled("DRAPrioritizedList") and not gates.enabled("DRAListTypeAttributes")
    parsed = FeatureGates.parse("DRAListTypeAttributes=true, DRAAdminAccess=false")
    assert parsed.enabled("DRAListTypeAttributes") and not parsed.enabled("DRAAdminAccess")
    assert parsed == gates.with_overrides({"DRAListTypeAttributes": True, "DRAAdminAccess": False})
    assert hash(parsed) == hash(FeatureGates.parse("DRAAdminAccess=false,DRAListTypeAttributes=true"))
    with pytest.raises(ValueError, match="unknown feature gate 'Nope'"):
        FeatureGates.parse("Nope=true")
    with pytest.raises(ValueError, match="expected NAME=true"):
        FeatureGates.parse("DRAAdminAccess=yes")
    assert not FeatureGates({"DRAResourceClaimDeviceStatus": False}).binding_and_status


def test_node_label_keys_tell_apart_exactly_the_label_sets_that_differ() -> None:
    def key(labels: dict[str, str]) -> tuple:
        return Node.named("n", labels).labels_key

    assert key({"a": "b", "c": "d"}) == key({"c": "d", "a": "b"})
    assert len({key({}), key({"a": "b"}), key({"a": "bc"}), key({"ab": "c"}), key({"a": "b", "c": "d"}),
                key({"a": "c", "b": "d"}), key({"a": ""})}) == 7
