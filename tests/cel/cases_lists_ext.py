"""Conformance cases for cel-go's lists extension (ext.Lists version 3) and the two-variable
comprehensions (ext.TwoVarComprehensions) of the Kubernetes 1.37 DRA CEL environment, run against
every engine. Each expectation is cel-go's answer (checked with the upstream program of
tests/conformance for a new selector with list-type attributes).
"""

from __future__ import annotations

from case import CelCase
from cases_libraries import LIST_DEVICE as SORTED_LIST_DEVICE
from cases_libraries import LIST_OPTIONS

D = 'device.attributes["gpu.example.com"]'
C = 'device.capacity["gpu.example.com"]'
# The libraries' list device with unsorted, repeating lists, for sort, distinct and reverse.
LIST_DEVICE = {
    **SORTED_LIST_DEVICE,
    "attributes": {**SORTED_LIST_DEVICE["attributes"], "ids": {"ints": [3, 1, 2]},
                   "tags": {"strings": ["b", "a", "b"]}},
}


def _cases(prefix: str, rows: list[tuple[str, object]]) -> list[CelCase]:
    return [CelCase(f"{prefix}: {expression}", expression, expect,  # type: ignore[arg-type]
                    device=LIST_DEVICE, options=LIST_OPTIONS)
            for expression, expect in rows]


SLICE_FLATTEN_RANGE = _cases("lists extension", [
    ("[1, 2, 3].slice(1, 3) == [2, 3]", True),
    ("[1, 2].slice(0, 0) == []", True),
    ("[1, 2].slice(0, 3) == []", "runtime_error"),  # past the end
    ("[1, 2].slice(-1, 1) == []", "runtime_error"),  # negative index
    (f"{D}.ids.slice(0, 2) == [3, 1]", True),
    ("[[1], [2, 3]].flatten() == [1, 2, 3]", True),
    ("[1, 2].flatten() == [1, 2]", "compile_error"),  # flatten() wants a list of lists
    ("[1, 2].flatten(1) == [1, 2]", True),  # flatten(depth) takes any list
    ("[dyn(1), dyn([dyn(2), dyn([3])])].flatten(5) == [1, 2, 3]", True),
    ("dyn([1, [2]]).flatten(5) == [1, 2]", "compile_error"),  # a literal must be homogeneous
    (f"{D}.ids.flatten() == [3, 1, 2]", True),  # dynamic: a flat list stays as it is
    (f"{D}.ids.flatten(-1) == []", "runtime_error"),
    ("lists.range(3) == [0, 1, 2]", True),
    ("lists.range(0).size() == 0", True),
    ("lists.range(-1) == []", "runtime_error"),
    ("[1, 2].reverse() == [2, 1]", True),
    ("[].reverse() == []", True),
    (f"{D}.ids.reverse() == [2, 1, 3]", True),
    ("[1, 2].first() == 1", "compile_error"),  # first/last come after Kubernetes 1.37's cel-go
    ("[1, 2].last() == 2", "compile_error"),
])

SORT_DISTINCT = _cases("lists extension sort", [
    ("[3, 1, 2].sort() == [1, 2, 3]", True),
    ('["b", "a"].sort() == ["a", "b"]', True),
    ("[1u, 0u].sort() == [0u, 1u]", True),
    ("[1.5, 0.5].sort()[0] == 0.5", True),
    ("[true, false].sort() == [false, true]", True),
    ('[b"b", b"a"].sort()[0] == b"a"', True),
    (f"{D}.ids.sort() == [1, 2, 3]", True),
    (f'{D}.tags.sort() == ["a", "b", "b"]', True),
    (f"{D}.versions.sort() == []", "runtime_error"),  # versions are not comparable
    ('[quantity("1")].sort() == []', "compile_error"),
    ("dyn([[1], [2]]).sort() == []", "runtime_error"),
    ('dyn([1, "a"]).sort() == []', "compile_error"),  # a literal must be homogeneous
    ('[1, 1.0, 2].distinct() == [1, 2]', "compile_error"),
    (f'{D}.tags.distinct() == ["b", "a"]', True),
    ("[3, 1, 3, 2].sort().distinct().reverse() == [3, 2, 1]", True),
    (f"{D}.ids.sort().distinct().reverse() == [3, 2, 1]", "compile_error"),  # cost over the limit
    ("[3, 1, 2].sortBy(x, -x) == [3, 2, 1]", True),
    ('["aa", "b", "ccc"].sortBy(s, size(s)) == ["b", "aa", "ccc"]', True),
    (f'{D}.tags.sortBy(t, t) == ["a", "b", "b"]', True),
    ("[2, 1].sortBy(x, x).sortBy(y, -y) == [2, 1]", True),
    ("[2, 1].sortBy(x, x).map(y, y * 2) == [2, 4]", True),
    ("1 in [3, 1].sortBy(x, x % 3).filter(x, x > 2)", False),  # the receiver is the list, not the `in`
    ("cel.bind(y, [2, 1], y + []).sortBy(x, x) == [1, 2]", True),
    ("cel.bind(y, [2, 1], y).sortBy(x, x) == [1, 2]", "compile_error"),  # cel-go cannot size the bind
    ("-[2, 1].sortBy(x, x)[0] == -1", True),
    ("[1, 2].sortBy(x, [x]) == []", "compile_error"),  # the key must have an ordered type
    ('"abc".sortBy(x, x) == []', "compile_error"),  # sortBy applies to lists only
    ('{"a": 1}.sortBy(x, x) == []', "compile_error"),
    ('dyn({"a": 1}).sortBy(x, x) == []', "runtime_error"),
])

TWO_VARIABLE = _cases("two-variable comprehensions", [
    ("[1, 2, 3].transformList(i, v, i * v) == [0, 2, 6]", True),
    ("[1, 2, 3].transformList(i, v, v > 1, v) == [2, 3]", True),
    (f"{D}.ids.transformList(i, v, v * 2) == [6, 2, 4]", True),
    ('"gpu.example.com" in device.attributes.transformList(k, v, k)', True),
    ("[1, 2].transformList(i, v, v, v) == []", "compile_error"),  # the filter must be a bool
    ("[1, 2].transformList(i, v, i / 0 == 1, v) == []", "runtime_error"),
    ("[1].transformList(i, i, i) == []", "compile_error"),  # one name for both variables
    ('{"a": 1}.transformMap(k, v, v + 1) == {"a": 2}', True),
    ('{"a": 1, "b": 2}.transformMap(k, v, v > 1, v) == {"b": 2}', True),
    ("[1, 2].transformMap(i, v, v) == {0: 1, 1: 2}", True),
    ("7 in [1, 2, 3].transformMap(i, v, v > 1, (v + 1)).transformList(k, v, v)", False),
    ("[1, 2].transformMapEntry(i, v, cel.bind(z, v, {z: i})).size() == 2", True),
    ("[1, 2].transformMapEntry(i, v, {v: i}) == {1: 0, 2: 1}", True),
    ("[1, 2].transformMapEntry(i, v, v > 1, {v: i}) == {2: 1}", True),
    ("[1, 1].transformMapEntry(i, v, {v: i}) == {}", "runtime_error"),  # duplicate key
    ("[true].transformMapEntry(i, v, {v: i})[true] == 0", True),
    ("[1].transformMapEntry(i, v, 1) == {}", "compile_error"),  # the entry must be a map
    ("dyn([1]).transformMapEntry(i, v, v) == {}", "runtime_error"),
    ("[1, 2, 1].existsOne(i, v, v == 2)", True),
    ("[1, 2, 1].exists_one(i, v, v == 1)", False),
    (f"{D}.ids.existsOne(i, v, i == 1)", True),
    (f"{D}.ids.exists_one(i, v, v / 0 == 1)", "runtime_error"),
])

# cel-go's checker binds the free element type of an empty literal to the first overload that fits:
# sorted (by itself), it is a list of ints.
EMPTY_LITERALS = _cases("lists extension on an empty literal", [
    ('[].sort() == ["a"]', "compile_error"),
    ('[].sortBy(x, x) == ["a"]', "compile_error"),
    ('[].slice(1, 2).sortBy(x, x).exists(s, s == "b")', "compile_error"),
    ('[].sortBy(x, 1) == ["a"]', False),
    ('[].slice(0, 0) == ["a"]', False),
    ('[].reverse().exists(s, s == "b")', False),
    ('[].flatten().exists(s, s == "b")', False),
])

# On a dynamic receiver (a list attribute) slice, reverse, distinct and flatten() give a list whose
# element type is left free, which a list literal takes beside a list of any type; sort() and
# sortBy() give dyn, flatten(depth) list(dyn).
DYNAMIC_RECEIVERS = _cases("lists extension on a dynamic list", [
    (f"[{D}.ids.slice(0, 1), [1]].size() == 2", True),
    (f'[{D}.ids.reverse(), ["a"]].size() == 2', True),
    (f"[{D}.ids.flatten(), [1]].size() == 2", True),
    (f"[{D}.ids.transformList(i, v, v * i + 1), {D}.ids.slice(0, 1)].size() == 2", True),
    (f"[{D}.ids.sort(), [1]].size() == 2", "compile_error"),
    (f"[{D}.ids.sortBy(x, x), [1]].size() == 2", "compile_error"),
    (f"[{D}.ids.flatten(1), [1]].size() == 2", "compile_error"),
    (f"[{D}.ids.slice(0, 1), {D}.ids].size() == 2", "compile_error"),
])

# An optional index into a dynamic list (a list attribute) or an empty literal leaves the value's
# type free, so orValue(x) has x's type; an optional field of a dynamic value stays dyn.
OPTIONAL_INDEX = _cases("optional index of a dynamic list", [
    (f"[{D}.ids[?7].orValue(-5), 1].size() == 2", True),
    ("1 in [1, [][?7].orValue(-5)]", True),
    (f'{C}.memory == {D}.ids[?1].orValue(-5)', "compile_error"),
    (f'{D}.ids[?0].orValue("x") == 3', "compile_error"),
    (f"[{D}.?index.orValue(3), 1].size() == 2", "compile_error"),
])

# Durations and timestamps out of the extension's functions: cel-expr-python cannot take them back
# from Python, so the cel-expr engine hands such an expression to celpy (DeferToOtherEngine).
TIME_ELEMENTS = _cases("lists extension on durations and timestamps", [
    ('[duration("2h"), duration("1m")].sort() == [duration("1m"), duration("2h")]', True),
    ('[timestamp("2020-01-01T00:00:00Z"), timestamp("2019-01-01T00:00:00Z")].sort()[0]'
     ' == timestamp("2019-01-01T00:00:00Z")', True),
    ('[duration("1s"), duration("1000ms")].distinct().size() == 1', True),
    ('{"a": duration("1s")}.transformMap(k, v, v + duration("1s"))["a"] == duration("2s")', True),
    ('[duration("1s")].slice(0, 2).size() == 1', "runtime_error"),
])

CASES: list[CelCase] = [*SLICE_FLATTEN_RANGE, *SORT_DISTINCT, *TWO_VARIABLE, *EMPTY_LITERALS,
                        *DYNAMIC_RECEIVERS, *OPTIONAL_INDEX, *TIME_ELEMENTS]
