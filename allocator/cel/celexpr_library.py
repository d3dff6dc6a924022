"""The Kubernetes CEL libraries (quantity, semver, lists, regex, includes) for cel-expr-python.

cel-expr-python cannot pass custom Python types through CEL (see python-libraries.md, C2), so
Quantity and Semver values travel as tagged ``bytes``: a 0xFF byte (never valid UTF-8, so
``string(q)`` fails like upstream's missing conversion) plus a kind letter plus a canonical text.
The text is canonical for equality: a quantity's exact nano-unit count (encoded so that bytes
order is numeric order), a version without build metadata. So ``==`` between two quantities or two
versions is exact, as upstream.

Typing: ``quantity("1").compareTo(1)`` still fails at compile time (no overload on (bytes, int)),
as upstream. Documented deviations from upstream, where cel-go rejects at compile time:
- Mixing a quantity and a semver, or calling a semver method on a quantity, fails at run time
  with "no such overload" rather than at compile time.
- ``quantity(...) == "1"`` is ``false`` here where cel-go reports "no such overload".
- Methods meant for other types (``size()``, ``b"..."`` comparisons) accept the bytes encoding.

cel-expr-python matches an overload at run time by the kinds of its arguments and never by
``dyn`` parameters, so the functions that accept anything (``includes``, ``indexOf``) get one
overload per argument kind.
"""

from __future__ import annotations

import datetime
import functools
import itertools
from collections.abc import Callable, Sequence
from typing import Any, cast

import re2
from cel_expr_python import cel

from allocator.cel import (
    celexpr_conversions,
    celexpr_format,
    celexpr_net,
    celexpr_time,
    lists_ext,
    strings_ext,
)
from allocator.cel.celpy_check import QUIET_RE2, regexp_error
from allocator.quantity import INT64_MAX, INT64_MIN, NANO, Quantity
from allocator.semver import Semver

T = cel.Type

_QUANTITY_TAG = b"\xffQ"
_SEMVER_TAG = b"\xffS"

# The strings extension already declares indexOf/lastIndexOf; cel-expr-python cannot add list
# overloads to it, so member calls are renamed (same length, so error positions stay right) to
# functions that serve both strings and lists.
RENAMED_MEMBER_FUNCTIONS = {"indexOf": "_ndexOf", "lastIndexOf": "_astIndexOf"}


class NoSuchOverload(TypeError):
    def __init__(self, function: str, *args: object) -> None:
        kinds = ", ".join(_kind(a) for a in args)
        super().__init__(f"no such overload: {function}({kinds})")


_BYTES = (bytes, bytearray)  # cel-expr-python hands bytes values to functions as bytearray


def opaque_kind(value: bytes | bytearray) -> str:
    """The CEL type of a bytes value: a quantity, a version or plain bytes (how they reach cel-cpp)."""
    tag = bytes(value[:2])
    if tag == _QUANTITY_TAG:
        return "kubernetes.Quantity"
    if tag in celexpr_net.KINDS:
        return celexpr_net.KINDS[tag]
    if tag in celexpr_format.KINDS:
        return celexpr_format.KINDS[tag]
    return "kubernetes.Semver" if tag == _SEMVER_TAG else "bytes"


def decode_semver(value: bytes | bytearray) -> Semver:
    return _decoded_semver(bytes(value))


def _kind(value: object) -> str:
    if isinstance(value, _BYTES):
        return opaque_kind(value).removeprefix("kubernetes.")
    return {bool: "bool", int: "int", float: "double", str: "string", list: "list", dict: "map",
            type(None): "null"}.get(type(value), type(value).__name__)


# -- encoding -----------------------------------------------------------------------------------

def encode_quantity(quantity: Quantity) -> bytes:
    return quantity_bytes(quantity.nanos)


_DIGIT_COMPLEMENT = bytes.maketrans(b"0123456789", b"9876543210")


@functools.lru_cache(maxsize=4096)  # devices share a few capacity values ("80Gi")
def quantity_bytes(nanos: int) -> bytes:
    """Exact and order-preserving: bytes comparison of two encodings orders them like the values.
    Sign letter, ten-digit digit count, digits; count and digits complemented for negative values.
    No NUL bytes: cel-expr-python cuts input bytes at the first NUL."""
    if nanos == 0:
        return _QUANTITY_TAG + b"b"
    digits = str(abs(nanos)).encode()
    if nanos > 0:
        return _QUANTITY_TAG + b"c" + b"%010d" % len(digits) + digits
    complement = b"%010d" % (9_999_999_999 - len(digits))
    return _QUANTITY_TAG + b"a" + complement + digits.translate(_DIGIT_COMPLEMENT)


def _decoded_nanos(value: bytes | bytearray) -> int:
    sign = value[2:3]
    if sign == b"b":
        return 0
    digits = bytes(value[13:])
    return int(digits) if sign == b"c" else -int(digits.translate(_DIGIT_COMPLEMENT))


def encode_semver(version: Semver) -> bytes:
    text = f"{version.major}.{version.minor}.{version.patch}"
    if version.prerelease:
        text += "-" + ".".join(map(str, version.prerelease))
    return _SEMVER_TAG + text.encode()


def _nanos(value: object, function: str, *others: object) -> int:
    if isinstance(value, _BYTES) and value[:2] == _QUANTITY_TAG:
        return _decoded_nanos(value)
    raise NoSuchOverload(function, value, *others)


@functools.lru_cache(maxsize=4096)
def _decoded_semver(value: bytes) -> Semver:
    return Semver.parse(value[2:].decode())


def _semver(value: object, function: str, *others: object) -> Semver:
    if isinstance(value, _BYTES) and value[:2] == _SEMVER_TAG:
        return _decoded_semver(bytes(value))
    raise NoSuchOverload(function, value, *others)


# -- quantity and semver ------------------------------------------------------------------------

@functools.lru_cache(maxsize=1024)  # cel-cpp calls quantity("40Gi") on every evaluation
def _quantity(text: str) -> bytes:
    return encode_quantity(Quantity.parse(text))


def _is_quantity(text: str) -> bool:
    try:
        Quantity.parse(text)
    except ValueError:
        return False
    return True


def _sign(value: bytes) -> int:
    nanos = _nanos(value, "sign")
    return (nanos > 0) - (nanos < 0)


def _compare(a: bytes, b: bytes, function: str) -> int:
    if a[:2] == b[:2] == _QUANTITY_TAG:
        return (a > b) - (a < b)  # the encoding is order-preserving
    if a[:2] == b[:2] == _SEMVER_TAG:
        return _decoded_semver(bytes(a)).compare(_decoded_semver(bytes(b)))
    raise NoSuchOverload(function, a, b)


def _as_integer(value: bytes) -> int:
    nanos = _nanos(value, "asInteger")
    whole, fraction = divmod(nanos, NANO)
    if fraction or not INT64_MIN <= whole <= INT64_MAX:
        raise ValueError("cannot convert value to integer")
    return whole


def _is_integer(value: bytes) -> bool:
    nanos = _nanos(value, "isInteger")
    return nanos % NANO == 0 and INT64_MIN <= nanos // NANO <= INT64_MAX


def _as_approximate_float(value: bytes) -> float:
    return Quantity(_nanos(value, "asApproximateFloat")).as_approximate_float()


def _add(a: bytes, b: bytes | int) -> bytes:
    if type(b) is int:
        return quantity_bytes(_nanos(a, "add", b) + b * NANO)
    return quantity_bytes(_nanos(a, "add", b) + _nanos(b, "add", a))


def _sub(a: bytes, b: bytes | int) -> bytes:
    if type(b) is int:
        return quantity_bytes(_nanos(a, "sub", b) - b * NANO)
    return quantity_bytes(_nanos(a, "sub", b) - _nanos(b, "sub", a))


@functools.lru_cache(maxsize=1024)
def _semver_of(text: str, normalize: bool = False) -> bytes:
    return encode_semver(Semver.parse(text, normalize=normalize))


def _is_semver(text: str, normalize: bool = False) -> bool:
    try:
        Semver.parse(text, normalize=normalize)
    except ValueError:
        return False
    return True


# -- lists, includes, regex --------------------------------------------------------------------

def cel_equal(a: object, b: object) -> bool:
    """CEL heterogeneous equality on the Python values cel-expr-python hands to functions."""
    if type(a) is bytearray:
        a = bytes(a)
    if type(b) is bytearray:
        b = bytes(b)
    ta, tb = type(a), type(b)
    if ta is bool or tb is bool:
        return ta is tb and a == b
    if ta in (int, float) and tb in (int, float):
        return a == b
    if type(a) is list and type(b) is list:
        return len(a) == len(b) and all(cel_equal(x, y) for x, y in zip(a, b, strict=True))
    if type(a) is dict and type(b) is dict:
        return a.keys() == b.keys() and all(cel_equal(a[k], b[k]) for k in a)
    return ta is tb and a == b


def _order_key(value: object, function: str) -> tuple[int, Any]:
    kind = type(value)
    if kind is bool:
        return (0, value)
    if kind in (int, float):
        return (1, value)
    if kind is str:
        return (2, value)
    if kind in _BYTES:
        data = bytes(cast("bytes | bytearray", value))
        if data[:2] == _QUANTITY_TAG:
            return (3, data)
        if data[:2] == _SEMVER_TAG:
            return (4, _decoded_semver(data))
        return (5, data)
    raise NoSuchOverload(function, value)


def _ordered(items: list[Any], function: str) -> list[tuple[int, Any]]:
    keys = [_order_key(item, function) for item in items]
    if len({k[0] for k in keys}) > 1:
        raise NoSuchOverload(function, items)
    return keys


def _is_sorted(items: list[Any]) -> bool:
    keys = _ordered(items, "isSorted")
    return all(not (b[1] < a[1]) for a, b in itertools.pairwise(keys))


def _extreme(items: list[Any], function: str, pick: Callable[[Any, Any], bool]) -> object:
    if not items:
        raise ValueError(f"{function} called on empty list")
    keys = _ordered(items, function)
    best = 0
    for i in range(1, len(items)):
        if pick(keys[i][1], keys[best][1]):
            best = i
    return items[best]


def _min(items: list[Any]) -> object:
    return _extreme(items, "min", lambda a, b: a < b)


def _max(items: list[Any]) -> object:
    return _extreme(items, "max", lambda a, b: a > b)


def _sum(items: list[Any]) -> int | float:
    if not items:
        return 0
    kinds = {type(item) for item in items}
    if kinds == {int}:
        total: int = sum(items)
        if not INT64_MIN <= total <= INT64_MAX:
            raise OverflowError("integer overflow")
        return total
    if kinds == {float}:
        return float(sum(items))
    raise NoSuchOverload("sum", items)


def _index_of(target: str | list[Any], item: object, offset: int | None = None) -> int:
    if isinstance(target, str):
        return _string_index_of(target, item, offset, last=False)
    return next((i for i, x in enumerate(target) if cel_equal(x, item)), -1)


def _last_index_of(target: str | list[Any], item: object, offset: int | None = None) -> int:
    if isinstance(target, str):
        return _string_index_of(target, item, offset, last=True)
    return next((i for i in range(len(target) - 1, -1, -1) if cel_equal(target[i], item)), -1)


def _string_index_of(text: str, sub: object, offset: int | None, last: bool) -> int:
    if not isinstance(sub, str):
        raise NoSuchOverload("lastIndexOf" if last else "indexOf", text, sub)
    return (strings_ext.last_index_of if last else strings_ext.index_of)(text, sub, offset)


def _includes(target: object, item: object) -> bool:
    if type(target) is list:
        return any(cel_equal(x, item) for x in target)
    return cel_equal(target, item)


@functools.lru_cache(maxsize=512)
def _regex(pattern: str) -> Any:
    problem = regexp_error(pattern)
    if problem is not None:
        raise ValueError(problem)
    return re2.compile(pattern, QUIET_RE2)


def _find(text: str, pattern: str) -> str:
    match = _regex(pattern).search(text)
    return match.group(0) if match else ""


def _find_all(text: str, pattern: str, limit: int = -1) -> list[str]:
    if limit == 0:
        return []
    found = [m.group(0) for m in _regex(pattern).finditer(text)]
    return found if limit < 0 else found[:limit]


# -- cel-go's lists extension (lists_ext) ----------------------------------------------------------

SORT_BY_KEYS = "_sortByKeys"  # what celexpr_backend expands sortBy to, as cel-go's @sortByAssociatedKeys


def _cel_kind(value: object) -> str:
    """The CEL type of a value as cel-expr-python hands it to a function (a uint looks like an int)."""
    if isinstance(value, _BYTES):
        return opaque_kind(value)
    return {bool: "bool", int: "int", float: "double", str: "string", list: "list", dict: "map",
            type(None): "null_type", datetime.datetime: "google.protobuf.Timestamp",
            datetime.timedelta: "google.protobuf.Duration"}.get(type(value), type(value).__name__)


def _lists_call(implementation: Callable[..., list[Any]]) -> Callable[..., list[Any]]:
    def call(*args: Any) -> list[Any]:
        try:
            return implementation(*args)
        except lists_ext.ListsError as err:
            raise ValueError(str(err)) from None

    return call


def _sorted_by_keys(items: list[Any], keys: list[Any]) -> list[Any]:
    return lists_ext.sorted_by_keys(items, keys, _cel_kind, lambda a, b: bool(a < b))


# transformMap and transformMapEntry as celexpr_backend expands them: the map of [key, value] pairs,
# and the union of single-entry maps, in order; a key seen before (by CEL equality) is an error.
MAP_FROM_PAIRS = "_mapFromPairs"
MAP_FROM_ENTRIES = "_mapFromEntries"


def _map_from(entries: list[Any], pairs: bool) -> dict[Any, Any]:
    result: dict[Any, Any] = {}
    for entry in entries:
        if not pairs and type(entry) is not dict:
            raise NoSuchOverload("cel.@mapInsert", result, entry)
        for key, value in ([entry] if pairs else entry.items()):
            if any(cel_equal(key, other) for other in result):
                shown = str(key).lower() if type(key) is bool else key
                raise ValueError(f"insert failed: key {shown} already exists")
            result[key] = value
    return result


_LISTS_FUNCTIONS: dict[str, Callable[..., list[Any]]] = {
    "slice": lists_ext.slice_of,
    "flatten": lambda items, depth=1: lists_ext.flattened(items, depth, lambda item: type(item) is list),
    "sort": lambda items: _sorted_by_keys(items, items),
    "distinct": lambda items: lists_ext.distinct(items, cel_equal),
    "reverse": lists_ext.reversed_list,
    "lists.range": lists_ext.list_range,
    SORT_BY_KEYS: _sorted_by_keys,
}


def _lists_declarations() -> dict[str, list[Any]]:
    L, N = T.LIST, T.INT
    call = {name: _lists_call(implementation) for name, implementation in _LISTS_FUNCTIONS.items()}
    return {
        "slice": [_member("slice", L, [L, N, N], call["slice"])],
        "flatten": [_member("flatten", L, [L], call["flatten"]),
                    _member("flatten", L, [L, N], call["flatten"])],
        "sort": [_member("sort", L, [L], call["sort"])],
        "distinct": [_member("distinct", L, [L], call["distinct"])],
        "reverse": [_member("reverse", L, [L], call["reverse"])],
        "lists.range": [_overload("lists_range_int", T.List(N), [N], call["lists.range"])],
        SORT_BY_KEYS: [_member(SORT_BY_KEYS, L, [L, L], call[SORT_BY_KEYS])],
        MAP_FROM_PAIRS: [_overload("map_from_pairs", T.MAP, [L], lambda items: _map_from(items, pairs=True))],
        MAP_FROM_ENTRIES: [_overload("map_from_entries", T.MAP, [L],
                                     lambda items: _map_from(items, pairs=False))],
    }


# Equality with a quantity add() or sub() returned: to cel-go that result is a pointer, which the
# Quantity and Semver equality of the Kubernetes library refuses ("no such overload"), any other
# value is merely unequal to it, and != is then always true. celexpr_backend calls these instead of
# == and != when the right operand is such a call.
ARITHMETIC_EQUALS = "_arithmeticEq"
ARITHMETIC_NOT_EQUALS = "_arithmeticNe"


def _equals_arithmetic_quantity(value: object, quantity: bytes) -> bool:
    if isinstance(value, _BYTES) and value[:2] in (_QUANTITY_TAG, _SEMVER_TAG):
        raise NoSuchOverload("_==_", value, quantity)
    return False


def _not_equals_arithmetic_quantity(value: object, quantity: bytes) -> bool:
    return True


# -- declarations ---------------------------------------------------------------------------------

# The run-time kinds a dyn argument can have (cel-expr-python needs one overload per kind).
_ANY_KINDS: Sequence[tuple[str, Any]] = (
    ("int", T.INT), ("uint", T.UINT), ("double", T.DOUBLE), ("string", T.STRING), ("bool", T.BOOL),
    ("bytes", T.BYTES), ("list", T.LIST), ("map", T.MAP), ("null", T.NULL),
)


def _overload(ident: str, result: Any, params: list[Any], impl: Callable[..., Any],
              member: bool = False) -> Any:
    return cel.Overload(ident, result, params, is_member=member, impl=impl)


def _member(name: str, result: Any, params: list[Any], impl: Callable[..., Any]) -> Any:
    ident = "_".join([name, *(str(p).lower().replace("<", "_").replace(">", "").replace(", ", "_")
                              for p in params)])
    return cel.Overload(ident, result, params, is_member=True, impl=impl)


def function_declarations() -> list[Any]:
    B, N, S, L = T.BYTES, T.INT, T.STRING, T.LIST
    decls: dict[str, list[Any]] = {
        "quantity": [_overload("quantity_string", B, [S], _quantity)],
        "isQuantity": [_overload("is_quantity_string", T.BOOL, [S], _is_quantity)],
        # A global function, as cel-go declares it: the member form the Kubernetes docs show does not
        # compile there.
        "sign": [_overload("sign_quantity", N, [B], _sign)],
        "compareTo": [_member("compareTo", N, [B, B], lambda a, b: _compare(a, b, "compareTo"))],
        "isGreaterThan": [_member("isGreaterThan", T.BOOL, [B, B],
                                  lambda a, b: _compare(a, b, "isGreaterThan") > 0)],
        "isLessThan": [_member("isLessThan", T.BOOL, [B, B], lambda a, b: _compare(a, b, "isLessThan") < 0)],
        "asInteger": [_member("asInteger", N, [B], _as_integer)],
        "isInteger": [_member("isInteger", T.BOOL, [B], _is_integer)],
        "asApproximateFloat": [_member("asApproximateFloat", T.DOUBLE, [B], _as_approximate_float)],
        "add": [_member("add", B, [B, B], _add), _member("add", B, [B, N], _add)],
        "sub": [_member("sub", B, [B, B], _sub), _member("sub", B, [B, N], _sub)],
        "semver": [_overload("semver_string", B, [S], _semver_of),
                   _overload("semver_string_bool", B, [S, T.BOOL], _semver_of)],
        "isSemver": [_overload("is_semver_string", T.BOOL, [S], _is_semver),
                     _overload("is_semver_string_bool", T.BOOL, [S, T.BOOL], _is_semver)],
        "major": [_member("major", N, [B], lambda v: _semver(v, "major").major)],
        "minor": [_member("minor", N, [B], lambda v: _semver(v, "minor").minor)],
        "patch": [_member("patch", N, [B], lambda v: _semver(v, "patch").patch)],
        "isSorted": [_member("isSorted", T.BOOL, [L], _is_sorted)],
        "sum": [_member("sum", T.DYN, [L], _sum)],
        "min": [_member("min", T.DYN, [L], _min)],
        "max": [_member("max", T.DYN, [L], _max)],
        "find": [_member("find", S, [S, S], _find)],
        "findAll": [_member("findAll", T.List(S), [S, S], _find_all),
                    _member("findAll", T.List(S), [S, S, N], _find_all)],
        RENAMED_MEMBER_FUNCTIONS["indexOf"]: [
            _member("indexOf", N, [S, S], _index_of), _member("indexOf", N, [S, S, N], _index_of),
            *(_member("indexOf", N, [L, kind], _index_of) for _, kind in _ANY_KINDS)],
        RENAMED_MEMBER_FUNCTIONS["lastIndexOf"]: [
            _member("lastIndexOf", N, [S, S], _last_index_of),
            _member("lastIndexOf", N, [S, S, N], _last_index_of),
            *(_member("lastIndexOf", N, [L, kind], _last_index_of) for _, kind in _ANY_KINDS)],
        "includes": [_member("includes", T.BOOL, [receiver, arg], _includes)
                     for _, receiver in _ANY_KINDS for _, arg in _ANY_KINDS],
        ARITHMETIC_EQUALS: [_overload(f"arithmetic_eq_{name}", T.BOOL, [kind, B], _equals_arithmetic_quantity)
                            for name, kind in _ANY_KINDS],
        ARITHMETIC_NOT_EQUALS: [
            _overload(f"arithmetic_ne_{name}", T.BOOL, [kind, B], _not_equals_arithmetic_quantity)
            for name, kind in _ANY_KINDS],
        **celexpr_net.function_declarations(),
        **_lists_declarations(),
        **celexpr_format.function_declarations(),
    }
    for name, overloads in (*celexpr_time.overloads().items(), *celexpr_conversions.overloads().items()):
        decls[name] = decls.get(name, []) + overloads
    return [cel.FunctionDecl(name, overloads) for name, overloads in decls.items()]
