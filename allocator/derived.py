"""Derived attributes (DRADerivedAttributes): attributes a request computes with CEL for its constraints.

A request may name attributes with an expression each; a matchAttribute or distinctAttribute constraint
over such a name then compares the expression's value on each device instead of the device's own
attribute (which it shadows), for that request only. Expressions are compiled when a constraint first
needs one and evaluated at most once per device and expression in one allocation, as upstream does; a
compile or evaluation error aborts the allocation with upstream's wording.
"""

from __future__ import annotations

from collections.abc import Callable

from allocator import cel
from allocator.constraints import lookup_attribute
from allocator.errors import AllocationError
from allocator.model import LIST_ATTRIBUTE_TYPES, AttributeValue, Device
from allocator.semver import Semver

DeviceKey = tuple[str, str, str]
# (device, expression) -> its value, for one allocation
Values = dict[tuple[DeviceKey, str], AttributeValue]
_LIST_TYPE = {base: plural for plural, base in LIST_ATTRIBUTE_TYPES.items()}


class DerivedAttributes:
    """One request's derived attributes, by name."""

    __slots__ = ("_compiled", "_expressions", "_options", "_values")

    def __init__(
        self, attributes: tuple[tuple[str, str], ...], options: cel.CompileOptions, values: Values
    ) -> None:
        self._expressions = dict(attributes)
        self._options = options
        self._values = values  # shared by every request of the allocation, as upstream's cache
        self._compiled: dict[str, cel.DerivedExpression] = {}

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self._expressions)

    def lookup(self, device: Device, key: DeviceKey, name: str) -> AttributeValue | None:
        """The derived value when ``name`` is derived here, else the device's own attribute."""
        expression = self._expressions.get(name)
        if expression is None:
            return lookup_attribute(device, key[0], name)
        found = self._values.get((key, expression))
        if found is not None:
            return found
        compiled = self._compiled.get(name)
        if compiled is None:
            compiled = self._compiled[name] = _compile(name, expression, self._options)
        try:
            value = attribute_value(compiled.value(device.cel_device(key[0])))
        except (cel.CELRuntimeError, ValueError) as exc:  # ValueError: the device cannot be a CEL input
            raise AllocationError(
                f"evaluate derived attribute {name} on device {'/'.join(key)} failed: {exc}"
            ) from None
        self._values[(key, expression)] = value
        return value

    def for_device(self, device: Device, key: DeviceKey) -> Callable[[str], AttributeValue | None]:
        return lambda name: self.lookup(device, key, name)


def _compile(name: str, expression: str, options: cel.CompileOptions) -> cel.DerivedExpression:
    try:
        return cel.compile_derived(expression, options)
    except cel.CELResultTypeError as exc:
        raise AllocationError(f"compile derived attribute {name} failed: {exc}") from None
    except cel.CELCompileError as exc:
        raise AllocationError(f"compile derived attribute {name} failed: compilation failed: {exc}") from None


def attribute_value(value: cel.AttributeValue) -> AttributeValue:
    """A CEL result as a device attribute value; an empty list counts as a string list (upstream)."""
    if isinstance(value, list):
        items = [str(v) if isinstance(v, Semver) else v for v in value]
        base = _scalar_type(value[0]) if value else "string"
        return AttributeValue(_LIST_TYPE[base], tuple(items))
    return AttributeValue(_scalar_type(value), str(value) if isinstance(value, Semver) else value)


def _scalar_type(value: object) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, Semver):
        return "version"
    return "string"
