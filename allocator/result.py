"""Build the AllocationResult dict of one claim, in the shape the API serializes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from allocator.errors import AllocationError
from allocator.model import ResourceClaim
from allocator.requestdata import Chosen, RequestData


def device_result(chosen: Chosen, *, binding_and_status: bool, skipped_operations: bool) -> dict[str, Any]:
    entry, rd = chosen.entry, chosen.request
    result: dict[str, Any] = {
        "request": rd.full_name,
        "driver": entry.key[0],
        "pool": entry.key[1],
        "device": entry.key[2],
    }
    if rd.admin:
        result["adminAccess"] = True
    if rd.tolerations:
        result["tolerations"] = [dict(t) for t in rd.tolerations]
    if binding_and_status:
        device = entry.device
        if device.binding_conditions:
            result["bindingConditions"] = list(device.binding_conditions)
        if device.binding_failure_conditions:
            result["bindingFailureConditions"] = list(device.binding_failure_conditions)
    if chosen.share_id is not None:
        result["shareID"] = chosen.share_id
    if chosen.consumed:
        result["consumedCapacity"] = {name: str(value) for name, value in chosen.consumed.items()}
    if skipped_operations and entry.slice.skip_node_operations:  # from the slice, for the kubelet
        result["skipNodeOperations"] = list(entry.slice.skip_node_operations)
    return result


def _configs(claim: ResourceClaim, selected: Sequence[RequestData]) -> list[dict[str, Any]]:
    """Class configs first (each class once, listing the requests using it), then claim configs."""
    configs: list[dict[str, Any]] = []
    class_ranges: dict[str, tuple[int, int]] = {}
    for rd in selected:
        existing = class_ranges.get(rd.device_class.name)
        if existing is not None:
            for i in range(*existing):
                configs[i]["requests"].append(rd.full_name)
            continue
        start = len(configs)
        for cfg in rd.device_class.config:
            configs.append({"source": "FromClass", "requests": [rd.full_name], **_without_requests(cfg)})
        class_ranges[rd.device_class.name] = (start, len(configs))
    # A request counts under its own name and, for firstAvailable, under "request/chosen-subrequest".
    names_of = [{request.name, rd.full_name} for request, rd in zip(claim.requests, selected, strict=True)]
    for cfg in claim.config:
        names = cfg.get("requests") or []
        body = _without_requests(cfg)
        if not names:
            configs.append({"source": "FromClaim", **body})
        elif any(not request_names.isdisjoint(names) for request_names in names_of):
            configs.append({"source": "FromClaim", "requests": list(names), **body})
    # Since 1.37 a config that names every request of the claim names none ("applies to all").
    for cfg in configs:
        requests = cfg.get("requests")
        if requests and all(not request_names.isdisjoint(requests) for request_names in names_of):
            del cfg["requests"]
    return configs


def _without_requests(cfg: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in cfg.items() if k not in ("requests", "source")}


def _merge_requirements(new: Sequence[dict[str, Any]], into: list[dict[str, Any]]) -> None:
    for req in new:
        signature = (req.get("key"), req.get("operator"), frozenset(req.get("values") or ()))
        if not any(
            (r.get("key"), r.get("operator"), frozenset(r.get("values") or ())) == signature for r in into
        ):
            into.append(req)


def node_selector(chosen: Sequence[Chosen], node_name: str) -> dict[str, Any] | None:
    """Pin to the node if any device is node-local or binds to the node; else merge slice selectors."""
    expressions: list[dict[str, Any]] = []
    fields: list[dict[str, Any]] = []
    for item in chosen:
        slice_, device = item.entry.slice, item.entry.device
        if slice_.per_device_node_selection:
            local, selector = device.node_name, device.node_selector
        else:
            local, selector = slice_.node_name, slice_.node_selector
        if local or device.binds_to_node:
            return {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}
                ]
            }
        if selector is None:
            continue
        terms = selector.get("nodeSelectorTerms") or []
        if len(terms) > 1:
            raise AllocationError(f"unsupported ResourceSlice.NodeSelector with {len(terms)} terms")
        if terms:
            _merge_requirements(terms[0].get("matchFields") or [], fields)
            _merge_requirements(terms[0].get("matchExpressions") or [], expressions)
    if not expressions and not fields:
        return None
    term: dict[str, Any] = {}
    if expressions:
        term["matchExpressions"] = expressions
    if fields:
        term["matchFields"] = fields
    return {"nodeSelectorTerms": [term]}


def build_allocation(
    claim: ResourceClaim,
    chosen: Sequence[Chosen],
    selected: Sequence[RequestData],
    node_name: str,
    *,
    binding_and_status: bool,
    skipped_operations: bool,
) -> dict[str, Any]:
    devices: dict[str, Any] = {
        "results": [
            device_result(c, binding_and_status=binding_and_status, skipped_operations=skipped_operations)
            for c in chosen
        ]
    }
    configs = _configs(claim, selected)
    if configs:
        devices["config"] = configs
    allocation: dict[str, Any] = {"devices": devices}
    try:
        selector = node_selector(chosen, node_name)
    except AllocationError as exc:
        raise AllocationError(f"create NodeSelector for claim {claim.name}: {exc}") from None
    if selector is not None:
        allocation["nodeSelector"] = selector
    return allocation
