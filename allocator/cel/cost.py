"""Static worst-case cost estimate of a device selector, in the spirit of cel-go's checker cost estimator.

Upstream rejects a selector whose estimated cost exceeds 1,000,000 (CELSelectorExpressionMaxCost). The
estimate walks the AST and combines, per node, the worst-case cost with the worst-case size of the value
(string length, list/map element count), using the size bounds DRA declares for the `device` variable:
at most 32 domains and 32 attributes/capacities per domain, domain names of at most 63 bytes, attribute
ids of at most 32, driver names of at most 63, and attribute values (strings, versions, lists) of at most 64.

Unit costs follow cel-go: identifiers and field selections 1, constants 0, list literals 10, map literals 30,
plain function calls 1, string traversals ceil(0.1 * length), regular expressions additionally
ceil(0.25 * pattern length); a comprehension costs its range plus, per element of the range, its loop
condition and step. Sizes that cannot be bounded make the estimate saturate at 2**64 - 1, as in cel-go.

Figures with these rules (tests/cel/test_cost.py): `device.driver == "gpu.example.com"` costs 4; the three
benchmark selectors (equality on driver/model/memory, `in` on a list, quantity compareTo) cost 14, 19 and 7;
an `exists` with `startsWith` over one attribute domain costs 196; two nested loops over the attribute maps
cost about 6,400 (25,000 with a regex match inside); three nested loops exceed 1,000,000 and are rejected,
and so is a string search in the result of string(), whose size cel-go cannot bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import cast

from allocator.cel.backend import CELCompileError, CompileOptions
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

MAX_COST = 2**64 - 1
UNBOUNDED = 2**64 - 1

STRING_TRAVERSAL_FACTOR = 0.1
REGEX_LENGTH_FACTOR = 0.25
LIST_CREATE_COST = 10
MAP_CREATE_COST = 30

MAX_DOMAINS = 32
MAX_IDS_PER_DOMAIN = 32
MAX_DOMAIN_LENGTH = 63
MAX_ID_LENGTH = 32
MAX_DRIVER_LENGTH = 63
MAX_ATTRIBUTE_VALUE_LENGTH = 64


@dataclass(frozen=True, slots=True)
class Shape:
    """What the estimator knows about a value: its kind, maximum size, and element shapes."""

    kind: str  # "string", "bytes", "list", "map", "bool", "int", "quantity", "device", ..., or "dyn"
    size: int = UNBOUNDED  # string/bytes length or number of elements; meaningless for scalars
    elem: Shape | None = None  # list element or map value
    key: Shape | None = None  # map key
    fields: tuple[tuple[str, Shape], ...] = ()  # declared fields of an object


DYN = Shape("dyn")
SCALAR_DYN = Shape("dyn", size=1)
BOOL = Shape("bool", size=1)
INT = Shape("int", size=1)

# An attribute is a string/version of at most 64 bytes or (list attributes) a list of at most 64 values;
# cel-go knows no size for an element of a list attribute (the attribute's type is dyn).
_ATTRIBUTE_VALUE = Shape("dyn", MAX_ATTRIBUTE_VALUE_LENGTH, elem=DYN)
_DOMAIN_KEY = Shape("string", size=MAX_DOMAIN_LENGTH)
_ID_KEY = Shape("string", size=MAX_ID_LENGTH)


def _domain_map(value: Shape) -> Shape:
    inner = Shape("map", MAX_IDS_PER_DOMAIN, elem=value, key=_ID_KEY)
    return Shape("map", MAX_DOMAINS, elem=inner, key=_DOMAIN_KEY)


def device_shape(options: CompileOptions) -> Shape:
    fields = [
        ("driver", Shape("string", MAX_DRIVER_LENGTH)),
        ("attributes", _domain_map(_ATTRIBUTE_VALUE)),
        ("capacity", _domain_map(Shape("quantity", size=1))),
    ]
    if options.consumable_capacity:
        fields.append(("allowMultipleAllocations", BOOL))
    return Shape("device", size=len(fields), fields=tuple(fields))


def _add(*costs: int) -> int:
    return min(MAX_COST, sum(costs))


def _mul(a: int, b: int) -> int:
    return min(MAX_COST, a * b)


def _traversal(size: int, factor: float = STRING_TRAVERSAL_FACTOR) -> int:
    if size >= UNBOUNDED:
        return MAX_COST
    return math.ceil(size * factor)


_SAME_SIZE_STRING_FUNCTIONS = {"lowerAscii", "upperAscii", "trim", "substring"}
_LIST_SCANS = {"isSorted", "sum", "min", "max", "indexOf", "lastIndexOf", "includes"}
_BOOL_RESULTS = {"isQuantity", "isSemver", "isInteger", "hasValue", "isGreaterThan", "isLessThan",
                 "sets.contains", "sets.equivalent", "sets.intersects"}
_INT_RESULTS = {"size", "int", "uint", "compareTo", "sign", "asInteger", "major", "minor", "patch", "charAt"}
_COMPARISONS = {"_==_", "_!=_", "_<_", "_<=_", "_>_", "_>=_"}
_SIZED_KINDS = {"string", "bytes", "list", "map", "dyn"}
IP, CIDR, URL = "net.IP", "net.CIDR", "kubernetes.URL"
FORMAT = "kubernetes.NamedFormat"
MAX_FORMAT_SIZE = 64  # apiserver's cel.MaxFormatSize
MAX_NAME_FORMAT_REGEX_SIZE = 128  # apiserver's cel.MaxNameFormatRegexSize
TIMESTAMP, DURATION = "google.protobuf.Timestamp", "google.protobuf.Duration"
_TIMES = {TIMESTAMP, DURATION}
# Types the Kubernetes estimator prices == for (1, a URL by its size); for cel-go they have no size,
# so != (and == of any other type without one, such as type values) cannot be bounded.
_KUBERNETES_EQUALITY = {IP, CIDR, URL, FORMAT, "kubernetes.Quantity", "kubernetes.Semver"}
# format.named()'s result: an optional, which == must not take for a format
_OPTIONAL_FORMAT = Shape("optional_type", elem=Shape(FORMAT))
_NOMINAL_NET = {"family": INT, "prefixLength": INT, "isUnspecified": BOOL, "isLoopback": BOOL,
                "isLinkLocalMulticast": BOOL, "isLinkLocalUnicast": BOOL, "isGlobalUnicast": BOOL,
                "masked": Shape(CIDR), "isURL": BOOL, "getQuery": Shape("map"),
                **dict.fromkeys(("getScheme", "getHost", "getHostname", "getPort", "getEscapedPath"),
                                Shape("string"))}
_TIME_GETTERS = {"getFullYear", "getMonth", "getDayOfYear", "getDate", "getDayOfMonth", "getDayOfWeek",
                 "getHours", "getMinutes", "getSeconds", "getMilliseconds"}


class _Estimator:
    def __init__(self, options: CompileOptions) -> None:
        self.scopes: list[dict[str, Shape]] = [{"device": device_shape(options)}]

    def lookup(self, name: str) -> Shape:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return DYN

    def estimate(self, node: Node) -> tuple[int, Shape]:
        if isinstance(node, Literal):
            if node.kind in ("string", "bytes"):
                return 0, Shape(node.kind, len(cast("str | bytes", node.value)))
            return 0, Shape(node.kind, size=1)
        if isinstance(node, Ident):
            return 1, self.lookup(node.name)
        if isinstance(node, Select):
            cost, shape = self.estimate(node.operand)
            return _add(cost, 1), _member(shape, node.field)
        if isinstance(node, Has):
            # the Kubernetes environment keeps cel-go's old rule: the presence test itself is free
            cost, _ = self.estimate(node.select.operand)
            return cost, BOOL
        if isinstance(node, Index):
            cost, shape = self.estimate(node.operand)
            index_cost, _ = self.estimate(node.index)
            return _add(cost, index_cost, 1), _element(shape)
        if isinstance(node, ListExpr):
            costs, shapes = self.estimate_all(node.elements)
            elem = shapes[0] if len({s.kind for s in shapes}) == 1 else _widest(shapes)
            return _add(LIST_CREATE_COST, *costs), Shape("list", len(node.elements), elem=elem)
        if isinstance(node, MapExpr):
            key_costs, keys = self.estimate_all(tuple(e.key for e in node.entries))
            value_costs, values = self.estimate_all(tuple(e.value for e in node.entries))
            shape = Shape("map", len(node.entries), elem=_widest(values), key=_widest(keys))
            return _add(MAP_CREATE_COST, *key_costs, *value_costs), shape
        if isinstance(node, Comprehension):
            return self.comprehension(node)
        if isinstance(node, Call):
            return self.call(node)
        raise TypeError(f"unexpected AST node {type(node).__name__}")

    def estimate_all(self, nodes: tuple[Node, ...]) -> tuple[list[int], list[Shape]]:
        results = [self.estimate(n) for n in nodes]
        return [c for c, _ in results], [s for _, s in results]

    def comprehension(self, node: Comprehension) -> tuple[int, Shape]:
        if node.macro == "sortBy":
            return self.sort_by(node)
        range_cost, range_shape = self.estimate(node.target)
        if node.macro == "bind":
            # cel.bind expands to a comprehension over an empty list literal, whose creation is charged.
            self.scopes.append({node.var: range_shape})
            body_cost, body_shape = self.estimate(node.args[0])
            self.scopes.pop()
            if isinstance(node.args[0], Ident) and node.args[0].name == node.var:
                # cel-go copies no size from a result that is the bound name itself
                body_shape = Shape(body_shape.kind, elem=body_shape.elem, key=body_shape.key)
            return _add(LIST_CREATE_COST, range_cost, body_cost), body_shape
        if range_shape.kind == "map":
            first, second = range_shape.key or DYN, range_shape.elem or DYN
        else:
            first, second = range_shape.elem or DYN, DYN
            if node.var2 is not None:  # two-variable form: index, value (a dynamic range's index is dyn)
                first, second = INT if range_shape.kind == "list" else DYN, range_shape.elem or DYN
        scope = {node.var: first}
        if node.var2 is not None:
            scope[node.var2] = second
        self.scopes.append(scope)
        costs, shapes = self.estimate_all(node.args)
        self.scopes.pop()
        # Per element: the loop condition and step of cel-go's macro expansion; plus the accumulator's
        # initial value (a list literal for map/filter) and the result expression.
        count = range_shape.size
        if node.macro == "all":  # cond @not_strictly_false(acc), step acc && p
            per_item, fixed, result = _add(costs[0], 3), 1, BOOL
        elif node.macro == "exists":  # cond @not_strictly_false(!acc), step acc || p
            per_item, fixed, result = _add(costs[0], 4), 1, BOOL
        elif node.macro == "exists_one":  # step p ? acc + 1 : acc, result acc == 1
            per_item, fixed, result = _add(costs[0], 2), 2, BOOL
        elif node.macro in ("transformMap", "transformMapEntry"):
            # step cel.@mapInsert(acc, k, t) or cel.@mapInsert(acc, t), or f ? that : acc; the
            # accumulator starts as a map literal
            per_item = _add(*costs, 3 if node.macro == "transformMap" else 2)
            fixed = MAP_CREATE_COST + 1
            result = Shape("map", count, elem=shapes[-1], key=first)
        elif node.macro == "filter":  # step p ? acc + [x] : acc
            per_item, fixed = _add(costs[0], 13), LIST_CREATE_COST + 1
            result = Shape("list", count, elem=first)
        else:  # map, transformList: step acc + [t], or p ? acc + [t] : acc
            per_item = _add(*costs, 12)
            fixed, result = LIST_CREATE_COST + 1, Shape("list", count, elem=shapes[-1])
        return _add(range_cost, _mul(count, per_item), fixed), result

    def call(self, node: Call) -> tuple[int, Shape]:
        name = node.function
        args = node.args
        if name == "_&&_" or name == "_||_":
            costs, _ = self.estimate_all(args)
            return _add(*costs), BOOL
        if name == "_?_:_":
            costs, shapes = self.estimate_all(args)
            return _add(costs[0], max(costs[1], costs[2])), _widest(shapes[1:])
        namespace = qualified_name(node.target) if node.target is not None else None
        if namespace in ("sets", "strings", "optional", "math", "ip", "lists", "format"):
            qualified, target = f"{namespace}.{name}", None
        else:
            qualified, target = name, node.target
        target_cost, target_shape = self.estimate(target) if target is not None else (0, DYN)
        arg_costs, arg_shapes = self.estimate_all(args)
        base = _add(target_cost, *arg_costs)
        operands = ([target_shape] if target is not None else []) + arg_shapes
        if qualified in _LISTS_EXTENSION and (target is not None) == (qualified != "lists.range"):
            own, shape = _lists_extension_cost(qualified, target_shape, args, arg_shapes)
        else:
            own, shape = _call_cost(qualified, operands)
        return _add(base, own), shape

    def sort_by(self, node: Comprehension) -> tuple[int, Shape]:
        """cel-go expands ``l.sortBy(e, key)`` to a cel.bind of the list whose result is
        ``@sortByAssociatedKeys`` of it and of its keys (a map over it)."""
        target_cost, target_shape = self.estimate(node.target)
        self.scopes.append({_SORT_BY_INPUT: target_shape})
        keys = Comprehension(node.pos, "map", Ident(node.pos, _SORT_BY_INPUT), node.var, None, node.args)
        keys_cost, keys_shape = self.estimate(keys)
        self.scopes.pop()
        own, shape = _sort_cost(keys_shape, target_shape.elem)
        return _add(LIST_CREATE_COST, target_cost, 1, keys_cost, own), shape


def _member(shape: Shape, field: str) -> Shape:
    for name, field_shape in shape.fields:
        if name == field:
            return field_shape
    return _element(shape)


def _element(shape: Shape) -> Shape:
    if shape.kind in ("map", "list") and shape.elem is not None:
        return shape.elem
    return DYN


def _widest(shapes: list[Shape]) -> Shape:
    if not shapes:
        return DYN
    kinds = {s.kind for s in shapes}
    return Shape(kinds.pop() if len(kinds) == 1 else "dyn", max(s.size for s in shapes))


def _call_cost(name: str, operands: list[Shape]) -> tuple[int, Shape]:
    """Cost of the call itself (arguments excluded) and the shape of its result.

    Follows cel-go's checker (operators, string functions, regular expressions) and the Kubernetes
    library estimator (lists, regex, strings extension); anything else costs 1, as there.
    """
    first = operands[0] if operands else DYN
    second = operands[1] if len(operands) > 1 else DYN
    if name in ("_==_", "_!=_") and first is _OPTIONAL_FORMAT and second is _OPTIONAL_FORMAT:
        return MAX_COST, BOOL  # as upstream's estimate of two format.named() results
    if name == "_==_" and first.kind == second.kind == FORMAT:
        # the Kubernetes estimator: a format's name of at most 64 bytes is compared
        return _traversal(MAX_FORMAT_SIZE), BOOL
    if name == "_==_" and first.kind == second.kind and first.kind in _KUBERNETES_EQUALITY:
        return (_traversal(second.size) if first.kind == URL else 1), BOOL
    if name == "_!=_" and {_named(first.kind), _named(second.kind)} <= _KUBERNETES_EQUALITY:
        return MAX_COST, BOOL
    if name in _COMPARISONS:
        # Proportional to the smaller operand for strings, bytes, lists and dynamic values (nothing
        # when one is empty, "" or []); 1 for scalars.
        if not {first.kind, second.kind} & _SIZED_KINDS:
            return 1, BOOL
        return _traversal(min(first.size, second.size)), BOOL
    if name == "@in":
        # a list is searched (an empty one costs nothing); a dynamic one may be a map, which costs 1
        cost = 1 if second.kind == "map" else second.size if second.kind == "list" else max(1, second.size)
        return cost, BOOL
    if name == "_+_":
        if first.kind == "list" or second.kind == "list":
            return 1, Shape("list", min(UNBOUNDED, first.size + second.size), elem=first.elem or second.elem)
        if first.kind in ("string", "bytes") or second.kind in ("string", "bytes"):
            size = min(UNBOUNDED, first.size + second.size)
            return _traversal(size), Shape(first.kind if first.kind != "dyn" else second.kind, size)
        if first.kind == "dyn" and second.kind == "dyn":  # may be two lists or strings: sizes add up
            size = min(UNBOUNDED, first.size + second.size)
            # the dearest overload that may apply: string concatenation traverses the result
            return max(1, _traversal(size)), Shape("dyn", size, elem=first.elem or second.elem)
        return 1, _arithmetic_result(first, second)
    if name in ("startsWith", "endsWith"):
        return _traversal(second.size), BOOL
    if name == "contains":
        return _mul(_traversal(first.size), _traversal(second.size)), BOOL
    if name in ("matches", "find", "findAll"):
        cost = _mul(_traversal(min(UNBOUNDED, first.size + 1)), _traversal(second.size, REGEX_LENGTH_FACTOR))
        if name == "matches":
            return cost, BOOL
        found = Shape("string", first.size)
        return cost, found if name == "find" else Shape("list", first.size, elem=found)
    if name in _LIST_SCANS and first.kind != "string":
        elem = first.elem or SCALAR_DYN
        # sum/min/max: a number has size 1, as cel-go's estimator sees it (an empty literal's is an int,
        # its first overload); another element's size it does not know
        numeric = name in ("indexOf", "lastIndexOf") or first.size == 0
        result = INT if numeric else _arithmetic_result(elem, elem)
        if name in ("isSorted", "includes"):
            result = BOOL
        if first.kind != "list" and name != "includes":
            # the Kubernetes estimator takes a dynamic receiver (an attribute) for a string
            return _traversal(first.size), result
        # per element 1, plus a traversal for strings, whose size it does not know in a typed list
        text_size = UNBOUNDED if first.kind == "list" else elem.size
        per_element = 1 + (_traversal(text_size) if elem.kind in ("string", "bytes") else 0)
        return _mul(first.size, per_element), result
    if name in ("indexOf", "lastIndexOf"):  # on a string
        return _traversal(first.size), INT
    if name in _SAME_SIZE_STRING_FUNCTIONS:
        return _traversal(first.size), Shape("string", first.size)
    if name == "replace":
        old, new = second, operands[2] if len(operands) > 2 else DYN
        if old.size == 0:
            size = _add(_mul(first.size + 1, new.size), first.size)
        elif new.size <= old.size:
            size = first.size
        else:
            size = _mul(math.ceil(first.size / old.size), new.size)
        return _traversal(first.size, 2 * STRING_TRAVERSAL_FACTOR), Shape("string", size)
    if name == "split":
        part = Shape("string")  # cel-go sizes the list, not its parts
        return _traversal(first.size, 2 * STRING_TRAVERSAL_FACTOR), Shape("list", first.size, elem=part)
    if name == "join":
        # As the Kubernetes estimator: the elements of a typed list (a literal, a split() or map()
        # result) have no size it knows, so neither has the result; a dynamic list (an attribute
        # value) has no element type at all, and only its separators are counted.
        size = UNBOUNDED if first.kind == "list" and first.size else 0
        if len(operands) > 1:
            size = _add(size, _mul(second.size, max(0, first.size - 1)))
        return _traversal(size), Shape("string", size)
    if name == "format":
        return _traversal(first.size), Shape("string", _add(first.size, second.size))
    if name == "strings.quote":
        return _traversal(first.size), Shape("string", _add(_mul(first.size, 2), 2))
    if name in ("sets.contains", "sets.equivalent", "sets.intersects"):
        return _add(_mul(first.size, second.size), 1), BOOL
    # Computed scalars (parsed, added, multiplied) have no size in cel-go, only literals do: that
    # matters where such a value meets a dynamic one (a comparison, string()).
    if name in ("quantity", "semver", "isQuantity", "isSemver"):
        # parsing traverses the text (the Kubernetes estimator), unbounded for a computed string
        result = BOOL if name.startswith("is") else Shape(f"kubernetes.{name.capitalize()}")
        return _traversal(first.size), result
    if name in ("add", "sub"):
        return 1, Shape("kubernetes.Quantity")
    if name == "validate" and len(operands) == 2:
        # the Kubernetes estimator: the string is traversed once per (assumed) regex expression of a
        # 128-byte pattern, whatever the format; the result's size is unknown
        traversal = _traversal(operands[1].size)
        regex = math.ceil(MAX_NAME_FORMAT_REGEX_SIZE * REGEX_LENGTH_FACTOR)
        return _mul(traversal, regex), Shape("list", elem=Shape("string"))
    if name == "format.named":
        return 1, _OPTIONAL_FORMAT
    if name.startswith("format."):
        return 1, Shape(FORMAT)
    net = _net_call_cost(name, operands)
    if net is not None:
        return net
    if name in ("duration", "timestamp"):
        return 1, Shape(DURATION if name == "duration" else TIMESTAMP, size=1)
    if name in _TIME_GETTERS:
        return 1, INT
    if name == "string":
        # cel-go knows no size for the conversion of a typed value, so searching it cannot be bounded;
        # converting a dynamic value (an attribute) keeps that value's size and traverses it.
        if first.kind == "dyn":
            return _traversal(first.size), Shape("string", first.size)
        return 1, Shape("string")
    if name in _BOOL_RESULTS or name in ("!_",):
        return 1, BOOL
    if name in _INT_RESULTS:
        return 1, INT
    if name in ("orValue", "value"):
        if first is _OPTIONAL_FORMAT:
            return 1, Shape(FORMAT)
        # cel-go keeps no size for what an optional holds
        return 1, Shape(first.kind, elem=first.elem)
    if name == "dyn":
        return 1, Shape("dyn", first.size, elem=first.elem, key=first.key)
    if name in ("optional.of", "optional.ofNonZeroValue"):
        return 1, first
    if name in ("_-_", "_*_", "_/_", "_%_", "-_"):
        return 1, _arithmetic_result(first, second if len(operands) > 1 else first)
    return 1, DYN


def _named(kind: str) -> str:
    """A capacity's shape is "quantity": the type's name for it."""
    return "kubernetes.Quantity" if kind == "quantity" else kind


def _net_call_cost(name: str, operands: list[Shape]) -> tuple[int, Shape] | None:
    """The Kubernetes estimator's prices for the ip, cidr and url libraries: parsing traverses the
    string, an accessor is nominal, a containment test compares two addresses of 4 to 16 bytes."""
    first = operands[0] if operands else DYN
    if name in ("ip", "cidr", "isIP", "isCIDR", "url", "ip.isCanonical") and first.kind != CIDR:
        factor = 2 * STRING_TRAVERSAL_FACTOR if name == "ip.isCanonical" else STRING_TRAVERSAL_FACTOR
        results = {"ip": Shape(IP), "cidr": Shape(CIDR), "url": Shape(URL, first.size)}
        return _traversal(first.size, factor), results.get(name, BOOL)
    if name == "ip":  # the address of a CIDR
        return 1, Shape(IP)
    if name in _NOMINAL_NET:
        return 1, _NOMINAL_NET[name]
    if name in ("containsIP", "containsCIDR"):
        compare = math.ceil(32 * STRING_TRAVERSAL_FACTOR)  # two addresses of at most 16 bytes
        if name == "containsCIDR":  # and the prefix masked and its bits compared
            compare += math.ceil(16 * STRING_TRAVERSAL_FACTOR) + 1
        argument = operands[1] if len(operands) > 1 else DYN
        if argument.kind not in (IP, CIDR):  # the string overload parses it too
            compare = _add(compare, _traversal(argument.size))
        return compare, BOOL
    return None


_LISTS_EXTENSION = {"slice", "flatten", "sort", "distinct", "reverse", "lists.range"}
_SORT_BY_INPUT = "@__sortBy_input__"


def _int_literal(node: Node, default: int) -> int:
    """An argument's value where it is an int literal (negative ones count as 0), as cel-go's list
    estimators read it; else ``default``."""
    if isinstance(node, Literal) and node.kind == "int":
        return max(0, cast(int, node.value))
    return default


def _factor(size: int, factor: float) -> int:
    """cel-go's MultiplyByCostFactor: rounded up, saturating."""
    if size >= UNBOUNDED or size * factor >= 2**64:
        return MAX_COST
    return math.ceil(size * factor)


def _allocating(size: int, factor: float) -> int:
    """A call that builds a list: dispatch 1, the list 10, and ``factor`` per element of ``size``."""
    return _add(_factor(size, factor), 1, LIST_CREATE_COST)


def _lists_extension_cost(name: str, target: Shape, args: tuple[Node, ...],
                          shapes: list[Shape]) -> tuple[int, Shape]:
    """cel-go's estimators of the lists extension (ext.Lists version 3)."""
    if name == "lists.range":
        size = _int_literal(args[0], UNBOUNDED)
        return _allocating(size, 1), Shape("list", size, elem=INT)
    if name == "slice":
        start, end = _int_literal(args[0], 0), _int_literal(args[1], target.size)
        size = (end - start) % 2**64  # unsigned, as in cel-go: a start past the end wraps around
        return _allocating(size, 1), Shape("list", size, elem=target.elem)
    if name == "reverse":
        return _allocating(target.size, 1), Shape("list", target.size, elem=target.elem)
    if name == "flatten":
        depth = _int_literal(args[0], UNBOUNDED) if args else 1
        inner = target.elem.elem if target.elem is not None and target.elem.elem is not None else None
        return _allocating(target.size, depth), Shape("list", target.size, elem=inner)
    if name == "distinct":
        squared = _mul(target.size, target.size)
        return _allocating(squared, 2), Shape("list", squared, elem=target.elem)
    return _sort_cost(target, target.elem)


def _sort_cost(keys: Shape, elem: Shape | None) -> tuple[int, Shape]:
    """sort() and sortBy's @sortByAssociatedKeys: 2 per pair of keys, 2.1 where the keys may be
    strings or bytes (cel-go takes the dearest of the overloads that match)."""
    squared = _mul(keys.size, keys.size)
    key_kind = keys.elem.kind if keys.elem is not None else "dyn"
    factor = 2.0 if key_kind in ("int", "uint", "double", "bool") else 2.0 + STRING_TRAVERSAL_FACTOR
    return _allocating(squared, factor), Shape("list", squared, elem=elem)


def _arithmetic_result(first: Shape, second: Shape) -> Shape:
    """A number has size 1 for the estimator; a dynamic operand with no number beside it may be
    anything (cel-go resolves no overload), so its result has no size."""
    for operand in (first, second):
        if operand.kind in ("int", "uint", "double"):
            return Shape(operand.kind, size=1)
    if first.kind in _TIMES or second.kind in _TIMES:
        kinds = {first.kind, second.kind}
        if kinds == {TIMESTAMP}:
            return Shape(DURATION, size=1)  # the difference of two timestamps
        return Shape(TIMESTAMP if TIMESTAMP in kinds else DURATION, size=1)
    return Shape(first.kind)


def estimate_cost(expression: str, options: CompileOptions) -> int:
    """Worst-case cost of evaluating `expression` once; raises CELCompileError for syntax errors."""
    tree = parse(expression)
    try:
        cost, _ = _Estimator(options).estimate(tree)
    except RecursionError:
        raise CELCompileError("expression is nested too deeply to estimate its cost", expression) from None
    return cost
