"""The CEL parser shared by the cost estimator and the celpy backend."""

from __future__ import annotations

import pytest

from allocator.cel.backend import CELCompileError
from allocator.cel.parser import (
    MAX_NESTING_DEPTH,
    Call,
    Comprehension,
    Has,
    Ident,
    Index,
    ListExpr,
    Literal,
    MapExpr,
    Node,
    Select,
    parse,
)


def depth(node: Node) -> int:
    children: list[Node] = []
    if isinstance(node, Call):
        children = [*node.args, *([node.target] if node.target else [])]
    elif isinstance(node, (Select, Index)):
        children = [node.operand]
    return 1 + max((depth(c) for c in children), default=0)


@pytest.mark.parametrize("text, value, kind", [
    ("42", 42, "int"),
    ("0x1F", 31, "int"),
    ("-9223372036854775808", -(2**63), "int"),
    ("18446744073709551615u", 2**64 - 1, "uint"),
    ("1.5e3", 1500.0, "double"),
    (".5", 0.5, "double"),
    ("'a\\tb\\x41\\101\\u00e9\\U0001F600'", "a\tbAAé😀", "string"),
    ('r"\\d+"', "\\d+", "string"),
    ('"""two\nlines"""', "two\nlines", "string"),
    ("b'\\xff\\000'", b"\xff\x00", "bytes"),
    ("true", True, "bool"),
    ("null", None, "null"),
])
def test_literals(text: str, value: object, kind: str) -> None:
    assert parse(text) == Literal(0, value, kind)  # type: ignore[arg-type]


def test_precedence_and_associativity() -> None:
    node = parse("1 + 2 * 3 - 4")
    assert isinstance(node, Call) and node.function == "_-_"
    left = node.args[0]
    assert isinstance(left, Call) and left.function == "_+_"
    assert isinstance(left.args[1], Call) and left.args[1].function == "_*_"
    ternary = parse("a ? b : c ? d : e")
    assert isinstance(ternary, Call) and ternary.function == "_?_:_"
    assert isinstance(ternary.args[2], Call) and ternary.args[2].function == "_?_:_"


def test_member_chains_macros_and_optional_syntax() -> None:
    node = parse('device.attributes["d"].?model.orValue("x")')
    assert isinstance(node, Call) and node.function == "orValue"
    assert isinstance(node.target, Select) and node.target.optional and node.target.field == "model"
    assert isinstance(parse("m[?k]"), Index) and parse("m[?k]").optional  # type: ignore[union-attr]
    assert parse("has(a.b)") == Has(0, Select(5, Ident(4, "a"), "b"))
    macro = parse("xs.exists(x, x > 1)")
    assert isinstance(macro, Comprehension) and (macro.macro, macro.var) == ("exists", "x")
    two = parse("m.all(k, v, v > 0)")
    assert isinstance(two, Comprehension) and (two.var, two.var2) == ("k", "v")
    bind = parse("cel.bind(x, 1, x + 1)")
    assert isinstance(bind, Comprehension) and bind.macro == "bind"
    optional_list = parse("[1, ?x]")
    assert isinstance(optional_list, ListExpr) and optional_list.optional_indices == (1,)
    optional_map = parse("{?'a': x}")
    assert isinstance(optional_map, MapExpr) and optional_map.entries[0].optional


def test_even_runs_of_unary_operators_cancel_like_cel_go() -> None:
    assert parse("!!x") == Ident(2, "x")
    assert parse("--x") == Ident(2, "x")
    node = parse("!!!x")
    assert isinstance(node, Call) and node.function == "!_"


def test_long_logical_chains_become_balanced_trees() -> None:
    node = parse(" && ".join(["true"] * 1024))
    assert depth(node) == 11  # log2(1024) + 1, not 1024


@pytest.mark.parametrize("text, message", [
    ("", "expression is empty"),
    ("a.", "syntax error at 1:3: expected an identifier, found end of input"),
    ("1 = 2", "syntax error at 1:3: unexpected character '='"),
    ('"abc', "unterminated string literal"),
    ("'a\nb'", "newline in single-quoted string literal"),
    ("'\\q'", "invalid escape sequence"),
    ("9223372036854775808", "int literal 9223372036854775808 out of range"),
    ("18446744073709551616u", "out of range"),
    ("has(a)", "invalid argument to has() macro"),
    ("if", "reserved identifier 'if'"),
    ("Foo{a: 1}", "message construction 'Foo{...}' is not supported"),
    ("a ? b ? c : d : e", "expected ':'"),
    ("(" * (MAX_NESTING_DEPTH + 1) + "1" + ")" * (MAX_NESTING_DEPTH + 1), "nesting exceeds"),
    ("[1, 2].all(1, true)", "variable must be a simple identifier"),
])
def test_syntax_errors_are_compile_errors_with_a_clear_message(text: str, message: str) -> None:
    with pytest.raises(CELCompileError, match=message.replace("(", r"\(").replace(")", r"\)")
                       .replace("{", r"\{").replace("}", r"\}").replace("?", r"\?").replace(".", r"\.")):
        parse(text)


def test_two_variable_macros_and_sort_by() -> None:
    transform = parse("l.transformMap(k, v, v > 1, v * 2)")
    assert isinstance(transform, Comprehension)
    shape = (transform.macro, transform.var, transform.var2, len(transform.args))
    assert shape == ("transformMap", "k", "v", 2)
    exists_one = parse("l.existsOne(i, v, v == 1)")
    assert isinstance(exists_one, Comprehension)
    assert (exists_one.macro, exists_one.var2) == ("exists_one", "v")  # one macro under both names
    sort_by = parse("l.sortBy(e, -e)")
    assert isinstance(sort_by, Comprehension) and (sort_by.macro, sort_by.var) == ("sortBy", "e")
    # cel-go's sortBy refuses literal receivers other than lists
    for text in ('"abc".sortBy(e, e)', '{"a": 1}.sortBy(e, e)', "l.transformList(i, i, i)"):
        with pytest.raises(CELCompileError):
            parse(text)
    assert isinstance(parse("l.sortBy(e)"), Call)  # the wrong arity is an ordinary (undeclared) call
