"""DRADerivedAttributes: derived attributes in CEL (both engines), in the search, and their validation."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from allocator_objects import (
    DRIVER,
    allocate,
    claim_obj,
    dev,
    first_available,
    inventory,
    picked,
    req,
    slice_obj,
)

from allocator import AllocationError, cel
from allocator.derived import CLAIM_COST_LIMIT, MAX_PER_REQUEST, attribute_value, claim_problems
from allocator.semver import Semver

GATE = {"DRADerivedAttributes": True}
STORED = cel.CompileOptions(consumable_capacity=True, list_type_attributes=True)
ENGINES = ["cel-expr", "celpy"] if cel.cel_expr_available() else ["celpy"]


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> Iterator[cel.Engine]:
    yield cel.get_engine(request.param)


def device_view() -> cel.CELDevice:
    return cel.make_device(
        DRIVER,
        {"numa": {"int": 1}, "model": {"string": "a"}, "v": {"version": "1.2.3"}, "l": {"ints": [1, 2]}},
        {"memory": {"value": "1Gi"}},
    )


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        (f'device.attributes["{DRIVER}"].numa', 1),
        (f'device.attributes["{DRIVER}"].model', "a"),
        ("true", True),
        (f'device.attributes["{DRIVER}"].v', Semver.parse("1.2.3")),
        (f'device.attributes["{DRIVER}"].l', [1, 2]),
        ('["x", "y"]', ["x", "y"]),
        ("[]", []),
        ("device.driver", DRIVER),
    ],
)
def test_derived_values(engine: cel.Engine, expression: str, value: Any) -> None:
    assert engine.compile_derived(expression, STORED).value(device_view()) == value


@pytest.mark.parametrize("expression", ["1.5", '{"a": 1}', f'device.capacity["{DRIVER}"].memory', "1u"])
def test_result_types_that_cannot_be_attributes_do_not_compile(engine: cel.Engine, expression: str) -> None:
    with pytest.raises(cel.CELResultTypeError, match="must evaluate to a primitive scalar"):
        engine.compile_derived(expression, STORED)


def test_lists_only_where_allowed(engine: cel.Engine) -> None:
    engine.compile_derived("[1, 2]", STORED, lists_allowed=True)
    with pytest.raises(cel.CELResultTypeError, match=r"\(string, integer, boolean, semver\), not list"):
        engine.compile_derived("[1, 2]", STORED, lists_allowed=False)


@pytest.mark.parametrize(
    ("expression", "error"),
    [
        ("dyn(1.5)", "unsupported CEL return type: double"),
        ("dyn(1u)", "unsupported CEL return type: uint"),
        ("[dyn(1), dyn('a')]", "expected list element at index 1 to be int, got string"),
        (f'device.attributes["{DRIVER}"].missing', "no such key: missing"),
    ],
)
def test_runtime_results_that_are_no_attribute(engine: cel.Engine, expression: str, error: str) -> None:
    compiled = engine.compile_derived(expression, STORED)
    with pytest.raises(cel.CELRuntimeError, match=error.replace("(", r"\(")):
        compiled.value(device_view())


def test_attribute_values_keep_api_types() -> None:
    assert (attribute_value(3).type, attribute_value(3).value) == ("int", 3)
    assert attribute_value(Semver.parse("1.0.0")).value == "1.0.0"
    assert (attribute_value([]).type, attribute_value([]).value) == ("strings", ())
    assert (attribute_value([True]).type, attribute_value([True]).value) == ("bools", (True,))


# --- in the search ------------------------------------------------------------------------------


def numa_devices(*values: Any) -> list[dict[str, Any]]:
    return [dev(f"d{i}", attrs={"numa": v}) for i, v in enumerate(values)]


def derived_claim(expression: str, count: int = 2, name: str = "derived/key", **kw: Any) -> dict[str, Any]:
    attributes = [{"name": name, "expression": expression}]
    return claim_obj(
        "c", req("r", count, derivedAttributes=attributes), constraints=[{"matchAttribute": name}], **kw
    )


def test_without_the_gate_a_request_with_derived_attributes_is_refused() -> None:
    inv = inventory([slice_obj("s", numa_devices(1, 1))])
    with pytest.raises(
        AllocationError,
        match="claim default/c, request r: cannot handle request with derived "
        "attributes, the feature is disabled",
    ):
        allocate(inv, derived_claim('"x"'))


def test_a_derived_value_replaces_the_attribute_for_its_request() -> None:
    # numa differs on every device, numa % 2 groups d0 with d2.
    inv = inventory([slice_obj("s", numa_devices(0, 1, 2))])
    outcome = allocate(inv, derived_claim(f'device.attributes["{DRIVER}"].numa % 2'), gates=GATE)
    assert picked(outcome) == ["r=d0", "r=d2"]
    # Under the devices' own name the derived value shadows the attribute.
    shadowed = derived_claim('"same"', count=3, name=f"{DRIVER}/numa")
    assert picked(allocate(inv, shadowed, gates=GATE)) == ["r=d0", "r=d1", "r=d2"]


def test_each_subrequest_has_its_own_derived_attributes() -> None:
    inv = inventory([slice_obj("s", numa_devices(0, 1))])
    subs = [
        req(
            "a",
            2,
            derivedAttributes=[{"name": "derived/k", "expression": f'device.attributes["{DRIVER}"].numa'}],
        ),
        req("b", 2, derivedAttributes=[{"name": "derived/k", "expression": '"same"'}]),
    ]
    claim = claim_obj("c", first_available("r", *subs), constraints=[{"matchAttribute": "derived/k"}])
    assert picked(allocate(inv, claim, gates=GATE)) == ["r/b=d0", "r/b=d1"]


def test_a_failing_derived_attribute_aborts_with_upstreams_words() -> None:
    inv = inventory([slice_obj("s", [dev("d0")])])
    with pytest.raises(
        AllocationError,
        match=f"evaluate derived attribute derived/key on device {DRIVER}/node-1/d0 "
        "failed: no such key: numa",
    ):
        allocate(inv, derived_claim(f'device.attributes["{DRIVER}"].numa', count=1), gates=GATE)
    with pytest.raises(
        AllocationError, match="compile derived attribute derived/key failed: compilation failed"
    ):
        allocate(inv, derived_claim("nope(", count=1), gates=GATE)
    with pytest.raises(AllocationError, match="compile derived attribute derived/key failed: must evaluate"):
        allocate(inv, derived_claim("1.5", count=1), gates=GATE)


def test_pruning_does_not_hide_a_failing_derived_attribute() -> None:
    # Three devices wanted, two exist: upstream's search still adds the first device, and its derived
    # attribute fails; a bound that gives up early would answer "does not fit" instead.
    inv = inventory([slice_obj("s", [dev("d0"), dev("d1")])])
    with pytest.raises(AllocationError, match="evaluate derived attribute"):
        allocate(inv, derived_claim(f'device.attributes["{DRIVER}"].numa', count=3), gates=GATE)


@pytest.mark.parametrize(("lists", "count", "fits"), [(True, 1, False), (False, 1, True), (False, 2, False)])
def test_an_empty_list_matches_nothing_with_list_semantics(lists: bool, count: int, fits: bool) -> None:
    # As upstream: with list semantics an empty set matches nothing; without, only the first device.
    inv = inventory([slice_obj("s", numa_devices(0, 1))])
    gates = {**GATE, "DRAListTypeAttributes": lists}
    assert allocate(inv, derived_claim("[]", count=count), gates=gates).success is fits


def test_an_explanation_counts_devices_by_their_derived_values() -> None:
    inv = inventory([slice_obj("s", numa_devices(0, 1, 2))])
    outcome = allocate(inv, derived_claim(f'device.attributes["{DRIVER}"].numa', count=2), gates=GATE)
    assert not outcome.success
    assert "2 failing claim constraints" in outcome.reasons[0].message


# --- validation, as the API server with the gate on -------------------------------------------------


def devices_spec(
    *attributes: dict[str, Any], constraints: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    return {
        "requests": [
            {"name": "r", "exactly": {"deviceClassName": "gpu", "derivedAttributes": list(attributes)}}
        ],
        "constraints": constraints if constraints is not None else [{"matchAttribute": "derived/k"}],
    }


def problems(spec: dict[str, Any], lists: bool = False) -> list[str]:
    options = cel.CompileOptions(list_type_attributes=lists)
    return claim_problems(spec, "spec.devices", options, lists_allowed=lists)


def test_valid_derived_attributes_have_no_problems() -> None:
    assert problems(devices_spec({"name": "derived/k", "expression": '"x"'})) == []


def test_a_derived_attribute_must_be_used_by_a_constraint_on_its_request() -> None:
    spec = devices_spec(
        {"name": "derived/k", "expression": '"x"'},
        constraints=[{"matchAttribute": "derived/k", "requests": ["other"]}],
    )
    assert problems(spec) == [
        "spec.devices.requests[0].exactly.derivedAttributes[0].name: Invalid value: 'derived/k': must be "
        "referenced by at least one matchAttribute or distinctAttribute constraint targeting this request"
    ]


def test_names_expressions_and_counts_are_checked() -> None:
    found = problems(
        devices_spec(
            {"name": "no-domain", "expression": '"x"'},
            {"name": "derived/k", "expression": "1.5"},
            {"name": "derived/k", "expression": ""},
            {"name": f"{'d' * 64}/k", "expression": '"x"'},
            constraints=[{"matchAttribute": "derived/k"}, {"matchAttribute": f"{'d' * 64}/k"}],
        )
    )
    assert any("name: Invalid value: 'no-domain': must be a domain" in p for p in found)
    assert any("[1].expression: must evaluate to a primitive scalar" in p for p in found)
    assert any("[2].name: Duplicate value" in p for p in found)
    assert any("[2].expression: Required value" in p for p in found)
    assert any("[3].name: Too long: may not be more than 63 bytes" in p for p in found)
    many = [{"name": f"derived/k{i}", "expression": '"x"'} for i in range(MAX_PER_REQUEST + 1)]
    spec = devices_spec(*many, constraints=[{"matchAttribute": a["name"]} for a in many])
    assert problems(spec) == [
        f"spec.devices.requests[0].exactly.derivedAttributes: Too many: {MAX_PER_REQUEST + 1}: must have "
        f"at most {MAX_PER_REQUEST} items"
    ]


def test_lists_follow_the_list_attributes_gate() -> None:
    spec = devices_spec({"name": "derived/k", "expression": "[1]"})
    assert problems(spec, lists=True) == []
    assert "not list(int)" in problems(spec, lists=False)[0]


def test_the_claim_has_one_cost_budget_for_all_derived_attributes() -> None:
    # Three nested comprehensions over the attribute domains: about a third of the budget each.
    expensive = (
        "device.attributes.all(d, device.attributes.all(e, device.attributes.all(f, "
        "d.size() > e.size() + f.size())))"
    )
    assert CLAIM_COST_LIMIT < cel.estimate_cost(expensive, cel.CompileOptions()) * 3 < 3 * CLAIM_COST_LIMIT
    spec = devices_spec(
        *({"name": f"derived/k{i}", "expression": expensive} for i in range(3)),
        constraints=[{"matchAttribute": f"derived/k{i}"} for i in range(3)],
    )
    assert problems(spec)[-1].startswith(
        "spec.devices: Forbidden: too complex, total cost of derived attribute"
    )
