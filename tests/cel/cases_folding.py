"""Conformance cases for what cel-go computes when a program is created (constant folding: type
conversions of constants, constant regular expressions; allocator.cel.folding), for the conversions
it computes there (Go's strconv), and for how its checker types an empty literal through the
overloads that use its elements. Each expectation is upstream's answer (the program of
tests/conformance replays every table, test_differential.py); the default GPU device has
model "LATEST-GPU-MODEL" and index 3.
"""

from __future__ import annotations

from case import CelCase

from allocator.cel import CompileOptions

D = 'device.attributes["gpu.example.com"]'
UNLIMITED = CompileOptions(cost_limit=None)  # string() of a double has no cost bound for cel-go
LIST_OPTIONS = CompileOptions(list_type_attributes=True)


def _cases(prefix: str, rows: list[tuple[str, object]],
           options: CompileOptions | None = None) -> list[CelCase]:
    return [CelCase(f"{prefix}: {expression}", expression, expect,  # type: ignore[arg-type]
                    options=options or CompileOptions())
            for expression, expect in rows]


FOLDING = _cases("folding", [
    # a conversion of constants fails when the program is created, wherever it sits
    ('duration(string(timestamp(-62135596800))) <= duration("2us")', "compile_error"),
    ('false && int("x") == 1', "compile_error"),
    ("[].all(x, uint(-1) > 0u)", "compile_error"),
    ('cel.bind(v, int("x"), true)', "compile_error"),
    ('timestamp(int("253402300800")) > timestamp(0)', "compile_error"),
    ("int(dyn([1])) == 1", "compile_error"),
    ("int(1e19) == 1", "compile_error"),
    ('string(b"\\xff") == ""', "compile_error"),
    # ... and succeeds for a valid one; what is not a constant converts when it runs
    (f'{D}.model == "x" && int("1") == 1', False),
    (f"int({D}.model) == 1", "runtime_error"),
    ('cel.bind(s, "x", int(s)) == 1', "runtime_error"),
    (f"{D}.nope in []", False),
    # constant patterns of matches(), find() and findAll() compile with the program
    ('"abc".find("(") == ""', "compile_error"),
    ('"abc".findAll(string("[")).size() == 0', "compile_error"),
    ('"abc".matches(dyn("("))', "compile_error"),
    ('"abc".matches(string("a\\\\C"))', "compile_error"),
    ('"abc".find("b+") == "b"', True),
    (f'"abc".matches({D}.model + "(")', "runtime_error"),
    # a map literal keeps the last of repeated keys, folded or not
    ('dyn({1: 1, 1: 2})[1] == 2', True),
    ('[1].all(x, {x: 1, 1: 2}.size() == 1)', True),
])

CONVERSIONS = _cases("conversions", [
    ('int(" 1") == 1', "compile_error"),
    ('int("1_0") == 10', "compile_error"),
    ('int("-9223372036854775808") < 0', True),
    ('uint("+1") == 1u', "compile_error"),
    ('uint(-0.5) == 0u', "compile_error"),
    ('double("1_0") == 10.0', True),
    ('double("0x1p-2") == 0.25', True),
    ('double("-Infinity") < 0.0', True),
    ('double("1e400") > 0.0', "compile_error"),
    ('double(" 1") == 1.0', "compile_error"),
    ('bool("T") && !bool("F")', True),
    ('bool("yes")', "compile_error"),
    ('cel.bind(s, "T", bool(s))', True),
    ('cel.bind(s, "+1", uint(s)) == 1u', "runtime_error"),
    ('cel.bind(s, "0x_1p0", double(s)) == 1.0', True),
]) + _cases("conversions", [
    ('string(1e6) == "1e+06" && string(100000.0) == "100000" && string(123456789.125) == "1.23456789125e+08"',
     True),
    ('string(-0.0) == "-0" && string(1e-7) == "1e-07" && string(0.0001) == "0.0001"', True),
    ('string(double("inf")) == "+Inf" && string(double("-inf")) == "-Inf" && string(double("nan")) == "NaN"',
     True),
], UNLIMITED)

EMPTY_LITERALS = _cases("empty literal", [
    ("[[3, 1], [].filter(x, x > 0)].flatten().exists(y, y >= 0)", True),
    ("[[3, 1], [].filter(x, x > 0.5)].size() == 2", True),
    ("[[3, 1], [].filter(x, x == x)].size() == 2", True),
    ("[[3, 1], [].filter(x, x in [1, 2])].size() == 2", True),
    ("[[1.5], [].sortBy(x, -x)].size() == 2", True),
    ("[].sortBy(x, x).exists(i, v, size(string(v)) > i)", False),
    ('[["a"], [].sortBy(x, x)].size() == 2', "compile_error"),
    ("[[3, 1], [].sortBy(x, -x)].size() == 2", "compile_error"),
    ('[[b"a"], [].filter(x, size(x) > 0)].size() == 2', True),
    ("[[3, 1], [].filter(x, size(x) > 0)].size() == 2", "compile_error"),
    ('[["a"], [].filter(x, string(x) == "a")].size() == 2', True),
    ('[["a"], [].filter(x, x.startsWith("a"))].size() == 2', True),
    ('[].filter(x, x > 0 && x == "a").size() == 0', "compile_error"),
    ('[[1], [].filter(x, x > 0) + ["a"]].size() == 2', "compile_error"),
    ('[].filter(x, x > 0).join("-") == ""', "compile_error"),
    ("[[1], [].map(x, x * 2)].size() == 2", True),
    # a comprehension's type is fixed when it is checked, and a type parameter bound by two types
    # takes the less specific one
    ("[[dyn(1)], [].filter(s, s > 1)].size() == 2", "compile_error"),
    ("[[dyn(1)], [].filter(s, true)].size() == 2", True),
    (f"[[1], [2] + [{D}.index]].size() == 2", "compile_error"),
    (f"[[1], true ? [2] : [{D}.index]].size() == 2", "compile_error"),
    # a list function of a dynamic list gives a list whose element type is still free
    ("[dyn([1]).reverse().filter(s, size(s) > 0), [1]].size() == 2", "compile_error"),
    ("[dyn([1]).reverse().filter(s, s > 0), [1]].size() == 2", True),
    # an int compared with a double, beside a device attribute (cel-expr hands it to celpy)
    (f"[3, 1].filter(x, x >= 0.5).size() == 2 && {D}.index == 3", True),
    ("([].map(x, x * 2) + [].filter(x, x >= 0.5)).size() == 0", True),
    ("([].map(x, x * 2) + [].filter(x, -x >= 0.5)).size() == 0", "compile_error"),
    # orValue() and or() bind their type parameter twice too; optional.none()'s value type is free
    (f"[optional.of(1).orValue({D}.index), 1].size() == 2", "compile_error"),
    (f"[{D}.?index.or(optional.of(7)).value(), dyn(1)].size() == 2", "compile_error"),  # any, then dyn
    ('[optional.none().or(optional.none()).value(), 2].size() == 2', "runtime_error"),
    ("[].sortBy(x, -x)[?0].orValue(-5) == 1", "compile_error"),  # optional(double).orValue(int)
    ("optional.of(1).or(optional.of(1.5)).hasValue()", "compile_error"),
    ('[1].indexOf("a") == -1', "compile_error"),
    ("optional.of(1).orValue(dyn(1.5)) == 1", True),
]) + _cases("empty literal, list attributes", [
    # compared with a dynamic value: bound to bool by _>_'s first overload, widened to dyn by ==
    (f"[[3, 1], [].filter(x, x > {D}.index)].size() == 2", "compile_error"),
    (f"[[true], [].filter(x, x > {D}.index)].size() == 2", True),
    (f"[[3, 1], [].filter(x, x > 0 && x == {D}.index)].size() == 2", "compile_error"),
    (f"[].filter(x, x > 0 && x == {D}.index).size() == 0", True),
    (f"[{D}.?index.or(optional.of(7)).value(), dyn(1)].size() == 2", True),
], LIST_OPTIONS)

CASES: list[CelCase] = FOLDING + CONVERSIONS + EMPTY_LITERALS
