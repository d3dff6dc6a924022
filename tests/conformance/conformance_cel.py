"""Hypothesis strategies for random DRA CEL selectors over the Kubernetes libraries, and random devices
to evaluate them on.

Expressions are built by type (int, string, bool, quantity, semver, lists), so most compile; a
few deliberately mix types or read attributes a device may lack, so compile and runtime errors are
exercised too. Everything uses the device's own domain "dra.example.com" (D and C below).
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

Obj = dict[str, Any]
DRIVER = "dra.example.com"
D = 'device.attributes["dra.example.com"]'
C = 'device.capacity["dra.example.com"]'
MAX_DEPTH = 3


@st.composite
def devices(draw: st.DrawFn, lists: bool) -> Obj:
    attributes: Obj = {}
    if draw(st.booleans()):
        attributes["idx"] = {"int": draw(st.integers(-3, 5))}
    if draw(st.booleans()):
        attributes["model"] = {"string": draw(st.sampled_from(["a100", "H100", "x-y", ""]))}
    if draw(st.booleans()):
        attributes["ver"] = {"version": draw(st.sampled_from(["1.2.3", "2.0.0-rc.1", "0.9.0", "1.10.0"]))}
    if draw(st.booleans()):
        attributes["ok"] = {"bool": draw(st.booleans())}
    if draw(st.integers(0, 3)) == 0:
        attributes["other.example.com/zone"] = {"string": draw(st.sampled_from(["z1", "z2"]))}
    if lists and draw(st.booleans()):
        attributes["ids"] = {"ints": draw(st.lists(st.integers(0, 4), max_size=3))}
    if lists and draw(st.booleans()):
        attributes["tags"] = {"strings": draw(st.lists(st.sampled_from(["a", "b", "c"]), max_size=3))}
    capacity: Obj = {}
    if draw(st.booleans()):
        capacity["memory"] = {"value": draw(st.sampled_from(["80Gi", "1500m", "4", "0"]))}
    if draw(st.booleans()):
        capacity["cores"] = {"value": draw(st.sampled_from(["8", "2k"]))}
    device: Obj = {"driver": DRIVER, "attributes": attributes, "capacity": capacity}
    if draw(st.booleans()):
        device["allowMultipleAllocations"] = draw(st.booleans())
    return device


def _bin(draw: st.DrawFn, kind: str, depth: int, ops: list[str]) -> str:
    return f"({expr(draw, kind, depth + 1)} {draw(st.sampled_from(ops))} {expr(draw, kind, depth + 1)})"


def _conditional(draw: st.DrawFn, kind: str, depth: int) -> str:
    condition = expr(draw, "bool", depth + 1)
    return f"({condition} ? {expr(draw, kind, depth + 1)} : {expr(draw, kind, depth + 1)})"


def _optional_int(draw: st.DrawFn, depth: int) -> str:
    """An int through the optional library: value() of an absent attribute fails at run time."""
    shape = draw(st.integers(0, 4))
    if shape == 0:
        return f"{D}.?idx.value()"
    if shape == 1:
        return f"optional.none().orValue({expr(draw, 'int', depth + 1)})"
    if shape == 2:
        return f"{D}.?idx.or(optional.of({expr(draw, 'int', depth + 1)})).value()"
    if shape == 3:
        return f"{expr(draw, 'ints', depth + 1)}[?{expr(draw, 'int', depth + 1)}].orValue(-5)"
    return f"optional.ofNonZeroValue({expr(draw, 'int', depth + 1)}).orValue(5)"


def _list_extension(draw: st.DrawFn, kind: str, depth: int) -> str:
    """A list of ``kind`` (ints or strings) through cel-go's lists extension or transformList; some
    calls fail at run time (slice bounds, lists.range(-1)) or do not compile (flatten of a typed
    flat list, sortBy on a key of no ordered type)."""
    element = "int" if kind == "ints" else "string"
    target = expr(draw, kind, depth + 1)
    shape = draw(st.integers(0, 7))
    if shape == 0:
        return f"{target}.{draw(st.sampled_from(['sort', 'distinct', 'reverse']))}()"
    if shape == 1:
        bounds = draw(st.sampled_from(["0, 1", "1, 2", "0, 0", "2, 1", "-1, 1", "0, 5"]))
        if draw(st.booleans()):
            bounds = f"0, {expr(draw, 'int', depth + 1)}"
        return f"{target}.slice({bounds})"
    if shape == 2:
        key = draw(st.sampled_from(
            ["-x", "x % 3", "1", "[x]"] if kind == "ints" else ["x", "size(x)", "x.upperAscii()", "[x]"]))
        return f"{target}.sortBy(x, {key})"
    if shape == 3:
        other = expr(draw, kind, depth + 1)
        form = draw(st.sampled_from(["[{}, {}].flatten()", "[{}, {}].flatten(1)", "{}.flatten()",
                                     "dyn([{}, {}]).flatten(2)"]))
        return form.format(target, other) if form.count("{}") == 2 else form.format(target)
    if shape == 4:
        transform = "v * i + 1" if kind == "ints" else 'v + "-" + string(i)'
        if draw(st.booleans()):
            return f"{target}.transformList(i, v, {transform})"
        return f"{target}.transformList(i, v, i % 2 == 0, {transform})"
    if shape == 5 and kind == "ints":
        return f"lists.range({expr(draw, 'int', depth + 1)})"
    if shape == 6:  # values of a map built by a transform, in key order of a sort
        built = _map_transform(draw, depth)
        return f"{built}.transformList(k, v, {'v' if kind == 'ints' else 'string(k)'}).sort()"
    return f"[{expr(draw, element, depth + 1)}, {expr(draw, element, depth + 1)}].sort()"


def _map_transform(draw: st.DrawFn, depth: int) -> str:
    """A map(int, int) through transformMap or transformMapEntry (duplicate keys fail at run time)."""
    source = expr(draw, "ints", depth + 1)
    return draw(st.sampled_from([
        f"{source}.transformMap(i, v, v + i)",
        f"{source}.transformMap(i, v, v > 1, v)",
        f"{source}.transformMapEntry(i, v, {{v: i}})",
        f"{source}.transformMapEntry(i, v, i < 2, {{v % 3: i}})",
    ]))


def _map_transform_size(draw: st.DrawFn, depth: int) -> str:
    built = _map_transform(draw, depth)
    return draw(st.sampled_from([f"size({built})", f"{built}.transformList(k, v, k + v).sum()"]))


def expr(draw: st.DrawFn, kind: str, depth: int = 0) -> str:
    """A random expression of type ``kind``: int, string, bool, quantity, version, ints, strings."""
    leaf = depth >= MAX_DEPTH or draw(st.integers(0, 2)) == 0
    if kind == "int":
        if leaf:
            return draw(st.sampled_from(["0", "1", "2", "-1", "7", f"{D}.idx", f"{D}.?idx.orValue(3)"]))
        shape = draw(st.integers(0, 10))
        if shape == 0:
            return _bin(draw, "int", depth, ["+", "-", "*", "/", "%"])
        if shape == 10:
            return _map_transform_size(draw, depth)
        if shape == 1:
            return f"size({expr(draw, 'string', depth + 1)})"
        if shape == 2:
            return f"{expr(draw, 'string', depth + 1)}.indexOf({expr(draw, 'string', depth + 1)})"
        if shape == 3:  # sign is a global function in cel-go; the member form does not compile
            form = draw(st.sampled_from(["{}.asInteger()", "{}.asInteger()", "sign({})", "{}.sign()"]))
            return form.format(expr(draw, "quantity", depth + 1))
        if shape == 4:
            return (
                f"{expr(draw, 'version', depth + 1)}.{draw(st.sampled_from(['major', 'minor', 'patch']))}()"
            )
        if shape == 5:
            return f"{expr(draw, 'ints', depth + 1)}.{draw(st.sampled_from(['sum', 'min', 'max']))}()"
        if shape == 6:
            return f"cel.bind(x, {expr(draw, 'int', depth + 1)}, x * x + 1)"
        if shape == 7:
            return f"size({expr(draw, 'ints', depth + 1)})"
        if shape == 8:
            return _optional_int(draw, depth)
        return f"{expr(draw, 'quantity', depth + 1)}.compareTo({expr(draw, 'quantity', depth + 1)})"
    if kind == "string":
        if leaf:
            return draw(
                st.sampled_from(
                    [
                        '"a100"',
                        '"AbC"',
                        '""',
                        '"x-y"',
                        "device.driver",
                        f"{D}.model",
                        f'{D}.?model.orValue("none")',
                        'device.attributes["other.example.com"].zone',
                    ]
                )
            )
        shape = draw(st.integers(0, 6))
        if shape == 0:
            method = draw(st.sampled_from(["lowerAscii", "upperAscii", "trim"]))
            return f"{expr(draw, 'string', depth + 1)}.{method}()"
        if shape == 1:
            return f"({expr(draw, 'string', depth + 1)} + {expr(draw, 'string', depth + 1)})"
        if shape == 2:
            return f"{expr(draw, 'string', depth + 1)}.substring({draw(st.sampled_from(['0', '1', '3']))})"
        if shape == 3:
            return f'{expr(draw, "string", depth + 1)}.replace("a", {expr(draw, "string", depth + 1)})'
        if shape == 4:
            return f'{expr(draw, "strings", depth + 1)}.join("-")'
        if shape == 5:
            return f"string({expr(draw, 'int', depth + 1)})"
        return _conditional(draw, "string", depth)
    if kind == "quantity":
        if leaf:
            return draw(
                st.sampled_from(
                    [
                        'quantity("1Gi")',
                        'quantity("500m")',
                        'quantity("4")',
                        f"{C}.memory",
                        f"{C}.cores",
                        f'{C}.?memory.orValue(quantity("1"))',
                    ]
                )
            )
        op = draw(st.sampled_from(["add", "sub"]))
        other = expr(draw, draw(st.sampled_from(["quantity", "int"])), depth + 1)
        return f"{expr(draw, 'quantity', depth + 1)}.{op}({other})"
    if kind == "version":
        if leaf or draw(st.booleans()):
            return draw(
                st.sampled_from(
                    [
                        'semver("1.2.3")',
                        'semver("2.0.0-rc.1")',
                        'semver("v1.2", true)',
                        f"{D}.ver",
                        'semver("1.02.3")',
                    ]
                )
            )
        return _conditional(draw, "version", depth)
    if kind == "ints":
        if leaf:
            return draw(st.sampled_from(["[]", "[1, 2, 3]", "[3, 1]", f"{D}.ids"]))
        shape = draw(st.integers(0, 4))
        if shape == 4:
            return _list_extension(draw, "ints", depth)
        if shape == 0:
            return f"{expr(draw, 'ints', depth + 1)}.filter(x, x > {expr(draw, 'int', depth + 1)})"
        if shape == 1:
            return f"{expr(draw, 'ints', depth + 1)}.map(x, x * 2)"
        if shape == 2:
            return f"({expr(draw, 'ints', depth + 1)} + {expr(draw, 'ints', depth + 1)})"
        return f"[{expr(draw, 'int', depth + 1)}, {expr(draw, 'int', depth + 1)}]"
    if kind == "strings":
        if leaf:
            return draw(st.sampled_from(['["a", "b"]', "[]", f"{D}.tags", '"a,b,c".split(",")']))
        if draw(st.booleans()):
            return _list_extension(draw, "strings", depth)
        return f'{expr(draw, "string", depth + 1)}.split("-")'
    assert kind == "bool", kind
    if leaf:
        return draw(
            st.sampled_from(
                [
                    "true",
                    "false",
                    f"{D}.ok",
                    f"has({D}.idx)",
                    f'"model" in {D}',
                    "device.allowMultipleAllocations",
                    f"{D}.?ok.orValue(true)",
                    f"{D}.?idx.hasValue()",
                ]
            )
        )
    shape = draw(st.integers(0, 14))
    if shape == 0:
        return _bin(draw, "int", depth, ["==", "!=", "<", "<=", ">", ">="])
    if shape == 14:  # two-variable quantifiers: index (or key) and value
        macro = draw(st.sampled_from(["exists", "all", "existsOne", "exists_one"]))
        kind = draw(st.sampled_from(["ints", "strings"]))
        predicate = draw(st.sampled_from(["i < 2", "i == v", "v == v", "size(string(v)) > i", "v > i"]))
        return f"{expr(draw, kind, depth + 1)}.{macro}(i, v, {predicate})"
    if shape == 1:
        return _bin(draw, "string", depth, ["==", "!=", "<", ">"])
    if shape == 2:
        method = draw(st.sampled_from(["startsWith", "endsWith", "contains", "matches"]))
        argument = draw(st.sampled_from(['"a"', '"^[a-z]+[0-9]*$"', '"("', '"H"']))
        return f"{expr(draw, 'string', depth + 1)}.{method}({argument})"
    if shape == 3:
        method = draw(st.sampled_from(["isGreaterThan", "isLessThan"]))
        return f"{expr(draw, 'quantity', depth + 1)}.{method}({expr(draw, 'quantity', depth + 1)})"
    if shape == 4:
        method = draw(st.sampled_from(["isGreaterThan", "isLessThan"]))
        return f"{expr(draw, 'version', depth + 1)}.{method}({expr(draw, 'version', depth + 1)})"
    if shape == 5:
        return _bin(draw, "bool", depth, ["&&", "||", "==", "!="])
    if shape == 6:
        return f"!{expr(draw, 'bool', depth + 1)}"
    if shape == 7:
        macro = draw(st.sampled_from(["exists", "all", "exists_one"]))
        return f"{expr(draw, 'ints', depth + 1)}.{macro}(y, y >= {expr(draw, 'int', depth + 1)})"
    if shape == 8:
        return f"{draw(st.sampled_from(['isSemver', 'isQuantity']))}({expr(draw, 'string', depth + 1)})"
    if shape == 9:
        return f"{expr(draw, 'ints', depth + 1)}.isSorted()"
    if shape == 10:
        return f"{expr(draw, 'int', depth + 1)} in {expr(draw, 'ints', depth + 1)}"
    if shape == 11:
        return f"{expr(draw, 'strings', depth + 1)}.{draw(st.sampled_from(['includes', 'exists']))}" + (
            '("a")' if draw(st.booleans()) else '(s, s == "b")'
        )
    if shape == 12:  # mixes types on purpose: compile errors, or runtime errors through dyn values
        kinds = st.sampled_from(["int", "string", "quantity", "version", "bool"])
        return f"{expr(draw, draw(kinds), depth + 1)} == {expr(draw, draw(kinds), depth + 1)}"
    return _conditional(draw, "bool", depth)


@st.composite
def questions(draw: st.DrawFn) -> Obj:
    """One CEL question for the upstream program: expression, device and environment switches."""
    lists = draw(st.booleans())
    return {
        "expression": expr(draw, "bool"),
        "device": draw(devices(lists)),
        "consumableCapacity": draw(st.booleans()),
        "listTypeAttributes": lists,
        "newExpressions": draw(st.booleans()),
    }


# Result kinds of derived attribute expressions: attribute types, and one that is none (quantity).
DERIVED_KINDS = ["int", "string", "bool", "version", "ints", "strings", "quantity"]


@st.composite
def derived_questions(draw: st.DrawFn) -> Obj:
    """A question about a derived attribute's expression (DRADerivedAttributes): its value as an
    attribute, a compile error (also for a result type that is no attribute) or a runtime error."""
    question = draw(questions())
    question["expression"] = expr(draw, draw(st.sampled_from(DERIVED_KINDS)))
    question["derived"] = True
    return question

