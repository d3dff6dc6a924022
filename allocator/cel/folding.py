"""What cel-go computes when a program is created, so that its errors are compile errors.

The Kubernetes base environment creates its programs with ``cel.OptOptimize``. cel-go's planner then
looks at every node of the checked expression, leaves first, and:

- takes a list or map literal whose entries are all constants as a constant itself;
- evaluates a type conversion (:data:`CONVERSIONS`) of one constant argument, whose result is a
  constant too; an error fails the program's creation;
- compiles a constant pattern of ``matches()`` (cel-go) and of ``find()`` and ``findAll()`` (the
  Kubernetes regex library), and fails the program's creation when it does not compile;
- answers a membership in a constant empty list with false (``parser.is_empty_list_membership``,
  which both engines apply when they translate the expression).

Literals and type names (``int``, ``string``, ...) are the other constants. The API server reports a
failed creation as "program instantiation failed: <the error>", and since the planner visits every
node this happens wherever the call sits: in a branch never taken, or in the body of a comprehension
over an empty list. :func:`check` makes the same calls at compile time, for both engines, with the
celpy runtime's conversions (the reference semantics) evaluating the constant parts.
"""

from __future__ import annotations

from collections.abc import Callable

from allocator.cel.backend import CELCompileError, CELRuntimeError
from allocator.cel.celpy_check import TYPE_NAMES, regexp_error
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
)

CONVERSIONS = frozenset({"bool", "bytes", "double", "duration", "dyn", "int", "string", "timestamp", "type",
                         "uint"})
# The functions whose pattern is compiled when the program is created, and the position of the pattern
# among their arguments (a member call's receiver is the first).
PATTERN_ARGUMENT = {"matches": 1, "find": 1, "findAll": 1}
FAILED = "program instantiation failed: "

Evaluate = Callable[[Node], object]


def check(tree: Node, expression: str, evaluate: Evaluate | None = None) -> None:
    """Raise CELCompileError where cel-go's program creation fails for ``tree`` (already checked).
    ``evaluate`` gives a constant node's value or raises CELRuntimeError; by default celpy's runtime
    does (imported only when the expression has something to evaluate)."""
    folds = _Folds(expression, evaluate)
    folds.visit(tree, frozenset())


class _Folds:
    def __init__(self, expression: str, evaluate: Evaluate | None) -> None:
        self.expression = expression
        self._evaluate = evaluate

    def visit(self, node: Node, bound: frozenset[str]) -> bool:
        """Visit ``node`` and what it contains, leaves first; True when it is a constant."""
        if isinstance(node, Literal):
            return True
        if isinstance(node, Ident):
            return node.name in TYPE_NAMES and node.name not in bound
        if isinstance(node, ListExpr):
            constants = [self.visit(element, bound) for element in node.elements]
            return all(constants) and not node.optional_indices
        if isinstance(node, MapExpr):
            parts = [part for entry in node.entries for part in (entry.key, entry.value)]
            constants = [self.visit(part, bound) for part in parts]
            return all(constants) and not any(entry.optional for entry in node.entries)
        if isinstance(node, Select):
            self.visit(node.operand, bound)
            return False
        if isinstance(node, Index):
            self.visit(node.operand, bound)
            self.visit(node.index, bound)
            return False
        if isinstance(node, Has):
            self.visit(node.select, bound)
            return False
        if isinstance(node, Comprehension):
            self.visit(node.target, bound)
            inner = bound | {node.var} | ({node.var2} if node.var2 else set())
            for arg in node.args:
                self.visit(arg, inner)
            return False
        assert isinstance(node, Call), node
        operands = ([node.target] if node.target is not None else []) + list(node.args)
        constants = [self.visit(operand, bound) for operand in operands]
        if node.target is None and node.function in CONVERSIONS and len(node.args) == 1 and constants[0]:
            self.value(node)  # raises when the conversion fails
            return True
        position = PATTERN_ARGUMENT.get(node.function)
        if position is not None and position < len(operands) and constants[position]:
            self.compile_pattern(operands[position])
        return False

    def value(self, node: Node) -> object:
        if isinstance(node, Literal):
            return node.value
        if self._evaluate is None:
            from allocator.cel.celpy_backend import evaluate_constant

            self._evaluate = evaluate_constant
        try:
            return self._evaluate(node)
        except CELRuntimeError as err:
            raise CELCompileError(FAILED + err.message, self.expression) from None

    def compile_pattern(self, node: Node) -> None:
        pattern = self.value(node)
        if not isinstance(pattern, str):
            return  # a constant of another type: cel-go leaves the call to fail when it runs
        problem = regexp_error(pattern)
        if problem is not None:
            raise CELCompileError(FAILED + problem, self.expression)
