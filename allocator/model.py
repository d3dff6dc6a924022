"""Object model over the raw resource.k8s.io/v1 (and core Node) dicts.

Every object is parsed and validated once; the allocator then works on these parsed forms. The original
dict stays available as ``.raw``, except for a ResourceSlice and its devices, the bulk of the cluster's
objects, which keep only what they parse (the cache stores slices packed). Checks that upstream's
allocator performs itself at allocation time (for example a selector without CEL, an unknown allocation
mode) are deliberately left to the allocator so that it can report them with upstream's wording; here we
reject input whose structure is unusable.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Mapping
from operator import attrgetter
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeVar

import orjson

from allocator.errors import InvalidObjectError
from allocator.quantity import Quantity
from allocator.semver import Semver

_parse_serial = itertools.count()

SCALAR_ATTRIBUTE_TYPES = ("int", "bool", "string", "version")
LIST_ATTRIBUTE_TYPES = {"ints": "int", "bools": "bool", "strings": "string", "versions": "version"}
_PY_TYPES: dict[str, tuple[type, ...]] = {"int": (int,), "bool": (bool,), "string": (str,), "version": (str,)}
BLOCKING_TAINT_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
COMPATIBILITY_GROUPS_MAX_SIZE = 2  # DeviceCompatibilityGroupsMaxSize
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


# Parsed values many devices have in common (an attribute value, a capacity without a request policy)
# are made once and shared: they are never changed after parsing, and separate copies add up over
# thousands of nodes. Bounded: emptied when full, so unique values cannot grow it for ever.
_SHARED_PARSES: dict[tuple[Any, ...], Any] = {}
MAX_SHARED_PARSES = 50_000
_T = TypeVar("_T")


def _shared(key: tuple[Any, ...], make: Callable[[], _T]) -> _T:
    found: _T | None = _SHARED_PARSES.get(key)
    if found is None:
        if len(_SHARED_PARSES) >= MAX_SHARED_PARSES:
            _SHARED_PARSES.clear()
        found = _SHARED_PARSES[key] = make()
    return found


class _Checker:
    """Field access with errors that name the object and the field path."""

    __slots__ = ("kind", "name")

    def __init__(self, kind: str, name: str) -> None:
        self.kind = kind
        self.name = name

    def fail(self, path: str, problem: str) -> InvalidObjectError:
        return InvalidObjectError(self.kind, self.name, path, problem)

    def mapping(self, obj: Mapping[str, Any], key: str, path: str, *,
                required: bool = False) -> dict[str, Any]:
        value = obj.get(key)
        if value is None:
            if required:
                raise self.fail(f"{path}{key}", "required field is missing")
            return {}
        if not isinstance(value, dict):
            raise self.fail(f"{path}{key}", f"must be an object, got {type(value).__name__}")
        return value

    def list(self, obj: Mapping[str, Any], key: str, path: str) -> list[Any]:
        value = obj.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.fail(f"{path}{key}", f"must be a list, got {type(value).__name__}")
        return value

    def string(self, obj: Mapping[str, Any], key: str, path: str, *, required: bool = False) -> str:
        value = obj.get(key)
        if value is None or value == "":
            if required:
                raise self.fail(f"{path}{key}", "required field is missing")
            return ""
        if not isinstance(value, str):
            raise self.fail(f"{path}{key}", f"must be a string, got {type(value).__name__}")
        return value

    def integer(self, obj: Mapping[str, Any], key: str, path: str, default: int | None = None) -> int | None:
        value = obj.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(f"{path}{key}", f"must be an integer, got {value!r}")
        return value

    def boolean(self, obj: Mapping[str, Any], key: str, path: str) -> bool | None:
        value = obj.get(key)
        if value is None:
            return None
        if not isinstance(value, bool):
            raise self.fail(f"{path}{key}", f"must be true or false, got {value!r}")
        return value

    def quantity(self, value: Any, path: str) -> Quantity:
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise self.fail(path, f"must be a quantity string, got {value!r}")
        try:
            return Quantity.parse(str(value))
        except ValueError as exc:
            raise self.fail(path, f"invalid quantity: {exc}") from None

    def string_list(self, obj: Mapping[str, Any], key: str, path: str) -> tuple[str, ...]:
        items = self.list(obj, key, path)
        for i, item in enumerate(items):
            if not isinstance(item, str):
                raise self.fail(f"{path}{key}[{i}]", f"must be a string, got {item!r}")
        return tuple(items)

    def node_selector(self, obj: Mapping[str, Any], key: str, path: str) -> dict[str, Any] | None:
        if obj.get(key) is None:
            return None
        selector = self.mapping(obj, key, path)
        terms = self.list(selector, "nodeSelectorTerms", f"{path}{key}.")
        for i, term in enumerate(terms):
            where = f"{path}{key}.nodeSelectorTerms[{i}]"
            if not isinstance(term, dict):
                raise self.fail(where, "must be an object")
            for field in ("matchExpressions", "matchFields"):
                for j, req in enumerate(self.list(term, field, f"{where}.")):
                    if not isinstance(req, dict):
                        raise self.fail(f"{where}.{field}[{j}]", "must be an object")
                    self.string(req, "key", f"{where}.{field}[{j}].", required=True)
                    self.string(req, "operator", f"{where}.{field}[{j}].", required=True)
                    self.string_list(req, "values", f"{where}.{field}[{j}].")
        return selector


def _metadata(raw: Mapping[str, Any], kind: str) -> tuple[_Checker, dict[str, Any]]:
    if not isinstance(raw, dict):
        raise InvalidObjectError(kind, "", "", f"must be an object, got {type(raw).__name__}")
    meta = raw.get("metadata")
    if not isinstance(meta, dict):
        raise InvalidObjectError(kind, "", "metadata", "required field is missing")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidObjectError(kind, "", "metadata.name", "required field is missing")
    namespace = meta.get("namespace")
    label = f"{namespace}/{name}" if isinstance(namespace, str) and namespace else name
    return _Checker(kind, label), meta


def _parse_taint(ck: _Checker, taint: Any, path: str) -> dict[str, Any]:
    if not isinstance(taint, dict):
        raise ck.fail(path, "must be an object")
    ck.string(taint, "key", f"{path}.", required=True)
    ck.string(taint, "value", f"{path}.")
    ck.string(taint, "effect", f"{path}.", required=True)
    return taint


def _parse_tolerations(ck: _Checker, obj: Mapping[str, Any], path: str) -> tuple[dict[str, Any], ...]:
    tolerations = ck.list(obj, "tolerations", path)
    for i, tol in enumerate(tolerations):
        where = f"{path}tolerations[{i}]"
        if not isinstance(tol, dict):
            raise ck.fail(where, "must be an object")
        for key in ("key", "operator", "value", "effect"):
            ck.string(tol, key, f"{where}.")
        ck.integer(tol, "tolerationSeconds", f"{where}.")
    return tuple(tolerations)


class AttributeValue:
    """One device attribute: its API type key and value (a tuple for list types)."""

    __slots__ = ("base_type", "is_list", "type", "value")

    def __init__(self, type_: str, value: Any) -> None:
        self.type = type_
        self.value = value
        self.is_list = type_ in LIST_ATTRIBUTE_TYPES
        self.base_type = LIST_ATTRIBUTE_TYPES.get(type_, type_)

    def as_set(self) -> frozenset[Any]:
        return frozenset(self.value) if self.is_list else frozenset((self.value,))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AttributeValue) and (self.type, self.value) == (other.type, other.value)

    def __hash__(self) -> int:
        return hash((self.type, self.value))

    def __repr__(self) -> str:
        return f"{{{self.type}: {self.value!r}}}"


def _check_version(ck: _Checker, text: str, path: str) -> None:
    try:
        Semver.parse(text)
    except ValueError as exc:
        raise ck.fail(path, f"invalid semantic version: {exc}") from None


def _parse_attribute(ck: _Checker, raw: Any, path: str) -> AttributeValue:
    if not isinstance(raw, dict) or len(raw) != 1:
        raise ck.fail(
            path, "must set exactly one of int, bool, string, version, ints, bools, strings, versions"
        )
    ((type_, value),) = raw.items()
    if type_ in SCALAR_ATTRIBUTE_TYPES:
        expected = _PY_TYPES[type_]
        if not isinstance(value, expected) or (type_ == "int" and isinstance(value, bool)):
            raise ck.fail(f"{path}.{type_}", f"must be a {type_}, got {value!r}")
        # The isinstance tests repeat the type check above for the type checker.
        if type_ == "version" and isinstance(value, str):
            _check_version(ck, value, f"{path}.version")
        if type_ == "int" and isinstance(value, int) and not _INT64_MIN <= value <= _INT64_MAX:
            raise ck.fail(f"{path}.int", f"out of the int64 range: {value}")
        return _shared(("attribute", type_, value), lambda: AttributeValue(type_, value))
    if type_ in LIST_ATTRIBUTE_TYPES:
        base = LIST_ATTRIBUTE_TYPES[type_]
        if not isinstance(value, list) or not value:
            raise ck.fail(f"{path}.{type_}", "must be a non-empty list")
        for i, item in enumerate(value):
            if not isinstance(item, _PY_TYPES[base]) or (base == "int" and isinstance(item, bool)):
                raise ck.fail(f"{path}.{type_}[{i}]", f"must be a {base}, got {item!r}")
            if base == "version" and isinstance(item, str):
                _check_version(ck, item, f"{path}.{type_}[{i}]")
            if base == "int" and isinstance(item, int) and not _INT64_MIN <= item <= _INT64_MAX:
                raise ck.fail(f"{path}.{type_}[{i}]", f"out of the int64 range: {item}")
        items = tuple(value)
        return _shared(("attribute", type_, items), lambda: AttributeValue(type_, items))
    raise ck.fail(f"{path}.{type_}", "unknown attribute type")


class CapacityRequestPolicy:
    __slots__ = ("default", "valid_range", "valid_values")

    def __init__(
        self,
        default: Quantity | None,
        valid_values: tuple[Quantity, ...],
        valid_range: tuple[Quantity, Quantity | None, Quantity | None] | None,
    ) -> None:
        self.default = default
        self.valid_values = valid_values
        self.valid_range = valid_range  # (min, max, step)


class DeviceCapacity:
    __slots__ = ("policy", "value")

    def __init__(self, value: Quantity, policy: CapacityRequestPolicy | None) -> None:
        self.value = value
        self.policy = policy


def _parse_policy(ck: _Checker, raw: dict[str, Any], path: str) -> CapacityRequestPolicy:
    default = ck.quantity(raw["default"], f"{path}.default") if raw.get("default") is not None else None
    values = tuple(
        ck.quantity(v, f"{path}.validValues[{i}]")
        for i, v in enumerate(ck.list(raw, "validValues", f"{path}."))
    )
    valid_range = None
    if raw.get("validRange") is not None:
        rng = ck.mapping(raw, "validRange", f"{path}.")
        if rng.get("min") is None:
            raise ck.fail(f"{path}.validRange.min", "required field is missing")
        valid_range = (
            ck.quantity(rng["min"], f"{path}.validRange.min"),
            ck.quantity(rng["max"], f"{path}.validRange.max") if rng.get("max") is not None else None,
            ck.quantity(rng["step"], f"{path}.validRange.step") if rng.get("step") is not None else None,
        )
    if values and valid_range:
        raise ck.fail(path, "validValues and validRange are mutually exclusive")
    return CapacityRequestPolicy(default, values, valid_range)


class NodeAllocatableResource:
    """One entry of a device's nodeAllocatableResources (gate DRANodeAllocatableResources): how an
    allocation of the device translates into a node allocatable resource (cpu, memory, hugepages-*).

    The allocator does not read it; kube-scheduler's side of the gate (the extender's
    extender/plugin/nodeallocatable.py) does. Validated here as the API server validates it."""

    __slots__ = ("capacity_key", "capacity_multiplier", "device_multiplier", "mapped", "per_container",
                 "per_pod")

    def __init__(self, ck: _Checker, raw: Any, path: str, capacity: Mapping[str, Any]) -> None:
        if not isinstance(raw, dict):
            raise ck.fail(path, "must be an object")
        mapping = raw.get("mapping")
        overhead = raw.get("overhead")
        if mapping is None and overhead is None:
            raise ck.fail(path, "at least one of mapping or overhead must be set")
        self.mapped = mapping is not None
        self.capacity_key: str | None = None
        self.capacity_multiplier: Quantity | None = None
        self.device_multiplier: Quantity | None = None
        if mapping is not None:
            where = f"{path}.mapping"
            mapping = ck.mapping(raw, "mapping", f"{path}.")
            if mapping.get("capacityKey") is not None:
                key = ck.string(mapping, "capacityKey", f"{where}.")
                if not key:
                    raise ck.fail(f"{where}.capacityKey", "capacityKey must not be an empty string")
                if key not in capacity:
                    raise ck.fail(f"{where}.capacityKey", f"Not found: {key!r}")
                self.capacity_key = key
            self.capacity_multiplier = self._positive(ck, mapping, "capacityMultiplier", where)
            self.device_multiplier = self._positive(ck, mapping, "deviceMultiplier", where)
            if self.capacity_key is not None and self.capacity_multiplier is None:
                raise ck.fail(f"{where}.capacityMultiplier",
                              "capacityMultiplier is required when capacityKey is set")
            if self.capacity_multiplier is not None and self.capacity_key is None:
                raise ck.fail(f"{where}.capacityKey",
                              "capacityKey is required when capacityMultiplier is set")
        self.per_pod: Quantity | None = None
        self.per_container: Quantity | None = None
        if overhead is not None:
            where = f"{path}.overhead"
            overhead = ck.mapping(raw, "overhead", f"{path}.")
            if overhead.get("perPod") is None and overhead.get("perContainer") is None:
                raise ck.fail(where, "at least one of perPod or perContainer must be set")
            for field in ("perPod", "perContainer"):
                if overhead.get(field) is None:
                    continue
                value = ck.quantity(overhead[field], f"{where}.{field}")
                if value.sign() < 0:
                    raise ck.fail(f"{where}.{field}", f"{value}: must be non-negative")
                if field == "perPod":
                    self.per_pod = value
                else:
                    self.per_container = value

    @staticmethod
    def _positive(ck: _Checker, mapping: dict[str, Any], field: str, where: str) -> Quantity | None:
        if mapping.get(field) is None:
            return None
        value = ck.quantity(mapping[field], f"{where}.{field}")
        if value.sign() <= 0:
            raise ck.fail(f"{where}.{field}", f"{value}: must be positive")
        return value


def _is_node_allocatable_name(name: str) -> bool:
    return name in ("cpu", "memory") or name.startswith("hugepages-")


def _parse_node_allocatable(ck: _Checker, raw: dict[str, Any], path: str,
                            capacity: Mapping[str, Any]) -> Mapping[str, NodeAllocatableResource]:
    entries = ck.mapping(raw, "nodeAllocatableResources", f"{path}.")
    if not entries:
        return _NO_NODE_ALLOCATABLE
    parsed: dict[str, NodeAllocatableResource] = {}
    for name, entry in entries.items():
        where = f"{path}.nodeAllocatableResources[{name}]"
        if not _is_node_allocatable_name(name):
            raise ck.fail(where, f"{name!r}: must be a node allocatable resource name")
        parsed[name] = NodeAllocatableResource(ck, entry, where, capacity)
    return parsed


_NO_NODE_ALLOCATABLE: Mapping[str, NodeAllocatableResource] = MappingProxyType({})


_DEVICE_CONTENT_FIELDS = (
    "all_nodes", "allow_multiple_allocations", "attributes", "binding_conditions",
    "binding_failure_conditions", "binds_to_node", "capacity", "compatibility_groups", "consumes_counters",
    "has_request_policies", "node_allocatable", "node_name", "node_selector", "signature", "taints",
)
# Also on _DeviceContent, read by Device itself: the entry's attributes, capacity and
# allowMultipleAllocations as written, which CEL's device is made from.
_DEVICE_CONTENT_SLOTS = (*_DEVICE_CONTENT_FIELDS, "cel_input")


class _DeviceContent:
    """What a device's entry says apart from its name, parsed and checked: shared by every device whose
    entry says the same (see Device)."""

    __slots__ = _DEVICE_CONTENT_SLOTS

    def __init__(self, ck: _Checker, raw: dict[str, Any], path: str, signature: str) -> None:
        attributes: dict[str, AttributeValue] = {
            key: _parse_attribute(ck, value, f"{path}.attributes[{key}]")
            for key, value in ck.mapping(raw, "attributes", f"{path}.").items()
        }
        # Devices that differ elsewhere (a taint, a counter) may still have the same attributes.
        attributes = _shared(("attributes", *attributes.items()), lambda: attributes)
        capacity: dict[str, DeviceCapacity] = {}
        for key, cap in ck.mapping(raw, "capacity", f"{path}.").items():
            where = f"{path}.capacity[{key}]"
            if not isinstance(cap, dict) or cap.get("value") is None:
                raise ck.fail(f"{where}.value", "required field is missing")
            policy = cap.get("requestPolicy")
            value = cap["value"]
            if isinstance(policy, dict) or not isinstance(value, str):
                capacity[key] = DeviceCapacity(
                    ck.quantity(value, f"{where}.value"),
                    _parse_policy(ck, policy, f"{where}.requestPolicy") if isinstance(policy, dict) else None,
                )
            else:
                capacity[key] = _shared(  # parsed (and checked) only when not seen before
                    ("capacity", value),
                    lambda: DeviceCapacity(ck.quantity(value, f"{where}.value"), None))  # noqa: B023
        has_request_policies = any(c.policy is not None for c in capacity.values())
        if not has_request_policies:
            # Capacities without a policy are shared objects (above), so equal ones are identical.
            capacity = _shared(("capacities", *capacity.items()), lambda: capacity)
        uses = [
            _parse_counter_use(ck, item, f"{path}.consumesCounters[{i}]")
            for i, item in enumerate(ck.list(raw, "consumesCounters", f"{path}."))
        ]
        consumes_counters: tuple[tuple[str, dict[str, Quantity]], ...] = tuple(
            (counter_set, counters) for counter_set, counters, _ in uses
        )
        # DRADeviceCompatibilityGroups: per counter set consumed (in consumesCounters order), the groups
        # declared for it; empty when the device declares none anywhere.
        compatibility_groups: tuple[tuple[str, frozenset[str]], ...] = (
            tuple((counter_set, groups) for counter_set, _, groups in uses)
            if any(groups for _, _, groups in uses)
            else ()
        )
        node_name = ck.string(raw, "nodeName", f"{path}.")
        node_selector = ck.node_selector(raw, "nodeSelector", f"{path}.")
        all_nodes = bool(ck.boolean(raw, "allNodes", f"{path}."))
        taints: tuple[dict[str, Any], ...] = tuple(
            _parse_taint(ck, t, f"{path}.taints[{i}]")
            for i, t in enumerate(ck.list(raw, "taints", f"{path}."))
        )
        binds_to_node = bool(ck.boolean(raw, "bindsToNode", f"{path}."))
        binding_conditions = ck.string_list(raw, "bindingConditions", f"{path}.")
        binding_failure_conditions = ck.string_list(raw, "bindingFailureConditions", f"{path}.")
        allow_multiple_allocations = bool(ck.boolean(raw, "allowMultipleAllocations", f"{path}."))
        # Empty (one shared empty mapping) for almost every device.
        node_allocatable = (_parse_node_allocatable(ck, raw, path, capacity)
                            if raw.get("nodeAllocatableResources") is not None else _NO_NODE_ALLOCATABLE)
        self.attributes = attributes
        self.capacity = capacity
        self.has_request_policies = has_request_policies
        self.consumes_counters = consumes_counters
        self.compatibility_groups = compatibility_groups
        self.node_name = node_name
        self.node_selector = node_selector
        self.all_nodes = all_nodes
        self.taints = taints
        self.binds_to_node = binds_to_node
        self.binding_conditions = binding_conditions
        self.binding_failure_conditions = binding_failure_conditions
        self.allow_multiple_allocations = allow_multiple_allocations
        self.node_allocatable = node_allocatable
        self.signature = signature
        self.cel_input = (raw.get("attributes") or {}, raw.get("capacity") or {},
                          raw.get("allowMultipleAllocations"))


class Device:
    """One entry of a ResourceSlice's spec.devices.

    Everything but the name is read through the shared `_DeviceContent`: one pointer per device instead
    of fifteen (18 MB at 160,000 devices). The reads are C-level attribute getters, a few nanoseconds
    slower than a slot. Unlike other parsed objects a device keeps no `raw`: the cache stores slices
    packed (extender.state.packing), and a reference here would keep every device's dict alive."""

    __slots__ = ("_cel", "_content", "_memo_prefix", "name")

    if TYPE_CHECKING:   # properties over _content, set after the class
        attributes: dict[str, AttributeValue]
        capacity: dict[str, DeviceCapacity]
        has_request_policies: bool
        consumes_counters: tuple[tuple[str, dict[str, Quantity]], ...]
        compatibility_groups: tuple[tuple[str, frozenset[str]], ...]
        node_name: str
        node_selector: dict[str, Any] | None
        all_nodes: bool
        taints: tuple[dict[str, Any], ...]
        binds_to_node: bool
        binding_conditions: tuple[str, ...]
        binding_failure_conditions: tuple[str, ...]
        allow_multiple_allocations: bool
        node_allocatable: Mapping[str, NodeAllocatableResource]
        signature: str

    def __init__(self, ck: _Checker, raw: Any, path: str, memo_prefix: tuple[Any, ...]) -> None:
        if not isinstance(raw, dict):
            raise ck.fail(path, "must be an object")
        self.name = ck.string(raw, "name", f"{path}.", required=True)
        self._memo_prefix = memo_prefix   # the slice's: memo_key is made when CEL first needs it
        self._cel: Any = None
        # Everything except the name: two devices with equal signatures in the same pool behave identically
        # for every selector, constraint, counter, taint and capacity check.
        content = {k: v for k, v in raw.items() if k != "name"}
        try:
            # Decoded to a fresh str: orjson's bytes keep the whole buffer it wrote into (about 4 KB).
            signature = orjson.dumps(content, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS).decode()
        except TypeError:  # values orjson cannot encode: parsed every time (a representation is no proof)
            self._content = _DeviceContent(ck, raw, path, repr(content))
            return
        # Devices of one model repeat the same content on every node: it is parsed (and checked) once, and
        # every such device shares the parsed parts. Only content that parsed without error is kept.
        self._content = _shared(("device", signature), lambda: _DeviceContent(ck, raw, path, signature))

    @property
    def memo_key(self) -> tuple[Any, ...]:
        """What CEL results for this device are memoized under: the slice's identity and version, and
        the device's name."""
        return (*self._memo_prefix, self.name)

    def cel_device(self, driver: str) -> Any:
        """The CEL input for this device, built on first use and kept for the slice's lifetime."""
        if self._cel is None:
            from allocator import cel

            attributes, capacity, allow_multiple_allocations = self._content.cel_input
            self._cel = cel.make_device(driver, attributes, capacity,
                                        allow_multiple_allocations=allow_multiple_allocations,
                                        memo_key=self.memo_key)
        return self._cel


for _field in _DEVICE_CONTENT_FIELDS:   # typed above, for the checker; read from the shared content
    setattr(Device, _field, property(attrgetter(f"_content.{_field}")))
del _field


def _parse_counter_use(ck: _Checker, raw: Any, path: str) -> tuple[str, dict[str, Quantity], frozenset[str]]:
    if not isinstance(raw, dict):
        raise ck.fail(path, "must be an object")
    counter_set = ck.string(raw, "counterSet", f"{path}.", required=True)
    groups = _parse_compatibility_groups(ck, raw, f"{path}.")
    return counter_set, _parse_counters(ck, raw, path), groups


_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DNS_LABEL_MESSAGE = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start "
    "and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)


def _dns_label_problem(value: str) -> str | None:
    """The first problem the API server's short-name format (IsDNS1123Label) reports, in its words."""
    if len(value.encode()) > 63:
        return "must be no more than 63 bytes"
    if _DNS_LABEL.fullmatch(value):
        return None
    return "must not contain dots" if _DNS_SUBDOMAIN.fullmatch(value) else _DNS_LABEL_MESSAGE


def _parse_compatibility_groups(ck: _Checker, raw: dict[str, Any], parent: str) -> frozenset[str]:
    """Checked like the API server's declarative validation (v1.37.1): at most
    DeviceCompatibilityGroupsMaxSize entries, each a DNS label, no duplicates; same error texts."""
    groups = ck.list(raw, "compatibilityGroups", parent)
    path = f"{parent}compatibilityGroups"
    limit = COMPATIBILITY_GROUPS_MAX_SIZE
    if len(groups) > limit:
        raise ck.fail(path, f"Too many: {len(groups)}: must have at most {limit} items")
    seen: set[str] = set()
    for i, group in enumerate(groups):
        if not isinstance(group, str):
            raise ck.fail(f"{path}[{i}]", f"must be a string, got {group!r}")
        problem = _dns_label_problem(group)
        if problem is not None:
            raise ck.fail(f"{path}[{i}]", f"Invalid value: {orjson.dumps(group).decode()}: {problem}")
        if group in seen:
            raise ck.fail(f"{path}[{i}]", f"Duplicate value: {orjson.dumps(group).decode()}")
        seen.add(group)
    return frozenset(groups)


def _parse_counters(ck: _Checker, raw: dict[str, Any], path: str) -> dict[str, Quantity]:
    counters: dict[str, Quantity] = {}
    for name, counter in ck.mapping(raw, "counters", f"{path}.").items():
        if not isinstance(counter, dict) or counter.get("value") is None:
            raise ck.fail(f"{path}.counters[{name}].value", "required field is missing")
        counters[name] = ck.quantity(counter["value"], f"{path}.counters[{name}].value")
    return counters


class DeviceClass:
    __slots__ = ("compiled", "config", "name", "raw", "selectors", "uid")

    def __init__(self, raw: dict[str, Any]) -> None:
        ck, meta = _metadata(raw, "DeviceClass")
        self.raw = raw
        self.name: str = meta["name"]
        self.uid: str = meta.get("uid") or ""
        spec = ck.mapping(raw, "spec", "")
        self.selectors = _parse_selectors(ck, spec, "spec.")
        self.compiled: dict[Any, list[Any]] = {}  # compiled selectors by CEL compile options
        self.config: list[dict[str, Any]] = ck.list(spec, "config", "spec.")
        for i, cfg in enumerate(self.config):
            if not isinstance(cfg, dict):
                raise ck.fail(f"spec.config[{i}]", "must be an object")

    @classmethod
    def from_api(cls, raw: dict[str, Any]) -> DeviceClass:
        return cls(raw)


def _parse_selectors(ck: _Checker, obj: Mapping[str, Any], path: str) -> tuple[str | None, ...]:
    """CEL expressions of a selectors list; None for a selector without CEL (reported by the allocator)."""
    result: list[str | None] = []
    for i, selector in enumerate(ck.list(obj, "selectors", path)):
        if not isinstance(selector, dict):
            raise ck.fail(f"{path}selectors[{i}]", "must be an object")
        cel = selector.get("cel")
        if cel is None:
            result.append(None)
            continue
        if not isinstance(cel, dict):
            raise ck.fail(f"{path}selectors[{i}].cel", "must be an object")
        result.append(ck.string(cel, "expression", f"{path}selectors[{i}].cel.") or None)
    return tuple(result)


class ResourceSlice:
    __slots__ = (
        "all_nodes",
        "counter_sets",
        "devices",
        "driver",
        "generation",
        "has_binding_conditions",
        "name",
        "node_name",
        "node_selector",
        "per_device_node_selection",
        "pool",
        "pool_generation",
        "resource_slice_count",
        "shared_counters_set",
        "skip_node_operations",
        "uid",
        "uses_compatibility_groups",
    )

    def __init__(self, raw: dict[str, Any]) -> None:
        ck, meta = _metadata(raw, "ResourceSlice")
        self.name: str = meta["name"]
        self.uid: str = meta.get("uid") or ""
        self.generation = meta.get("generation") or 0
        spec = ck.mapping(raw, "spec", "", required=True)
        self.driver = ck.string(spec, "driver", "spec.", required=True)
        pool = ck.mapping(spec, "pool", "spec.", required=True)
        self.pool = ck.string(pool, "name", "spec.pool.", required=True)
        self.pool_generation = ck.integer(pool, "generation", "spec.pool.", default=0) or 0
        count = ck.integer(pool, "resourceSliceCount", "spec.pool.", default=None)
        if count is None or count <= 0:
            raise ck.fail("spec.pool.resourceSliceCount", f"must be greater than zero, got {count!r}")
        self.resource_slice_count: int = count
        self.node_name = ck.string(spec, "nodeName", "spec.")
        self.node_selector = ck.node_selector(spec, "nodeSelector", "spec.")
        self.all_nodes = bool(ck.boolean(spec, "allNodes", "spec."))
        # Tri-state like the API pointer: None (unset), True/False when set.
        self.per_device_node_selection = ck.boolean(spec, "perDeviceNodeSelection", "spec.")
        # Node operations the kubelet skips for these devices (DRAOptionalNodeOperations): only a node
        # declaring that feature can take them.
        self.skip_node_operations = ck.string_list(spec, "skipNodeOperations", "spec.")
        self.shared_counters_set = spec.get("sharedCounters") is not None
        self.counter_sets: list[tuple[str, dict[str, Quantity]]] = []
        for i, item in enumerate(ck.list(spec, "sharedCounters", "spec.")):
            where = f"spec.sharedCounters[{i}]"
            if not isinstance(item, dict):
                raise ck.fail(where, "must be an object")
            self.counter_sets.append(
                (ck.string(item, "name", f"{where}.", required=True), _parse_counters(ck, item, where))
            )
        # Without a uid (test input), make every parse distinct so CEL memoization can never go stale.
        memo_prefix = (
            (self.uid, self.generation, meta.get("resourceVersion") or "")
            if self.uid
            else ("parse", next(_parse_serial))
        )
        self.devices = tuple(
            Device(ck, d, f"spec.devices[{i}]", memo_prefix)
            for i, d in enumerate(ck.list(spec, "devices", "spec."))
        )
        self.has_binding_conditions = any(d.binding_conditions for d in self.devices)
        self.uses_compatibility_groups = any(d.compatibility_groups for d in self.devices)

    @classmethod
    def from_api(cls, raw: dict[str, Any]) -> ResourceSlice:
        return cls(raw)


class ExactRequest:
    """An ``exactly`` request or one ``firstAvailable`` subrequest."""

    __slots__ = (
        "admin_access",
        "allocation_mode",
        "capacity_requests",
        "compiled",
        "count",
        "derived_attributes",
        "device_class_name",
        "name",
        "selectors",
        "tolerations",
    )

    def __init__(self, ck: _Checker, raw: Any, path: str, name: str, *, subrequest: bool) -> None:
        if not isinstance(raw, dict):
            raise ck.fail(path, "must be an object")
        self.name = name
        self.device_class_name = ck.string(raw, "deviceClassName", f"{path}.")
        self.selectors = _parse_selectors(ck, raw, f"{path}.")
        self.compiled: dict[Any, list[Any]] = {}  # compiled selectors by CEL compile options
        self.allocation_mode = ck.string(raw, "allocationMode", f"{path}.") or "ExactCount"
        count = ck.integer(raw, "count", f"{path}.", default=None)
        self.count: int = 1 if count is None and self.allocation_mode == "ExactCount" else (count or 0)
        if self.allocation_mode == "ExactCount" and self.count <= 0:
            raise ck.fail(f"{path}.count", f"must be greater than zero, got {self.count}")
        self.admin_access: bool | None = None if subrequest else ck.boolean(raw, "adminAccess", f"{path}.")
        self.tolerations = _parse_tolerations(ck, raw, f"{path}.")
        # (name, CEL expression) in the order given; the allocator refuses them without DRADerivedAttributes
        self.derived_attributes: tuple[tuple[str, str], ...] = tuple(
            _parse_derived_attribute(ck, item, f"{path}.derivedAttributes[{i}]")
            for i, item in enumerate(ck.list(raw, "derivedAttributes", f"{path}."))
        )
        capacity = raw.get("capacity")
        self.capacity_requests: dict[str, Quantity] | None = None
        if capacity is not None:
            if not isinstance(capacity, dict):
                raise ck.fail(f"{path}.capacity", "must be an object")
            self.capacity_requests = {
                key: ck.quantity(value, f"{path}.capacity.requests[{key}]")
                for key, value in ck.mapping(capacity, "requests", f"{path}.capacity.").items()
            }


def _parse_derived_attribute(ck: _Checker, raw: Any, path: str) -> tuple[str, str]:
    if not isinstance(raw, dict):
        raise ck.fail(path, "must be an object")
    return ck.string(raw, "name", f"{path}.", required=True), ck.string(
        raw, "expression", f"{path}.", required=True
    )


class DeviceRequest:
    __slots__ = ("exactly", "first_available", "name")

    def __init__(self, ck: _Checker, raw: Any, path: str) -> None:
        if not isinstance(raw, dict):
            raise ck.fail(path, "must be an object")
        self.name = ck.string(raw, "name", f"{path}.", required=True)
        has_exactly = raw.get("exactly") is not None
        subs = ck.list(raw, "firstAvailable", f"{path}.")
        if has_exactly == bool(subs):
            raise ck.fail(path, "exactly one of exactly or firstAvailable must be set")
        self.exactly = (
            ExactRequest(ck, raw["exactly"], f"{path}.exactly", self.name, subrequest=False)
            if has_exactly else None
        )
        self.first_available: tuple[ExactRequest, ...] = tuple(
            ExactRequest(
                ck,
                sub,
                f"{path}.firstAvailable[{i}]",
                ck.string(sub, "name", f"{path}.firstAvailable[{i}].", required=True)
                if isinstance(sub, dict)
                else "",
                subrequest=True,
            )
            for i, sub in enumerate(subs)
        )


class DeviceConstraint:
    __slots__ = ("distinct_attribute", "match_attribute", "requests")

    def __init__(self, ck: _Checker, raw: Any, path: str) -> None:
        if not isinstance(raw, dict):
            raise ck.fail(path, "must be an object")
        self.requests = frozenset(ck.string_list(raw, "requests", f"{path}."))
        self.match_attribute = ck.string(raw, "matchAttribute", f"{path}.") or None
        self.distinct_attribute = ck.string(raw, "distinctAttribute", f"{path}.") or None


class ResourceClaim:
    __slots__ = (
        "allocation",
        "config",
        "constraints",
        "deleting",
        "key",
        "name",
        "namespace",
        "raw",
        "requests",
        "reserved_uids",
        "resource_version",
        "spec",
        "uid",
    )

    def __init__(self, raw: dict[str, Any], *, spec_of: ResourceClaim | None = None) -> None:
        ck, meta = _metadata(raw, "ResourceClaim")
        self.raw = raw
        self.name: str = meta["name"]
        self.namespace: str = meta.get("namespace") or ""
        self.uid: str = meta.get("uid") or ""
        self.key = f"{self.namespace}/{self.name}"
        self.resource_version: str = str(meta.get("resourceVersion") or "")
        self.deleting = bool(meta.get("deletionTimestamp"))
        spec = ck.mapping(raw, "spec", "")
        # The spec object itself: what `spec_of` is matched by, and what the filter's claim signature
        # reads, without going through `raw` (the cache gives that as a copy).
        self.spec: dict[str, Any] = spec
        self.requests: tuple[DeviceRequest, ...]
        self.constraints: tuple[DeviceConstraint, ...]
        self.config: list[dict[str, Any]]
        if spec_of is not None and spec and spec is spec_of.spec and not spec_of.parsed_from(raw):
            # The very same spec object, parsed already (the parts are never changed after parsing).
            self.requests, self.constraints = spec_of.requests, spec_of.constraints
            self.config = spec_of.config
        else:
            self.requests, self.constraints, self.config = _parse_claim_spec(ck, spec)
        status = ck.mapping(raw, "status", "")
        allocation = status.get("allocation")
        if allocation is not None:
            _check_allocation(ck, allocation)
        self.allocation: dict[str, Any] | None = allocation
        # The uids of status.reservedFor, in order (its entries as written are read through `raw`).
        # Every claim not reserved (each pending one) shares one empty tuple.
        reserved = ck.list(status, "reservedFor", "status.")
        self.reserved_uids: tuple[str, ...] = tuple(
            [str(entry.get("uid")) for entry in reserved if isinstance(entry, dict)]) if reserved else ()

    def parsed_from(self, raw: dict[str, Any]) -> bool:
        """Whether this claim was parsed from `raw`, the very object (not an equal one)."""
        return self.raw is raw

    @classmethod
    def from_api(cls, raw: dict[str, Any], *, spec_of: ResourceClaim | None = None) -> ResourceClaim:
        """`spec_of`: a claim parsed before (an earlier version of this one, say); when `raw["spec"]` is
        its raw spec object itself, not merely equal, its parsed requests, constraints and config are
        taken as they are. Objects stored in the cluster cache are never edited in place and share equal
        specs, so each new version of a claim skips parsing what did not change. The very object
        `spec_of` was parsed from is parsed again (re-applying a stored object re-indexes it)."""
        return cls(raw, spec_of=spec_of)


def _parse_claim_spec(
    ck: _Checker, spec: dict[str, Any]
) -> tuple[tuple[DeviceRequest, ...], tuple[DeviceConstraint, ...], list[dict[str, Any]]]:
    devices = ck.mapping(spec, "devices", "spec.")
    requests = tuple(
        DeviceRequest(ck, r, f"spec.devices.requests[{i}]")
        for i, r in enumerate(ck.list(devices, "requests", "spec.devices."))
    )
    constraints = tuple(
        DeviceConstraint(ck, c, f"spec.devices.constraints[{i}]")
        for i, c in enumerate(ck.list(devices, "constraints", "spec.devices."))
    )
    config: list[dict[str, Any]] = ck.list(devices, "config", "spec.devices.")
    for i, cfg in enumerate(config):
        if not isinstance(cfg, dict):
            raise ck.fail(f"spec.devices.config[{i}]", "must be an object")
        ck.string_list(cfg, "requests", f"spec.devices.config[{i}].")
    return requests, constraints, config


def _check_allocation(ck: _Checker, allocation: Any) -> None:
    if not isinstance(allocation, dict):
        raise ck.fail("status.allocation", "must be an object")
    devices = ck.mapping(allocation, "devices", "status.allocation.")
    for i, result in enumerate(ck.list(devices, "results", "status.allocation.devices.")):
        where = f"status.allocation.devices.results[{i}]"
        if not isinstance(result, dict):
            raise ck.fail(where, "must be an object")
        for key in ("request", "driver", "pool", "device"):
            ck.string(result, key, f"{where}.", required=True)
        ck.string(result, "shareID", f"{where}.")
        ck.string_list(result, "skipNodeOperations", f"{where}.")
        for name, value in ck.mapping(result, "consumedCapacity", f"{where}.").items():
            ck.quantity(value, f"{where}.consumedCapacity[{name}]")


# Most nodes declare no features: one empty set for all of them (an empty frozenset is 216 bytes).
_NOTHING_DECLARED: frozenset[str] = frozenset()


class Node:
    """A node as allocation sees it: its name, labels (node selectors) and status.declaredFeatures, and
    status.allocatable for the plugins that read it.

    ``labels_key`` is what the node's pool view depends on; ``verdict_key`` is what an allocation
    verdict for the node depends on besides its name and the cluster (labels and declared features).
    """

    __slots__ = (
        "allocatable", "declared_features", "labels", "labels_key", "name", "raw", "uid", "verdict_key",
    )

    def __init__(self, raw: dict[str, Any]) -> None:
        ck, meta = _metadata(raw, "Node")
        self.raw = raw
        self.name: str = meta["name"]
        self.uid: str = meta.get("uid") or ""
        labels = ck.mapping(meta, "labels", "metadata.")
        for key, value in labels.items():
            if not isinstance(value, str):
                raise ck.fail(f"metadata.labels[{key}]", f"must be a string, got {value!r}")
        self.labels: dict[str, str] = labels
        # Keys and values in one flat tuple (the keys sorted): a pair tuple per label was 56 bytes each,
        # 17 MB for 20,000 nodes of 15 labels. Only compared, never read.
        self.labels_key: tuple[str, ...] = tuple([part for item in sorted(labels.items()) for part in item])
        status = ck.mapping(raw, "status", "")
        # status.allocatable as written (extended and node allocatable resources read it for each node).
        self.allocatable: Any = status.get("allocatable")
        declared = ck.string_list(status, "declaredFeatures", "status.")
        self.declared_features = frozenset(declared) if declared else _NOTHING_DECLARED
        self.verdict_key = (self.labels_key, tuple(sorted(self.declared_features)))

    @classmethod
    def from_api(cls, raw: dict[str, Any]) -> Node:
        return cls(raw)

    def declares(self, feature: str) -> bool:
        return feature in self.declared_features

    @classmethod
    def named(
        cls, name: str, labels: Mapping[str, str] | None = None, declared_features: tuple[str, ...] = ()
    ) -> Node:
        raw: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": dict(labels or {})},
        }
        if declared_features:
            raw["status"] = {"declaredFeatures": list(declared_features)}
        return cls(raw)


class DeviceTaintRule:
    __slots__ = ("name", "raw", "selector", "taint", "uid")

    def __init__(self, raw: dict[str, Any]) -> None:
        ck, meta = _metadata(raw, "DeviceTaintRule")
        self.raw = raw
        self.name: str = meta["name"]
        self.uid: str = meta.get("uid") or ""
        spec = ck.mapping(raw, "spec", "", required=True)
        selector = spec.get("deviceSelector")
        self.selector: tuple[str, str, str] | None = None
        if selector is not None:
            if not isinstance(selector, dict):
                raise ck.fail("spec.deviceSelector", "must be an object")
            where = "spec.deviceSelector."
            self.selector = (
                ck.string(selector, "driver", where),
                ck.string(selector, "pool", where),
                ck.string(selector, "device", where),
            )
        if spec.get("taint") is None:
            raise ck.fail("spec.taint", "required field is missing")
        self.taint = _parse_taint(ck, spec["taint"], "spec.taint")

    @classmethod
    def from_api(cls, raw: dict[str, Any]) -> DeviceTaintRule:
        return cls(raw)

    def matches(self, driver: str, pool: str, device: str) -> bool:
        """Set selector fields must be equal; a rule without a selector matches nothing."""
        if self.selector is None:
            return False
        want_driver, want_pool, want_device = self.selector
        return (
            (not want_driver or want_driver == driver)
            and (not want_pool or want_pool == pool)
            and (not want_device or want_device == device)
        )


_KINDS: dict[str, type] = {
    "DeviceClass": DeviceClass,
    "ResourceSlice": ResourceSlice,
    "ResourceClaim": ResourceClaim,
    "Node": Node,
    "DeviceTaintRule": DeviceTaintRule,
}


def parse_object(
    raw: dict[str, Any],
) -> DeviceClass | ResourceSlice | ResourceClaim | Node | DeviceTaintRule | None:
    """Parse one API object of a kind the allocator uses; None for every other kind."""
    if not isinstance(raw, dict):
        raise InvalidObjectError("object", "", "", f"must be an object, got {type(raw).__name__}")
    kind = raw.get("kind")
    cls = _KINDS.get(kind) if isinstance(kind, str) else None
    return cls(raw) if cls is not None else None


def claim_ref(claim: ResourceClaim) -> str:
    """Like klog.KObj: namespace/name, or just the name without a namespace."""
    return f"{claim.namespace}/{claim.name}" if claim.namespace else claim.name
