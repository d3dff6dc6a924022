"""Behaviour specific to the cel-python backend: where celpy on its own diverges from cel-go."""

from __future__ import annotations

import sys
import threading

import celpy.celtypes as ct
import pytest

from allocator.cel.backend import CELCompileError, CELRuntimeError, CompileOptions, make_device
from allocator.cel.celpy_backend import CelpyBackend, _BudgetedRunner, emit
from allocator.cel.parser import parse
from allocator.quantity import Quantity
from allocator.semver import Semver

D = 'device.attributes["gpu.example.com"]'
BACKEND = CelpyBackend()
DEVICE = make_device(
    "gpu.example.com",
    {"model": {"string": "A100"}, "index": {"int": 3}, "migCapable": {"bool": True},
     "driverVersion": {"version": "1.2.3"}, "numa.example.com/node": {"int": 1}, "ids": {"ints": [1, 2]}},
    {"memory": {"value": "80Gi"}},
)


def evaluate(expression: str, device: object = DEVICE, options: CompileOptions | None = None) -> bool:
    program = BACKEND.compile(expression, options or CompileOptions())
    return program.evaluate(BACKEND.activation(device))  # type: ignore[arg-type]


@pytest.mark.parametrize("expression, construct", [
    ('{?"a": optional.of(1)} == {"a": 1}', "optional map entries"),
    ("Foo{a: 1}", "message construction 'Foo{...}'"),
])
def test_unsupported_constructs_fail_at_compile_time_naming_the_construct(expression: str,
                                                                          construct: str) -> None:
    with pytest.raises(CELCompileError, match="not supported") as error:
        BACKEND.compile(expression, CompileOptions())
    assert construct in str(error.value)


def test_optional_syntax_is_supported_by_rewriting() -> None:
    # celpy cannot parse `.?` / `[?`: the backend rewrites them into presence-testing calls.
    assert "__opt_qualify" in emit(parse(f"{D}.?model.orValue('x')"))
    assert evaluate(f'{D}.?model.orValue("x") == "A100"')
    assert evaluate(f'{D}.?nope.orValue("x") == "x"')
    assert evaluate('device.attributes[?"none.example.com"].?a.b.orValue(7) == 7')


@pytest.mark.parametrize("expression, expected", [
    ("dyn(true) == 1", False),  # celpy alone: true (its BoolType is an int)
    ("dyn(1) == 1u", True),  # celpy alone: "no such overload"
    ("dyn(80) == 80.0", True),
    ("1 < 2u", True),
    (f"{D}.migCapable == 1", False),
    (f"{D}.migCapable != 1", True),
    (f"{D}.index == 3.0", True),
    (f"{D}.index in [1.0, 3.0]", True),
])
def test_cel_go_equality_and_numeric_comparisons(expression: str, expected: bool) -> None:
    assert evaluate(expression) is expected


@pytest.mark.parametrize("expression, expected", [
    # Kubernetes' Semver and Quantity compare only with their own type: on the left of == with
    # anything else the comparison fails in cel-go; on the right, or with !=, it is merely unequal.
    (f'{D}.driverVersion == "1.2.3"', "no such overload"),
    (f"{D}.driverVersion == 1", "no such overload"),
    (f'{D}.driverVersion == quantity("1")', "no such overload"),
    (f'"1.2.3" == {D}.driverVersion', False),
    (f'{D}.driverVersion != "1.2.3"', True),
    (f'{D}.driverVersion == semver("1.2.3+build")', True),
    # cel-go's list and map equality count a failing element comparison as equal
    (f'[{D}.driverVersion] == ["1.2.3"]', True),
    (f'{{"v": {D}.driverVersion}} == {{"v": 0}}', True),
    (f'[{D}.driverVersion, {D}.index] == [dyn("1.2.3"), dyn(2)]', False),
    (f'optional.of({D}.driverVersion) == optional.of(1)', "no such overload"),
])
def test_opaque_values_compare_like_cel_go(expression: str, expected: bool | str) -> None:
    if isinstance(expected, str):
        with pytest.raises(CELRuntimeError, match=expected):
            evaluate(expression)
    else:
        assert evaluate(expression) is expected


@pytest.mark.parametrize("expression", ["true == 1", "1 == 1u", "1 + 1u", "!1", '"a" < 1'])
def test_statically_mismatched_operands_are_compile_errors(expression: str) -> None:
    with pytest.raises(CELCompileError, match="found no matching overload"):
        BACKEND.compile(expression, CompileOptions())


def test_runtime_type_errors_are_errors_not_false() -> None:
    with pytest.raises(CELRuntimeError, match="no such overload"):
        evaluate(f"{D}.model < 1")
    with pytest.raises(CELRuntimeError, match="no such overload"):
        evaluate(f"{D}.index && true")  # celpy alone would return the int


def test_has_on_a_missing_key_of_an_outer_map_is_an_error() -> None:
    # celpy alone answers false; cel-go reports the missing key of the outer map.
    with pytest.raises(CELRuntimeError, match="no such key: b"):
        evaluate('has({"a": {}}.b.c)')
    # The device's unknown domains are empty maps, as upstream, so this is simply false.
    assert evaluate('has(device.attributes["other.example.com"].model)') is False
    assert evaluate(f"has({D}.model)") is True


def test_unknown_attribute_error_suggests_has_or_optional_chaining() -> None:
    with pytest.raises(CELRuntimeError, match=r"no such key: nope \(test for it with has\(\) or use"):
        evaluate(f"{D}.nope == 1")


def test_non_bool_result_is_a_runtime_error() -> None:
    with pytest.raises(CELRuntimeError, match="must evaluate to bool, got int"):
        evaluate(f"{D}.index")


def test_allow_multiple_allocations_is_declared_only_with_consumable_capacity() -> None:
    with pytest.raises(CELCompileError, match="undefined field 'allowMultipleAllocations'"):
        BACKEND.compile("device.allowMultipleAllocations", CompileOptions())
    shared = make_device("gpu.example.com", allow_multiple_allocations=True)
    assert evaluate("device.allowMultipleAllocations", shared, CompileOptions(consumable_capacity=True))


def test_evaluation_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    expression = "[1, 2, 3, 4, 5, 6, 7, 8].all(a, [1, 2, 3, 4, 5, 6, 7, 8].all(b, a * b > 0))"
    assert evaluate(expression)
    monkeypatch.setattr(_BudgetedRunner, "max_steps", 500)
    with pytest.raises(CELRuntimeError, match="exceeded its budget of 500 steps"):
        evaluate(expression)
    # The budget is per evaluation: a small selector still evaluates, again and again.
    for _ in range(3):
        assert evaluate(f'{D}.model == "A100"')


def test_all_and_exists_stop_at_the_deciding_element_and_report_the_first_error() -> None:
    assert evaluate("[0, 1].exists(x, 1 / x == 1)")
    assert evaluate("[1, 0].all(x, 1 / x == 2)") is False
    with pytest.raises(CELRuntimeError, match="divide by zero"):
        evaluate("[0, 0].all(x, 1 / x == 1)")


def test_literals_survive_the_translation_to_celpy() -> None:
    assert evaluate("'é😀\\'\"\\\\\\n' == \"\\u00e9\\U0001F600'\\\"\\\\\\x0a\"")
    assert evaluate(r'b"\xff\000" == b"\377\x00"')
    assert evaluate("-9223372036854775808 < 0 && 18446744073709551615u > 0u && 1e999 > 1.0")
    assert evaluate("r'\\d' == '\\\\d'")


def test_activation_converts_the_device_once_into_celpy_values() -> None:
    activation = BACKEND.activation(DEVICE)
    device = activation["device"]
    attributes = device["attributes"]["gpu.example.com"]
    assert isinstance(attributes["index"], ct.IntType)
    assert isinstance(attributes["migCapable"], ct.BoolType)
    assert isinstance(attributes["driverVersion"], Semver)
    assert attributes["ids"] == [1, 2]
    assert device["attributes"]["numa.example.com"]["node"] == 1
    assert isinstance(device["capacity"]["gpu.example.com"]["memory"], Quantity)
    assert device["attributes"]["unknown.example.com"] == {}
    assert device["allowMultipleAllocations"] is not None


def test_a_program_is_shared_safely_between_threads() -> None:
    program = BACKEND.compile(f"{D}.index % 2 == 0 && {D}.ids.exists(i, i == {D}.index)",
                              CompileOptions(list_type_attributes=True))
    devices = [make_device("gpu.example.com", {"index": {"int": i}, "ids": {"ints": [i, i + 1]}})
               for i in range(40)]
    activations = [BACKEND.activation(d) for d in devices]
    failures: list[int] = []

    def run() -> None:
        for _ in range(5):
            for i, activation in enumerate(activations):
                if program.evaluate(activation) is not (i % 2 == 0):
                    failures.append(i)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        threads = [threading.Thread(target=run) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(old)
    assert failures == []


def test_creating_a_backend_never_lowers_the_recursion_limit() -> None:
    # celpy.Environment() sets the limit to 2500; a process that asked for more keeps its limit.
    old = sys.getrecursionlimit()
    try:
        sys.setrecursionlimit(6000)
        CelpyBackend()
        assert sys.getrecursionlimit() == 6000
        sys.setrecursionlimit(1000)
        CelpyBackend()
        assert sys.getrecursionlimit() == 2500  # accepted: celpy needs it for deep expressions
    finally:
        sys.setrecursionlimit(old)


def test_deeply_nested_expression_compiles_and_evaluates() -> None:
    expression = "(" * 45 + "true" + ")" * 45
    assert evaluate(expression)
    with pytest.raises(CELCompileError, match="nesting exceeds"):
        BACKEND.compile("(" * 150 + "true" + ")" * 150, CompileOptions())


def test_library_errors_carry_the_library_message() -> None:
    with pytest.raises(CELRuntimeError, match="invalid quantity 'lots'"):
        evaluate('quantity("lots").isInteger()')
    with pytest.raises(CELRuntimeError, match="semantic version"):
        evaluate('semver("1.2").major() == 1')


@pytest.mark.parametrize("expression, message", [
    (f'{D}["nope"] == 1', "no such key: nope"),
    ("[1, 2][5] == 1", "index out of range: 5"),
    ('{"a": 1}["b"] == 1', "no such key: b"),
    (f'int({D}.model) == 1', "conversion error"),  # of a literal, a compile error (test_folding.py)
])
def test_lookup_and_conversion_failures_are_runtime_errors(expression: str, message: str) -> None:
    # celpy converts only some Python exceptions into CEL errors, depending on the construct.
    with pytest.raises(CELRuntimeError, match=message):
        evaluate(expression)


def test_nan_cannot_be_ordered_as_in_cel_go() -> None:
    # cel-go's Compare fails for NaN (celpy alone answers false); == is simply false, and max() keeps a
    # leading NaN, which nothing is greater than.
    for expression in ('1 < double("NaN")', 'double("NaN") >= 1.0', '1u > double("nan")'):
        with pytest.raises(CELRuntimeError, match="NaN values cannot be ordered"):
            evaluate(expression)
    assert evaluate('cel.bind(n, double("NaN"), n != n && [n, 1.0].max() != 1.0)')


def test_a_repeated_map_key_takes_the_later_value_as_in_cel_go() -> None:
    # celpy alone fails such a map literal; cel-go keeps the last entry.
    assert evaluate('{"a": 1, "a": 2}["a"] == 2 && {"a": 1, "a": 2}.size() == 1')
    with pytest.raises(CELRuntimeError, match="divide by zero"):
        evaluate('{"a": 1, "a": 1 / 0}.size() == 1')


def test_comprehension_errors_are_values_absorbed_by_logical_operators() -> None:
    # celpy alone raises out of map/filter/exists_one bodies, past the surrounding && and ||.
    assert evaluate("false && [0].map(x, 1 / x)[0] == 1") is False
    assert evaluate("[0].filter(x, 1 / x == 1).size() == 0 || true")
    assert evaluate("true || [0].exists_one(x, 1 / x == 1)")
    assert evaluate("cel.bind(x, 1 / 0, true) || true")
    with pytest.raises(CELRuntimeError, match="divide by zero"):
        evaluate("[1, 0].map(x, 1 / x).size() == 2")
