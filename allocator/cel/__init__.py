"""Kubernetes DRA CEL device selectors.

    selector = cel.compile('device.attributes["gpu.example.com"].model == "A100"')
    selector.matches(cel.make_device("gpu.example.com", attributes, capacity, memo_key=key))

``cel.compile_derived(expression)`` compiles a derived attribute (DRADerivedAttributes) instead: an
expression whose value, not a bool, is the result.

Two engines implement the same semantics: "cel-expr" (cel-expr-python, Google's cel-cpp; used when
importable) and "celpy" (pure Python, always available). ``use_engine(name)`` picks one; the library reads
no environment (the servers' composition root does).

Speed: compiled selectors are cached per engine by (expression, options) in a bounded LRU; each
device's engine input is built once and kept on the ``CELDevice``; and the common class selector
``device.driver == "<name>"`` is answered without the engine. Results are memoized on the
``CELDevice`` itself, per selector, when the device has a ``memo_key``: the caller builds one
device view per (slice uid, slice generation, device), so the memo is keyed by exactly that and
dies with the view. A memo hit is one dict lookup keyed by the selector's identity, which keeps
a memoized 40,000-device pass in milliseconds.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import threading
from collections.abc import Callable
from typing import cast

from cachetools import LRUCache

from allocator.cel.backend import (
    DEFAULT_COST_LIMIT,
    MAX_EXPRESSION_BYTES,
    AttributeValue,
    Backend,
    CELCompileError,
    CELDevice,
    CELError,
    CELResultTypeError,
    CELRuntimeError,
    CompileOptions,
    DeferToOtherEngine,
    Program,
    derived_result_problem,
    make_device,
)
from allocator.cel.cost import estimate_cost
from allocator.cel.parser import tokenize

__all__ = [
    "DEFAULT_COST_LIMIT",
    "ENGINE_NAMES",
    "MAX_EXPRESSION_BYTES",
    "AttributeValue",
    "CELCompileError",
    "CELDevice",
    "CELError",
    "CELResultTypeError",
    "CELRuntimeError",
    "CompileOptions",
    "DerivedExpression",
    "Engine",
    "Selector",
    "cel_expr_available",
    "compile",
    "compile_derived",
    "configured_engine_name",
    "default_engine",
    "estimate_cost",
    "get_engine",
    "make_device",
    "use_engine",
]

_log = logging.getLogger(__name__)

ENGINE_NAMES = ("cel-expr", "celpy")
COMPILED_CACHE_SIZE = 4096
# Distinct selectors remembered per device view (first in, first out).
MEMO_ENTRIES_PER_DEVICE = 16


class Selector:
    """A compiled selector. ``matches`` raises CELRuntimeError when evaluation fails."""

    __slots__ = ("_backend", "_backend_name", "_program", "engine", "expression", "options")

    def __init__(self, expression: str, options: CompileOptions, backend: Backend,
                 program: Program | None) -> None:
        self.expression = expression
        self.options = options
        self.engine = backend.name
        self._backend = backend
        self._backend_name = backend.name
        self._program = program

    def matches(self, device: CELDevice) -> bool:
        hit = device.results.get(self)
        if hit is not None:
            if hit.__class__ is bool:
                return hit
            raise CELRuntimeError(cast(str, hit), self.expression)  # a remembered error message
        activation = device.activations.get(self._backend_name)
        if activation is None:
            activation = device.activations[self._backend_name] = self._backend.activation(device)
        try:
            # _program is None only in _DriverSelector, which answers without it.
            result: bool | str = self._program.evaluate(activation)  # type: ignore[union-attr]
        except CELRuntimeError as err:
            result = err.message  # errors are deterministic too: remembered like results
        except DeferToOtherEngine:
            result = _carried_elsewhere(lambda: _other_engine(self._backend_name).compile(
                self.expression, self.options).matches(device))
        if device.memo_key is not None:
            _remember(device.results, self, result)
        if result.__class__ is bool:
            return result
        raise CELRuntimeError(cast(str, result), self.expression)

    def __repr__(self) -> str:
        return f"Selector({self.expression!r}, engine={self.engine!r})"


def _other_engine(name: str) -> Engine:
    """The engine that evaluates what engine ``name`` defers (DeferToOtherEngine): celpy, pure
    Python, is always there and carries every value."""
    return get_engine("celpy" if name != "celpy" else "cel-expr")


def _carried_elsewhere(evaluate: Callable[[], bool]) -> bool | str:
    try:
        return evaluate()
    except CELRuntimeError as err:
        return err.message


def _remember(results: dict[object, bool | str], selector: Selector, result: bool | str) -> None:
    if len(results) >= MEMO_ENTRIES_PER_DEVICE:
        # StopIteration/KeyError/RuntimeError: emptied or resized by another thread meanwhile
        with contextlib.suppress(StopIteration, KeyError, RuntimeError):
            del results[next(iter(results))]
    results[selector] = result


class DerivedExpression:
    """A compiled derived-attribute expression (DRADerivedAttributes): ``value`` evaluates it on a device
    and raises CELRuntimeError when that fails or gives no attribute value."""

    __slots__ = ("_backend", "_lists_allowed", "_options", "_program", "expression")

    def __init__(self, expression: str, backend: Backend, program: Program, options: CompileOptions,
                 lists_allowed: bool) -> None:
        self.expression = expression
        self._backend = backend
        self._program = program
        self._options = options
        self._lists_allowed = lists_allowed

    def value(self, device: CELDevice) -> AttributeValue:
        activation = device.activations.get(self._backend.name)
        if activation is None:
            activation = device.activations[self._backend.name] = self._backend.activation(device)
        try:
            return self._program.value(activation)
        except DeferToOtherEngine:
            other = _other_engine(self._backend.name)
            return other.compile_derived(self.expression, self._options,
                                         lists_allowed=self._lists_allowed).value(device)

    def __repr__(self) -> str:
        return f"DerivedExpression({self.expression!r}, engine={self._backend.name!r})"


class _DriverSelector(Selector):
    """``device.driver == "<name>"``: answered by a string comparison, no engine call (nor engine: the
    engine's module is imported only for the first selector that needs it, which saves ~25 MB of
    resident memory in a cluster whose selectors all name a driver)."""

    __slots__ = ("_driver",)

    def __init__(self, expression: str, options: CompileOptions, engine_name: str, driver: str) -> None:
        self.expression = expression
        self.options = options
        self.engine = engine_name
        self._backend_name = engine_name
        self._program = None
        self._driver = driver

    def matches(self, device: CELDevice) -> bool:
        return device.driver == self._driver


def _driver_equality(expression: str) -> str | None:
    """The driver name if the expression is exactly ``device.driver == "<name>"`` (either order)."""
    if "driver" not in expression or len(expression) > 400:
        return None
    try:
        tokens = [t for t in tokenize(expression) if t.kind != "eof"]
    except CELError:
        return None
    if len(tokens) != 5:
        return None
    texts = [t.text for t in tokens]
    if texts[:4] == ["device", ".", "driver", "=="] and tokens[4].kind == "string":
        return str(tokens[4].value)
    if texts[1:] == ["==", "device", ".", "driver"] and tokens[0].kind == "string":
        return str(tokens[0].value)
    return None


class Engine:
    """One backend plus its compiled-selector cache."""

    def __init__(self, backend: Backend) -> None:
        self.name = backend.name
        self._backend = backend
        self._compiled: LRUCache[tuple[str, CompileOptions], Selector] = LRUCache(COMPILED_CACHE_SIZE)
        self._derived: LRUCache[tuple[str, CompileOptions, bool], DerivedExpression] = LRUCache(
            COMPILED_CACHE_SIZE)
        self._lock = threading.Lock()

    def compile(self, expression: str, options: CompileOptions | None = None) -> Selector:
        options = options or CompileOptions()
        key = (expression, options)
        with self._lock:
            selector = self._compiled.get(key)
        if selector is not None:
            return selector
        selector = self._compile_uncached(expression, options)
        with self._lock:
            self._compiled[key] = selector  # only successes are cached, as upstream
        return selector

    def _compile_uncached(self, expression: str, options: CompileOptions) -> Selector:
        _check_size(expression)
        driver = _driver_equality(expression)
        if driver is not None:
            return _DriverSelector(expression, options, self.name, driver)
        program = self._backend.compile(expression, options)
        _check_cost(expression, options)
        return Selector(expression, options, self._backend, program)

    def compile_derived(self, expression: str, options: CompileOptions, *,
                        lists_allowed: bool = True) -> DerivedExpression:
        """Compile a derived attribute's expression: its result type must be a scalar attribute type
        (or dynamic), or with ``lists_allowed`` a list of one (upstream always allows lists for stored
        expressions, and for new ones with DRAListTypeAttributes). Raises CELCompileError, and its
        subclass CELResultTypeError for a result type that cannot be an attribute."""
        key = (expression, options, lists_allowed)
        with self._lock:
            derived = self._derived.get(key)
        if derived is not None:
            return derived
        _check_size(expression)
        program, result_type = self._backend.compile_value(expression, options)
        problem = derived_result_problem(result_type, lists_allowed)
        if problem is not None:
            raise CELResultTypeError(problem, expression)
        _check_cost(expression, options)
        derived = DerivedExpression(expression, self._backend, program, options, lists_allowed)
        with self._lock:
            self._derived[key] = derived
        return derived


def _check_size(expression: str) -> None:
    if not isinstance(expression, str):
        raise CELCompileError(f"expression must be a string, not {type(expression).__name__}")
    size = len(expression.encode())
    if size > MAX_EXPRESSION_BYTES:
        raise CELCompileError(f"expression is {size} bytes long, more than the limit of "
                              f"{MAX_EXPRESSION_BYTES} bytes (10 KiB)", expression[:80] + "...")


def _check_cost(expression: str, options: CompileOptions) -> None:
    if options.cost_limit is not None:
        cost = estimate_cost(expression, options)
        if cost > options.cost_limit:
            raise CELCompileError(f"estimated cost {cost} exceeds the limit of {options.cost_limit}; "
                                  "reduce the work per device (fewer or smaller comprehensions, "
                                  "shorter strings and lists)", expression)


_engines: dict[str, Engine] = {}
_engines_lock = threading.Lock()


def cel_expr_available() -> bool:
    return importlib.util.find_spec("cel_expr_python") is not None


def _new_backend(name: str) -> Backend:
    if name == "cel-expr":
        if not cel_expr_available():
            raise ValueError("CEL engine 'cel-expr' needs the cel-expr-python package "
                             "(pip install 'dra-extender[fast]')")
        try:
            from allocator.cel.celexpr_backend import CelExprBackend

            return CelExprBackend()
        except (ImportError, RuntimeError, TypeError, AttributeError) as err:  # an incompatible release
            raise ValueError(f"cel-expr-python is installed but unusable: {err}") from err
    from allocator.cel.celpy_backend import CelpyBackend

    return CelpyBackend()


def get_engine(name: str) -> Engine:
    """The engine called ``name`` ("cel-expr" or "celpy"); raises ValueError otherwise."""
    if name not in ENGINE_NAMES:
        raise ValueError(f"unknown CEL engine {name!r}; choose one of {', '.join(ENGINE_NAMES)}")
    with _engines_lock:
        engine = _engines.get(name)
        if engine is None:
            engine = _engines[name] = Engine(_new_backend(name))
    return engine


# The engine chosen with use_engine; None: cel-expr when installed, else celpy.
_chosen: str | None = None


def _check_engine_name(name: str) -> None:
    if name not in ENGINE_NAMES:
        raise ValueError(f"unknown CEL engine {name!r}; choose one of {', '.join(ENGINE_NAMES)}")
    if name == "cel-expr" and not cel_expr_available():
        raise ValueError("CEL engine 'cel-expr' needs the cel-expr-python package "
                         "(pip install 'dra-extender[fast]')")


def use_engine(name: str | None) -> None:
    """Make ``name`` the engine `compile` and `default_engine` use from now on; None goes back to the
    automatic choice. Raises ValueError for an unknown name, or "cel-expr" without its package. Checked
    without importing the engine: it is loaded by the first selector that needs it."""
    global _chosen
    if name is not None:
        _check_engine_name(name)
    _chosen = name


def configured_engine_name() -> str:
    """The engine `default_engine` picks, without importing it: the one given to `use_engine`, else
    cel-expr when installed, else celpy. An installed cel-expr-python that fails to import is only found
    when first used (then `default_engine` falls back to celpy with a warning)."""
    if _chosen is not None:
        return _chosen
    return "cel-expr" if cel_expr_available() else "celpy"


def default_engine() -> Engine:
    """The engine given to `use_engine`, else cel-expr when installed and usable, else celpy."""
    if _chosen is not None:
        return get_engine(_chosen)
    if cel_expr_available():
        try:
            return get_engine("cel-expr")
        except ValueError as err:
            _log.warning("falling back to the celpy CEL engine: %s", err)
    return get_engine("celpy")


def compile(expression: str, options: CompileOptions | None = None) -> Selector:
    """Compile with the default engine (cached); raises CELCompileError. A driver equality is answered
    without creating the engine."""
    if isinstance(expression, str) and len(expression.encode()) <= MAX_EXPRESSION_BYTES:
        driver = _driver_equality(expression)
        if driver is not None:
            return _DriverSelector(expression, options or CompileOptions(), configured_engine_name(), driver)
    return default_engine().compile(expression, options)


def compile_derived(expression: str, options: CompileOptions | None = None, *,
                    lists_allowed: bool = True) -> DerivedExpression:
    """Compile a derived attribute's expression with the default engine (cached): see
    Engine.compile_derived."""
    return default_engine().compile_derived(expression, options or CompileOptions(),
                                            lists_allowed=lists_allowed)
