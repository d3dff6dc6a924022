"""cel-expr specifics: the bytes encoding of quantities and the rewrites that make it fast."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from allocator import cel

pytest.importorskip("cel_expr_python")

from allocator.cel import celexpr_library as library

nanos = st.one_of(st.integers(min_value=-(10**30), max_value=10**30), st.sampled_from([0, 1, -1, 10, -10]))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nanos, nanos)
def test_quantity_encoding_is_exact_and_order_preserving(a: int, b: int) -> None:
    encoded_a, encoded_b = library.quantity_bytes(a), library.quantity_bytes(b)
    assert (encoded_a < encoded_b) == (a < b)
    assert (encoded_a == encoded_b) == (a == b)
    assert b"\x00" not in encoded_a  # cel-expr-python truncates input bytes at NUL
    assert library._decoded_nanos(bytearray(encoded_a)) == a


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ('quantity("-1").compareTo(quantity("-2")) == 1', True),
        ('quantity("-2").isLessThan(quantity("-1"))', True),
        ('quantity("0").isGreaterThan(quantity("-1m"))', True),
        ('quantity("1Ki").compareTo(quantity("1024")) == 0', True),
        ('quantity("1e40").isGreaterThan(quantity("999999E"))', True),
        ('quantity("1").add(quantity("-2")).isLessThan(quantity("0"))', True),
        ('device.capacity["gpu.example.com"].memory.compareTo(quantity("80Gi")) == 0', True),
        ('(device.capacity["gpu.example.com"].memory).isLessThan(quantity("81Gi"))', True),
        ('cel.bind(m, device.capacity["gpu.example.com"].memory, m.compareTo(quantity("1Ti")) < 0)', True),
    ],
)
def test_quantity_comparisons(expression: str, expected: bool) -> None:
    device = cel.make_device("gpu.example.com", capacity={"memory": {"value": "80Gi"}})
    assert cel.get_engine("cel-expr").compile(expression).matches(device) is expected


def test_invalid_quantity_literal_fails_at_run_time_like_upstream() -> None:
    selector = cel.get_engine("cel-expr").compile('quantity("10Mo").isInteger()')
    with pytest.raises(cel.CELRuntimeError, match="quantities must match"):
        selector.matches(cel.make_device("gpu.example.com"))


def test_compile_errors_point_into_the_users_text() -> None:
    with pytest.raises(cel.CELCompileError, match=r"<input>:1:\d+: .*'indexOf'") as raised:
        cel.get_engine("cel-expr").compile('"abc".indexOf(true) == 2')
    assert '| "abc".indexOf(true) == 2' in str(raised.value)


def test_nested_conversions_compile_in_linear_time() -> None:
    # the checker that finds the conversions to rename asks for an argument's type before the call's
    import time

    engine = cel.get_engine("cel-expr")
    expression = "string(" * 25 + 'duration("1.5s")' + ")" * 25 + ' == "1.5s"'
    started = time.monotonic()
    selector = engine.compile(expression, cel.CompileOptions(cost_limit=None))
    assert time.monotonic() - started < 2
    assert selector.matches(cel.make_device("d", {}, {}))


def test_net_values_and_time_conversions_keep_upstream_answers() -> None:
    engine = cel.get_engine("cel-expr")
    device = cel.make_device("d", {"addr": {"string": "10.1.2.3"}, "unit": {"string": "2µs"},
                                    "at": {"string": "2020-01-01T00:00:00,5Z"}}, {})
    for expression in [
        'cel.bind(a, cidr("10.1.2.3/8"), string(a.masked())) == "10.0.0.0/8"',
        'string(device.attributes["d"].addr) == string(ip(device.attributes["d"].addr))',
        'int(duration("1h0m0.000000001s")) == 3600000000001',
        'string(duration("1µs")) == "0.000001s"',
        'duration("1.5s").getMilliseconds() == 1500',
        # a string known only at run time is parsed with Go's rules before cel-cpp converts it
        'duration(device.attributes["d"].unit) == duration("2µs")',
        'timestamp(device.attributes["d"].at) == timestamp("2020-01-01T00:00:00.5Z")',
    ]:
        assert engine.compile(expression).matches(device), expression


def test_values_cel_expr_cannot_carry_are_evaluated_by_celpy() -> None:
    # cel-expr-python refuses a duration or timestamp that a Python function returns (here the lists
    # extension's sort); the selector and the derived expression still give cel-go's answer.
    engine = cel.get_engine("cel-expr")
    device = cel.make_device("gpu.example.com", {}, {}, memo_key=("slice", 1, "dev-0"))
    sorted_durations = '[duration("2h"), duration("1m")].sort()'
    selector = engine.compile(f'{sorted_durations}[0] == duration("1m")')
    assert selector.engine == "cel-expr"
    assert selector.matches(device) is True
    assert selector.matches(device) is True  # the remembered answer
    failing = engine.compile(f'{sorted_durations}[0] == duration("1m") && [1][2] == 1')
    with pytest.raises(cel.CELRuntimeError, match="index"):
        failing.matches(device)
    derived = engine.compile_derived(f'{sorted_durations}.size()', cel.CompileOptions())
    assert derived.value(device) == 2


def test_a_failure_of_cel_expr_python_itself_is_a_runtime_error() -> None:
    from allocator.cel.celexpr_backend import CelExprProgram

    class Failing:
        def eval(self, activation: object) -> None:
            raise RuntimeError("INVALID_ARGUMENT: something cel-expr-python cannot do")

    with pytest.raises(cel.CELRuntimeError, match="cel-expr: INVALID_ARGUMENT"):
        CelExprProgram(Failing()).evaluate(object())
