"""Raw API dict builders for the allocator's own unit tests (kept tiny; one line per object)."""

from __future__ import annotations

from typing import Any

from allocator import (
    AllocatedState,
    AllocationOutcome,
    Allocator,
    DeviceClass,
    DeviceTaintRule,
    FeatureGates,
    Inventory,
    Node,
    ResourceClaim,
    ResourceSlice,
)

Obj = dict[str, Any]
DRIVER = "gpu.example.com"


def dev(name: str, **fields: Any) -> Obj:
    """A device; ``attrs`` takes {"name": value} and wraps values by Python type."""
    attrs = fields.pop("attrs", {})
    device: Obj = {"name": name, **fields}
    if attrs:
        device["attributes"] = {key: _attr(value) for key, value in attrs.items()}
    return device


def _attr(value: Any) -> Obj:
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    if isinstance(value, list):
        kind = "bools" if isinstance(value[0], bool) else "ints" if isinstance(value[0], int) else "strings"
        return {kind: value}
    return {"string": value}


def slice_obj(
    name: str,
    devices: list[Obj],
    *,
    node: str | None = "node-1",
    pool: str | None = None,
    driver: str = DRIVER,
    generation: int = 1,
    count: int = 1,
    **spec: Any,
) -> Obj:
    body: Obj = {
        "driver": driver,
        "pool": {"name": pool or node or name, "generation": generation, "resourceSliceCount": count},
        **spec,
    }
    if node and not ({"allNodes", "nodeSelector", "perDeviceNodeSelection"} & spec.keys()):
        body["nodeName"] = node
    if devices or "sharedCounters" not in spec:
        body["devices"] = devices
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": body,
    }


def class_obj(name: str = "gpu", *expressions: str, config: list[Obj] | None = None) -> Obj:
    spec: Obj = {"selectors": [{"cel": {"expression": e}} for e in expressions]}
    if config:
        spec["config"] = config
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": spec,
    }


def req(name: str, count: int = 1, cls: str = "gpu", **fields: Any) -> Obj:
    exactly: Obj = {"deviceClassName": cls, **fields}
    if exactly.get("allocationMode") != "All":
        exactly.setdefault("count", count)
    return {"name": name, "exactly": exactly}


def first_available(name: str, *subs: Obj) -> Obj:
    return {"name": name, "firstAvailable": [{"name": s["name"], **s["exactly"]} for s in subs]}


def claim_obj(
    name: str, *requests: Obj, constraints: list[Obj] | None = None, config: list[Obj] | None = None
) -> Obj:
    devices: Obj = {"requests": list(requests)}
    if constraints:
        devices["constraints"] = constraints
    if config:
        devices["config"] = config
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"devices": devices},
    }


def allocated_claim(name: str, *devices: tuple[str, str, str], admin: bool = False) -> ResourceClaim:
    raw = claim_obj(name, req("r"))
    results = [{"request": "r", "driver": d, "pool": p, "device": n} for d, p, n in devices]
    if admin:
        for result in results:
            result["adminAccess"] = True
    raw["status"] = {"allocation": {"devices": {"results": results}}}
    return ResourceClaim.from_api(raw)


def inventory(
    slices: list[Obj], classes: list[Obj] | None = None, rules: list[Obj] | None = None
) -> Inventory:
    inv = Inventory()
    for raw in classes if classes is not None else [class_obj()]:
        inv.upsert_class(DeviceClass.from_api(raw))
    for raw in slices:
        inv.upsert_slice(ResourceSlice.from_api(raw))
    for raw in rules or []:
        inv.upsert_taint_rule(DeviceTaintRule.from_api(raw))
    return inv


def allocate(
    inv: Inventory,
    *claims: Obj,
    node: Node | None = None,
    state: AllocatedState | None = None,
    gates: dict[str, bool] | None = None,
    **options: Any,
) -> AllocationOutcome:
    allocator = Allocator(inv, state or AllocatedState(), FeatureGates(gates or {}), **options)
    return allocator.allocate(node or Node.named("node-1"), [ResourceClaim.from_api(c) for c in claims])


def picked(outcome: AllocationOutcome, claim_index: int = 0) -> list[str]:
    """The chosen devices of one claim as "request=device"."""
    return [f"{r['request']}={r['device']}" for r in outcome.allocations[claim_index]["devices"]["results"]]
