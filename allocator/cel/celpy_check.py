"""A static check of a parsed selector against the DRA CEL environment.

cel-python has no type checker, so this module rejects at compile time what cel-go's checker rejects
(the cel-expr backend runs it too, after cel-cpp's own checker, which types the Kubernetes libraries
less precisely):
undeclared identifiers and functions, undefined `device` fields (`allowMultipleAllocations` exists only
with consumable capacity), calls that match no overload, operators on statically mismatched types
(`true == 1`, `1 + 1u`), list/map literals whose elements differ in type, dyn included
(HomogeneousAggregateLiterals; not inside format()), invalid literal
regular expressions in matches(), and a result that cannot be a bool. Anything whose type is only known at
evaluation time (attribute values are `dyn`) is left to the runtime, as in cel-go.
"""

from __future__ import annotations

import re
from typing import TypeAlias

import re2

from allocator.cel import formatlib
from allocator.cel.backend import CELCompileError, CompileOptions
from allocator.cel.parser import (
    TRANSFORMS,
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
    line_column,
    qualified_name,
)
from allocator.cel.timelib import TimeError, from_unix, parse_duration, parse_timestamp

# A static type: a CEL type name, or ("list", elem), ("map", key, value), ("optional_type", value).
Type: TypeAlias = str | tuple["Type", ...]

DYN = "dyn"


class _AnyType(str):
    """google.protobuf.Any, the type of attribute values when a new selector is validated without
    DRAListTypeAttributes. cel-go's checker treats it as dyn (so it equals DYN here) except where it
    says 'any': a comprehension cannot range over it, and list and map literals must not mix it
    with another element type."""

    __slots__ = ()


ANY = _AnyType(DYN)
BOOL, INT, UINT, DOUBLE, STRING, BYTES = "bool", "int", "uint", "double", "string", "bytes"
QUANTITY, SEMVER = "kubernetes.Quantity", "kubernetes.Semver"
TIMESTAMP, DURATION = "google.protobuf.Timestamp", "google.protobuf.Duration"
DEVICE = "kubernetes.DRADevice"
IP, CIDR, URL = "net.IP", "net.CIDR", "kubernetes.URL"
FORMAT = formatlib.TYPE_NAME
ANY_LIST: Type = ("list", DYN)
ANY_MAP: Type = ("map", DYN, DYN)
ANY_OPTIONAL: Type = ("optional_type", DYN)
# optional.none()'s value type is a free type parameter: orValue(x) takes x's type, where an optional
# read from a dynamic value (``?.field``) stays dyn.
FREE = "@free"
STRING_LIST: Type = ("list", STRING)


class TypeVar(str):
    """A free type with an identity: the element type of an empty list literal (key and value types of
    an empty map literal), or a type parameter of an overload while it is tried. cel-go's checker binds
    it to the types it meets (see Checker.bind), so ``[].filter(x, x > 0)`` is a list(int) there. Unbound
    it equals FREE, and every rule about free types applies; bindings live in the Checker, keyed by
    ``id()`` (all TypeVars are equal as strings)."""

    __slots__ = ()

    def __new__(cls) -> TypeVar:
        return super().__new__(cls, FREE)

    def __repr__(self) -> str:
        return f"TypeVar@{id(self):x}"


NUMERIC = {INT, UINT, DOUBLE}
ORDERED = {INT, UINT, DOUBLE, STRING, BYTES, BOOL, TIMESTAMP, DURATION}
TIMES = {TIMESTAMP, DURATION}
ARITHMETIC = {
    "_+_": {INT, UINT, DOUBLE, STRING, BYTES},
    "_-_": {INT, UINT, DOUBLE},
    "_*_": {INT, UINT, DOUBLE},
    "_/_": {INT, UINT, DOUBLE},
    "_%_": {INT, UINT},
}
ELEMENT = "@element"  # result placeholder: the receiver list's element type
INNER = "@inner"  # result placeholder: the receiver optional's value type
WRAPPED = "@wrapped"  # result placeholder: an optional of the argument's type
SAME = "@same"  # result placeholder: the receiver list's own type
FLAT = "@flat"  # result placeholder: the element type of a list of lists
EITHER = "@either"  # result placeholder: an optional of the receiver's or the argument's value type

TIME_GETTERS = ("getFullYear", "getMonth", "getDayOfYear", "getDayOfMonth", "getDate", "getDayOfWeek",
                "getHours", "getMinutes", "getSeconds", "getMilliseconds")
DURATION_GETTERS = ("getHours", "getMinutes", "getSeconds", "getMilliseconds")
# name -> overloads (receiver, parameters, result); the receiver is None for global functions.
Overload = tuple[Type | None, tuple[Type, ...], Type]
_ANY_SIZED = (STRING, BYTES, ANY_LIST, ANY_MAP)
OVERLOADS: dict[str, list[Overload]] = {
    "size": [*((r, (), INT) for r in _ANY_SIZED), *((None, (r,), INT) for r in _ANY_SIZED)],
    "int": [(None, (DYN,), INT)], "uint": [(None, (DYN,), UINT)], "double": [(None, (DYN,), DOUBLE)],
    "string": [(None, (t,), STRING)
               for t in (INT, UINT, DOUBLE, STRING, BYTES, BOOL, TIMESTAMP, DURATION, IP, CIDR)],
    "bytes": [(None, (DYN,), BYTES)], "bool": [(None, (DYN,), BOOL)],
    "dyn": [(None, (DYN,), DYN)], "type": [(None, (DYN,), "type")],
    "duration": [(None, (STRING,), DURATION), (None, (DURATION,), DURATION)],
    "timestamp": [(None, (STRING,), TIMESTAMP), (None, (TIMESTAMP,), TIMESTAMP), (None, (INT,), TIMESTAMP)],
    **{name: [(TIMESTAMP, (), INT), (TIMESTAMP, (STRING,), INT),
              *([(DURATION, (), INT)] if name in DURATION_GETTERS else [])] for name in TIME_GETTERS},
    "contains": [(STRING, (STRING,), BOOL)],
    "startsWith": [(STRING, (STRING,), BOOL)],
    "endsWith": [(STRING, (STRING,), BOOL)],
    "matches": [(STRING, (STRING,), BOOL), (None, (STRING, STRING), BOOL)],
    "find": [(STRING, (STRING,), STRING)],
    "findAll": [(STRING, (STRING,), STRING_LIST), (STRING, (STRING, INT), STRING_LIST)],
    "charAt": [(STRING, (INT,), STRING)],
    "indexOf": [(STRING, (STRING,), INT), (STRING, (STRING, INT), INT), (ANY_LIST, (DYN,), INT)],
    "lastIndexOf": [(STRING, (STRING,), INT), (STRING, (STRING, INT), INT), (ANY_LIST, (DYN,), INT)],
    "lowerAscii": [(STRING, (), STRING)],
    "upperAscii": [(STRING, (), STRING)],
    "trim": [(STRING, (), STRING)],
    "replace": [(STRING, (STRING, STRING), STRING), (STRING, (STRING, STRING, INT), STRING)],
    "split": [(STRING, (STRING,), STRING_LIST), (STRING, (STRING, INT), STRING_LIST)],
    "substring": [(STRING, (INT,), STRING), (STRING, (INT, INT), STRING)],
    "join": [(STRING_LIST, (), STRING), (STRING_LIST, (STRING,), STRING)],
    "format": [(STRING, (ANY_LIST,), STRING)],
    "strings.quote": [(None, (STRING,), STRING)],
    "isSorted": [(ANY_LIST, (), BOOL)],
    "sum": [(ANY_LIST, (), ELEMENT)],
    "min": [(ANY_LIST, (), ELEMENT)],
    "max": [(ANY_LIST, (), ELEMENT)],
    "sets.contains": [(None, (ANY_LIST, ANY_LIST), BOOL)],
    "sets.equivalent": [(None, (ANY_LIST, ANY_LIST), BOOL)],
    "sets.intersects": [(None, (ANY_LIST, ANY_LIST), BOOL)],
    "quantity": [(None, (STRING,), QUANTITY)],
    "isQuantity": [(None, (STRING,), BOOL)],
    "compareTo": [(QUANTITY, (QUANTITY,), INT), (SEMVER, (SEMVER,), INT)],
    "isGreaterThan": [(QUANTITY, (QUANTITY,), BOOL), (SEMVER, (SEMVER,), BOOL)],
    "isLessThan": [(QUANTITY, (QUANTITY,), BOOL), (SEMVER, (SEMVER,), BOOL)],
    "add": [(QUANTITY, (QUANTITY,), QUANTITY), (QUANTITY, (INT,), QUANTITY)],
    "sub": [(QUANTITY, (QUANTITY,), QUANTITY), (QUANTITY, (INT,), QUANTITY)],
    "isInteger": [(QUANTITY, (), BOOL)],
    "asInteger": [(QUANTITY, (), INT)],
    "asApproximateFloat": [(QUANTITY, (), DOUBLE)],
    "sign": [(None, (QUANTITY,), INT)],  # a global function in cel-go, not the documented member
    "semver": [(None, (STRING,), SEMVER), (None, (STRING, BOOL), SEMVER)],
    "isSemver": [(None, (STRING,), BOOL), (None, (STRING, BOOL), BOOL)],
    "major": [(SEMVER, (), INT)],
    "minor": [(SEMVER, (), INT)],
    "patch": [(SEMVER, (), INT)],
    "optional.of": [(None, (DYN,), WRAPPED)],
    "optional.ofNonZeroValue": [(None, (DYN,), WRAPPED)],
    "optional.none": [(None, (), ("optional_type", FREE))],
    "hasValue": [(ANY_OPTIONAL, (), BOOL)],
    "value": [(ANY_OPTIONAL, (), INNER)],
    "orValue": [(ANY_OPTIONAL, (DYN,), INNER)],
    "or": [(ANY_OPTIONAL, (ANY_OPTIONAL,), EITHER)],
    "includes": [(DYN, (DYN,), BOOL)],
    "ip": [(None, (STRING,), IP), (CIDR, (), IP)],
    "isIP": [(None, (STRING,), BOOL)],
    "ip.isCanonical": [(None, (STRING,), BOOL)],
    "family": [(IP, (), INT)],
    **{name: [(IP, (), BOOL)] for name in ("isUnspecified", "isLoopback", "isLinkLocalMulticast",
                                           "isLinkLocalUnicast", "isGlobalUnicast")},
    "cidr": [(None, (STRING,), CIDR)],
    "isCIDR": [(None, (STRING,), BOOL)],
    "containsIP": [(CIDR, (STRING,), BOOL), (CIDR, (IP,), BOOL)],
    "containsCIDR": [(CIDR, (STRING,), BOOL), (CIDR, (CIDR,), BOOL)],
    "prefixLength": [(CIDR, (), INT)],
    "masked": [(CIDR, (), CIDR)],
    "url": [(None, (STRING,), URL)],
    "isURL": [(None, (STRING,), BOOL)],
    **{name: [(URL, (), STRING)] for name in ("getScheme", "getHost", "getHostname", "getPort",
                                              "getEscapedPath")},
    "getQuery": [(URL, (), ("map", STRING, STRING_LIST))],
    # cel-go's lists extension, version 3 (lists_ext)
    "slice": [(ANY_LIST, (INT, INT), SAME)],
    "flatten": [(("list", ANY_LIST), (), FLAT), (ANY_LIST, (INT,), ANY_LIST)],
    "sort": [(("list", kind), (), ("list", kind)) for kind in (INT, UINT, DOUBLE, BOOL, DURATION, TIMESTAMP,
                                                                STRING, BYTES)],
    "distinct": [(ANY_LIST, (), SAME)],
    "reverse": [(ANY_LIST, (), SAME)],
    "lists.range": [(None, (INT,), ("list", INT))],
    **{f"format.{key}": [(None, (), FORMAT)] for key in formatlib.FORMATS},
    "format.named": [(None, (STRING,), ("optional_type", FORMAT))],
    "validate": [(FORMAT, (STRING,), ("optional_type", STRING_LIST))],
}
NAMESPACES = ("sets", "strings", "optional", "ip", "lists", "format")
TYPE_NAMES = {"bool", "int", "uint", "double", "string", "bytes", "list", "map", "null_type", "type"}
QUIET_RE2 = re2.Options()
QUIET_RE2.log_errors = False  # invalid patterns are reported as CEL errors, not logged to stderr
# RE2's names for what is wrong with a pattern, as Go's regexp/syntax names them
_GO_REGEXP_CODES = {
    "missing )": "missing closing )", "missing ]": "missing closing ]",
    "bad repetition operator": "invalid nested repetition operator",
    "no argument for repetition operator": "missing argument to repetition operator",
    "invalid repetition size": "invalid repeat count",
    "invalid perl operator": "invalid or unsupported Perl syntax",
    "invalid named capture group": "invalid named capture",
}
_ANY_BYTE = re.compile(r"(?<!\\)(?:\\\\)*\\C")  # RE2's \C, which Go's syntax does not have


def regexp_error(pattern: str) -> str | None:
    """Why Go's regexp.Compile refuses ``pattern``, in Go's words, or None when it compiles. Go and
    RE2 share the syntax but for RE2's \\C."""
    if _ANY_BYTE.search(pattern):
        return "error parsing regexp: invalid escape sequence: `\\C`"
    try:
        re2.compile(pattern, QUIET_RE2)
    except re2.error as err:
        raw = err.args[0] if err.args else str(err)
        text = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
        if text == "trailing \\":
            return "error parsing regexp: trailing backslash at end of expression: ``"
        code, _, fragment = text.partition(": ")
        return f"error parsing regexp: {_GO_REGEXP_CODES.get(code, code)}: `{fragment}`"
    return None


OPERATORS = {"_&&_", "_||_", "!_", "_?_:_", "-_", "@in", "_==_", "_!=_", "_<_", "_<=_", "_>_", "_>=_",
             *ARITHMETIC}
# Like cel-go's ValidateRegexLiterals (in the Kubernetes base environment since 1.29): only matches().
REGEX_FUNCTIONS = {"matches"}

# cel-go's overloads in the order it declares them, as parameter types (a member's receiver first), where
# that order binds a free type differently from OVERLOADS (or OVERLOADS has no entry: the operators). cel-go
# tries every overload in turn, and each that fits binds what is still free, so the first one that fits
# decides: `x > 0` makes x an int, `-x` a double, `size(x)` bytes. "@A" and "@B" are type parameters.
_A, _B = "@A", "@B"
_ORDERED_PAIRS: list[tuple[Type, ...]] = [
    (BOOL, BOOL), (INT, INT), (INT, DOUBLE), (INT, UINT), (UINT, UINT), (UINT, DOUBLE), (UINT, INT),
    (DOUBLE, DOUBLE), (DOUBLE, INT), (DOUBLE, UINT), (STRING, STRING), (BYTES, BYTES), (TIMESTAMP, TIMESTAMP),
    (DURATION, DURATION)]
CEL_GO_ORDER: dict[str, list[tuple[Type, ...]]] = {
    "_==_": [(_A, _A)], "_!=_": [(_A, _A)],
    "@in": [(_A, ("list", _A)), (_A, ("map", _A, _B))],
    "_?_:_": [(BOOL, _A, _A)],
    "!_": [(BOOL,)], "_&&_": [(BOOL, BOOL)], "_||_": [(BOOL, BOOL)],
    "-_": [(DOUBLE,), (INT,)],
    "_+_": [(BYTES, BYTES), (DOUBLE, DOUBLE), (DURATION, DURATION), (DURATION, TIMESTAMP),
            (TIMESTAMP, DURATION), (INT, INT), (("list", _A), ("list", _A)), (STRING, STRING), (UINT, UINT)],
    "_-_": [(DOUBLE, DOUBLE), (DURATION, DURATION), (INT, INT), (TIMESTAMP, DURATION), (TIMESTAMP, TIMESTAMP),
            (UINT, UINT)],
    "_*_": [(DOUBLE, DOUBLE), (INT, INT), (UINT, UINT)],
    "_/_": [(DOUBLE, DOUBLE), (INT, INT), (UINT, UINT)],
    "_%_": [(INT, INT), (UINT, UINT)],
    **dict.fromkeys(("_<_", "_<=_", "_>_", "_>=_"), _ORDERED_PAIRS),
    "size": [(BYTES,), (("list", _A),), (("map", _A, _B),), (STRING,)],
    "bool": [(BOOL,), (STRING,)],
    "bytes": [(BYTES,), (STRING,)],
    "double": [(DOUBLE,), (INT,), (STRING,), (UINT,)],
    "duration": [(DURATION,), (STRING,)],
    "dyn": [(_A,)],
    "type": [(_A,)],
    "int": [(INT,), (DOUBLE,), (DURATION,), (STRING,), (TIMESTAMP,), (UINT,)],
    "string": [(STRING,), (BOOL,), (BYTES,), (DOUBLE,), (DURATION,), (INT,), (TIMESTAMP,), (UINT,),
               (IP,), (CIDR,)],
    "timestamp": [(TIMESTAMP,), (INT,), (STRING,)],
    "uint": [(UINT,), (DOUBLE,), (INT,), (STRING,)],
}


# Member functions whose arguments must agree with their receiver through a type parameter, which
# OVERLOADS writes as dyn: cel-go refuses optional.of(1).orValue(1.5) and [1].indexOf("a").
_AGREEING: dict[str, list[tuple[Type, ...]]] = {
    "orValue": [(("optional_type", _A), _A)],
    "or": [(("optional_type", _A), ("optional_type", _A))],
    **{name: [(STRING, STRING), (STRING, STRING, INT), (("list", _A), _A)]
       for name in ("indexOf", "lastIndexOf")},
}


def _signatures(name: str, member: bool) -> list[tuple[Type, ...]]:
    if name in CEL_GO_ORDER:
        return CEL_GO_ORDER[name]
    return [((receiver,) if receiver is not None else ()) + params
            for receiver, params, _ in OVERLOADS.get(name, ()) if (receiver is not None) == member]


def _instantiate(t: Type, parameters: dict[str, TypeVar], fresh: list[TypeVar]) -> Type:
    """A signature's type with new TypeVars for its type parameters (and for dyn, which OVERLOADS
    writes where cel-go declares a type parameter)."""
    if isinstance(t, tuple):
        return (t[0], *(_instantiate(p, parameters, fresh) for p in t[1:]))
    if t in (_A, _B):
        if t not in parameters:
            parameters[t] = TypeVar()
            fresh.append(parameters[t])
        return parameters[t]
    if t == DYN and not isinstance(t, _AnyType):
        fresh.append(TypeVar())
        return fresh[-1]
    return t


def _less_specific(a: Type, b: Type) -> bool:
    """cel-go's "equal or less specific": dyn and free types are less specific than anything."""
    if a in (DYN, FREE):
        return True
    if b in (DYN, FREE):
        return False
    if isinstance(a, tuple) and isinstance(b, tuple):
        return (a[0] == b[0] and len(a) == len(b)
                and all(_less_specific(x, y) for x, y in zip(a[1:], b[1:], strict=True)))
    return a == b


def _most_general(a: Type, b: Type) -> Type:
    """The type cel-go gives a type parameter that two unifying types bind: the first unless the
    second is less specific (``[1] + [dyn(2)]`` is a list(dyn))."""
    return a if _less_specific(a, b) else b


def _has_type_var(t: Type) -> bool:
    if isinstance(t, tuple):
        return any(_has_type_var(p) for p in t[1:])
    return isinstance(t, TypeVar)


def type_name(t: Type) -> str:
    if isinstance(t, tuple):
        return f"{t[0]}({', '.join(type_name(p) for p in t[1:])})"
    if isinstance(t, _AnyType):
        return "any"
    return DYN if t == FREE else t


def _known(t: Type) -> Type:
    """An element or value type as a value of it is used: a free type parameter is dynamic."""
    return DYN if t == FREE else t


def equivalent(a: Type, b: Type) -> bool:
    """cel-go's IsEquivalentType, which its homogeneous-literal validator applies to the checked types
    of the elements: dyn and any match only themselves, a free type parameter (the element type of an
    empty literal) matches anything."""
    if a == FREE or b == FREE:
        return True
    if isinstance(a, tuple) or isinstance(b, tuple):
        return (isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b) and a[0] == b[0]
                and all(equivalent(x, y) for x, y in zip(a[1:], b[1:], strict=True)))
    return a == b and isinstance(a, _AnyType) == isinstance(b, _AnyType)


def unifies(a: Type, b: Type) -> bool:
    if a in (DYN, FREE) or b in (DYN, FREE):
        return True
    if isinstance(a, tuple) and isinstance(b, tuple):
        if len(a) != len(b) or a[0] != b[0]:
            return False
        return all(unifies(x, y) for x, y in zip(a[1:], b[1:], strict=True))
    return a == b


def _join(a: Type, b: Type) -> Type:
    """The more specific of two unifying types."""
    if a in (DYN, FREE):
        return b
    if b in (DYN, FREE) or not isinstance(a, tuple):
        return a
    return (a[0], *(_join(x, y) for x, y in zip(a[1:], b[1:], strict=True)))


def _applies(receiver_type: Type | None, params: tuple[Type, ...], receiver: Type | None,
             args: list[Type]) -> bool:
    if (receiver_type is None) != (receiver is None) or len(params) != len(args):
        return False
    if receiver_type is not None and receiver is not None and not unifies(receiver_type, receiver):
        return False
    return all(unifies(p, a) for p, a in zip(params, args, strict=True))


def _device_type(options: CompileOptions) -> dict[str, Type]:
    attribute = DYN if options.list_type_attributes else ANY
    fields: dict[str, Type] = {
        "driver": STRING,
        "attributes": ("map", STRING, ("map", STRING, attribute)),
        "capacity": ("map", STRING, ("map", STRING, QUANTITY)),
    }
    if options.consumable_capacity:
        fields["allowMultipleAllocations"] = BOOL
    return fields


class Checker:
    def __init__(self, text: str, options: CompileOptions, *, optional_map_entries: bool = False) -> None:
        """``optional_map_entries``: the engine supports ``{?key: value}`` (cel-expr does, celpy not)."""
        self.text = text
        self.options = options
        self.optional_map_entries = optional_map_entries
        self.device_fields = _device_type(options)
        self.scopes: list[dict[str, Type]] = []
        # Inside format(): cel-go's string-format validator exempts its literals from the homogeneity check.
        self.in_format = 0
        # What each TypeVar is bound to, by id(); every TypeVar made is kept, so ids stay unique.
        self.bindings: dict[int, Type] = {}
        self.type_vars: list[TypeVar] = []

    def fail(self, node: Node, message: str) -> CELCompileError:
        line, column = line_column(self.text, node.pos)
        return CELCompileError(f"compile error at {line}:{column}: {message}", self.text)

    def check_selector(self, node: Node) -> None:
        result = self.result_type(node)
        if not unifies(result, BOOL):
            message = f"selector must evaluate to bool or the unknown type, not {type_name(result)}"
            raise CELCompileError(message, self.text)

    def result_type(self, node: Node) -> Type:
        """The type of the whole expression, with what its checking bound filled in."""
        return self.resolve(self.check(node))

    # -- free types (TypeVar) and their bindings, as cel-go's checker makes them

    def new_type_var(self) -> TypeVar:
        self.type_vars.append(TypeVar())
        return self.type_vars[-1]

    def resolve(self, t: Type) -> Type:
        """``t`` with its bound TypeVars replaced by what they are bound to."""
        while isinstance(t, TypeVar):
            bound = self.bindings.get(id(t))
            if bound is None:
                return t
            t = bound
        if isinstance(t, tuple):
            return (t[0], *(self.resolve(p) for p in t[1:]))
        return t

    def bind(self, name: str, types: list[Type], *, member: bool = False) -> list[Type]:
        """``types`` (the receiver's first) resolved, after binding their TypeVars the way cel-go's
        overload resolution of ``name`` does: every overload that fits, tried in cel-go's order,
        binds what is still free (and widens a bound one that meets dyn to dyn)."""
        if not any(_has_type_var(t) for t in types):
            return types
        for signature in _signatures(name, member):
            if len(signature) != len(types):
                continue
            trial = dict(self.bindings)
            parameters: dict[str, TypeVar] = {}
            params = [_instantiate(p, parameters, self.type_vars) for p in signature]
            if all(self.assignable(trial, t, p) for t, p in zip(types, params, strict=True)):
                self.bindings = trial
        return [self.resolve(t) for t in types]

    def fits(self, signatures: list[tuple[Type, ...]], types: list[Type]) -> bool:
        """Whether ``types`` fit one of ``signatures`` (binding nothing)."""
        for signature in signatures:
            parameters: dict[str, TypeVar] = {}
            params = [_instantiate(p, parameters, self.type_vars) for p in signature]
            trial = dict(self.bindings)
            if len(params) == len(types) and all(
                    self.assignable(trial, t, p) for t, p in zip(types, params, strict=True)):
                return True
        return False

    def bind_to(self, var: TypeVar, t: Type) -> None:
        self.bindings[id(var)] = t

    def assignable(self, bindings: dict[int, Type], t1: Type, t2: Type) -> bool:
        """Whether a value of type ``t1`` can be passed where ``t2`` is expected, binding free types
        in ``bindings`` (cel-go's assignability with type substitutions)."""
        if t1 is t2:
            return True
        if isinstance(t2, TypeVar):
            fits, was_bound = self._substitution(bindings, t1, t2)
            if fits or was_bound:
                return fits
        if isinstance(t1, TypeVar):
            return self._substitution(bindings, t2, t1)[0]
        if t1 in (DYN, FREE) or t2 in (DYN, FREE):
            return True
        if isinstance(t1, tuple) and isinstance(t2, tuple):
            return (t1[0] == t2[0] and len(t1) == len(t2)
                    and all(self.assignable(bindings, a, b) for a, b in zip(t1[1:], t2[1:], strict=True)))
        return not isinstance(t1, tuple) and not isinstance(t2, tuple) and t1 == t2

    def _substitution(self, bindings: dict[int, Type], t: Type, var: TypeVar) -> tuple[bool, bool]:
        """Whether ``t`` may stand for ``var`` (then bound to it, or to the more general of it and what
        ``var`` was bound to), and whether ``var`` was bound already."""
        if t is var:
            return True, True
        bound = bindings.get(id(var))
        if bound is None:
            if self._occurs(bindings, var, t):
                return False, False
            bindings[id(var)] = t
            return True, False
        if bound is t:
            return True, True
        if not self.assignable(bindings, t, bound):
            return False, True
        general = t if _less_specific(t, bound) else bound
        if not self._occurs(bindings, var, general):
            bindings[id(var)] = general
        return True, True

    def _occurs(self, bindings: dict[int, Type], var: TypeVar, t: Type) -> bool:
        if t is var:
            return True
        if isinstance(t, TypeVar):
            bound = bindings.get(id(t))
            return bound is not None and self._occurs(bindings, var, bound)
        return isinstance(t, tuple) and any(self._occurs(bindings, var, p) for p in t[1:])

    def joined(self, types: list[Type]) -> list[Type]:
        """The element types of a literal, resolved after binding their TypeVars to the others as cel-go
        joins them (``[x, 1]`` binds x to int)."""
        if any(_has_type_var(t) for t in types):
            previous: Type | None = None
            for t in types:
                trial = dict(self.bindings)
                if previous is not None and self.assignable(trial, previous, t):
                    self.bindings = trial
                    previous = previous if _less_specific(self.resolve(previous), self.resolve(t)) else t
                elif previous is None:
                    previous = t
            types = [self.resolve(t) for t in types]
        return types

    def check(self, node: Node) -> Type:
        if isinstance(node, Literal):
            return "null_type" if node.kind == "null" else node.kind
        if isinstance(node, Ident):
            return self.identifier(node)
        if isinstance(node, Select):
            return self.qualify(node, self.check(node.operand), node.field, None, optional=node.optional)
        if isinstance(node, Has):
            operand = self.check(node.select.operand)
            self.qualify(node.select, operand, node.select.field, None, optional=False)
            return BOOL
        if isinstance(node, Index):
            operand = self.check(node.operand)
            return self.qualify(node, operand, None, self.check(node.index), optional=node.optional)
        if isinstance(node, ListExpr):
            elements = [self.element(node, i, e) for i, e in enumerate(node.elements)]
            return ("list", self.homogeneous(node, elements))
        if isinstance(node, MapExpr):
            if not self.optional_map_entries and any(entry.optional for entry in node.entries):
                raise self.fail(node, "optional map entries '{?key: value}' are not supported by the celpy "
                                      "backend (the cel-expr backend supports them)")
            keys = [self.check(entry.key) for entry in node.entries]
            values = [self.check(entry.value) for entry in node.entries]
            return ("map", self.homogeneous(node, keys), self.homogeneous(node, values))
        if isinstance(node, Comprehension):
            return self.comprehension(node)
        if isinstance(node, Call):
            return self.call(node)
        raise self.fail(node, f"unsupported expression {type(node).__name__}")

    def identifier(self, node: Ident) -> Type:
        for scope in reversed(self.scopes):
            if node.name in scope:
                return scope[node.name]
        if node.name == "device":
            return DEVICE
        if node.name in TYPE_NAMES:
            return "type"
        raise self.fail(node, f"undeclared reference to '{node.name}'")

    def element(self, node: ListExpr, position: int, element: Node) -> Type:
        element_type = self.check(element)
        if position not in node.optional_indices:
            return element_type
        element_type = self.resolve(element_type)
        if not unifies(element_type, ANY_OPTIONAL):
            found = type_name(element_type)
            raise self.fail(element, f"optional list element must be an optional, not {found}")
        return element_type[1] if isinstance(element_type, tuple) else DYN

    def homogeneous(self, node: Node, types: list[Type]) -> Type:
        """The element type of a literal (free when it is empty); every element must have the first
        one's type (HomogeneousAggregateLiterals)."""
        if not types:
            return self.new_type_var()
        types = self.joined(types)
        result = types[0]
        for t in types[1:]:
            if not self.in_format and not equivalent(types[0], t):
                raise self.fail(node, f"expected type '{type_name(types[0])}' but found '{type_name(t)}'")
            result = _join(result, t) if unifies(result, t) else DYN
        return result

    def qualify(self, node: Node, operand: Type, field: str | None, index: Type | None, *,
                optional: bool) -> Type:
        operand = self.resolve(operand)
        if isinstance(operand, TypeVar):
            self.bind_to(operand, DYN)  # as cel-go: a free operand of a selection or index is dyn
            operand = DYN
        was_optional = isinstance(operand, tuple) and operand[0] == "optional_type"
        target = operand[1] if was_optional else operand
        if field is None and target == DYN:
            # An index of a dynamic value (optional or not, `[?i]` too, also behind `.?`): cel-go
            # resolves it against its list and its map overloads, whose results differ, so it is plain
            # dyn, and orValue(x) on it takes x's type (see result()). `attrs.ids[?i].orValue(-5)` is
            # an int; an optional field selection of a dyn value stays an optional of dyn.
            return DYN
        result = self.member(node, target, field, index)
        if optional and field is None and (target == FREE or (
                isinstance(target, tuple) and target[0] == "list" and target[1] == FREE)):
            # an optional index of an empty literal leaves the value's type free, as in cel-go
            return ("optional_type", FREE)
        return ("optional_type", result) if optional or was_optional else result

    def member(self, node: Node, target: Type, field: str | None, index: Type | None) -> Type:
        if target == DEVICE:
            if field is None:
                raise self.fail(node, f"type '{DEVICE}' does not support indexing")
            if field not in self.device_fields:
                raise self.fail(node, f"undefined field '{field}'")
            return self.device_fields[field]
        if target == DYN:
            return DYN
        if isinstance(target, tuple) and target[0] == "map":
            key = STRING if field is not None else index
            if not unifies(key, target[1]):  # type: ignore[arg-type]
                raise self.fail(node, f"found no matching overload for '_[_]' applied to "
                                      f"'({type_name(target)}, {type_name(key)})'")  # type: ignore[arg-type]
            return _known(target[2])
        if isinstance(target, tuple) and target[0] == "list" and field is None:
            if not unifies(index, INT):  # type: ignore[arg-type]
                raise self.fail(node, f"found no matching overload for '_[_]' applied to "
                                      f"'({type_name(target)}, {type_name(index)})'")  # type: ignore[arg-type]
            return _known(target[1])
        if field is not None:
            raise self.fail(node, f"type '{type_name(target)}' does not support field selection")
        raise self.fail(node, f"found no matching overload for '_[_]' applied to "
                              f"'({type_name(target)}, {type_name(index)})'")  # type: ignore[arg-type]

    def comprehension(self, node: Comprehension) -> Type:
        # as cel-go records it: with what the body bound filled in, later bindings do not change it
        return self.resolve(self._comprehension(node))

    def _comprehension(self, node: Comprehension) -> Type:
        target = self.resolve(self.check(node.target))
        if isinstance(target, TypeVar) and node.macro != "bind":
            self.bind_to(target, DYN)  # as cel-go: a free range is dyn
            target = DYN
        if node.macro == "bind":
            self.scopes.append({node.var: target})
            result = self.check(node.args[0])
            self.scopes.pop()
            return result
        if isinstance(target, _AnyType):
            raise self.fail(node, "expression of type 'any' cannot be range of a comprehension "
                                  "(must be list, map, or dynamic)")
        if target == DYN:
            variable: Type = DYN
            second: Type = DYN
        elif isinstance(target, tuple) and target[0] in ("list", "map"):
            # an empty literal's element type stays free in the body, to be bound there
            variable, second = (t if isinstance(t, TypeVar) else _known(t)
                                for t in (target[1], target[2] if target[0] == "map" else target[1]))
        else:
            raise self.fail(node, f"expression of type '{type_name(target)}' cannot be the range of a "
                                  "comprehension (must be list, map, or dynamic)")
        scope = {node.var: variable}
        if node.var2 is not None:  # two-variable forms: index or key, then the value
            variable = INT if isinstance(target, tuple) and target[0] == "list" else variable
            scope = {node.var: variable, node.var2: second}
        self.scopes.append(scope)
        results = [self.check(arg) for arg in node.args]
        self.scopes.pop()
        if node.macro == "sortBy":
            return self.sort_by(node, self.resolve(target), self.resolve(results[0]))
        has_predicate = node.macro not in ("map", *TRANSFORMS) or len(results) == 2
        if has_predicate and not unifies(results[0], BOOL):
            found = type_name(results[0])
            raise self.fail(node.args[0], f"{node.macro}() predicate must be bool, not {found}")
        if node.macro in ("map", "transformList"):
            return ("list", results[-1])
        if node.macro == "transformMap":
            return ("map", variable, results[-1])
        if node.macro == "transformMapEntry":
            entry = results[-1]
            if entry == DYN:
                return ANY_MAP
            if not (isinstance(entry, tuple) and entry[0] == "map"):
                raise self.fail(node.args[-1], "found no matching overload for 'cel.@mapInsert' applied to "
                                               f"'(map(dyn, dyn), {type_name(entry)})'")
            return ("map", _known(entry[1]), _known(entry[2]))
        if node.macro == "filter":
            return ("list", variable)
        return BOOL

    def sort_by(self, node: Comprehension, target: Type, key: Type) -> Type:
        """``list.sortBy(e, key)``: cel-go expands it to ``@sortByAssociatedKeys`` of the list and
        the list of its keys, declared for lists whose keys have an orderable type."""
        is_list = target == DYN or (isinstance(target, tuple) and target[0] == "list")
        if not is_list or not (key in (DYN, FREE) or key in ORDERED):
            raise self.fail(node, "found no matching overload for '@sortByAssociatedKeys' applied to "
                                  f"'{type_name(target)}.(list({type_name(key)}))'")
        if target == DYN:
            return DYN  # the overloads for every key type apply, with different results
        by_element = isinstance(node.args[0], Ident) and node.args[0].name == node.var
        if target[1] == FREE and (key == FREE or by_element):
            # an empty literal sorted by its elements: cel-go binds their type to the first
            # overload's key type, int
            if isinstance(target[1], TypeVar):
                self.bind_to(target[1], INT)
            return ("list", INT)
        return ("list", target[1])

    def call(self, node: Call) -> Type:
        name = node.function
        if name in OPERATORS:
            return self.operator(node, [self.check(arg) for arg in node.args])
        namespace = qualified_name(node.target) if node.target is not None else None
        receiver: Type | None = None
        formatting = name == "format"
        self.in_format += formatting
        if namespace in NAMESPACES:
            name = f"{namespace}.{name}"
        elif node.target is not None:
            receiver = self.check(node.target)
        args = [self.check(arg) for arg in node.args]
        self.in_format -= formatting
        overloads = OVERLOADS.get(name)
        if overloads is None or (name == "includes" and not self.options.list_type_attributes):
            raise self.fail(node, f"undeclared reference to '{name}'")
        if receiver is None:
            args = self.bind(name, args)
        else:
            receiver, *args = self.bind(name, [receiver, *args], member=True)
        results = [self.result(result, receiver, args) for r, params, result in overloads
                   if _applies(r, params, receiver, args)]
        if results and receiver is not None and name in _AGREEING and not self.fits(_AGREEING[name],
                                                                                     [receiver, *args]):
            results = []
        if not results:
            applied = ", ".join(type_name(a) for a in args)
            shown = f"{name}({applied})" if receiver is None else f"{type_name(receiver)}.{name}({applied})"
            raise self.fail(node, f"found no matching overload for '{name}' applied to '{shown}'")
        if name.startswith("sets.") and not unifies(args[0], args[1]):
            raise self.fail(node, f"found no matching overload for '{name}' applied to "
                                  f"'({type_name(args[0])}, {type_name(args[1])})'")
        if name in REGEX_FUNCTIONS:
            self.check_regex(node.args[-1])
        if name in ("duration", "timestamp") and receiver is None:
            self.check_time_literal(node, name)
        if isinstance(receiver, tuple) and receiver[0] == "list" and receiver[1] == FREE:
            return results[0]  # cel-go binds an empty literal's element type to the first overload's
        return results[0] if all(r == results[0] for r in results) else DYN

    def result(self, result: Type, receiver: Type | None, args: list[Type]) -> Type:
        if result == INNER and not isinstance(receiver, tuple) and args:
            # orValue(x) on a dynamic receiver: the value type is free and takes the default's type.
            return args[0]
        if result in (ELEMENT, INNER):
            inner = receiver[1] if isinstance(receiver, tuple) else DYN
            if inner == FREE:
                # sum/min/max of an empty literal: cel-go settles on the first overload, list(int)
                return INT if result == ELEMENT else args[0] if args else self.freed(inner)
            # orValue(x): the type parameter is bound by the value and by x, and takes the less specific
            return _most_general(inner, args[0]) if result == INNER and args else inner
        if result == EITHER:
            values = [t[1] if isinstance(t, tuple) else DYN for t in (receiver, *args)]
            known = [t for t in values if t != FREE]
            return ("optional_type", _most_general(known[0], known[-1]) if known else self.freed(values[0]))
        if result == WRAPPED:
            return ("optional_type", args[0])
        if result in (SAME, FLAT):
            # list(T) of a dynamic receiver (or of dynamic elements, for flatten) leaves T free, to be
            # bound where the list is used (dyn.reverse().filter(s, size(s) > 1) is a list(bytes))
            inner = receiver[1] if isinstance(receiver, tuple) else FREE
            if result == FLAT and inner != FREE:
                inner = inner[1] if isinstance(inner, tuple) else FREE
            return ("list", self.freed(inner))
        return self.freed(result)

    def freed(self, t: Type) -> Type:
        """``t`` with a new TypeVar for each plain free type in it (optional.none()'s value type, a list
        function's element type of a dynamic list), so that its uses can bind it as cel-go's do."""
        if isinstance(t, tuple):
            return (t[0], *(self.freed(p) for p in t[1:]))
        return self.new_type_var() if t == FREE and not isinstance(t, TypeVar) else t

    def check_regex(self, pattern: Node) -> None:
        if isinstance(pattern, Literal) and pattern.kind == "string":
            problem = regexp_error(str(pattern.value))
            if problem is not None:
                raise self.fail(pattern, f"invalid regular expression {pattern.value!r}: {problem}")

    def check_time_literal(self, node: Call, name: str) -> None:
        """cel-go's ValidateDurationLiterals / ValidateTimestampLiterals: a literal argument must convert."""
        argument = node.args[0]
        if not isinstance(argument, Literal) or argument.kind not in ("string", "int"):
            return
        try:
            if name == "duration" and argument.kind == "string":
                parse_duration(str(argument.value))
            elif name == "timestamp":
                if argument.kind == "string":
                    parse_timestamp(str(argument.value))
                else:
                    from_unix(int(str(argument.value)))
        except TimeError:
            raise self.fail(argument, f"invalid {name} argument") from None

    def operator(self, node: Call, types: list[Type]) -> Type:
        name = node.function
        types = self.bind(name, types)
        mismatch = self.fail(node, f"found no matching overload for '{name}' applied to "
                                   f"'({', '.join(type_name(t) for t in types)})'")
        if name in ("_&&_", "_||_", "!_"):
            if not all(unifies(t, BOOL) for t in types):
                raise mismatch
            return BOOL
        if name == "_?_:_":
            if not unifies(types[0], BOOL) or not unifies(types[1], types[2]):
                raise mismatch
            if DYN in (types[1], types[2]):
                return DYN  # as cel-go: a dynamic branch makes the whole conditional dynamic
            return _most_general(types[1], types[2])
        if name == "-_":
            if types[0] not in (DYN, INT, DOUBLE):  # cel-go negates no duration
                raise mismatch
            return DYN if types[0] == DYN else types[0]  # any's negation is dyn
        left, right = types
        if name in ("_==_", "_!=_"):
            if not unifies(left, right):
                raise mismatch
            return BOOL
        if name == "@in":
            if isinstance(right, tuple) and right[0] in ("list", "map") and unifies(left, right[1]):
                return BOOL
            if right == DYN:
                return BOOL
            raise mismatch
        if name in ("_<_", "_<=_", "_>_", "_>=_"):
            if DYN in (left, right) and all(t == DYN or t in ORDERED for t in types):
                return BOOL
            if (left in NUMERIC and right in NUMERIC) or (left == right and left in ORDERED):
                return BOOL
            raise mismatch
        if DYN in (left, right):
            if all(t == DYN or t in ARITHMETIC[name] or t in TIMES or
                   (name == "_+_" and isinstance(t, tuple) and t[0] == "list") for t in types):
                result = right if left == DYN else left
                return DYN if result == DYN else result  # any + any is dyn
            raise mismatch
        if name == "_+_" and isinstance(left, tuple) and left[0] == "list" and unifies(left, right):
            return _most_general(left, right)
        if left == right and left in ARITHMETIC[name]:
            return left
        if name == "_+_" and left in TIMES and right in TIMES and (left, right) != (TIMESTAMP, TIMESTAMP):
            return TIMESTAMP if TIMESTAMP in (left, right) else DURATION
        if name == "_-_" and left in TIMES and right in TIMES and (left, right) != (DURATION, TIMESTAMP):
            return DURATION if left == right else TIMESTAMP
        raise mismatch
