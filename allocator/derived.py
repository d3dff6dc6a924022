"""Derived attributes (DRADerivedAttributes): attributes a request computes with CEL for its constraints.

A request may name attributes with an expression each; a matchAttribute or distinctAttribute constraint
over such a name then compares the expression's value on each device instead of the device's own
attribute (which it shadows), for that request only. Expressions are compiled when a constraint first
needs one and evaluated at most once per device and expression in one allocation, as upstream does; a
compile or evaluation error aborts the allocation with upstream's wording.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

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


# --- validation of new claims, as the API server does with DRADerivedAttributes on ---------------------

MAX_PER_REQUEST = 32  # DeviceDerivedAttributesMaxSize
CLAIM_COST_LIMIT = 1_000_000  # DeviceClaimDerivedAttributeCELMaxCost: all expressions of a claim together
DOMAIN_MAX_LENGTH = 63  # the prefix of a k8s-resource-fully-qualified-name, as a driver name
_FULLY_QUALIFIED = re.compile(
    r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/[A-Za-z_][A-Za-z0-9_]{0,31}"
)


def claim_problems(
    devices: Mapping[str, Any], path: str, options: cel.CompileOptions, *, lists_allowed: bool
) -> list[str]:
    """What the API server (gate on) rejects in the derived attributes of a claim spec's ``devices`` at
    ``path``, plus expressions our CEL engine cannot compile: each problem names its field."""
    constrained = _constrained_attributes(devices)
    problems: list[str] = []
    total_cost = 0
    for where, request_name, attributes in _derived_lists(devices, path):
        if len(attributes) > MAX_PER_REQUEST:
            problems.append(
                f"{where}: Too many: {len(attributes)}: must have at most {MAX_PER_REQUEST} items"
            )
        seen: set[str] = set()
        for i, attribute in enumerate(attributes):
            item = f"{where}[{i}]"
            if not isinstance(attribute, Mapping):
                problems.append(f"{item}: must be an object")
                continue
            name, expression = attribute.get("name"), attribute.get("expression")
            if not isinstance(name, str) or not name:
                problems.append(f"{item}.name: Required value")
            elif not _FULLY_QUALIFIED.fullmatch(name):
                problems.append(
                    f"{item}.name: Invalid value: {name!r}: must be a domain and a C identifier "
                    "separated by a slash (for example derived/numaNode)"
                )
            elif len(domain := name.partition("/")[0]) > DOMAIN_MAX_LENGTH:
                problems.append(
                    f"{item}.name: Too long: may not be more than {DOMAIN_MAX_LENGTH} bytes ({domain!r})"
                )
            elif name in seen:
                problems.append(f"{item}.name: Duplicate value: {name!r}")
            elif not _used_by_constraint(name, request_name, constrained):
                problems.append(
                    f"{item}.name: Invalid value: {name!r}: must be referenced by at least one "
                    "matchAttribute or distinctAttribute constraint targeting this request"
                )
            if isinstance(name, str):
                seen.add(name)
            if not isinstance(expression, str) or not expression:
                problems.append(f"{item}.expression: Required value")
                continue
            try:
                cel.compile_derived(expression, options, lists_allowed=lists_allowed)
                total_cost += cel.estimate_cost(expression, options)
            except cel.CELError as exc:  # first line only: some engines add the source and a caret
                problems.append(f"{item}.expression: {(str(exc).strip().splitlines() or ['invalid'])[0]}")
    if total_cost > CLAIM_COST_LIMIT:
        problems.append(
            f"{path}: Forbidden: too complex, total cost of derived attribute CEL expressions in "
            "the claim exceeds cost limit"
        )
    return problems


def _derived_lists(devices: Mapping[str, Any], path: str) -> Iterator[tuple[str, str, list[Any]]]:
    """(field path, request name as constraints name it, derivedAttributes) of every request and
    subrequest that has some."""
    for i, request in enumerate(_items(devices.get("requests"))):
        if not isinstance(request, Mapping):
            continue
        name = str(request.get("name") or "")
        exactly = request.get("exactly")
        if isinstance(exactly, Mapping) and exactly.get("derivedAttributes"):
            yield (
                f"{path}.requests[{i}].exactly.derivedAttributes",
                name,
                _items(exactly["derivedAttributes"]),
            )
        for j, sub in enumerate(_items(request.get("firstAvailable"))):
            if isinstance(sub, Mapping) and sub.get("derivedAttributes"):
                yield (
                    f"{path}.requests[{i}].firstAvailable[{j}].derivedAttributes",
                    f"{name}/{sub.get('name') or ''}",
                    _items(sub["derivedAttributes"]),
                )


def _constrained_attributes(devices: Mapping[str, Any]) -> dict[str, set[str]]:
    """Request reference ("" for constraints over every request) -> the attributes constrained for it."""
    constrained: dict[str, set[str]] = {}
    for constraint in _items(devices.get("constraints")):
        if not isinstance(constraint, Mapping):
            continue
        attribute = constraint.get("matchAttribute") or constraint.get("distinctAttribute")
        if not isinstance(attribute, str):
            continue
        for request in _items(constraint.get("requests")) or [""]:
            constrained.setdefault(str(request), set()).add(attribute)
    return constrained


def _used_by_constraint(name: str, request: str, constrained: dict[str, set[str]]) -> bool:
    parent = request.partition("/")[0]
    return any(name in constrained.get(key, ()) for key in {"", request, parent})


def _items(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def has_derived_attributes(devices: Mapping[str, Any]) -> bool:
    return any(True for _ in _derived_lists(devices, ""))
