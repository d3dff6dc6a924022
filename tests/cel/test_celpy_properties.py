"""Property tests of the celpy backend: any expression compiles or fails with CELCompileError, and any
compiled selector evaluates to a bool or fails with CELRuntimeError, never with another exception."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from allocator.cel.backend import CELCompileError, CELRuntimeError, CompileOptions, make_device
from allocator.cel.celpy_backend import CelpyBackend
from allocator.cel.cost import estimate_cost

D = 'device.attributes["gpu.example.com"]'
BACKEND = CelpyBackend()
DEVICE = make_device(
    "gpu.example.com",
    {"index": {"int": 3}, "model": {"string": "A100"}, "mig": {"bool": True}, "v": {"version": "1.2.3"},
     "ids": {"ints": [1, 2, 3]}, "tags": {"strings": ["a", "b"]}, "x.example.com/n": {"int": 0}},
    {"memory": {"value": "80Gi"}},
)
ACTIVATION = BACKEND.activation(DEVICE)
OPTIONS = CompileOptions(list_type_attributes=True, consumable_capacity=True)

ATOMS = [
    "0", "1", "-1", "2u", "1.5", "true", "false", '"a"', '"A100"', '""', "null",
    "[]", "[1, 2]", '{"a": 1}', "{}",
    f"{D}.index", f"{D}.model", f"{D}.mig", f"{D}.ids", f"{D}.tags", f"{D}.v", f"{D}.nope", "device.driver",
    'device.capacity["gpu.example.com"].memory', 'device.attributes["other.example.com"]',
    "device.attributes",
    "dyn(1)", "dyn(true)", 'quantity("1Gi")', 'semver("1.0.0")', "1 / 0", f"{D}.?nope", f"{D}.?index",
    "optional.none()", "device.allowMultipleAllocations", "9223372036854775807", "-9223372036854775808",
]
BINARY = ["==", "!=", "<", "<=", ">", ">=", "+", "-", "*", "/", "%", "&&", "||", "in"]
SUFFIXES = [
    ".size()", '.contains("a")', '.startsWith("A")', ".lowerAscii()", '.split(",")', ".charAt(0)",
    '.indexOf("a")', '.matches("^A")', '.find("[0-9]")', ".isSorted()", ".sum()", ".min()", ".max()",
    ".orValue(5)", ".hasValue()", ".value()", '.compareTo(quantity("1"))', '.isGreaterThan(semver("1.0.0"))',
    ".major()", ".asInteger()", ".includes(1)", ".exists(x, x == 1)", ".all(x, x != 2)", ".map(x, x)",
    ".filter(x, true)", ".exists_one(x, true)", ".all(k, v, true)", "[0]", '["a"]', ".index", ".?a",
]


def expressions(depth: int = 3) -> st.SearchStrategy[str]:
    atom = st.sampled_from(ATOMS)
    if depth == 0:
        return atom
    inner = expressions(depth - 1)
    return st.one_of(
        atom,
        st.tuples(inner, st.sampled_from(BINARY), inner).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        st.tuples(st.sampled_from(["!", "-", "!!", "--"]), inner).map(lambda t: f"{t[0]}({t[1]})"),
        st.tuples(inner, inner, inner).map(lambda t: f"({t[0]} ? {t[1]} : {t[2]})"),
        st.tuples(inner, st.sampled_from(SUFFIXES)).map(lambda t: f"({t[0]}){t[1]}"),
        inner.map(lambda e: f"has(({e}).model)"),
        inner.map(lambda e: f"cel.bind(b, {e}, b == b)"),
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expressions())
def test_any_expression_compiles_and_evaluates_or_fails_with_a_cel_error(expression: str) -> None:
    try:
        program = BACKEND.compile(expression, OPTIONS)
        estimate_cost(expression, OPTIONS)
    except CELCompileError:
        return
    try:
        result = program.evaluate(ACTIVATION)
    except CELRuntimeError as err:
        assert str(err)
        return
    assert isinstance(result, bool)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(alphabet='abcdevice.[]()"\'!?:&|=<>+-*/%0123456789 ,{}u\\', max_size=40))
def test_arbitrary_text_never_crashes_the_compiler(text: str) -> None:
    try:
        BACKEND.compile(text, OPTIONS)
        estimate_cost(text, OPTIONS)
    except CELCompileError as err:
        assert str(err)
