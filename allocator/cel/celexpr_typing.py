"""Compile-time checks that cel-cpp does not make for the cel-expr backend.

cel-expr carries Quantity and Semver values as bytes (see celexpr_library), so its type checker
sees ``bytes`` where cel-go sees ``kubernetes.Quantity`` / ``kubernetes.Semver``. This pass infers
those two types where they are statically known (capacity values, ``quantity()``/``semver()``
results and quantity arithmetic) and rejects what cel-go rejects: operators on them
(``memory > quantity("1")``), equality with another type, methods of the other type, and
quantity/semver mixes. It also does what the Kubernetes environment adds to cel-go's checker and
cel-cpp lacks: literal regular expressions are validated, and comprehensions need a list or map
range (homogeneous list and map literals are celpy_check's, which cel-expr runs too). Where a type
is only known at run time (attribute values, bound variables) the run-time checks of
celexpr_library apply instead.
"""

from __future__ import annotations

from collections.abc import Iterator

from allocator.cel.backend import CELCompileError
from allocator.cel.celpy_check import regexp_error
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
    line_column,
)

QUANTITY = "kubernetes.Quantity"
_CONDITIONAL = "_?_:_"
SEMVER = "kubernetes.Semver"

_METHODS = {
    QUANTITY: {"compareTo", "isGreaterThan", "isLessThan", "add", "sub", "asInteger", "isInteger",
               "asApproximateFloat", "includes"},
    SEMVER: {"compareTo", "isGreaterThan", "isLessThan", "major", "minor", "patch", "includes"},
}
_SAME_TYPE_ARGUMENT = {"compareTo", "isGreaterThan", "isLessThan"}
_OPERATORS = {"_<_", "_<=_", "_>_", "_>=_", "_+_", "_-_", "_*_", "_/_", "_%_", "-_", "!_"}
_EQUALITY = {"_==_", "_!=_"}
_REGEX_FUNCTIONS = {"matches", "find", "findAll"}


def check(expression: str, tree: Node) -> None:
    """Raise CELCompileError for the static type errors and bad regex literals described above."""
    for node in walk(tree):
        if isinstance(node, Call):
            _check_call(expression, node)
        elif isinstance(node, Comprehension) and node.macro != "bind":
            kind = static_type(node.target)
            if kind is not None and kind not in ("list", "map"):
                raise _fail(expression, node, f"expression of type '{kind}' cannot be the range of a "
                                              "comprehension (must be list, map, or dynamic)")


def walk(node: object) -> Iterator[Node]:
    if isinstance(node, Node):
        yield node
    children: tuple[Node | None, ...] = ()
    if isinstance(node, Select):
        children = (node.operand,)
    elif isinstance(node, Index):
        children = (node.operand, node.index)
    elif isinstance(node, Call):
        children = (node.target, *node.args)
    elif isinstance(node, ListExpr):
        children = node.elements
    elif isinstance(node, MapExpr):
        children = tuple(part for entry in node.entries for part in (entry.key, entry.value))
    elif isinstance(node, Has):
        children = (node.select,)
    elif isinstance(node, Comprehension):
        children = (node.target, *node.args)
    for child in children:
        if child is not None:
            yield from walk(child)


def static_type(node: Node) -> str | None:
    """QUANTITY, SEMVER, a literal's type name, or None when only known at run time."""
    if isinstance(node, Literal):
        return "null_type" if node.kind == "null" else node.kind
    if isinstance(node, ListExpr):
        return "list"
    if isinstance(node, MapExpr):
        return "map"
    if isinstance(node, Call):
        if node.target is None and node.function in ("quantity", "semver"):
            return QUANTITY if node.function == "quantity" else SEMVER
        if node.function == _CONDITIONAL:
            branches = {static_type(node.args[1]), static_type(node.args[2])}
            return branches.pop() if len(branches) == 1 else None
        if node.target is not None and node.function in ("add", "sub"):
            return QUANTITY if static_type(node.target) == QUANTITY else None
        return None
    if isinstance(node, (Select, Index)) and not node.optional:
        domain = node.operand
        if isinstance(domain, Index) and not domain.optional and _is_device_field(domain.operand, "capacity"):
            return QUANTITY
    return None


def _is_device_field(node: Node, field: str) -> bool:
    return (isinstance(node, Select) and not node.optional and node.field == field
            and isinstance(node.operand, Ident) and node.operand.name == "device")


def _fail(expression: str, node: Node, message: str) -> CELCompileError:
    line, column = line_column(expression, node.pos)
    return CELCompileError(f"ERROR: <input>:{line}:{column}: {message}", expression)


def _check_call(expression: str, call: Call) -> None:
    if call.function in _REGEX_FUNCTIONS:
        pattern = call.args[0] if call.target is not None else call.args[1] if len(call.args) > 1 else None
        if isinstance(pattern, Literal) and pattern.kind == "string":
            problem = regexp_error(str(pattern.value))
            if problem is not None:
                message = f"invalid regular expression {pattern.value!r}: {problem}"
                raise _fail(expression, pattern, message)
    operands = [call.target, *call.args] if call.target is not None else list(call.args)
    types = [static_type(operand) for operand in operands]
    opaque = [t for t in types if t in _METHODS]
    if not opaque:
        return
    signature = ", ".join(t or "dyn" for t in types)
    applied = f"found no matching overload for '{call.function}' applied to '({signature})'"
    if call.function in _OPERATORS:
        raise _fail(expression, call, applied)
    if call.function == _CONDITIONAL:  # both branches must have one type (or be dynamic)
        if None not in types[1:] and types[1] != types[2]:
            raise _fail(expression, call, applied)
        return
    if call.function in _EQUALITY:
        if None not in types and types[0] != types[1]:
            raise _fail(expression, call, applied)
        return
    if call.target is None:
        if call.function not in ("sign", "dyn", "type"):
            raise _fail(expression, call, applied)
        return
    receiver = types[0]
    if receiver not in _METHODS:
        return  # cel-cpp itself rejects a bytes argument where the receiver's method wants another type
    argument = types[1] if len(types) > 1 else None
    if (call.function not in _METHODS[receiver]
            or (call.function in _SAME_TYPE_ARGUMENT and argument is not None and argument != receiver)
            or (call.function in ("add", "sub") and argument not in (None, QUANTITY, "int"))):
        raise _fail(expression, call, applied)
