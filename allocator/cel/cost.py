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
benchmark selectors (equality on driver/model/memory, `in` on a list, quantity compareTo) cost 14, 31 and 8;
an `exists` with `startsWith` over one attribute domain costs 196; two nested loops over the attribute maps
cost about 6,400 (45,000 with a regex match inside); three nested loops exceed 1,000,000 and are rejected.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

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

# An attribute is a string/version of at most 64 bytes or (list attributes) a list of at most 64 values.
_ATTRIBUTE_VALUE = Shape("dyn", MAX_ATTRIBUTE_VALUE_LENGTH, elem=Shape("dyn", MAX_ATTRIBUTE_VALUE_LENGTH))
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


_STRING_SAME_SIZE = {"lowerAscii", "upperAscii", "trim", "substring", "quote", "reverse"}
_STRING_TO_INT = {"indexOf", "lastIndexOf"}
_LIST_SCANS = {"isSorted", "sum", "min", "max", "indexOf", "lastIndexOf", "includes"}
_BOOL_PREDICATES = {"isQuantity", "isSemver", "isInteger", "hasValue", "isGreaterThan", "isLessThan"}
_INT_RESULTS = {"size", "int", "uint", "compareTo", "sign", "asInteger", "major", "minor", "patch"}
_SET_FUNCTIONS = {"sets.contains", "sets.equivalent", "sets.intersects"}


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
                return 0, Shape(node.kind, len(node.value))  # type: ignore[arg-type]
            return 0, Shape(node.kind, size=1)
        if isinstance(node, Ident):
            return 1, self.lookup(node.name)
        if isinstance(node, Select):
            cost, shape = self.estimate(node.operand)
            return _add(cost, 1), _member(shape, node.field)
        if isinstance(node, Has):
            cost, _ = self.estimate(node.select.operand)
            return _add(cost, 1), BOOL
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
        range_cost, range_shape = self.estimate(node.target)
        if node.macro == "bind":
            self.scopes.append({node.var: range_shape})
            body_cost, body_shape = self.estimate(node.args[0])
            self.scopes.pop()
            return _add(range_cost, body_cost), body_shape
        if range_shape.kind == "map":
            first, second = range_shape.key or DYN, range_shape.elem or DYN
        else:
            first, second = range_shape.elem or DYN, DYN
            if node.var2 is not None:  # two-variable form over a list: index, value
                first, second = INT, range_shape.elem or DYN
        scope = {node.var: first}
        if node.var2 is not None:
            scope[node.var2] = second
        self.scopes.append(scope)
        costs, shapes = self.estimate_all(node.args)
        self.scopes.pop()
        count = range_shape.size
        if node.macro in ("all", "exists"):
            per_item, result_cost, result = _add(costs[0], 3), 1, BOOL
        elif node.macro == "exists_one":
            per_item, result_cost, result = _add(costs[0], 3), 2, BOOL
        elif node.macro == "filter":
            per_item, result_cost, result = _add(costs[0], 13), 1, Shape("list", count, elem=first)
        else:  # map, optionally with a filter predicate first
            per_item = _add(*costs, 12)
            result_cost, result = 1, Shape("list", count, elem=shapes[-1])
        return _add(range_cost, _mul(count, per_item), result_cost), result

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
        if namespace in ("sets", "strings", "optional", "math"):
            qualified, target = f"{namespace}.{name}", None
        else:
            qualified, target = name, node.target
        target_cost, target_shape = self.estimate(target) if target is not None else (0, DYN)
        arg_costs, arg_shapes = self.estimate_all(args)
        base = _add(target_cost, *arg_costs)
        operands = ([target_shape] if target is not None else []) + arg_shapes
        own, shape = _call_cost(qualified, operands)
        return _add(base, own), shape


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
    """Cost of the call itself (arguments excluded) and the shape of its result."""
    first = operands[0] if operands else DYN
    second = operands[1] if len(operands) > 1 else DYN
    if name in ("_==_", "_!=_", "_<_", "_<=_", "_>_", "_>=_"):
        sized = [s.size for s in operands if s.kind in ("string", "bytes", "list", "map", "dyn")]
        smallest = min(sized) if len(sized) == 2 else 1
        return max(1, _traversal(smallest)), BOOL
    if name == "@in":
        if second.kind == "map":
            return 1, BOOL
        return max(1, _mul(second.size, max(1, _traversal(first.size)))), BOOL
    if name == "_+_":
        if first.kind in ("string", "bytes", "list") or second.kind in ("string", "bytes", "list"):
            size = min(UNBOUNDED, first.size + second.size)
            return max(1, _traversal(size)), Shape(first.kind, size, elem=first.elem)
        return 1, Shape(first.kind, size=1)
    if name in ("_-_", "_*_", "_/_", "_%_", "-_"):
        return 1, Shape(first.kind, size=1)
    if name == "!_":
        return 1, BOOL
    if name in ("contains", "startsWith", "endsWith") and first.kind != "list":
        if name == "contains":
            return max(1, _mul(_traversal(first.size), _traversal(second.size))), BOOL
        return 1 + _traversal(second.size), BOOL
    if name in ("matches", "find", "findAll"):
        cost = _mul(max(1, _traversal(first.size)), max(1, _traversal(second.size, REGEX_LENGTH_FACTOR)))
        if name == "matches":
            return _add(cost, 1), BOOL
        result = Shape("string", first.size)
        return _add(cost, 1), result if name == "find" else Shape("list", first.size, elem=result)
    if name in _LIST_SCANS and first.kind in ("list", "dyn"):
        elem = first.elem or SCALAR_DYN
        cost = max(1, _mul(first.size, max(1, _traversal(elem.size))))
        if name in _STRING_TO_INT:
            return cost, INT
        return cost, BOOL if name in ("isSorted", "includes") else elem
    if name in _SET_FUNCTIONS:
        return max(1, _mul(first.size, second.size)), BOOL
    if name in _STRING_SAME_SIZE or name in _STRING_TO_INT or name == "charAt":
        shape = INT if name in _STRING_TO_INT else Shape("string", 1 if name == "charAt" else first.size + 2)
        return 1 + _traversal(first.size), shape
    if name == "replace":
        size = min(UNBOUNDED, _mul(first.size, max(1, operands[2].size if len(operands) > 2 else 1)))
        return 1 + _traversal(size), Shape("string", size)
    if name == "split":
        part = Shape("string", first.size)
        return 1 + _traversal(first.size), Shape("list", min(UNBOUNDED, first.size + 1), elem=part)
    if name == "join":
        size = _mul(first.size, (first.elem or DYN).size)
        return 1 + _traversal(size), Shape("string", size)
    if name in ("format", "strings.quote", "string"):
        size = UNBOUNDED if name == "format" else first.size * 2 + 2
        return 1 + _traversal(first.size), Shape("string", min(UNBOUNDED, size))
    if name in ("quantity", "semver"):
        return 1 + _traversal(first.size), Shape(name, size=1)
    if name in _BOOL_PREDICATES:
        return 1 + (_traversal(first.size) if name in ("isQuantity", "isSemver") else 0), BOOL
    if name in _INT_RESULTS:
        return 1, INT
    if name in ("add", "sub"):
        return 1, Shape("quantity", size=1)
    if name in ("dyn", "orValue", "value", "optional.of", "optional.ofNonZeroValue"):
        return 1, first
    return 1, DYN


def estimate_cost(expression: str, options: CompileOptions) -> int:
    """Worst-case cost of evaluating `expression` once; raises CELCompileError for syntax errors."""
    tree = parse(expression)
    try:
        cost, _ = _Estimator(options).estimate(tree)
    except RecursionError:
        raise CELCompileError("expression is nested too deeply to estimate its cost", expression) from None
    return cost
