"""What every CEL backend shares: options, errors, the device view, and the backend protocol.

A backend turns an expression into a ``Program`` and a ``CELDevice`` into its own input format
(the "activation"); the activation is cached on the device, so it is built once per device and
backend and reused by every selector evaluated against that device.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Protocol, cast

from allocator.quantity import Quantity
from allocator.semver import Semver

MAX_EXPRESSION_BYTES = 10 * 1024
DEFAULT_COST_LIMIT = 1_000_000

AttributeValue = int | bool | str | Semver | list[int] | list[bool] | list[str] | list[Semver]

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


@dataclass(frozen=True)
class CompileOptions:
    """The parts of the CEL environment that depend on feature gates, plus the cost limit."""

    consumable_capacity: bool = False  # declares device.allowMultipleAllocations
    list_type_attributes: bool = False  # list attribute values and includes()
    cost_limit: int | None = DEFAULT_COST_LIMIT


class CELError(Exception):
    """A selector that cannot be compiled or evaluated; the message is meant for the user."""

    def __init__(self, message: str, expression: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.expression = expression


class CELCompileError(CELError):
    pass


class CELRuntimeError(CELError):
    pass


class DeferToOtherEngine(Exception):
    """An engine cannot give cel-go's answer for this evaluation; the other engine, which has the
    same semantics, evaluates the expression instead. cel-expr defers where cel-expr-python cannot
    carry a value back from a function of ours (a duration, timestamp or type value that the lists
    extension returns), and where cel-cpp fails an optional selection (``.?f``, ``[?k]``) of a value
    that is no container, which cel-go answers with an empty optional."""


class CELResultTypeError(CELCompileError):
    """An expression whose static result type cannot serve where it is used (a derived attribute)."""


class CELDevice:
    """The DRA CEL view of one device. Build it once per ResourceSlice generation (``make_device``)."""

    __slots__ = ("activations", "allow_multiple_allocations", "attributes", "capacity", "driver", "memo_key",
                 "results")

    def __init__(self, driver: str, attributes: dict[str, dict[str, AttributeValue]],
                 capacity: dict[str, dict[str, Quantity]], allow_multiple_allocations: bool = False,
                 memo_key: Hashable | None = None) -> None:
        self.driver = driver
        self.attributes = attributes
        self.capacity = capacity
        self.allow_multiple_allocations = allow_multiple_allocations
        self.memo_key = memo_key
        # backend name -> that backend's input built from this device (filled lazily)
        self.activations: dict[str, object] = {}
        # selector -> its result on this device, or its runtime error message (when memo_key is set)
        self.results: dict[object, bool | str] = {}

    def __repr__(self) -> str:
        return f"CELDevice(driver={self.driver!r}, memo_key={self.memo_key!r})"


class Program(Protocol):
    def evaluate(self, activation: object) -> bool:
        """The selector's result; raises CELRuntimeError (also when the result is not a bool)."""
        ...

    def value(self, activation: object) -> AttributeValue:
        """The result as an attribute value (derived attributes); raises CELRuntimeError when it is
        none of bool, int, string, semver or a list of one of them."""
        ...


class Backend(Protocol):
    name: str

    def compile(self, expression: str, options: CompileOptions) -> Program:
        """Raises CELCompileError, also when the result cannot be a bool."""
        ...

    def compile_value(self, expression: str, options: CompileOptions) -> tuple[Program, str]:
        """The program and the CEL name of its static result type ("dyn" when only known at run
        time); raises CELCompileError."""
        ...

    def activation(self, device: CELDevice) -> object:
        """This backend's input for ``device``; callers cache it in ``device.activations[name]``."""
        ...


def attribute_result(value: object, kind_of: Callable[[object], str],
                     plain: Callable[[object], object]) -> AttributeValue:
    """An evaluation result as an attribute value, with cel-go's checks (upstream's valToDeviceAttribute):
    a scalar, or a list whose elements all have the first one's type (an empty list is a string list).
    ``kind_of`` names a backend value's CEL type, ``plain`` turns a scalar into its Python value."""
    kind = kind_of(value)
    if kind in _RESULT_KINDS:
        return plain(value)  # type: ignore[return-value]
    if kind != "list":
        raise CELRuntimeError(f"unsupported CEL return type: {kind}")
    items = list(value)  # type: ignore[call-overload]
    if not items:
        return []
    first = kind_of(items[0])
    if first not in _RESULT_KINDS:
        raise CELRuntimeError(f"unsupported list element type: {first}")
    for index, item in enumerate(items):
        if kind_of(item) != first:
            raise CELRuntimeError(
                f"expected list element at index {index} to be {first}, got {kind_of(item)}"
            )
    return [plain(item) for item in items]  # type: ignore[return-value]


_RESULT_KINDS = ("bool", "int", "string", "kubernetes.Semver")
# Static result types a derived attribute may have (cel-go's checker; attribute values are dyn, or
# google.protobuf.Any when a new expression is validated without list-type attributes).
DERIVED_RESULT_TYPES = ("bool", "int", "string", "dyn", "any", "kubernetes.Semver")


def derived_result_problem(type_name: str, lists_allowed: bool) -> str | None:
    """Why an expression of static type ``type_name`` cannot be a derived attribute, None if it can."""
    element = type_name[5:-1] if type_name.startswith("list(") and type_name.endswith(")") else None
    if type_name in DERIVED_RESULT_TYPES or (lists_allowed and element in DERIVED_RESULT_TYPES):
        return None
    if lists_allowed:
        return ("must evaluate to a primitive scalar (string, integer, boolean, semver) or a list of these "
                f"scalars, not {type_name}")
    return f"must evaluate to a primitive scalar (string, integer, boolean, semver), not {type_name}"


def _split_name(driver: str, name: str) -> tuple[str, str]:
    # Names without a domain belong to the driver's own domain.
    domain, slash, ident = name.rpartition("/")
    return (domain, ident) if slash else (driver, name)


def _checked_scalar(kind: str, value: object, where: str) -> int | bool | str | Semver:
    if kind == "int":
        if type(value) is not int or not _INT64_MIN <= value <= _INT64_MAX:
            raise ValueError(f"{where}: int value must be a 64-bit integer, got {value!r}")
        return value
    if kind == "bool":
        if type(value) is not bool:
            raise ValueError(f"{where}: bool value must be true or false, got {value!r}")
        return value
    if not isinstance(value, str):
        raise ValueError(f"{where}: {kind} value must be a string, got {value!r}")
    if kind == "version":
        try:
            return Semver.parse(value)
        except ValueError as err:
            raise ValueError(f"{where}: {err}") from None
    return value


_SCALAR_KINDS = {"int": "int", "bool": "bool", "string": "string", "version": "version"}
_LIST_KINDS = {"ints": "int", "bools": "bool", "strings": "string", "versions": "version"}


def _attribute_value(raw: object, where: str) -> AttributeValue:
    if not isinstance(raw, Mapping) or len(raw) != 1:
        raise ValueError(f"{where}: an attribute needs exactly one of "
                         f"{', '.join([*_SCALAR_KINDS, *_LIST_KINDS])}, got {raw!r}")
    ((kind, value),) = raw.items()
    if kind in _SCALAR_KINDS:
        return _checked_scalar(kind, value, where)
    if kind in _LIST_KINDS:
        if not isinstance(value, list):
            raise ValueError(f"{where}: {kind} value must be a list, got {value!r}")
        # One kind for every item, so the list is one of AttributeValue's list types.
        return cast(AttributeValue, [_checked_scalar(_LIST_KINDS[kind], item, where) for item in value])
    raise ValueError(f"{where}: unknown attribute type {kind!r}")


def _capacity_value(raw: object, where: str) -> Quantity:
    if not isinstance(raw, Mapping) or "value" not in raw:
        raise ValueError(f"{where}: a capacity needs a 'value', got {raw!r}")
    value = raw["value"]
    if isinstance(value, Quantity):
        return value
    if type(value) is int:  # YAML may carry small quantities as plain numbers
        value = str(value)
    if not isinstance(value, str):
        raise ValueError(f"{where}: capacity value must be a quantity string, got {value!r}")
    try:
        return Quantity.parse(value)
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None


def make_device(driver: str, attributes: Mapping[str, Mapping[str, object]] | None = None,
                capacity: Mapping[str, Mapping[str, object]] | None = None,
                allow_multiple_allocations: bool | None = None,
                memo_key: Hashable | None = None) -> CELDevice:
    """Convert a device's API attributes and capacity into the CEL view (raises ValueError)."""
    if not isinstance(driver, str) or not driver:
        raise ValueError(f"device driver must be a non-empty string, got {driver!r}")
    by_domain: dict[str, dict[str, AttributeValue]] = {}
    for name, raw in (attributes or {}).items():
        domain, ident = _split_name(driver, name)
        by_domain.setdefault(domain, {})[ident] = _attribute_value(raw, f"attribute {name!r}")
    capacity_by_domain: dict[str, dict[str, Quantity]] = {}
    for name, raw in (capacity or {}).items():
        domain, ident = _split_name(driver, name)
        capacity_by_domain.setdefault(domain, {})[ident] = _capacity_value(raw, f"capacity {name!r}")
    return CELDevice(driver, by_domain, capacity_by_domain, bool(allow_multiple_allocations), memo_key)
