"""Runtime values and functions of the celpy backend: cel-go's operator semantics and the libraries.

Everything here is called by celpy's evaluator on celpy values (`celpy.celtypes`), plus Quantity and
Semver objects, which celpy carries as they are. The operators replace celpy's own (heterogeneous
equality, cross-type numeric ordering, strict bool logic, typed arithmetic); the functions implement the
Kubernetes Quantity, Semver, lists and regex libraries, cel-go's lists extension (lists_ext),
ext.Strings (v2), ext.Sets, optional values, the DRA device maps, the Kubernetes ip/cidr/url
libraries (allocator.cel.netlib) and cel-go's durations and timestamps (allocator.cel.timelib).
Errors are raised as Python exceptions of the classes celpy turns into CEL errors.
"""

from __future__ import annotations

import functools
import itertools
import math
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import celpy.celtypes as ct
import re2
from celpy.evaluation import CELEvalError, base_functions

from allocator.cel import conversions, formatlib, lists_ext, netlib, strings_ext, timelib
from allocator.cel.celpy_check import QUIET_RE2, TIME_GETTERS, regexp_error
from allocator.quantity import Quantity
from allocator.semver import Semver


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


class DomainMap(ct.MapType):
    """`device.attributes` / `device.capacity`: an unknown domain is an empty map, as upstream."""

    def __missing__(self, key: object) -> ct.MapType:
        return ct.MapType()


class DomainValues(ct.MapType):
    """The attributes or capacities of one domain: an unknown name is a "no such key" error."""

    def __missing__(self, key: object) -> Any:
        raise MissingKey(f"no such key: {key!s} (test for it with has() or use optional chaining: "
                           f".?{key!s})")


@dataclass(frozen=True, slots=True)
class OptionalValue:
    """A CEL optional value (`optional.of(x)` / `optional.none()`)."""

    present: bool
    value: Any = None


OPTIONAL_NONE = OptionalValue(False)


_LIBRARY_KINDS: dict[type, str] = {
    netlib.IPAddress: "net.IP", netlib.CIDRPrefix: "net.CIDR", netlib.URLValue: "kubernetes.URL",
    timelib.Timestamp: "google.protobuf.Timestamp", timelib.Duration: "google.protobuf.Duration",
}


def kind_of(value: object) -> str:
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
    if isinstance(value, OptionalValue):
        return "optional_type"
    library_kind = _LIBRARY_KINDS.get(type(value))
    if library_kind is not None:
        return library_kind
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
    return NoOverload(f"no such overload: {function}({', '.join(kind_of(a) for a in args)})")


def cel_equals(a: object, b: object) -> bool:
    """cel-go's heterogeneous equality: numbers compare by value across int/uint/double, other
    values of different types are simply unequal (never an error)."""
    if _is_number(a) and _is_number(b):
        return _plain(a) == _plain(b)  # Python compares int and float exactly
    kind = kind_of(a)
    if kind != kind_of(b):
        return False
    # The isinstance tests only tell the type checker what equal kinds already mean.
    if kind == "list" and isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(cel_equals(x, y) for x, y in zip(a, b, strict=True))
    if kind == "map" and isinstance(a, dict) and isinstance(b, dict):
        if len(a) != len(b):
            return False
        for key, value in a.items():
            found = _map_find(b, key)
            if found is None or not cel_equals(value, found[0]):
                return False
        return True
    if kind == "optional_type" and isinstance(a, OptionalValue) and isinstance(b, OptionalValue):
        return a.present == b.present and (not a.present or cel_equals(a.value, b.value))
    return bool(a == b)


def go_equal(a: object, b: object) -> bool | None:
    """``a == b`` as cel-go's ``types.Equal`` answers it, None where it answers "no such overload".

    Kubernetes' Quantity and Semver define equality only with a value of their own type, so with
    anything else (``semver == 1``, a dynamic attribute against a string) the comparison fails, while
    ``1 == semver`` is merely false. A quantity that add()/sub() returned is a pointer to cel-go, which
    Quantity's equality does not accept either (``q == q.add(0)`` fails, ``q.add(0) == q`` does not).
    Lists and maps count a failing element comparison as equal, as cel-go does."""
    a_null, b_null = kind_of(a) == "null_type", kind_of(b) == "null_type"
    if a_null or b_null:
        return a_null and b_null
    if isinstance(a, (Semver, *_NET_TYPES)):
        return a == b if type(b) is type(a) else None
    if isinstance(a, Quantity):
        return a == b if isinstance(b, Quantity) and not isinstance(b, ArithmeticQuantity) else None
    if _is_number(a):
        return _is_number(b) and _plain(a) == _plain(b)
    if kind_of(a) != kind_of(b):
        return False
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(go_equal(x, y) is not False for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        if len(a) != len(b):
            return False
        for key, value in a.items():
            found = _map_find(b, key)
            if found is None or go_equal(value, found[0]) is False:
                return False
        return True
    if isinstance(a, OptionalValue) and isinstance(b, OptionalValue):
        if not a.present or not b.present:
            return a.present == b.present
        return go_equal(a.value, b.value)
    return bool(a == b)


_NET_TYPES = (netlib.IPAddress, netlib.CIDRPrefix, netlib.URLValue, formatlib.NamedFormat)


class ArithmeticQuantity(Quantity):
    """A quantity add() or sub() returned (see go_equal)."""

    __slots__ = ()


def _map_find(mapping: dict[Any, Any], key: object) -> tuple[Any] | None:
    """Look a key up with CEL key equality (1 and 1u and 1.0 name the same entry)."""
    if kind_of(key) in ("string", "bool") and dict.__contains__(mapping, key):
        return (dict.__getitem__(mapping, key),)
    for candidate, value in mapping.items():
        if cel_equals(candidate, key):
            return (value,)
    return None


_ORDERED_KINDS = {"bool", "string", "bytes", "google.protobuf.Timestamp", "google.protobuf.Duration"}


def _ordered(function: str, a: object, b: object) -> tuple[Any, Any]:
    if _is_number(a) and _is_number(b):
        return _plain(a), _plain(b)
    kind = kind_of(a)
    if kind == kind_of(b) and kind in _ORDERED_KINDS:
        if kind == "bool" and isinstance(a, int) and isinstance(b, int):  # celpy's BoolType is an int
            return int(a), int(b)
        return a, b
    raise _no_overload(function, a, b)


def _relation(function: str, compare: Callable[[Any, Any], bool]) -> Callable[[Any, Any], Any]:
    def implementation(a: Any, b: Any) -> Any:
        if isinstance(a, CELEvalError):
            return a
        if isinstance(b, CELEvalError):
            return b
        x, y = _ordered(function, a, b)
        if (isinstance(x, float) and math.isnan(x)) or (isinstance(y, float) and math.isnan(y)):
            raise LibraryError("NaN values cannot be ordered")  # cel-go's Compare; == is simply false
        return ct.BoolType(compare(x, y))

    implementation.__name__ = function
    return implementation


def _equality(negate: bool) -> Callable[[Any, Any], Any]:
    def implementation(a: Any, b: Any) -> Any:
        if isinstance(a, CELEvalError):
            return a
        if isinstance(b, CELEvalError):
            return b
        equal = go_equal(a, b)
        if negate:
            return ct.BoolType(equal is not True)  # cel-go: != is "not equal", never an error
        if equal is None:
            raise _no_overload("_==_", a, b)
        return ct.BoolType(equal)

    return implementation


def _in(item: Any, container: Any) -> Any:
    if isinstance(item, CELEvalError):
        return item
    if isinstance(container, CELEvalError):
        return container
    if isinstance(container, list):
        return ct.BoolType(any(go_equal(item, element) is True for element in container))
    if isinstance(container, dict):
        return ct.BoolType(_map_find(container, item) is not None)
    raise _no_overload("_in_", item, container)


def _logical(is_and: bool) -> Callable[[Any, Any], Any]:
    # CEL's commutative && and ||: the deciding value wins over an error on the other side, an error
    # wins over the non-deciding value, and a non-bool operand is an error (celpy would pass it through).
    decisive = not is_and

    def implementation(a: Any, b: Any) -> Any:
        for value in (a, b):
            if kind_of(value) == "bool" and bool(value) == decisive:
                return ct.BoolType(decisive)
        for value in (a, b):
            if isinstance(value, CELEvalError):
                return value
        for value in (a, b):
            if kind_of(value) != "bool":
                message = f"no such overload: {'_&&_' if is_and else '_||_'} applied to {kind_of(value)}"
                return CELEvalError(message, NoOverload, (message,))
        return ct.BoolType(not decisive)

    return implementation


def _not(value: Any) -> Any:
    if isinstance(value, CELEvalError):
        return value
    if kind_of(value) != "bool":
        raise _no_overload("!_", value)
    return ct.BoolType(not value)


def _condition(value: Any) -> Any:
    if kind_of(value) != "bool":
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
        kind_a, kind_b = kind_of(a), kind_of(b)
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
    kind = kind_of(value)
    if kind not in ("int", "double"):
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
        raise NoOverload(f"type '{kind_of(container)}' does not support field selection")
    return _index(container, field)


def _has(container: Any, field: Any) -> Any:
    if isinstance(container, OptionalValue):
        if not container.present:
            return ct.BoolType(False)
        container = container.value
    if not isinstance(container, dict):
        raise NoOverload(f"type '{kind_of(container)}' does not support field presence tests")
    return ct.BoolType(field in container)


def _optional_qualify(container: Any, key: Any) -> Any:
    # After `.?`/`[?` every following qualifier of the chain is a presence test too (as in cel-go).
    if isinstance(container, OptionalValue):
        if not container.present:
            return container
        container = container.value
    if isinstance(container, dict):
        if isinstance(key, str) and dict.__contains__(container, key):
            return OptionalValue(True, dict.__getitem__(container, key))
        found = _map_find(container, key)
        return OPTIONAL_NONE if found is None else OptionalValue(True, found[0])
    if isinstance(container, list) and _is_number(key):
        position = int(key)
        return OptionalValue(True, container[position]) if 0 <= position < len(container) else OPTIONAL_NONE
    if isinstance(container, list):
        raise _no_overload("_[?_]", container, key)
    return OPTIONAL_NONE  # as cel-go: a value that is no container has nothing to select


def _range(value: Any) -> Any:
    if not isinstance(value, (list, dict)):
        raise NoOverload(f"expression of type '{kind_of(value)}' cannot be the range of a comprehension")
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
    total = a + _quantity_operand("add", a, b)
    return ArithmeticQuantity(total.nanos, total.format)


def _sub_quantity(a: Any, b: Any) -> Quantity:
    difference = a - _quantity_operand("sub", a, b)
    return ArithmeticQuantity(difference.nanos, difference.format)


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


def _index_of(text: str, sub: Any, offset: Any = None) -> Any:
    try:
        return ct.IntType(strings_ext.index_of(text, str(sub), None if offset is None else int(offset)))
    except IndexError as err:
        raise LibraryError(str(err)) from None


def _last_index_of(text: str, sub: Any, offset: Any = None) -> Any:
    try:
        return ct.IntType(strings_ext.last_index_of(text, str(sub), None if offset is None else int(offset)))
    except IndexError as err:
        raise LibraryError(str(err)) from None


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


_QUOTE_TABLE = str.maketrans({"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r",
                              "\t": "\\t", "\v": "\\v", "\\": "\\\\", '"': '\\"'})


def _quote(text: Any) -> Any:
    # cel-go escapes exactly these characters and keeps every other one as it is.
    _require(text, str, "strings.quote")
    return ct.StringType('"' + str(text).translate(_QUOTE_TABLE) + '"')


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
            raise LibraryError(f"format: %{verb} needs a number, got {kind_of(value)}")
        return f"{float(value):.{int(precision or 6)}{verb}}"
    if not _is_number(value) or isinstance(value, float):
        raise LibraryError(f"format: %{verb} needs an integer, got {kind_of(value)}")
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


def _net_parser(function: str, parse: Callable[[str], Any]) -> Callable[[Any], Any]:
    def implementation(text: Any) -> Any:
        _require(text, str, function)
        try:
            return parse(str(text))
        except netlib.NetParseError as err:
            raise LibraryError(str(err)) from None

    return implementation


def _net_test(function: str, test: Callable[[str], bool]) -> Callable[[Any], Any]:
    def implementation(text: Any) -> Any:
        _require(text, str, function)
        return ct.BoolType(test(str(text)))

    return implementation


def _net_method(function: str, kind: type, method: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def implementation(value: Any) -> Any:
        _require(value, kind, function)
        return method(value)

    return implementation


def _contained(function: str, prefix: Any, other: Any, kind: type, parser: str,
               parse: Callable[[str], Any]) -> Any:
    """The argument of containsIP/containsCIDR as a value of ``kind``, parsed when it is a string."""
    _require(prefix, netlib.CIDRPrefix, function, other)
    if isinstance(other, str):
        other = _net_parser(parser, parse)(other)
    _require(other, kind, function, prefix)
    return other


def _contains_ip(prefix: Any, other: Any) -> Any:
    return ct.BoolType(prefix.contains_ip(
        _contained("containsIP", prefix, other, netlib.IPAddress, "ip", netlib.parse_ip)))


def _contains_cidr(prefix: Any, other: Any) -> Any:
    return ct.BoolType(prefix.contains_cidr(
        _contained("containsCIDR", prefix, other, netlib.CIDRPrefix, "cidr", netlib.parse_cidr)))


def _ip_member(value: Any) -> Any:
    """``cidr.ip()``: the prefix's address as written."""
    _require(value, netlib.CIDRPrefix, "ip")
    return value.address


def _url_query(value: netlib.URLValue) -> Any:
    return ct.MapType({ct.StringType(key): ct.ListType([ct.StringType(v) for v in values])
                       for key, values in value.query().items()})


def _string(value: Any) -> Any:
    if isinstance(value, (netlib.IPAddress, netlib.CIDRPrefix, timelib.Duration, timelib.Timestamp)):
        return ct.StringType(str(value))
    if isinstance(value, (Quantity, Semver, netlib.URLValue, formatlib.NamedFormat)):
        raise _no_overload("string", value)
    if isinstance(value, ct.DoubleType):
        return ct.StringType(conversions.format_double(float(value)))
    return _CELPY_STRING(value)


_CELPY_STRING = base_functions["string"]
_CELPY_INT = base_functions["int"]


def _conversion(function: str, from_string: Callable[[str], Any], kind: Callable[[Any], Any],
                from_double: Callable[[float], Any] | None = None) -> Callable[[Any], Any]:
    """A conversion that reads strings (and doubles) by cel-go's rules and leaves the rest to celpy's."""
    celpy_conversion = base_functions[function]

    def implementation(value: Any) -> Any:
        try:
            if isinstance(value, str):
                return kind(from_string(str(value)))
            if from_double is not None and isinstance(value, ct.DoubleType):
                return kind(from_double(float(value)))
        except conversions.ConversionError as err:
            raise LibraryError(str(err)) from None
        return celpy_conversion(value)

    return implementation


def _time_error(function: Callable[..., Any]) -> Callable[..., Any]:
    def implementation(*args: Any) -> Any:
        try:
            return function(*args)
        except timelib.TimeError as err:
            raise LibraryError(str(err)) from None

    return implementation


@_time_error
def _duration(value: Any) -> Any:
    if isinstance(value, timelib.Duration):
        return value
    _require(value, str, "duration")
    return timelib.duration_of(str(value))


@_time_error
def _timestamp(value: Any) -> Any:
    if isinstance(value, timelib.Timestamp):
        return value
    if isinstance(value, ct.IntType) and not isinstance(value, ct.BoolType):
        return timelib.from_unix(int(value))
    _require(value, str, "timestamp")
    return timelib.timestamp_of(str(value))


def _int(value: Any) -> Any:
    if isinstance(value, timelib.Duration):
        return ct.IntType(value.nanos)
    if isinstance(value, timelib.Timestamp):
        return ct.IntType(value.seconds)
    return _CELPY_INT_FROM_STRING(value)


_CELPY_INT_FROM_STRING = _conversion("int", conversions.parse_int, ct.IntType)


_DURATION_UNITS = {"getHours": "h", "getMinutes": "m", "getSeconds": "s", "getMilliseconds": "ms"}


def _time_getter(function: str) -> Callable[..., Any]:
    @_time_error
    def implementation(value: Any, *zone: Any) -> Any:
        if isinstance(value, timelib.Duration) and not zone and function in _DURATION_UNITS:
            return ct.IntType(value.part(_DURATION_UNITS[function]))
        _require(value, timelib.Timestamp, function, *zone)
        for name in zone:
            _require(name, str, function, value)
        return ct.IntType(value.get(function, *(str(name) for name in zone)))

    return implementation


def _bool_method(function: str, kind: type, method: Callable[[Any], bool]) -> Callable[[Any], Any]:
    return _net_method(function, kind, lambda value: ct.BoolType(method(value)))


def _string_getter(function: str, method: Callable[[netlib.URLValue], str]) -> Callable[[Any], Any]:
    return _net_method(function, netlib.URLValue, lambda value: ct.StringType(method(value)))


_NET_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "__to_string": _string,
    "__to_int": _int,
    "__to_uint": _conversion("uint", conversions.parse_uint, ct.UintType, conversions.double_to_uint),
    "__to_double": _conversion("double", conversions.parse_double, ct.DoubleType),
    "__to_bool": _conversion("bool", conversions.parse_bool, ct.BoolType),
    "duration": _duration,
    "timestamp": _timestamp,
    **{f"__m_{name}": _time_getter(name) for name in TIME_GETTERS},
    "ip": _net_parser("ip", netlib.parse_ip),
    "isIP": _net_test("isIP", netlib.is_ip),
    "__ip_isCanonical": _net_parser("ip.isCanonical", lambda text: ct.BoolType(netlib.is_canonical_ip(text))),
    "cidr": _net_parser("cidr", netlib.parse_cidr),
    "isCIDR": _net_test("isCIDR", netlib.is_cidr),
    "url": _net_parser("url", netlib.parse_url),
    "isURL": _net_test("isURL", netlib.is_url),
    "__m_family": _net_method("family", netlib.IPAddress, lambda ip: ct.IntType(ip.family)),
    "__m_isUnspecified": _bool_method("isUnspecified", netlib.IPAddress, netlib.IPAddress.is_unspecified),
    "__m_isLoopback": _bool_method("isLoopback", netlib.IPAddress, netlib.IPAddress.is_loopback),
    "__m_isLinkLocalMulticast": _bool_method("isLinkLocalMulticast", netlib.IPAddress,
                                             netlib.IPAddress.is_link_local_multicast),
    "__m_isLinkLocalUnicast": _bool_method("isLinkLocalUnicast", netlib.IPAddress,
                                           netlib.IPAddress.is_link_local_unicast),
    "__m_isGlobalUnicast": _bool_method("isGlobalUnicast", netlib.IPAddress,
                                        netlib.IPAddress.is_global_unicast),
    "__m_ip": _ip_member,
    "__m_containsIP": _contains_ip,
    "__m_containsCIDR": _contains_cidr,
    "__m_prefixLength": _net_method("prefixLength", netlib.CIDRPrefix, lambda c: ct.IntType(c.length)),
    "__m_masked": _net_method("masked", netlib.CIDRPrefix, netlib.CIDRPrefix.masked),
    "__m_getScheme": _string_getter("getScheme", lambda u: u.scheme),
    "__m_getHost": _string_getter("getHost", lambda u: u.host),
    "__m_getHostname": _string_getter("getHostname", netlib.URLValue.hostname),
    "__m_getPort": _string_getter("getPort", netlib.URLValue.port),
    "__m_getEscapedPath": _string_getter("getEscapedPath", netlib.URLValue.escaped_path),
    "__m_getQuery": _net_method("getQuery", netlib.URLValue, _url_query),
}


def _format_named(name: Any) -> Any:
    _require(name, str, "format.named")
    found = formatlib.named(str(name))
    return OPTIONAL_NONE if found is None else OptionalValue(True, found)


def _format_validate(format_: Any, text: Any) -> Any:
    _require(format_, formatlib.NamedFormat, "validate", text)
    _require(text, str, "validate", format_)
    errors = format_.validate(str(text))
    if not errors:
        return OPTIONAL_NONE
    return OptionalValue(True, ct.ListType([ct.StringType(e) for e in errors]))


_FORMAT_FUNCTIONS: dict[str, Callable[..., Any]] = {
    **{f"__format_{key}": (lambda key=key: formatlib.NamedFormat(key)) for key in formatlib.FORMATS},
    "__format_named": _format_named,
    "__m_validate": _format_validate,
}


def _list_method(function: str, scan: Callable[..., Any]) -> Callable[..., Any]:
    def implementation(values: Any, *args: Any) -> Any:
        _require(values, list, function, *args)
        return scan(values, *args)

    return implementation


def _is_sorted(values: list[Any]) -> Any:
    return ct.BoolType(not any(_less(b, a) for a, b in itertools.pairwise(values)))


def _less(a: Any, b: Any) -> bool:
    x, y = _ordered("<", a, b)
    return bool(x < y)


def _sum(values: list[Any]) -> Any:
    if not values:
        return ct.IntType(0)
    total = values[0]
    for value in values[1:]:
        total = _arithmetic("_+_", operator.add)(total, value)
    if isinstance(total, (str, bytes, list)):
        raise _no_overload("sum", values)
    return total


def _extreme(function: str, pick_less: bool) -> Callable[[list[Any]], Any]:
    def implementation(values: list[Any]) -> Any:
        if not values:
            raise LibraryError(f"{function} called on empty list")
        best = values[0]
        for value in values[1:]:
            # strictly beyond the best so far: NaN, which orders neither way, is kept or passed over
            if _less(value, best) if pick_less else _less(best, value):
                best = value
        return best

    return implementation


def _lists_extension(function: str, implementation: Callable[..., list[Any]],
                     *kinds: type) -> Callable[..., Any]:
    """A function of cel-go's lists extension (lists_ext) on a list receiver and arguments of
    ``kinds``; its errors carry cel-go's messages."""
    def checked(values: Any, *args: Any) -> Any:
        _require(values, list, function, *args)
        if len(args) > len(kinds):
            raise _no_overload(function, values, *args)
        for arg, kind in zip(args, kinds, strict=False):
            _require(arg, kind, function, values, *args)
        try:
            return ct.ListType(implementation(values, *(int(a) for a in args)))
        except lists_ext.ListsError as err:
            raise LibraryError(str(err)) from None

    return checked


def _lists_range(size: Any) -> Any:
    _require(size, ct.IntType, "lists.range")
    try:
        return ct.ListType(ct.IntType(i) for i in lists_ext.list_range(int(size)))
    except lists_ext.ListsError as err:
        raise LibraryError(str(err)) from None


def _sorted_by_keys(values: Any, keys: Any) -> Any:
    return _lists_extension("@sortByAssociatedKeys", lambda v: lists_ext.sorted_by_keys(
        v, keys, kind_of, _less))(values)


def map_insert(mapping: ct.MapType, key: Any, value: Any) -> None:
    """cel-go's ``cel.@mapInsert`` for the two-variable transforms, on the map being built: a key
    already there (by CEL equality: 1 and 1.0 are one key) is an error."""
    if _map_find(mapping, key) is not None:
        raise LibraryError(f"insert failed: key {_to_display(key)} already exists")
    dict.__setitem__(mapping, key, value)


def _list_index_of(values: list[Any], item: Any) -> Any:
    return ct.IntType(next((i for i, v in enumerate(values) if cel_equals(v, item)), -1))


def _list_last_index_of(values: list[Any], item: Any) -> Any:
    return ct.IntType(next((i for i in range(len(values) - 1, -1, -1) if cel_equals(values[i], item)), -1))


_STRING_INDEX_OF = _string_method("indexOf", _index_of, str, ct.IntType)
_STRING_LAST_INDEX_OF = _string_method("lastIndexOf", _last_index_of, str, ct.IntType)


def _index_of_any(value: Any, *args: Any) -> Any:
    if isinstance(value, list):
        return _list_index_of(value, *args)
    return _STRING_INDEX_OF(value, *args)


def _last_index_of_any(value: Any, *args: Any) -> Any:
    if isinstance(value, list):
        return _list_last_index_of(value, *args)
    return _STRING_LAST_INDEX_OF(value, *args)


@functools.lru_cache(maxsize=512)
def _compiled_regex(pattern: str) -> Any:
    # Patterns are nearly always literals: compile each once, not on every evaluation.
    problem = regexp_error(pattern)
    if problem is not None:
        raise LibraryError(problem)
    return re2.compile(pattern, QUIET_RE2)


def _matches(text: Any, pattern: Any) -> Any:
    _require(text, str, "matches", pattern)
    _require(pattern, str, "matches", text)
    return ct.BoolType(_compiled_regex(str(pattern)).search(str(text)) is not None)


def _find(text: Any, pattern: Any) -> Any:
    _require(text, str, "find", pattern)
    _require(pattern, str, "find", text)
    match = _compiled_regex(str(pattern)).search(str(text))
    return ct.StringType(match.group(0) if match else "")


def _find_all(text: Any, pattern: Any, limit: Any = -1) -> Any:
    _require(text, str, "findAll", pattern)
    _require(pattern, str, "findAll", text)
    found: list[ct.StringType] = []
    for match in _compiled_regex(str(pattern)).finditer(str(text)):
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


def _sets(function: str, test: Callable[[list[Any], list[Any]], bool]) -> Callable[[Any, Any], Any]:
    def implementation(a: Any, b: Any) -> Any:
        _require(a, list, function, b)
        _require(b, list, function, a)
        return ct.BoolType(test(a, b))

    return implementation


def _subset(container: list[Any], items: list[Any]) -> bool:
    return all(any(cel_equals(item, c) for c in container) for item in items)


def _includes(value: Any, item: Any) -> Any:
    if isinstance(value, list):
        return ct.BoolType(any(cel_equals(element, item) for element in value))
    return ct.BoolType(cel_equals(value, item))


def _optional_of(value: Any) -> OptionalValue:
    return OptionalValue(True, value)


def _optional_of_non_zero(value: Any) -> OptionalValue:
    is_zero = (value is None or (isinstance(value, (str, bytes, list, dict)) and len(value) == 0)
               or (_is_number(value) and value == 0) or (isinstance(value, ct.BoolType) and not value))
    return OPTIONAL_NONE if is_zero else OptionalValue(True, value)


def _optional_none() -> OptionalValue:
    return OPTIONAL_NONE


def _optional_method(function: str, implementation: Callable[..., Any]) -> Callable[..., Any]:
    def checked(value: Any, *args: Any) -> Any:
        _require(value, OptionalValue, function, *args)
        return implementation(value, *args)

    return checked


def _optional_value(value: OptionalValue) -> Any:
    if not value.present:
        raise LibraryError("optional.none() dereference")
    return value.value


def _optional_elements(values: Any, optional_positions: Any) -> Any:
    result = []
    for position, value in enumerate(values):
        if position in optional_positions:
            _require(value, OptionalValue, "optional list element")
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
    "sign": _quantity_method("sign", lambda q: ct.IntType(q.sign())),
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
    "__m_slice": _lists_extension("slice", lists_ext.slice_of, ct.IntType, ct.IntType),
    "__m_flatten": _lists_extension("flatten", lambda v, depth=1: lists_ext.flattened(
        v, depth, lambda item: isinstance(item, list)), ct.IntType),
    "__m_sort": _lists_extension("sort", lambda v: lists_ext.sorted_by_keys(v, v, kind_of, _less)),
    "__m_distinct": _lists_extension("distinct", lambda v: lists_ext.distinct(
        v, lambda a, b: go_equal(a, b) is True)),
    "__m_reverse": _lists_extension("reverse", lists_ext.reversed_list),
    "__lists_range": _lists_range,
    "__sort_by_keys": _sorted_by_keys,
    "__m_hasValue": _optional_method("hasValue", lambda o: ct.BoolType(o.present)),
    "__m_value": _optional_method("value", _optional_value),
    "__m_orValue": _optional_method("orValue", lambda o, default: o.value if o.present else default),
    "__m_or": _optional_method("or", lambda o, other: o if o.present else other),
    **_NET_FUNCTIONS,
    **_FORMAT_FUNCTIONS,
}
