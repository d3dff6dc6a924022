"""What allocator.cel.folding computes at compile time, and what it leaves alone (the expected
answers of whole selectors, on both engines and checked against upstream, are in cases_folding.py)."""

from __future__ import annotations

import pytest

from allocator.cel import CELCompileError, folding
from allocator.cel.parser import Node, parse

D = 'device.attributes["gpu.example.com"]'


def evaluated(expression: str) -> list[str]:
    """The constant parts folding evaluates (their node types), with an evaluator that records them."""
    seen: list[str] = []

    def evaluate(node: Node) -> object:
        seen.append(type(node).__name__)
        return "x"

    folding.check(parse(expression), expression, evaluate)
    return seen


@pytest.mark.parametrize("expression", [
    f'{D}.model == "a" && {D}.index > 2',
    f"int({D}.model) == 1",  # reads the device: converted when it runs
    'cel.bind(s, "1", int(s)) == 1',  # a bound variable is no constant
    "[1, 2].all(x, int(x) > 0)",
    'quantity("1Gi").isGreaterThan(quantity("1"))',  # not a type conversion
    f'{D}.model.matches("^a")',  # a literal pattern: checked by the checker, nothing to evaluate
])
def test_nothing_is_evaluated_where_nothing_is_constant(expression: str) -> None:
    assert evaluated(expression) == []


def test_every_conversion_of_a_constant_is_evaluated_leaves_first() -> None:
    assert evaluated('duration(string(timestamp(0))) > duration("1s")') == ["Call", "Call", "Call", "Call"]
    # a list or map literal of constants and a type name are constants too
    assert evaluated('dyn([1, {"a": int}]) == []') == ["Call"]
    assert evaluated("type(1) == int") == ["Call"]


def test_a_constant_pattern_is_compiled() -> None:
    assert evaluated(f'{D}.model.find(string("a+")) == ""') == ["Call", "Call"]
    with pytest.raises(CELCompileError, match=r"program instantiation failed: error parsing regexp: "
                                              r"missing closing \): `\(`"):
        folding.check(parse('"a".find("(") == ""'), '"a".find("(") == ""')


def test_a_failing_conversion_is_a_compile_error_with_cel_gos_message() -> None:
    expression = 'false && duration(string(timestamp(-62135596800))) < duration("2us")'
    with pytest.raises(CELCompileError) as error:
        folding.check(parse(expression), expression)
    assert error.value.message == ("program instantiation failed: type conversion error from 'string' to "
                                   "'google.protobuf.Duration'")
