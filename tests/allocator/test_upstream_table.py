"""Runs every ported case of upstream's allocator table against our Allocator.

Upstream runs each case with exactly the listed features on (everything else off); we do the same
through FeatureGates. Upstream's claims have no namespace; ours live in "default", so "default/"
is stripped from error texts before matching upstream's wording ("claim claim-0, request ...").
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from upstream_cases import MODULES, UPSTREAM_CASE_COUNT, all_cases
from upstream_cases.builders import (
    CLASS_A,
    DRIVER_A,
    NODE_1,
    SHARE_ID,
    Case,
    Obj,
    claim,
    device_class,
    devices,
    node,
    request,
    resource_slice,
)

from allocator import (
    AllocatedState,
    AllocationError,
    AllocationTimeout,
    Allocator,
    DeviceClass,
    FeatureGates,
    InvalidObjectError,
    Inventory,
    Node,
    ResourceClaim,
    ResourceSlice,
)

CASES = all_cases()

# Upstream feature names -> the gates that switch them on.
GATES_FOR_FEATURE: dict[str, tuple[str, ...]] = {
    "AdminAccess": ("DRAAdminAccess",),
    "PrioritizedList": ("DRAPrioritizedList",),
    "PartitionableDevices": ("DRAPartitionableDevices",),
    "DeviceTaints": ("DRADeviceTaints",),
    "ConsumableCapacity": ("DRAConsumableCapacity",),
    "DeviceBindingAndStatus": ("DRADeviceBindingConditions", "DRAResourceClaimDeviceStatus"),
    "ListTypeAttributes": ("DRAListTypeAttributes",),
    "FractionalCapacityRange": ("DRAFractionalCapacityRange",),
    "DerivedAttributes": ("DRADerivedAttributes",),
    "OptionalNodeOperations": ("DRAOptionalNodeOperations",),
    "CompatibilityGroups": ("DRADeviceCompatibilityGroups",),
}


def gates_for(features: frozenset[str]) -> FeatureGates:
    values = {gate: False for gates in GATES_FOR_FEATURE.values() for gate in gates}
    for feature in features:
        for gate in GATES_FOR_FEATURE[feature]:
            values[gate] = True
    return FeatureGates(values)


def allocated_claim(index: int, results: list[Obj]) -> Obj:
    """A claim that already holds the given devices (how allocated state reaches the allocator)."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": f"allocated-{index}", "namespace": "other", "uid": f"uid-allocated-{index}"},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "any"}}]}},
        "status": {"allocation": {"devices": {"results": results}}},
    }


def build_state(case: Case) -> AllocatedState:
    state = AllocatedState()
    raw_claims = [
        allocated_claim(i, [{"request": "r", "driver": d, "pool": p, "device": n}])
        for i, (d, p, n) in enumerate(case.allocated)
    ]
    raw_claims.extend(case.allocated_claims)
    for raw in raw_claims:
        state.add_claim(ResourceClaim.from_api(raw))
    return state


def with_uids(claims: list[Obj]) -> list[Obj]:
    out = []
    for index, raw in enumerate(claims):
        raw = copy.deepcopy(raw)
        raw["metadata"].setdefault("uid", f"uid-claim-{index}")
        out.append(raw)
    return out


def run(case: Case, deadline_s: float = 10.0, **options: Any) -> Any:
    """Build everything from raw dicts and allocate; returns the outcome (exceptions propagate)."""
    inventory = Inventory()
    for raw in case.classes:
        inventory.upsert_class(DeviceClass.from_api(raw))
    for raw in case.slices:
        inventory.upsert_slice(ResourceSlice.from_api(raw))
    claims = [ResourceClaim.from_api(raw) for raw in with_uids(case.claims)]
    allocator = Allocator(
        inventory, build_state(case), gates_for(case.features), deadline_s=deadline_s, **options
    )
    return allocator.allocate(Node.from_api(case.node or node(NODE_1)), claims)


def _prune(value: Any) -> Any:
    """Drop empty fields, as the API server's JSON (omitempty) does."""
    if isinstance(value, dict):
        pruned = {k: _prune(v) for k, v in value.items()}
        return {k: v for k, v in pruned.items() if v not in (None, [], {})}
    if isinstance(value, list):
        return [_prune(v) for v in value]
    return value


def _sorted_requirements(requirements: list[Obj]) -> list[Obj]:
    normalized = [{**r, "values": sorted(r.get("values", []))} for r in requirements]
    return sorted(normalized, key=lambda r: orjson.dumps(r, option=orjson.OPT_SORT_KEYS))


def normalize(allocation: Obj) -> Obj:
    """Share IDs are random, and the order inside a node selector is irrelevant (as upstream)."""
    allocation = _prune(copy.deepcopy(allocation))
    for res in allocation.get("devices", {}).get("results", []):
        if "shareID" in res:
            res["shareID"] = SHARE_ID
        if "consumedCapacity" in res:
            res["consumedCapacity"] = {k: _canonical_quantity(v) for k, v in res["consumedCapacity"].items()}
    for term in allocation.get("nodeSelector", {}).get("nodeSelectorTerms", []):
        for key in ("matchExpressions", "matchFields"):
            if key in term:
                term[key] = _sorted_requirements(term[key])
    return allocation


def _canonical_quantity(text: str) -> str:
    from allocator.quantity import Quantity

    return str(Quantity.parse(text))


def _key(allocation: Obj) -> bytes:
    return orjson.dumps(allocation, option=orjson.OPT_SORT_KEYS)


def _strip_namespace(message: str) -> str:
    return message.replace("default/", "")


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_upstream_case(case: Case) -> None:
    before = copy.deepcopy(case)
    try:
        check_case(case)
    finally:
        # Like upstream, the allocator must not modify the objects it was given.
        assert case == before, "the allocator modified its input objects"


def check_case(case: Case) -> None:
    if case.error or case.error_field:
        try:
            outcome = run(case)
        except InvalidObjectError as exc:
            assert case.error_field and case.error_field in str(exc), f"unexpected invalid object: {exc}"
            return
        except AllocationError as exc:
            assert case.error and case.error in _strip_namespace(str(exc)), f"wrong error: {exc}"
            return
        pytest.fail(f"expected error {case.error!r}, got success={outcome.success}: {outcome.allocations}")

    if case.node_error:
        try:
            outcome = run(case)
        except AllocationError as exc:
            assert case.node_error in str(exc)
            return
        assert not outcome.success, f"expected no allocation, got {outcome.allocations}"
        return

    outcome = run(case)
    if case.expect is None:
        assert not outcome.success, f"expected 'does not fit', got {outcome.allocations}"
        assert outcome.reasons, "an unschedulable outcome must say why"
    else:
        assert outcome.success, f"expected success, got: {outcome.summary()}"
        got = sorted((normalize(a) for a in outcome.allocations), key=_key)
        want = sorted((normalize(a) for a in case.expect), key=_key)
        assert got == want
    if case.steps is not None:
        # Upstream counts allocateOne invocations; our pruning may only make the search shorter,
        # and without pruning the search must take exactly upstream's (combination) steps.
        assert 0 < outcome.steps <= case.steps, f"{outcome.steps} steps, upstream needs {case.steps}"
        assert run(case, prune=False).steps == case.steps


def test_case_names_are_unique() -> None:
    names = [c.name for c in CASES]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)


def test_every_upstream_case_is_ported() -> None:
    assert sum(1 for c in CASES if not c.fixes_upstream_bug) == UPSTREAM_CASE_COUNT


def test_every_topic_module_is_listed() -> None:
    on_disk = {p.stem for p in (Path(__file__).parent / "upstream_cases").glob("*.py")}
    assert on_disk - {"__init__", "builders"} == set(MODULES)


# Upstream's "interrupt" test: request 6 devices from 5 (no solution). Without a deadline the
# answer is "does not fit"; with one that has already passed, the search stops with an error.
INTERRUPT = Case(
    "interrupt",
    claims=[claim("claim-0", request("req-0", CLASS_A, 6))],
    classes=[device_class()],
    slices=[resource_slice("slice-1", NODE_1, "pool-1", DRIVER_A, *devices(5, 1))],
)


def test_interrupt_off() -> None:
    assert not run(INTERRUPT).success


@pytest.mark.parametrize("deadline_s", [0.0, 1e-9])
def test_interrupt_deadline_already_passed(deadline_s: float) -> None:
    with pytest.raises(AllocationTimeout):
        run(INTERRUPT, deadline_s=deadline_s)
