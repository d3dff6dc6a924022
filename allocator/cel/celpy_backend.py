"""The portable CEL backend on cel-python (celpy), matching Kubernetes' DRA selector environment.

celpy has no type checker, no Kubernetes libraries and several semantic divergences from cel-go, so an
expression goes through three steps:

1. our parser (allocator.cel.parser) and a light static check that rejects what cel-go's checker rejects
   for this environment (undeclared names and functions, undefined `device` fields, operators on
   statically mismatched types such as `true == 1`, a non-bool result);
2. re-emission of the AST as celpy-compatible text in which every construct celpy gets wrong or lacks
   is a call to one of our functions (field selection and indexing, `has()`, optional chaining, the
   `sets.*`/`strings.*`/`optional.*` namespaces, member functions);
3. evaluation with celpy's InterpretedRunner (the CompiledRunner is not thread-safe), where the
   standard operators are replaced by implementations with cel-go's runtime semantics (heterogeneous
   equality, cross-type numeric ordering, strict bool logic) and every evaluation has a step budget.
"""

from __future__ import annotations

import itertools
import math
import operator
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import celpy
import celpy.celtypes as ct
import lark
import re2
from celpy.evaluation import CELEvalError, Evaluator

from allocator.cel.backend import CELCompileError, CELDevice, CELRuntimeError, CompileOptions
from allocator.cel.celpy_check import NAMESPACES, QUIET_RE2, Checker
from allocator.cel.parser import (
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
    qualified_name,
)
from allocator.quantity import Quantity
from allocator.semver import Semver

# Tree nodes celpy may visit while evaluating one selector on one device; typical selectors need
# 20-200. Upstream bounds evaluation by a runtime cost limit; this is our equivalent for celpy.
MAX_EVALUATION_STEPS = 200_000

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
UINT64_MAX = 2**64 - 1


# --------------------------------------------------------------------------------------------------
# Runtime values and errors


class LibraryError(ValueError):
    """A runtime error raised by one of our functions; its message is shown to the user as is."""


class NoOverload(TypeError):
    """No implementation for the argument types (cel-go: "no such overload")."""


# celpy turns only some exception classes into CEL errors, depending on the construct (an index
# expression catches KeyError and IndexError, a function call ValueError), so lookups raise both kinds.
class MissingKey(LibraryError, KeyError):
    """A map has no such key."""


class IndexOutOfRange(LibraryError, IndexError):
    """A list index outside the list."""


class EvaluationBudgetExceeded(Exception):
    """Raised out of the evaluator once an evaluation used up its step budget."""


@dataclass(frozen=True, slots=True)
class Optional:
    """A CEL optional value (`optional.of(x)` / `optional.none()`)."""

    present: bool
    value: Any = None


OPTIONAL_NONE = Optional(False)


def _kind(value: object) -> str:
    """The CEL type name of a runtime value (celpy's types, or the plain Python ones they derive from)."""
    if isinstance(value, (bool, ct.BoolType)):
        return "bool"
    if isinstance(value, ct.UintType):
        return "uint"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bytes):
        return "bytes"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "map"
    if value is None or isinstance(value, ct.NullType):
        return "null_type"
    if isinstance(value, Quantity):
        return "kubernetes.Quantity"
    if isinstance(value, Semver):
        return "kubernetes.Semver"
    if isinstance(value, Optional):
        return "optional_type"
    if isinstance(value, ct.TimestampType):
        return "google.protobuf.Timestamp"
    if isinstance(value, ct.DurationType):
        return "google.protobuf.Duration"
    if isinstance(value, type):
        return "type"
    return type(value).__name__


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, (bool, ct.BoolType))


def _plain(number: Any) -> int | float:
    # celpy's numeric types refuse to compare across int/uint/double; Python's own types do it exactly.
    return float(number) if isinstance(number, float) else int(number)


def _no_overload(function: str, *args: object) -> NoOverload:
    return NoOverload(f"no such overload: {function}({', '.join(_kind(a) for a in args)})")


def cel_equals(a: object, b: object) -> bool:
    """cel-go's heterogeneous equality: numbers compare by value across int/uint/double, other
    values of different types are simply unequal (never an error)."""
    if _is_number(a) and _is_number(b):
        return _plain(a) == _plain(b)  # Python compares int and float exactly
    kind = _kind(a)
    if kind != _kind(b):
        return False
    if kind == "list":
        return len(a) == len(b) and all(cel_equals(x, y) for x, y in zip(a, b, strict=True))  # type: ignore
    if kind == "map":
        if len(a) != len(b):  # type: ignore[arg-type]
            return False
        for key, value in a.items():  # type: ignore[union-attr]
            found = _map_find(b, key)  # type: ignore[arg-type]
            if found is None or not cel_equals(value, found[0]):
                return False
        return True
    if kind == "optional_type":
        return a.present == b.present and (not a.present or cel_equals(a.value, b.value))  # type: ignore
    return bool(a == b)


def _map_find(mapping: dict, key: object) -> tuple[Any] | None:
    """Look a key up with CEL key equality (1 and 1u and 1.0 name the same entry)."""
    if _kind(key) in ("string", "bool") and dict.__contains__(mapping, key):
        return (dict.__getitem__(mapping, key),)
    for candidate, value in mapping.items():
        if cel_equals(candidate, key):
            return (value,)
    return None


_ORDERED_KINDS = {"bool", "string", "bytes", "google.protobuf.Timestamp", "google.protobuf.Duration"}


def _ordered(function: str, a: object, b: object) -> tuple[Any, Any]:
    if _is_number(a) and _is_number(b):
        return _plain(a), _plain(b)
    kind = _kind(a)
    if kind == _kind(b) and kind in _ORDERED_KINDS:
        return (int(a), int(b)) if kind == "bool" else (a, b)  # type: ignore[call-overload]
    raise _no_overload(function, a, b)


def _relation(function: str, compare: Callable[[Any, Any], bool]) -> Callable[[Any, Any], Any]:
    def implementation(a: Any, b: Any) -> Any:
        if isinstance(a, CELEvalError):
            return a
        if isinstance(b, CELEvalError):
            return b
        x, y = _ordered(function, a, b)
        return ct.BoolType(compare(x, y))

    implementation.__name__ = function
    return implementation


def _equality(negate: bool) -> Callable[[Any, Any], Any]:
    def implementation(a: Any, b: Any) -> Any:
        if isinstance(a, CELEvalError):
            return a
        if isinstance(b, CELEvalError):
            return b
        return ct.BoolType(cel_equals(a, b) != negate)

    return implementation


def _in(item: Any, container: Any) -> Any:
    if isinstance(item, CELEvalError):
        return item
    if isinstance(container, CELEvalError):
        return container
    if isinstance(container, list):
        return ct.BoolType(any(cel_equals(item, element) for element in container))
    if isinstance(container, dict):
        return ct.BoolType(_map_find(container, item) is not None)
    raise _no_overload("_in_", item, container)


def _logical(is_and: bool) -> Callable[[Any, Any], Any]:
    # CEL's commutative && and ||: the deciding value wins over an error on the other side, an error
    # wins over the non-deciding value, and a non-bool operand is an error (celpy would pass it through).
    decisive = not is_and

    def implementation(a: Any, b: Any) -> Any:
        for value in (a, b):
            if _kind(value) == "bool" and bool(value) == decisive:
                return ct.BoolType(decisive)
        for value in (a, b):
            if isinstance(value, CELEvalError):
                return value
        for value in (a, b):
            if _kind(value) != "bool":
                return CELEvalError(f"no such overload: {'_&&_' if is_and else '_||_'} on {_kind(value)}",
                                    NoOverload, (f"no such overload: logical operator on {_kind(value)}",))
        return ct.BoolType(not decisive)

    return implementation


def _not(value: Any) -> Any:
    if isinstance(value, CELEvalError):
        return value
    if _kind(value) != "bool":
        raise _no_overload("!_", value)
    return ct.BoolType(not value)


def _condition(value: Any) -> Any:
    if _kind(value) != "bool":
        raise _no_overload("_?_:_", value)
    return ct.BoolType(value)


_ARITHMETIC_KINDS = {
    "_+_": {"int", "uint", "double", "string", "bytes", "list"},
    "_-_": {"int", "uint", "double"},
    "_*_": {"int", "uint", "double"},
    "_/_": {"int", "uint", "double"},
    "_%_": {"int", "uint"},
}
_TIME_KINDS = {"google.protobuf.Timestamp", "google.protobuf.Duration"}


def _arithmetic(function: str, implementation: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    allowed = _ARITHMETIC_KINDS[function]

    def checked(a: Any, b: Any) -> Any:
        if isinstance(a, CELEvalError):
            return a
        if isinstance(b, CELEvalError):
            return b
        kind_a, kind_b = _kind(a), _kind(b)
        if not ((kind_a == kind_b and kind_a in allowed) or
                (function in ("_+_", "_-_") and kind_a in _TIME_KINDS and kind_b in _TIME_KINDS)):
            raise _no_overload(function, a, b)
        if kind_a == "list":
            return ct.ListType([*a, *b])
        return _CEL_TYPES.get(kind_a, _same)(implementation(a, b))

    return checked


def _negate(value: Any) -> Any:
    if isinstance(value, CELEvalError):
        return value
    kind = _kind(value)
    if kind not in ("int", "double", "google.protobuf.Duration"):
        raise _no_overload("-_", value)
    return _CEL_TYPES.get(kind, _same)(-value)


def _same(value: Any) -> Any:
    return value


# Python arithmetic on celpy values can produce plain Python values; results are wrapped back (the
# constructors also enforce the 64-bit ranges).
_CEL_TYPES: dict[str, Callable[[Any], Any]] = {
    "int": ct.IntType, "uint": ct.UintType, "double": ct.DoubleType,
    "string": ct.StringType, "bytes": ct.BytesType,
}


def _index(container: Any, key: Any) -> Any:
    if isinstance(container, list):
        if not _is_number(key) or (isinstance(key, ct.DoubleType) and not float(key).is_integer()):
            raise _no_overload("_[_]", container, key)
        position = int(key)
        if not 0 <= position < len(container):
            raise IndexOutOfRange(f"index out of range: {position}")
        return container[position]
    if isinstance(container, dict):
        if isinstance(key, str) and dict.__contains__(container, key):
            return dict.__getitem__(container, key)
        if isinstance(container, (DomainMap, DomainValues)):
            return container.__missing__(key)  # the Kubernetes missing-domain / missing-name rules
        found = _map_find(container, key)
        if found is None:
            raise MissingKey(f"no such key: {_to_display(key)}")
        return found[0]
    raise _no_overload("_[_]", container, key)


def _select(container: Any, field: Any) -> Any:
    if not isinstance(container, dict):
        raise NoOverload(f"type '{_kind(container)}' does not support field selection")
    return _index(container, field)


def _has(container: Any, field: Any) -> Any:
    if isinstance(container, Optional):
        if not container.present:
            return ct.BoolType(False)
        container = container.value
    if not isinstance(container, dict):
        raise NoOverload(f"type '{_kind(container)}' does not support field presence tests")
    return ct.BoolType(field in container)


def _optional_qualify(container: Any, key: Any) -> Any:
    # After `.?`/`[?` every following qualifier of the chain is a presence test too (as in cel-go).
    if isinstance(container, Optional):
        if not container.present:
            return container
        container = container.value
    if isinstance(container, dict):
        if isinstance(key, str) and dict.__contains__(container, key):
            return Optional(True, dict.__getitem__(container, key))
        found = _map_find(container, key)
        return OPTIONAL_NONE if found is None else Optional(True, found[0])
    if isinstance(container, list) and _is_number(key):
        position = int(key)
        return Optional(True, container[position]) if 0 <= position < len(container) else OPTIONAL_NONE
    raise _no_overload("_[?_]", container, key)


def _range(value: Any) -> Any:
    if not isinstance(value, (list, dict)):
        raise NoOverload(f"expression of type '{_kind(value)}' cannot be the range of a comprehension")
    return value


def _first(values: Any) -> Any:
    return values[0]


def _size(value: Any) -> Any:
    if isinstance(value, (str, bytes, list, dict)):
        return ct.IntType(len(value))
    raise _no_overload("size", value)


# --------------------------------------------------------------------------------------------------
# The Kubernetes libraries (quantity, semver, lists, regex), ext.Strings, ext.Sets and optionals


def _require(value: Any, kinds: type | tuple[type, ...], function: str, *others: Any) -> None:
    if not isinstance(value, kinds) or (kinds is ct.IntType and isinstance(value, ct.BoolType)):
        raise _no_overload(function, value, *others)


def _quantity(text: Any) -> Quantity:
    _require(text, str, "quantity")
    try:
        return Quantity.parse(str(text))
    except ValueError as err:
        raise LibraryError(str(err)) from None


def _is_quantity(text: Any) -> Any:
    _require(text, str, "isQuantity")
    try:
        Quantity.parse(str(text))
    except ValueError:
        return ct.BoolType(False)
    return ct.BoolType(True)


def _semver(text: Any, normalize: Any = None) -> Semver:
    _require(text, str, "semver")
    try:
        return Semver.parse(str(text), normalize=bool(normalize))
    except ValueError as err:
        raise LibraryError(str(err)) from None


def _is_semver(text: Any, normalize: Any = None) -> Any:
    _require(text, str, "isSemver")
    try:
        Semver.parse(str(text), normalize=bool(normalize))
    except ValueError:
        return ct.BoolType(False)
    return ct.BoolType(True)


def _compare(function: str, a: Any, b: Any) -> int:
    if isinstance(a, Quantity) and isinstance(b, Quantity):
        return (a > b) - (a < b)
    if isinstance(a, Semver) and isinstance(b, Semver):
        return a.compare(b)
    raise _no_overload(function, a, b)


def _compare_to(a: Any, b: Any) -> Any:
    return ct.IntType(_compare("compareTo", a, b))


def _is_greater_than(a: Any, b: Any) -> Any:
    return ct.BoolType(_compare("isGreaterThan", a, b) > 0)


def _is_less_than(a: Any, b: Any) -> Any:
    return ct.BoolType(_compare("isLessThan", a, b) < 0)


def _quantity_operand(function: str, a: Any, b: Any) -> Quantity:
    _require(a, Quantity, function, b)
    if isinstance(b, Quantity):
        return b
    if isinstance(b, ct.IntType) and not isinstance(b, ct.BoolType):
        return Quantity.from_fraction(int(b))
    raise _no_overload(function, a, b)


def _add_quantity(a: Any, b: Any) -> Quantity:
    return a + _quantity_operand("add", a, b)


def _sub_quantity(a: Any, b: Any) -> Quantity:
    return a - _quantity_operand("sub", a, b)


def _quantity_method(function: str, convert: Callable[[Quantity], Any]) -> Callable[[Any], Any]:
    def implementation(value: Any) -> Any:
        _require(value, Quantity, function)
        try:
            return convert(value)
        except ValueError as err:
            raise LibraryError(str(err)) from None

    return implementation


def _semver_part(function: str) -> Callable[[Any], Any]:
    def implementation(value: Any) -> Any:
        _require(value, Semver, function)
        return ct.IntType(getattr(value, function))

    return implementation


def _string_method(function: str, method: Callable[..., Any], *kinds: type) -> Callable[..., Any]:
    def implementation(value: Any, *args: Any) -> Any:
        _require(value, str, function, *args)
        for arg, kind in zip(args, kinds, strict=False):
            _require(arg, kind, function, value, *args)
        return method(str(value), *args)

    return implementation


def _char_at(text: str, index: Any) -> Any:
    if not 0 <= index <= len(text):
        raise LibraryError(f"index out of range: {index}")
    return ct.StringType(text[index : index + 1])


def _index_of(text: str, sub: Any, offset: Any = 0) -> Any:
    if not 0 <= offset <= len(text):
        raise LibraryError(f"index out of range: {offset}")
    return ct.IntType(text.find(str(sub), int(offset)))


def _last_index_of(text: str, sub: Any, offset: Any = None) -> Any:
    end = len(text) if offset is None else int(offset)
    if not 0 <= end <= len(text):
        raise LibraryError(f"index out of range: {end}")
    return ct.IntType(text.rfind(str(sub), 0, end + len(sub)))


def _ascii_case(upper: bool) -> Callable[[str], Any]:
    source, target = ("abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")
    table = str.maketrans(source, target) if upper else str.maketrans(target, source)
    return lambda text: ct.StringType(text.translate(table))


def _replace(text: str, old: Any, new: Any, count: Any = -1) -> Any:
    return ct.StringType(text.replace(str(old), str(new), int(count) if count >= 0 else -1))


def _split(text: str, separator: Any, limit: Any = -1) -> Any:
    limit = int(limit)
    if limit == 0:
        return ct.ListType([])
    if separator == "":
        parts = list(text)
        if 0 < limit < len(parts):
            parts = [*parts[: limit - 1], "".join(parts[limit - 1 :])]
    else:
        parts = text.split(str(separator), limit - 1 if limit > 0 else -1)
    return ct.ListType([ct.StringType(p) for p in parts])


def _substring(text: str, start: Any, end: Any = None) -> Any:
    stop = len(text) if end is None else int(end)
    if not 0 <= start <= len(text) or not 0 <= stop <= len(text) or start > stop:
        raise LibraryError(f"substring out of range: start={start}, end={stop}, length={len(text)}")
    return ct.StringType(text[int(start) : stop])


def _trim(text: str) -> Any:
    return ct.StringType(text.strip())


def _join(values: Any, separator: Any = "") -> Any:
    _require(values, list, "join")
    _require(separator, str, "join")
    if not all(isinstance(v, str) for v in values):
        raise _no_overload("join", values)
    return ct.StringType(str(separator).join(values))


_GO_QUOTE_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t",
                     "\v": "\\v", "\\": "\\\\", '"': '\\"'}


def _quote(text: Any) -> Any:
    _require(text, str, "strings.quote")
    out = []
    for char in str(text):
        if char in _GO_QUOTE_ESCAPES:
            out.append(_GO_QUOTE_ESCAPES[char])
        elif char.isprintable():
            out.append(char)
        elif ord(char) < 0x10000:
            out.append(f"\\u{ord(char):04x}" if ord(char) > 0xFF else f"\\x{ord(char):02x}")
        else:
            out.append(f"\\U{ord(char):08x}")
    return ct.StringType('"' + "".join(out) + '"')


_FORMAT_VERB = re.compile(r"%(?:\.(\d+))?([sdfeboxX%])")


def _format(template: Any, args: Any) -> Any:
    _require(template, str, "format")
    _require(args, list, "format")
    values = iter(args)
    pieces: list[str] = []
    last = 0
    for match in _FORMAT_VERB.finditer(template):
        pieces.append(template[last : match.start()])
        last = match.end()
        precision, verb = match.groups()
        if verb == "%":
            pieces.append("%")
            continue
        try:
            value = next(values)
        except StopIteration:
            raise LibraryError(f"format: not enough arguments for {template!r}") from None
        pieces.append(_format_value(verb, precision, value))
    pieces.append(template[last:])
    if next(values, None) is not None:
        raise LibraryError(f"format: too many arguments for {template!r}")
    return ct.StringType("".join(pieces))


def _format_value(verb: str, precision: str | None, value: Any) -> str:
    if verb == "s":
        return _to_display(value)
    if verb in "fe":
        if not _is_number(value):
            raise LibraryError(f"format: %{verb} needs a number, got {_kind(value)}")
        return f"{float(value):.{int(precision or 6)}{verb}}"
    if not _is_number(value) or isinstance(value, float):
        raise LibraryError(f"format: %{verb} needs an integer, got {_kind(value)}")
    return format(int(value), {"d": "d", "b": "b", "o": "o", "x": "x", "X": "X"}[verb])


def _to_display(value: Any) -> str:
    if isinstance(value, ct.BoolType):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_to_display(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_to_display(k)}: {_to_display(v)}" for k, v in value.items()) + "}"
    if value is None:
        return "null"
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def _list_method(function: str, scan: Callable[..., Any]) -> Callable[..., Any]:
    def implementation(values: Any, *args: Any) -> Any:
        _require(values, list, function, *args)
        return scan(values, *args)

    return implementation


def _is_sorted(values: list) -> Any:
    return ct.BoolType(not any(_less(b, a) for a, b in itertools.pairwise(values)))


def _less(a: Any, b: Any) -> bool:
    x, y = _ordered("<", a, b)
    return bool(x < y)


def _sum(values: list) -> Any:
    if not values:
        return ct.IntType(0)
    total = values[0]
    for value in values[1:]:
        total = _arithmetic("_+_", operator.add)(total, value)
    if isinstance(total, (str, bytes, list)):
        raise _no_overload("sum", values)
    return total


def _extreme(function: str, pick_less: bool) -> Callable[[list], Any]:
    def implementation(values: list) -> Any:
        if not values:
            raise LibraryError(f"{function} called on empty list")
        best = values[0]
        for value in values[1:]:
            if _less(value, best) == pick_less and not cel_equals(value, best):
                best = value
        return best

    return implementation


def _list_index_of(values: list, item: Any) -> Any:
    return ct.IntType(next((i for i, v in enumerate(values) if cel_equals(v, item)), -1))


def _list_last_index_of(values: list, item: Any) -> Any:
    return ct.IntType(next((i for i in range(len(values) - 1, -1, -1) if cel_equals(values[i], item)), -1))


def _index_of_any(value: Any, *args: Any) -> Any:
    if isinstance(value, list):
        return _list_index_of(value, *args)
    return _string_method("indexOf", _index_of, str, ct.IntType)(value, *args)


def _last_index_of_any(value: Any, *args: Any) -> Any:
    if isinstance(value, list):
        return _list_last_index_of(value, *args)
    return _string_method("lastIndexOf", _last_index_of, str, ct.IntType)(value, *args)


def _compiled_regex(pattern: Any) -> Any:
    try:
        return re2.compile(str(pattern), QUIET_RE2)
    except re2.error as err:
        raise LibraryError(f"invalid regular expression {str(pattern)!r}: {err}") from None


def _matches(text: Any, pattern: Any) -> Any:
    _require(text, str, "matches", pattern)
    _require(pattern, str, "matches", text)
    return ct.BoolType(_compiled_regex(pattern).search(str(text)) is not None)


def _find(text: Any, pattern: Any) -> Any:
    _require(text, str, "find", pattern)
    _require(pattern, str, "find", text)
    match = _compiled_regex(pattern).search(str(text))
    return ct.StringType(match.group(0) if match else "")


def _find_all(text: Any, pattern: Any, limit: Any = -1) -> Any:
    _require(text, str, "findAll", pattern)
    _require(pattern, str, "findAll", text)
    found = []
    for match in _compiled_regex(pattern).finditer(str(text)):
        if 0 <= limit <= len(found):
            break
        found.append(ct.StringType(match.group(0)))
    return ct.ListType(found)


def _contains(value: Any, item: Any) -> Any:
    _require(value, str, "contains", item)
    _require(item, str, "contains", value)
    return ct.BoolType(str(item) in str(value))


def _starts_with(value: Any, prefix: Any) -> Any:
    _require(value, str, "startsWith", prefix)
    _require(prefix, str, "startsWith", value)
    return ct.BoolType(str(value).startswith(str(prefix)))


def _ends_with(value: Any, suffix: Any) -> Any:
    _require(value, str, "endsWith", suffix)
    _require(suffix, str, "endsWith", value)
    return ct.BoolType(str(value).endswith(str(suffix)))


def _sets(function: str, test: Callable[[list, list], bool]) -> Callable[[Any, Any], Any]:
    def implementation(a: Any, b: Any) -> Any:
        _require(a, list, function, b)
        _require(b, list, function, a)
        return ct.BoolType(test(a, b))

    return implementation


def _subset(container: list, items: list) -> bool:
    return all(any(cel_equals(item, c) for c in container) for item in items)


def _includes(value: Any, item: Any) -> Any:
    if isinstance(value, list):
        return ct.BoolType(any(cel_equals(element, item) for element in value))
    return ct.BoolType(cel_equals(value, item))


def _optional_of(value: Any) -> Optional:
    return Optional(True, value)


def _optional_of_non_zero(value: Any) -> Optional:
    is_zero = (value is None or (isinstance(value, (str, bytes, list, dict)) and len(value) == 0)
               or (_is_number(value) and value == 0) or (isinstance(value, ct.BoolType) and not value))
    return OPTIONAL_NONE if is_zero else Optional(True, value)


def _optional_none() -> Optional:
    return OPTIONAL_NONE


def _optional_method(function: str, implementation: Callable[..., Any]) -> Callable[..., Any]:
    def checked(value: Any, *args: Any) -> Any:
        _require(value, Optional, function, *args)
        return implementation(value, *args)

    return checked


def _optional_value(value: Optional) -> Any:
    if not value.present:
        raise LibraryError("optional.none() dereference")
    return value.value


def _optional_elements(values: Any, optional_positions: Any) -> Any:
    result = []
    for position, value in enumerate(values):
        if position in optional_positions:
            _require(value, Optional, "optional list element")
            if value.present:
                result.append(value.value)
        else:
            result.append(value)
    return ct.ListType(result)


# Functions callable by name from the emitted text: the operators celpy dispatches to, our helpers
# (prefixed "__", not reachable from user expressions since the checker rejects such names), global
# functions, and member functions as "__m_<name>" (the receiver is the first argument).
FUNCTIONS: dict[str, Callable[..., Any]] = {
    "_==_": _equality(negate=False),
    "_!=_": _equality(negate=True),
    "_<_": _relation("_<_", operator.lt),
    "_<=_": _relation("_<=_", operator.le),
    "_>_": _relation("_>_", operator.gt),
    "_>=_": _relation("_>=_", operator.ge),
    "_in_": _in,
    "_&&_": _logical(is_and=True),
    "_||_": _logical(is_and=False),
    "!_": _not,
    "-_": _negate,
    "_+_": _arithmetic("_+_", operator.add),
    "_-_": _arithmetic("_-_", operator.sub),
    "_*_": _arithmetic("_*_", operator.mul),
    "_/_": _arithmetic("_/_", operator.truediv),
    "_%_": _arithmetic("_%_", operator.mod),
    "_[_]": _index,
    "__select": _select,
    "__has": _has,
    "__opt_qualify": _optional_qualify,
    "__range": _range,
    "__cond": _condition,
    "__first": _first,
    "__optional_elements": _optional_elements,
    "__sets_contains": _sets("sets.contains", _subset),
    "__sets_equivalent": _sets("sets.equivalent", lambda a, b: _subset(a, b) and _subset(b, a)),
    "__sets_intersects": _sets("sets.intersects", lambda a, b: any(_in(x, a) for x in b)),
    "__strings_quote": _quote,
    "__optional_of": _optional_of,
    "__optional_ofNonZeroValue": _optional_of_non_zero,
    "__optional_none": _optional_none,
    "size": _size,
    "matches": _matches,
    "quantity": _quantity,
    "isQuantity": _is_quantity,
    "semver": _semver,
    "isSemver": _is_semver,
    "__m_size": _size,
    "__m_contains": _contains,
    "__m_startsWith": _starts_with,
    "__m_endsWith": _ends_with,
    "__m_matches": _matches,
    "__m_find": _find,
    "__m_findAll": _find_all,
    "__m_compareTo": _compare_to,
    "__m_isGreaterThan": _is_greater_than,
    "__m_isLessThan": _is_less_than,
    "__m_add": _add_quantity,
    "__m_sub": _sub_quantity,
    "__m_isInteger": _quantity_method("isInteger", lambda q: ct.BoolType(q.is_integer())),
    "__m_asInteger": _quantity_method("asInteger", lambda q: ct.IntType(q.as_integer())),
    "__m_asApproximateFloat": _quantity_method("asApproximateFloat",
                                               lambda q: ct.DoubleType(q.as_approximate_float())),
    "__m_sign": _quantity_method("sign", lambda q: ct.IntType(q.sign())),
    "__m_major": _semver_part("major"),
    "__m_minor": _semver_part("minor"),
    "__m_patch": _semver_part("patch"),
    "__m_charAt": _string_method("charAt", _char_at, ct.IntType),
    "__m_indexOf": _index_of_any,
    "__m_lastIndexOf": _last_index_of_any,
    "__m_lowerAscii": _string_method("lowerAscii", _ascii_case(upper=False)),
    "__m_upperAscii": _string_method("upperAscii", _ascii_case(upper=True)),
    "__m_replace": _string_method("replace", _replace, str, str, ct.IntType),
    "__m_split": _string_method("split", _split, str, ct.IntType),
    "__m_substring": _string_method("substring", _substring, ct.IntType, ct.IntType),
    "__m_trim": _string_method("trim", _trim),
    "__m_join": _join,
    "__m_format": _format,
    "__m_isSorted": _list_method("isSorted", _is_sorted),
    "__m_sum": _list_method("sum", _sum),
    "__m_min": _list_method("min", _extreme("min", pick_less=True)),
    "__m_max": _list_method("max", _extreme("max", pick_less=False)),
    "__m_includes": _includes,
    "__m_hasValue": _optional_method("hasValue", lambda o: ct.BoolType(o.present)),
    "__m_value": _optional_method("value", _optional_value),
    "__m_orValue": _optional_method("orValue", lambda o, default: o.value if o.present else default),
    "__m_or": _optional_method("or", lambda o, other: o if o.present else other),
}


# --------------------------------------------------------------------------------------------------
# Emission of celpy-compatible text


def _string_literal(value: str) -> str:
    out = []
    for char in value:
        code = ord(char)
        if char in "\\'":
            out.append("\\" + char)
        elif 0x20 <= code < 0x7F:
            out.append(char)
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    return "'" + "".join(out) + "'"


def _bytes_literal(value: bytes) -> str:
    return "b'" + "".join(f"\\x{b:02x}" for b in value) + "'"


def _literal(node: Literal) -> str:
    value = node.value
    if node.kind == "bool":
        return "true" if value else "false"
    if node.kind == "null":
        return "null"
    if node.kind == "string":
        return _string_literal(str(value))
    if node.kind == "bytes":
        return _bytes_literal(value)  # type: ignore[arg-type]
    if node.kind == "uint":
        return f"{value}u"
    if node.kind == "double":
        number = float(value)  # type: ignore[arg-type]
        if math.isinf(number):
            return "1e999" if number > 0 else "-1e999"
        return repr(number)
    return str(value)


_INFIX = {"_==_": "==", "_!=_": "!=", "_<_": "<", "_<=_": "<=", "_>_": ">", "_>=_": ">=", "@in": "in",
          "_&&_": "&&", "_||_": "||", "_+_": "+", "_-_": "-", "_*_": "*", "_/_": "/", "_%_": "%"}


def _optional_chain(node: Node) -> bool:
    """True when a field selection/index applies to a chain that contains `.?` or `[?`."""
    while isinstance(node, (Select, Index)):
        if node.optional:
            return True
        node = node.operand
    return False


# Precedence levels of the emitted text; an operand is parenthesized only when the grammar needs it.
_TERNARY, _OR, _AND, _RELATION, _ADDITION, _MULTIPLICATION, _UNARY, _MEMBER = range(1, 9)
_INFIX_LEVEL = {"_||_": _OR, "_&&_": _AND, "_+_": _ADDITION, "_-_": _ADDITION, "_*_": _MULTIPLICATION,
                "_/_": _MULTIPLICATION, "_%_": _MULTIPLICATION,
                **dict.fromkeys(("_==_", "_!=_", "_<_", "_<=_", "_>_", "_>=_", "@in"), _RELATION)}
_DEVICE_FIELDS = {"driver", "attributes", "capacity", "allowMultipleAllocations"}


def emit(node: Node) -> str:
    """celpy-compatible CEL text for a checked AST."""
    return _emit(node)[0]


def _at_least(node: Node, level: int) -> str:
    text, own = _emit(node)
    return text if own >= level else f"({text})"


def _emit(node: Node) -> tuple[str, int]:
    if isinstance(node, Literal):
        text = _literal(node)
        return text, _UNARY if text.startswith("-") else _MEMBER
    if isinstance(node, Ident):
        return node.name, _MEMBER
    if isinstance(node, Select):
        if node.optional or _optional_chain(node.operand):
            return f"__opt_qualify({emit(node.operand)}, {_string_literal(node.field)})", _MEMBER
        if isinstance(node.operand, Ident) and node.operand.name == "device" and node.field in _DEVICE_FIELDS:
            return f"device.{node.field}", _MEMBER  # always present: celpy's own selection cannot fail
        return f"__select({emit(node.operand)}, {_string_literal(node.field)})", _MEMBER
    if isinstance(node, Index):
        if node.optional or _optional_chain(node.operand):
            return f"__opt_qualify({emit(node.operand)}, {emit(node.index)})", _MEMBER
        return f"{_at_least(node.operand, _MEMBER)}[{emit(node.index)}]", _MEMBER
    if isinstance(node, Has):
        return f"__has({emit(node.select.operand)}, {_string_literal(node.select.field)})", _MEMBER
    if isinstance(node, ListExpr):
        elements = "[" + ", ".join(emit(e) for e in node.elements) + "]"
        if node.optional_indices:
            positions = ", ".join(str(i) for i in node.optional_indices)
            return f"__optional_elements({elements}, [{positions}])", _MEMBER
        return elements, _MEMBER
    if isinstance(node, MapExpr):
        return "{" + ", ".join(f"{emit(e.key)}: {emit(e.value)}" for e in node.entries) + "}", _MEMBER
    if isinstance(node, Comprehension):
        return _emit_comprehension(node), _MEMBER
    if isinstance(node, Call):
        return _emit_call(node)
    raise TypeError(f"unexpected AST node {type(node).__name__}")


def _emit_comprehension(node: Comprehension) -> str:
    if node.macro == "bind":
        # celpy has no cel.bind; a one-element map() binds the variable the same way.
        return f"__first([{emit(node.target)}].map({node.var}, {emit(node.args[0])}))"
    target = f"__range({emit(node.target)})"
    if node.macro == "map" and len(node.args) == 2:
        predicate, transform = node.args
        return f"{target}.filter({node.var}, {emit(predicate)}).map({node.var}, {emit(transform)})"
    return f"{target}.{node.macro}({node.var}, {emit(node.args[0])})"


def _emit_call(node: Call) -> tuple[str, int]:
    name = node.function
    if name in _INFIX:
        level = _INFIX_LEVEL[name]
        left, right = node.args
        return f"{_at_least(left, level)} {_INFIX[name]} {_at_least(right, level + 1)}", level
    if name in ("!_", "-_"):
        return f"{name[0]}{_at_least(node.args[0], _UNARY)}", _UNARY
    if name == "_?_:_":
        condition, then, otherwise = node.args
        return (f"__cond({emit(condition)}) ? {_at_least(then, _OR)} : {_at_least(otherwise, _TERNARY)}",
                _TERNARY)
    args = [emit(arg) for arg in node.args]
    namespace = qualified_name(node.target) if node.target is not None else None
    if namespace in NAMESPACES:
        return f"__{namespace}_{name}({', '.join(args)})", _MEMBER
    if node.target is None:
        return f"{name}({', '.join(args)})", _MEMBER
    return f"__m_{name}({', '.join([emit(node.target), *args])})", _MEMBER


# --------------------------------------------------------------------------------------------------
# Device conversion


class DomainMap(ct.MapType):
    """`device.attributes` / `device.capacity`: an unknown domain is an empty map, as upstream."""

    def __missing__(self, key: object) -> ct.MapType:
        return ct.MapType()


class DomainValues(ct.MapType):
    """The attributes or capacities of one domain: an unknown name is a "no such key" error."""

    def __missing__(self, key: object) -> Any:
        raise MissingKey(f"no such key: {key!s} (test for it with has() or use optional chaining: "
                           f".?{key!s})")


def _to_cel(value: object) -> Any:
    if isinstance(value, bool):
        return ct.BoolType(value)
    if isinstance(value, int):
        return ct.IntType(value)
    if isinstance(value, str):
        return ct.StringType(value)
    if isinstance(value, list):
        return ct.ListType([_to_cel(v) for v in value])
    return value  # Semver and Quantity are used as they are


def device_to_cel(device: CELDevice) -> ct.MapType:
    def domains(by_domain: dict[str, dict[str, Any]]) -> DomainMap:
        return DomainMap({
            ct.StringType(domain): DomainValues({ct.StringType(n): _to_cel(v) for n, v in values.items()})
            for domain, values in by_domain.items()
        })

    return ct.MapType({
        ct.StringType("driver"): ct.StringType(device.driver),
        ct.StringType("attributes"): domains(device.attributes),
        ct.StringType("capacity"): domains(device.capacity),
        ct.StringType("allowMultipleAllocations"): ct.BoolType(device.allow_multiple_allocations),
    })


# --------------------------------------------------------------------------------------------------
# The runner: celpy's InterpretedRunner with a step budget


class _Budget:
    __slots__ = ("steps",)

    def __init__(self, steps: int) -> None:
        self.steps = steps


_NOT_DECODED = object()
_RELATION_FUNCTIONS = {"relation_lt": "_<_", "relation_le": "_<=_", "relation_ge": "_>=_",
                       "relation_gt": "_>_",
                       "relation_eq": "_==_", "relation_ne": "_!=_", "relation_in": "_in_"}


class _BudgetedEvaluator(Evaluator):
    """celpy's tree-walking evaluator with a step budget and cel-go's all()/exists()."""

    def __init__(self, ast: lark.Tree, activation: Any, budget: _Budget) -> None:
        super().__init__(ast, activation)
        self.budget = budget

    def _visit_tree(self, tree: lark.Tree) -> Any:
        self.budget.steps -= 1
        if self.budget.steps < 0:
            raise EvaluationBudgetExceeded
        return super()._visit_tree(tree)

    def sub_evaluator(self, ast: lark.Tree) -> Evaluator:
        return _BudgetedEvaluator(ast, self.activation, self.budget)

    # celpy's versions of these three evaluate `typing.cast(Tuple[...])` on every call, which costs
    # more than the operator itself; the operators are ours (FUNCTIONS), the errors the same.
    def relation(self, tree: lark.Tree) -> Any:
        if len(tree.children) == 1:
            return self._visit_tree(tree.children[0])
        operation, right = tree.children
        name = _RELATION_FUNCTIONS[operation.data]
        return self._apply(tree, name, self._visit_tree(operation.children[0]), self._visit_tree(right))

    def conditionaland(self, tree: lark.Tree) -> Any:
        return self._logical(tree, "_&&_")

    def conditionalor(self, tree: lark.Tree) -> Any:
        return self._logical(tree, "_||_")

    def _logical(self, tree: lark.Tree, name: str) -> Any:
        if len(tree.children) == 1:
            return self._visit_tree(tree.children[0])
        left, right = (self._visit_tree(child) for child in tree.children)
        return self._apply(tree, name, left, right)

    def literal(self, tree: lark.Tree) -> Any:
        # celpy decodes a literal's token on every evaluation; the (immutable) value is kept on the node.
        value = tree.__dict__.get("cel_value", _NOT_DECODED)
        if value is _NOT_DECODED:
            value = super().literal(tree)
            if not isinstance(value, CELEvalError):
                tree.cel_value = value  # type: ignore[attr-defined]
        return value

    def _apply(self, tree: lark.Tree, name: str, left: Any, right: Any) -> Any:
        try:
            return self.activation.resolve_function(name)(left, right)
        except TypeError as err:
            error = CELEvalError(f"found no matching overload for {name}", err.__class__, err.args, tree=tree)
            error.__cause__ = err
            return error

    def member_dot_arg(self, tree: lark.Tree) -> Any:
        # celpy raises (instead of returning) errors from map/filter/exists_one bodies, which escapes
        # && and ||, and folds all()/exists() so that two element errors read "no such overload".
        # cel-go: all/exists stop at the deciding element and otherwise report the first error;
        # map/filter/exists_one report the first error as the value of the comprehension.
        method = tree.children[1]
        if not (isinstance(method, lark.Token) and method.value in _MACROS):
            return super().member_dot_arg(tree)
        values = self.visit(tree.children[0])
        if isinstance(values, CELEvalError):
            return values
        body = self.build_ss_macro_eval(tree)
        if method.value in ("all", "exists"):
            return _quantifier(method.value, values, body)
        results = []
        for value in values:
            result = body(value)
            if isinstance(result, CELEvalError):
                return result
            if method.value != "map" and _kind(result) != "bool":
                return CELEvalError("no such overload", NoOverload,
                                    (f"{method.value}() predicate returned {_kind(result)}",))
            results.append(result)
        if method.value == "map":
            return ct.ListType(results)
        if method.value == "filter":
            return ct.ListType(v for v, keep in zip(values, results, strict=True) if keep)
        return ct.BoolType(sum(1 for r in results if r) == 1)


_MACROS = {"all", "exists", "exists_one", "map", "filter"}


def _quantifier(name: str, values: Any, body: Callable[[Any], Any]) -> Any:
    decisive = name == "exists"
    error: CELEvalError | None = None
    for value in values:
        result = body(value)
        if _kind(result) == "bool":
            if bool(result) == decisive:
                return ct.BoolType(decisive)
        elif error is None:
            error = result if isinstance(result, CELEvalError) else CELEvalError(
                "no such overload", NoOverload, (f"{name}() predicate returned {_kind(result)}",))
    return error if error is not None else ct.BoolType(not decisive)


class _BudgetedRunner(celpy.InterpretedRunner):
    max_steps: ClassVar[int] = MAX_EVALUATION_STEPS

    def __init__(self, environment: celpy.Environment, ast: lark.Tree, functions: Any = None) -> None:
        super().__init__(environment, ast, functions)
        # Built once: every evaluation clones it before binding `device`, so it is never mutated.
        self.base_activation = self.new_activation()

    def evaluate(self, context: Any) -> Any:
        evaluator = _BudgetedEvaluator(self.ast, self.base_activation, _Budget(self.max_steps))
        return evaluator.evaluate(context)


# Grammar rules that only forward to their single child; removing them from the parse tree does not
# change what celpy's evaluator computes but saves most of its tree visits (a parenthesized operand
# is otherwise ten levels deep).
_PASS_THROUGH_RULES = {"expr", "conditionalor", "conditionaland", "relation", "addition", "multiplication",
                       "unary", "member"}


def _compact(tree: lark.Tree) -> lark.Tree:
    while True:
        children = tree.children
        if len(children) != 1 or not isinstance(children[0], lark.Tree):
            break
        child = children[0]
        if tree.data in _PASS_THROUGH_RULES:
            tree = child
        elif tree.data == "primary" and child.data == "paren_expr":
            tree = child.children[0]  # type: ignore[assignment]
        else:
            break
    tree.children = [_compact(c) if isinstance(c, lark.Tree) else c for c in tree.children]
    return tree


_CELPY_RULES = {"relation_eq": "_==_", "relation_ne": "_!=_", "relation_lt": "_<_", "relation_le": "_<=_",
                "relation_gt": "_>_", "relation_ge": "_>=_", "relation_in": "@in", "addition_add": "_+_",
                "addition_sub": "_-_", "multiplication_mul": "_*_", "multiplication_div": "_/_",
                "multiplication_mod": "_%_", "unary_not": "!_", "unary_neg": "-_"}
_CELPY_OVERLOAD = re.compile(r"found no matching overload for (?:Token\('RULE', '(\w+)'\)|'?(_\?_:_|\w+)'?)")


def _runtime_message(error: CELEvalError) -> str:
    args = error.args
    if (len(args) >= 3 and isinstance(args[1], type) and issubclass(args[1], (LibraryError, NoOverload))
            and isinstance(args[2], tuple) and args[2] and isinstance(args[2][0], str)):
        return args[2][0]
    message = str(args[0]) if args else "evaluation error"
    if message == "return error for overflow" and len(args) >= 3 and args[2]:
        # celpy's label for any ValueError, conversions included (int("x")).
        detail = str(args[2][0])
        return "integer overflow" if detail == "overflow" else f"conversion error: {detail}"
    # celpy's own overload errors name Python classes; reduce them to the CEL operator.
    match = _CELPY_OVERLOAD.match(message)
    if match:
        rule = match.group(1) or match.group(2)
        return f"no such overload for {_CELPY_RULES.get(rule, rule)}"
    return message


class CelpyProgram:
    def __init__(self, runner: celpy.Runner, expression: str) -> None:
        self.runner = runner
        self.expression = expression

    def evaluate(self, activation: object) -> bool:
        try:
            result = self.runner.evaluate(activation)  # type: ignore[arg-type]
        except CELEvalError as err:
            raise CELRuntimeError(_runtime_message(err), self.expression) from None
        except EvaluationBudgetExceeded:
            raise CELRuntimeError(f"evaluation exceeded its budget of {_BudgetedRunner.max_steps} steps",
                                  self.expression) from None
        except RecursionError:
            raise CELRuntimeError("evaluation nested too deeply", self.expression) from None
        except Exception as err:  # a celpy code path that does not wrap Python errors as CEL errors
            message = f"evaluation failed: {type(err).__name__}: {err}"
            raise CELRuntimeError(message, self.expression) from None
        if not isinstance(result, ct.BoolType):
            raise CELRuntimeError(f"selector must evaluate to bool, got {_kind(result)}", self.expression)
        return bool(result)


class CelpyBackend:
    """cel-python, pure Python: always available, about 100x slower than cel-expr."""

    name = "celpy"

    def __init__(self) -> None:
        # celpy.Environment() sets the recursion limit to 2500 (it needs deep recursion for its parse
        # trees). Keep that when it raises the limit, but never let it lower a higher limit.
        previous = sys.getrecursionlimit()
        self.environment = celpy.Environment(runner_class=_BudgetedRunner)
        sys.setrecursionlimit(max(previous, sys.getrecursionlimit()))

    def compile(self, expression: str, options: CompileOptions) -> CelpyProgram:
        tree = parse(expression)
        try:
            Checker(expression, options).check_selector(tree)
            ast = _compact(self.environment.compile(emit(tree)))
        except RecursionError:
            message = "expression is nested too deeply for the celpy backend"
            raise CELCompileError(message, expression) from None
        except celpy.CELParseError as err:  # our emitter produced something celpy cannot read
            message = f"internal error translating the expression for celpy: {err}"
            raise CELCompileError(message, expression) from None
        runner = self.environment.program(ast, functions=FUNCTIONS)
        return CelpyProgram(runner, expression)

    def activation(self, device: CELDevice) -> dict[str, Any]:
        return {"device": device_to_cel(device)}

