"""The portable CEL backend on cel-python (celpy), matching Kubernetes' DRA selector environment.

celpy has no type checker, no Kubernetes libraries and several semantic divergences from cel-go, so an
expression goes through three steps:

1. our parser (allocator.cel.parser) and a static check (allocator.cel.celpy_check) that rejects what
   cel-go's checker rejects in this environment (undeclared names and functions, undefined `device`
   fields, no matching overload such as `true == 1`, a result that cannot be a bool);
2. re-emission of the AST as celpy-compatible text in which every construct celpy gets wrong or lacks
   is a call to one of our functions (selection and indexing, `has()`, optional chaining `.?`/`[?`,
   the `sets.*`/`strings.*`/`optional.*` namespaces, member functions, cel.bind);
3. evaluation with celpy's InterpretedRunner (its CompiledRunner is not thread-safe) with our operators
   and libraries (allocator.cel.celpy_library), cel-go's comprehension error rules, and a step budget.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Callable
from typing import Any, ClassVar, cast

import celpy
import celpy.celtypes as ct
import lark
from celpy.celparser import CELParseError
from celpy.evaluation import CELEvalError, Evaluator

from allocator.cel import folding
from allocator.cel.backend import (
    AttributeValue,
    CELCompileError,
    CELDevice,
    CELRuntimeError,
    CompileOptions,
    attribute_result,
)
from allocator.cel.celpy_check import NAMESPACES, Checker, Type, type_name
from allocator.cel.celpy_library import (
    FUNCTIONS,
    DomainMap,
    DomainValues,
    LibraryError,
    NoOverload,
    kind_of,
    map_insert,
)
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
    is_empty_list_membership,
    parse,
    qualified_name,
)

# Parse-tree nodes celpy may visit while evaluating one selector on one device (typical selectors
# visit 10-100). Upstream bounds an evaluation by a runtime cost limit; this is celpy's equivalent.
MAX_EVALUATION_STEPS = 200_000


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
        return _bytes_literal(cast(bytes, value))
    if node.kind == "uint":
        return f"{value}u"
    if node.kind == "double":
        number = float(cast(float, value))
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
    if node.macro == "sortBy":
        # cel-go's expansion: the list bound once, then ordered by the list of its keys
        bound = "__sortBy_input__"
        keys = f"__range({bound}).map({node.var}, {emit(node.args[0])})"
        return f"__first([{emit(node.target)}].map({bound}, __sort_by_keys({bound}, {keys})))"
    target = f"__range({emit(node.target)})"
    if node.macro == "map" and len(node.args) == 2:
        predicate, transform = node.args
        return f"{target}.filter({node.var}, {emit(predicate)}).map({node.var}, {emit(transform)})"
    variables = node.var if node.var2 is None else f"{node.var}, {node.var2}"
    return f"{target}.{node.macro}({variables}, {', '.join(emit(arg) for arg in node.args)})"


def _emit_call(node: Call) -> tuple[str, int]:
    name = node.function
    if is_empty_list_membership(node):
        return "false", _MEMBER
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
        # the conversions are also type values (type(1) == int): they are called by another name
        name = _CONVERSIONS.get(name, name)
        return f"{name}({', '.join(args)})", _MEMBER
    if name in _LAZY_OPTIONAL and len(args) == 1:
        # cel-go evaluates the argument of or()/orValue() only when the optional is empty
        present = _LAZY_OPTIONAL[name]
        return (f"__first([{emit(node.target)}].map(__opt, __m_hasValue(__opt) ? {present} : {args[0]}))",
                _MEMBER)
    return f"__m_{name}({', '.join([emit(node.target), *args])})", _MEMBER


_CONVERSIONS = {name: f"__to_{name}" for name in ("int", "uint", "double", "bool", "string")}
_LAZY_OPTIONAL = {"or": "__opt", "orValue": "__m_value(__opt)"}


# --------------------------------------------------------------------------------------------------
# Device conversion


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


class EvaluationBudgetExceeded(Exception):
    """Raised out of the evaluator once an evaluation used up its step budget."""


class _Budget:
    __slots__ = ("steps",)

    def __init__(self, steps: int) -> None:
        self.steps = steps


_NOT_DECODED = object()
_RELATION_FUNCTIONS = {
    "relation_lt": "_<_", "relation_le": "_<=_", "relation_ge": "_>=_", "relation_gt": "_>_",
    "relation_eq": "_==_", "relation_ne": "_!=_", "relation_in": "_in_",
}


class _BudgetedEvaluator(Evaluator):
    """celpy's tree-walking evaluator with a step budget and cel-go's all()/exists()."""

    def __init__(self, ast: lark.Tree[Any], activation: Any, budget: _Budget) -> None:
        super().__init__(ast, activation)
        self.budget = budget

    def _visit_tree(self, tree: lark.Tree[Any]) -> Any:
        self.budget.steps -= 1
        if self.budget.steps < 0:
            raise EvaluationBudgetExceeded
        return super()._visit_tree(tree)

    def sub_evaluator(self, ast: lark.Tree[Any]) -> Evaluator:
        return _BudgetedEvaluator(ast, self.activation, self.budget)

    # celpy's versions of these three evaluate `typing.cast(Tuple[...])` on every call, which costs
    # more than the operator itself; the operators are ours (FUNCTIONS), the errors the same.
    def relation(self, tree: lark.Tree[Any]) -> Any:
        if len(tree.children) == 1:
            return self._visit_tree(tree.children[0])
        operation, right = tree.children
        name = _RELATION_FUNCTIONS[operation.data]
        return self._apply(tree, name, self._visit_tree(operation.children[0]), self._visit_tree(right))

    def conditionaland(self, tree: lark.Tree[Any]) -> Any:
        return self._logical(tree, "_&&_")

    def conditionalor(self, tree: lark.Tree[Any]) -> Any:
        return self._logical(tree, "_||_")

    def _logical(self, tree: lark.Tree[Any], name: str) -> Any:
        if len(tree.children) == 1:
            return self._visit_tree(tree.children[0])
        left, right = (self._visit_tree(child) for child in tree.children)
        return self._apply(tree, name, left, right)

    def literal(self, tree: lark.Tree[Any]) -> Any:
        # celpy decodes a literal's token on every evaluation; the (immutable) value is kept on the node.
        value = tree.__dict__.get("cel_value", _NOT_DECODED)
        if value is _NOT_DECODED:
            value = super().literal(tree)
            if not isinstance(value, CELEvalError):
                tree.cel_value = value  # type: ignore[attr-defined]
        return value

    def mapinits(self, tree: lark.Tree[Any]) -> Any:
        # cel-go builds a map literal entry by entry, a repeated key taking the later value (celpy
        # fails); the first error among the keys and values is the result.
        parts = [self._visit_tree(child) for child in tree.children]
        error = next((part for part in parts if isinstance(part, CELEvalError)), None)
        if error is not None:
            return error
        built = ct.MapType()
        for key, value in zip(parts[0::2], parts[1::2], strict=True):
            built[key] = value
        return built

    def _apply(self, tree: lark.Tree[Any], name: str, left: Any, right: Any) -> Any:
        try:
            return self.activation.resolve_function(name)(left, right)
        except TypeError as err:
            error = CELEvalError(f"found no matching overload for {name}", err.__class__, err.args, tree=tree)
            error.__cause__ = err
            return error

    def member_dot_arg(self, tree: lark.Tree[Any]) -> Any:
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
        arguments = tree.children[2].children
        if len(arguments) >= 3:  # the two-variable forms: all, exists, exists_one, the transforms
            pairs = list(values.items()) if isinstance(values, dict) else \
                [(ct.IntType(i), v) for i, v in enumerate(values)]
            bodies = [self._two_variable_body(arguments, argument) for argument in arguments[2:]]
            if method.value in ("all", "exists"):
                return _quantifier(method.value, pairs, bodies[0])
            return _two_variable_fold(method.value, pairs, bodies)
        body = self.build_ss_macro_eval(tree)
        if method.value in ("all", "exists"):
            return _quantifier(method.value, values, body)
        results = []
        for value in values:
            result = body(value)
            if isinstance(result, CELEvalError):
                return result
            if method.value != "map" and kind_of(result) != "bool":
                return CELEvalError("no such overload", NoOverload,
                                    (f"{method.value}() predicate returned {kind_of(result)}",))
            results.append(result)
        if method.value == "map":
            return ct.ListType(results)
        if method.value == "filter":
            return ct.ListType(v for v, keep in zip(values, results, strict=True) if keep)
        return ct.BoolType(sum(1 for r in results if r) == 1)


    def _two_variable_body(self, arguments: list[Any], body_tree: Any) -> Callable[[tuple[Any, Any]], Any]:
        first, second = (next(a.find_data("ident")).children[0].value for a in arguments[:2])
        nested = self.sub_evaluator(body_tree)

        def body(pair: tuple[Any, Any]) -> Any:
            try:
                return nested.evaluate({first: pair[0], second: pair[1]})
            except CELEvalError as err:
                return err

        return body


_MACROS = {"all", "exists", "exists_one", "map", "filter", *TRANSFORMS}


def _two_variable_fold(name: str, pairs: list[tuple[Any, Any]], bodies: list[Callable[[Any], Any]]) -> Any:
    """exists_one(k, v, p) and the transforms, as cel-go's expansions run them: every element is
    visited, and the first error (a filter that is not a bool included) is the result."""
    count, built_list, built_map = 0, ct.ListType(), ct.MapType()
    for pair in pairs:
        if name == "exists_one" or len(bodies) == 2:
            keep = bodies[0](pair)
            if kind_of(keep) != "bool":
                return keep if isinstance(keep, CELEvalError) else CELEvalError(
                    "no such overload", NoOverload, (f"{name}() predicate returned {kind_of(keep)}",))
            if not keep:
                continue
            if name == "exists_one":
                count += 1
                continue
        value = bodies[-1](pair)
        if isinstance(value, CELEvalError):
            return value
        try:
            if name == "transformList":
                built_list.append(value)
            elif name == "transformMap":
                map_insert(built_map, pair[0], value)
            elif isinstance(value, dict):
                for key, entry in value.items():
                    map_insert(built_map, key, entry)
            else:
                raise NoOverload(f"no such overload: cel.@mapInsert(map, {kind_of(value)})")
        except (LibraryError, NoOverload) as err:
            return CELEvalError(str(err), type(err), (str(err),))
    if name == "exists_one":
        return ct.BoolType(count == 1)
    return built_list if name == "transformList" else built_map


def _quantifier(name: str, values: Any, body: Callable[[Any], Any]) -> Any:
    decisive = name == "exists"
    error: CELEvalError | None = None
    for value in values:
        result = body(value)
        if kind_of(result) == "bool":
            if bool(result) == decisive:
                return ct.BoolType(decisive)
        elif error is None:
            error = result if isinstance(result, CELEvalError) else CELEvalError(
                "no such overload", NoOverload, (f"{name}() predicate returned {kind_of(result)}",))
    return error if error is not None else ct.BoolType(not decisive)


class _BudgetedRunner(celpy.InterpretedRunner):
    max_steps: ClassVar[int] = MAX_EVALUATION_STEPS

    def __init__(self, environment: celpy.Environment, ast: lark.Tree[Any], functions: Any = None) -> None:
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


def _compact(tree: lark.Tree[Any]) -> lark.Tree[Any]:
    while True:
        children = tree.children
        if len(children) != 1 or not isinstance(children[0], lark.Tree):
            break
        child = children[0]
        if tree.data in _PASS_THROUGH_RULES:
            tree = child
        elif tree.data == "primary" and child.data == "paren_expr":
            tree = child.children[0]
        else:
            break
    tree.children = [_compact(c) if isinstance(c, lark.Tree) else c for c in tree.children]
    return tree


# celpy's grammar rule of each operator -> the operator's CEL name
_CELPY_RULES = {
    **_RELATION_FUNCTIONS, "addition_add": "_+_", "addition_sub": "_-_", "multiplication_mul": "_*_",
    "multiplication_div": "_/_", "multiplication_mod": "_%_", "unary_not": "!_", "unary_neg": "-_",
}
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

    def _run(self, activation: object) -> Any:
        try:
            return self.runner.evaluate(activation)  # type: ignore[arg-type]
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

    def evaluate(self, activation: object) -> bool:
        result = self._run(activation)
        if not isinstance(result, ct.BoolType):
            raise CELRuntimeError(f"selector must evaluate to bool, got {kind_of(result)}", self.expression)
        return bool(result)

    def value(self, activation: object) -> AttributeValue:
        try:
            return attribute_result(self._run(activation), kind_of, _plain)
        except CELRuntimeError as err:
            raise CELRuntimeError(err.message, self.expression) from None


def _plain(value: object) -> object:
    if isinstance(value, ct.BoolType):
        return bool(value)
    if isinstance(value, ct.IntType):
        return int(value)
    if isinstance(value, ct.StringType):
        return str(value)
    return value  # a Semver


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
        return self._compile(expression, options, lambda checker, tree: checker.check_selector(tree))[0]

    def compile_value(self, expression: str, options: CompileOptions) -> tuple[CelpyProgram, str]:
        program, result = self._compile(expression, options, lambda checker, tree: checker.result_type(tree))
        assert result is not None  # check() always gives a type
        return program, type_name(result)

    def _compile(self, expression: str, options: CompileOptions,
                 check: Callable[[Checker, Node], Type | None]) -> tuple[CelpyProgram, Type | None]:
        tree = parse(expression)
        try:
            result = check(Checker(expression, options), tree)
            folding.check(tree, expression, evaluate_constant)
            ast = _compact(self.environment.compile(emit(tree)))
        except RecursionError:
            message = "expression is nested too deeply for the celpy backend"
            raise CELCompileError(message, expression) from None
        except CELParseError as err:  # our emitter produced something celpy cannot read
            message = f"internal error translating the expression for celpy: {err}"
            raise CELCompileError(message, expression) from None
        runner = self.environment.program(ast, functions=FUNCTIONS)
        return CelpyProgram(runner, expression), result

    def activation(self, device: CELDevice) -> dict[str, Any]:
        return {"device": device_to_cel(device)}


_constants: list[CelpyBackend] = []


def evaluate_constant(node: Node) -> Any:
    """The value of a checked subexpression that reads no variable (allocator.cel.folding); raises
    CELRuntimeError when its evaluation fails."""
    if not _constants:
        _constants.append(CelpyBackend())
    environment = _constants[0].environment
    runner = environment.program(_compact(environment.compile(emit(node))), functions=FUNCTIONS)
    return CelpyProgram(runner, emit(node))._run({})

