"""Small builders for raw resource.k8s.io/v1 API dicts, so each ported case stays a few lines.

Every builder returns plain dicts exactly as the API server would serialize them (camelCase keys,
quantities as strings, absent fields left out), because the allocator consumes raw API objects.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]

DRIVER_A = "driver-a"
DRIVER_B = "driver-b"
CLASS_A = "class-a"
CLASS_B = "class-b"
NODE_1 = "node-1"
NODE_2 = "node-2"
REGION_1 = "region-1"
REGION_2 = "region-2"
ALL_NODES = "<all nodes>"
PER_DEVICE = "<per-device node selection>"


@dataclass(frozen=True)
class Case:
    """One behaviour of upstream's allocator table, in our own terms.

    Exactly one outcome is expected: `expect` (allocation results, one per claim, compared
    order-insensitively across claims), `error` (substring of the hard error), or neither, which
    means "does not fit on this node". `error_field` accepts an InvalidObjectError naming that field
    instead, for input our object model rejects at parse time. `node_error` is upstream's node-local
    error: either a hard error containing the text or an unschedulable outcome.
    """

    name: str
    claims: list[Obj] = field(default_factory=list)
    classes: list[Obj] = field(default_factory=list)
    slices: list[Obj] = field(default_factory=list)
    node: Obj | None = None
    features: frozenset[str] = frozenset()
    allocated: list[tuple[str, str, str]] = field(default_factory=list)
    allocated_claims: list[Obj] = field(default_factory=list)
    expect: list[Obj] | None = None
    error: str | None = None
    error_field: str | None = None
    node_error: str | None = None
    steps: int | None = None
    # Upstream's expected outcome differs because of a known upstream bug; the issue is named here.
    fixes_upstream_bug: str | None = None


# Features, by upstream's names (all off unless listed, like upstream's zero-value Features).
ADMIN = "AdminAccess"
PRIORITIZED = "PrioritizedList"
PARTITIONABLE = "PartitionableDevices"
TAINTS = "DeviceTaints"
CAPACITY = "ConsumableCapacity"
BINDING = "DeviceBindingAndStatus"
LIST_ATTRS = "ListTypeAttributes"
FRACTIONAL = "FractionalCapacityRange"
DERIVED = "DerivedAttributes"
NODE_OPERATIONS = "OptionalNodeOperations"
COMPATIBILITY = "CompatibilityGroups"


def features(*names: str) -> frozenset[str]:
    return frozenset(names)


# --- nodes and node selectors -------------------------------------------------------------------


def node(name: str = NODE_1, region: str = REGION_1, *declared_features: str) -> Obj:
    obj: Obj = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": f"uid-{name}", "labels": {"region": region, "planet": "earth"}},
    }
    if declared_features:
        obj["status"] = {"declaredFeatures": list(declared_features)}
    return obj


def label_selector(key: str, *values: str) -> Obj:
    return {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": key, "operator": "In", "values": list(values)}]}]
    }


def local(node_name: str = NODE_1) -> Obj:
    """The node selector the allocator writes for node-local devices."""
    return {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}
        ]
    }


# --- device classes -----------------------------------------------------------------------------


def cel(expression: str) -> Obj:
    return {"cel": {"expression": expression}}


def driver_is(driver: str) -> Obj:
    return cel(f'device.driver == "{driver}"')


def memory_at_least(quantity: str, driver: str = DRIVER_A) -> Obj:
    return cel(f'device.capacity["{driver}"].memory.compareTo(quantity("{quantity}")) >= 0')


def opaque(driver: str, attribute: str) -> Obj:
    return {"opaque": {"driver": driver, "parameters": {attribute: attribute + "Value"}}}


def device_class(
    name: str = CLASS_A,
    driver: str = DRIVER_A,
    *,
    config: str | None = None,
    selector: Obj | None = None,
) -> Obj:
    spec: Obj = {"selectors": [selector or driver_is(driver)]}
    if config is not None:
        spec["config"] = [opaque(driver, config)]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name, "uid": f"uid-class-{name}"},
        "spec": spec,
    }


def class_allowing_multiple(name: str, driver: str, multiple: bool) -> Obj:
    flag = "true" if multiple else "false"
    return device_class(
        name,
        driver,
        selector=cel(f'device.driver == "{driver}" && device.allowMultipleAllocations == {flag}'),
    )


# --- claims -------------------------------------------------------------------------------------


def _request_body(
    cls: str,
    count: int | None,
    mode: str | None,
    selectors: Iterable[Obj],
    tolerations: Iterable[Obj],
    capacity: Mapping[str, str] | None,
    derived: Mapping[str, str] | None = None,
) -> Obj:
    body: Obj = {"deviceClassName": cls, "allocationMode": mode or "ExactCount"}
    if derived:
        body["derivedAttributes"] = [{"name": name, "expression": expr} for name, expr in derived.items()]
    if count is not None:
        body["count"] = count
    if selectors := list(selectors):
        body["selectors"] = selectors
    if tolerations := list(tolerations):
        body["tolerations"] = tolerations
    if capacity is not None:
        body["capacity"] = {"requests": dict(capacity)}
    return body


def request(
    name: str,
    cls: str = CLASS_A,
    count: int | None = 1,
    *selectors: Obj,
    mode: str | None = None,
    admin: bool | None = None,
    tolerations: Iterable[Obj] = (),
    capacity: Mapping[str, str] | None = None,
    derived: Mapping[str, str] | None = None,
) -> Obj:
    """An `exactly` request; mode="All" asks for all matching devices (count is then omitted);
    `derived` maps derived attribute names to their CEL expressions."""
    if mode == "All":
        count = None
    exactly = _request_body(cls, count, mode, selectors, tolerations, capacity, derived)
    if admin is not None:
        exactly["adminAccess"] = admin
    return {"name": name, "exactly": exactly}


def all_devices(name: str, cls: str = CLASS_A, *selectors: Obj, **kwargs: Any) -> Obj:
    return request(name, cls, None, *selectors, mode="All", **kwargs)


def sub(
    name: str,
    cls: str = CLASS_A,
    count: int | None = 1,
    *selectors: Obj,
    mode: str | None = None,
    tolerations: Iterable[Obj] = (),
    capacity: Mapping[str, str] | None = None,
    derived: Mapping[str, str] | None = None,
) -> Obj:
    if mode == "All":
        count = None
    return {"name": name, **_request_body(cls, count, mode, selectors, tolerations, capacity, derived)}


def first_available(name: str, *subrequests: Obj) -> Obj:
    return {"name": name, "firstAvailable": list(subrequests)}


def match(attribute: str, *requests: str) -> Obj:
    constraint: Obj = {"matchAttribute": attribute}
    if requests:
        constraint["requests"] = list(requests)
    return constraint


def distinct(attribute: str, *requests: str) -> Obj:
    constraint: Obj = {"distinctAttribute": attribute}
    if requests:
        constraint["requests"] = list(requests)
    return constraint


def claim_config(driver: str, attribute: str, *requests: str) -> Obj:
    config: Obj = dict(opaque(driver, attribute))
    if requests:
        config["requests"] = list(requests)
    return config


def claim(
    name: str,
    *requests: Obj,
    constraints: Iterable[Obj] = (),
    config: Iterable[Obj] = (),
    namespace: str = "default",
) -> Obj:
    devices: Obj = {"requests": list(requests)}
    if constraints := list(constraints):
        devices["constraints"] = constraints
    if config := list(config):
        devices["config"] = config
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": devices},
    }


def simple_claim(
    name: str = "claim-0", req: str = "req-0", cls: str = CLASS_A, count: int = 1, **kw: Any
) -> Obj:
    return claim(name, request(req, cls, count), **kw)


def toleration(key: str, effect: str, *, operator: str = "Exists", value: str | None = None) -> Obj:
    tol: Obj = {"key": key, "operator": operator, "effect": effect}
    if value is not None:
        tol["value"] = value
    return tol


def taint(key: str, value: str, effect: str) -> Obj:
    return {"key": key, "value": value, "effect": effect}


# --- devices and slices -------------------------------------------------------------------------


class Version(str):
    """Marks an attribute value as a semantic version rather than a string."""


def attribute(value: Any) -> Obj:
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    if isinstance(value, Version):
        return {"version": str(value)}
    if isinstance(value, str):
        return {"string": value}
    if isinstance(value, list | tuple):
        if all(isinstance(v, bool) for v in value):
            return {"bools": list(value)}
        if all(isinstance(v, int) for v in value):
            return {"ints": list(value)}
        if all(isinstance(v, Version) for v in value):
            return {"versions": [str(v) for v in value]}
        return {"strings": [str(v) for v in value]}
    raise TypeError(f"unsupported attribute value {value!r}")


def device(
    name: str,
    *,
    capacity: Mapping[str, Any] | None = None,
    attrs: Mapping[str, Any] | None = None,
    counters: Mapping[str, Mapping[str, str]] | None = None,
    capacity_from_counters: bool = False,
    groups: Mapping[str, Iterable[str]] | None = None,
    taints: Iterable[Obj] = (),
    node_name: str | None = None,
    all_nodes: bool | None = None,
    node_selector: Obj | None = None,
    binding: list[str] | None = None,
    binding_failure: list[str] | None = None,
    binds_to_node: bool | None = None,
    multiple: bool | None = None,
) -> Obj:
    """A device; `capacity` values are quantity strings or full DeviceCapacity dicts; `groups` gives
    the compatibility groups declared for some of the counter sets in `counters`."""
    dev: Obj = {"name": name}
    if attrs:
        dev["attributes"] = {key: attribute(value) for key, value in attrs.items()}
    caps: Obj = {}
    for cap_name, value in (capacity or {}).items():
        caps[cap_name] = value if isinstance(value, dict) else {"value": value}
    if counters:
        dev["consumesCounters"] = [
            {"counterSet": counter_set, "counters": {n: {"value": v} for n, v in values.items()}}
            for counter_set, values in counters.items()
        ]
        for use in dev["consumesCounters"]:
            if groups and groups.get(use["counterSet"]):
                use["compatibilityGroups"] = list(groups[use["counterSet"]])
        if capacity_from_counters:
            for values in counters.values():
                for counter_name, value in values.items():
                    caps[counter_name] = {"value": value}
    if caps:
        dev["capacity"] = caps
    if taints := list(taints):
        dev["taints"] = taints
    if node_name is not None:
        dev["nodeName"] = node_name
    if all_nodes is not None:
        dev["allNodes"] = all_nodes
    if node_selector is not None:
        dev["nodeSelector"] = node_selector
    if binding is not None:
        dev["bindingConditions"] = binding
    if binding_failure is not None:
        dev["bindingFailureConditions"] = binding_failure
    if binds_to_node is not None:
        dev["bindsToNode"] = binds_to_node
    if multiple is not None:
        dev["allowMultipleAllocations"] = multiple
    return dev


def devices(count: int, start: int = 0) -> list[Obj]:
    return [device(f"device-{i}") for i in range(start, start + count)]


def range_policy(
    value: str, *, default: str = "2", minimum: str = "2", step: str | None = "2", maximum: str | None = "4"
) -> Obj:
    valid_range: Obj = {"min": minimum}
    if step is not None:
        valid_range["step"] = step
    if maximum is not None:
        valid_range["max"] = maximum
    return {"value": value, "requestPolicy": {"default": default, "validRange": valid_range}}


def values_policy(value: str, default: str, *more: str) -> Obj:
    return {"value": value, "requestPolicy": {"default": default, "validValues": [default, *more]}}


def resource_slice(
    name: str,
    where: str | Obj,
    pool: str,
    driver: str,
    *devs: Obj,
    count: int = 1,
    generation: int = 1,
    counter_sets: Mapping[str, Mapping[str, str]] | None = None,
    skip_node_operations: Iterable[str] = (),
) -> Obj:
    """A slice; `where` is a node name, ALL_NODES, PER_DEVICE or a node selector dict."""
    spec: Obj = {
        "driver": driver,
        "pool": {"name": pool, "generation": generation, "resourceSliceCount": count},
    }
    if isinstance(where, dict):
        spec["nodeSelector"] = where
    elif where == ALL_NODES:
        spec["allNodes"] = True
    elif where == PER_DEVICE:
        spec["perDeviceNodeSelection"] = True
    else:
        spec["nodeName"] = where
    if devs:
        spec["devices"] = list(devs)
    if counter_sets is not None:
        spec["sharedCounters"] = [
            {"name": set_name, "counters": {n: {"value": v} for n, v in values.items()}}
            for set_name, values in counter_sets.items()
        ]
    if skip := list(skip_node_operations):
        spec["skipNodeOperations"] = skip
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": spec,
    }


def one_device_slice(name: str, where: str | Obj, pool: str, driver: str, **kw: Any) -> Obj:
    return resource_slice(name, where, pool, driver, device("device-1"), **kw)


def counter_slice(
    name: str,
    where: str | Obj,
    pool: str,
    driver: str,
    counter_sets: Mapping[str, Mapping[str, str]],
    *,
    count: int = 2,
) -> Obj:
    return resource_slice(name, where, pool, driver, count=count, counter_sets=counter_sets)


# --- expected results ---------------------------------------------------------------------------

SHARE_ID = "<share-id>"


def result(
    request: str,
    driver: str,
    pool: str,
    device_name: str,
    *,
    admin: bool = False,
    tolerations: Iterable[Obj] = (),
    binding: list[str] | None = None,
    binding_failure: list[str] | None = None,
    shared: bool = False,
    consumed: Mapping[str, str] | None = None,
    skip_node_operations: Iterable[str] = (),
) -> Obj:
    res: Obj = {"request": request, "driver": driver, "pool": pool, "device": device_name}
    if admin:
        res["adminAccess"] = True
    if tolerations := list(tolerations):
        res["tolerations"] = tolerations
    if binding:
        res["bindingConditions"] = binding
    if binding_failure:
        res["bindingFailureConditions"] = binding_failure
    if shared:
        res["shareID"] = SHARE_ID
    if consumed is not None:
        res["consumedCapacity"] = dict(consumed)
    if skip := list(skip_node_operations):
        res["skipNodeOperations"] = skip
    return res


def config_entry(source: str, driver: str, attribute: str, *requests: str) -> Obj:
    entry: Obj = {"source": source, **opaque(driver, attribute)}
    if requests:
        entry["requests"] = list(requests)
    return entry


def from_class(driver: str, attribute: str, *requests: str) -> Obj:
    return config_entry("FromClass", driver, attribute, *requests)


def from_claim(driver: str, attribute: str, *requests: str) -> Obj:
    return config_entry("FromClaim", driver, attribute, *requests)


def allocation(node_selector: Obj | None, *results: Obj, config: Iterable[Obj] = ()) -> Obj:
    devices_result: Obj = {"results": list(results)}
    if config := list(config):
        devices_result["config"] = config
    out: Obj = {"devices": devices_result}
    if node_selector is not None:
        out["nodeSelector"] = node_selector
    return out


def results(request_name: str, driver: str, pool: str, count: int, start: int = 0) -> list[Obj]:
    return [result(request_name, driver, pool, f"device-{i}") for i in range(start, start + count)]
