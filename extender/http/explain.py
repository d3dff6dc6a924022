"""Why a pod fits a node or not: per node, per claim and request, how many devices were candidates and
which step rejected the rest. Shared by GET /debug/explain and `dra-extender explain`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from allocator import Rejection
from common.claimrefs import pod_key
from extender.plugin.planning import PodPlan, SchedulingError
from extender.plugin.scheduling import Scheduler
from extender.plugin.verdicts import NodeVerdict


class ExplainError(LookupError):
    """The pod or node asked about does not exist in the cache."""


def _device_id(result: dict[str, Any]) -> str:
    return f"{result.get('driver')}/{result.get('pool')}/{result.get('device')}"


def _devices(verdict: NodeVerdict, claim_names: list[str]) -> list[dict[str, Any]]:
    if verdict.outcome is None or not verdict.fits:
        return []
    chosen = []
    for claim_name, allocation in zip(claim_names, verdict.outcome.allocations, strict=False):
        results = (allocation.get("devices") or {}).get("results") or []
        chosen.append(
            {
                "claim": claim_name,
                "devices": [{"request": r.get("request"), "device": _device_id(r)} for r in results],
            }
        )
    return chosen


def _node_report(verdict: NodeVerdict, claim_names: list[str]) -> dict[str, Any]:
    reasons = [reason.to_dict() for reason in verdict.outcome.reasons] if verdict.outcome is not None else []
    return {
        "node": verdict.node,
        "fits": verdict.fits,
        "unresolvable": verdict.unresolvable if not verdict.fits else False,
        "message": verdict.message,
        "requests": reasons,
        "allocation": _devices(verdict, claim_names),
    }


async def explain_pod(
    scheduler: Scheduler,
    namespace: str,
    name: str,
    nodes: Iterable[str] | None = None,
    *,
    driver_lost: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The explanation as a JSON-ready dict. Raises ExplainError for an unknown pod or node.

    Nodes are checked like filter's (yielding to other requests every few ms, so explaining a pod on
    hundreds of nodes does not stall filter and bind) but always computed afresh, never from the
    filter cache.

    `driver_lost`: pools whose driver vanished while claims hold devices (from the driver-loss
    controller); their devices are never offered, which explains missing candidates."""
    pod = scheduler.cache.pod(namespace, name)
    if pod is None:
        raise ExplainError(f"pod {namespace}/{name} not found")
    node_names = list(nodes) if nodes is not None else list(scheduler.cache.node_names())
    for node in node_names:
        if scheduler.cache.node(node) is None:
            raise ExplainError(f"node {node} not found")
    report: dict[str, Any] = {"pod": pod_key(pod), "claims": [], "error": "", "nodes": []}
    if driver_lost:
        report["driverLost"] = driver_lost
    try:
        plan = scheduler.planner.plan(pod)
        group = plan.group
        for entry in plan.claims:
            claim = entry.claim
            report["claims"].append(
                {
                    "podClaimName": entry.pod_claim_name,
                    "claim": claim.key,
                    "allocated": claim.allocation is not None,
                    "reservedFor": len(claim.reserved_uids),
                }
            )
            if group is not None and entry.pod_claim_name in group.pod_claim_names:
                report["claims"][-1]["sharedBy"] = {
                    "podGroup": group.key,
                    "pods": len(scheduler.cache.pods_in_group(group.namespace, group.name)),
                }
        if plan.bindings:
            report["bindingConditions"] = [binding.to_dict() for binding in plan.bindings]
        if plan.blocked is not None:
            report["blocked"] = plan.blocked.message
        variant = plan.extended_variant
        if variant is not None and plan.extended is not None:
            classes = plan.extended.classes
            report["extendedResources"] = [
                {"container": m["containerName"], "resource": m["resourceName"], "request": m["requestName"],
                 "deviceClass": classes[m["resourceName"]]}
                for m in variant.mappings
            ]
        to_allocate = [claim.key for claim in plan.to_allocate]
        checked = await scheduler.checker.check_all(plan, node_names, use_cache=False)
        verdicts = [checked[node] for node in node_names]
    except SchedulingError as error:
        report["error"] = str(error)
        return report
    report["nodes"] = [_node_report(verdict, to_allocate) for verdict in verdicts]
    for entry, verdict in zip(report["nodes"], verdicts, strict=True):
        statuses = _node_allocatable(scheduler, plan, verdict)
        if statuses:
            entry["nodeAllocatable"] = statuses
    if variant is not None:
        for node in report["nodes"]:
            node["message"] = variant.describe(node["message"])
    report["fittingNodes"] = sum(1 for verdict in verdicts if verdict.fits)
    return report


def _rejections(request: dict[str, Any]) -> str:
    parts = []
    for step, count in request.get("rejected", {}).items():
        if not count:
            continue
        text = f"{step} {count}"
        if step == Rejection.IN_USE and request.get("inUseBy"):
            owners = ", ".join(f"{owner}: {n}" for owner, n in sorted(request["inUseBy"].items()))
            text += f" ({owners})"
        parts.append(text)
    return "; ".join(parts) or "none"


def _node_allocatable(scheduler: Scheduler, plan: PodPlan, verdict: NodeVerdict) -> list[dict[str, Any]]:
    """With DRANodeAllocatableResources, what the devices the pod gets on a fitting node add to its
    requests (the pod status bind would write)."""
    node = scheduler.cache.node(verdict.node)
    if not verdict.fits or node is None or scheduler.checker.node_usage is None:
        return []
    try:
        found = scheduler.checker.node_fit(scheduler.planner.on(plan, verdict.node), node, verdict)
    except SchedulingError:
        return []
    return found.statuses if found is not None else []


OVERHEAD_PARTS = (("perPod", "per pod"), ("perContainer", "per container"))


def _footprint(status: dict[str, Any]) -> str:
    parts = [f"{entry['name']} {entry['quantity']}" for entry in status.get("mapping", [])]
    for entry in status.get("overhead", []):
        overhead = [f"{entry[key]} {label}" for key, label in OVERHEAD_PARTS if key in entry]
        parts.append(f"{entry['name']} overhead {' + '.join(overhead)}")
    containers = ", ".join(status.get("containers", [])) or "none"
    return f"{'; '.join(parts)} (containers: {containers})"


def render_text(report: dict[str, Any]) -> str:
    lines = []
    total = len(report["nodes"])
    if report["error"]:
        lines.append(f"pod {report['pod']}: error: {report['error']}")
    else:
        lines.append(f"pod {report['pod']}: fits {report.get('fittingNodes', 0)} of {total} node(s)")
    if report.get("blocked"):
        lines.append(f"  blocked on every node: {report['blocked']}")
    for claim in report["claims"]:
        state = "allocated" if claim["allocated"] else "to allocate"
        shared = claim.get("sharedBy")
        if shared:
            state += f", claim shared by PodGroup {shared['podGroup']}, {shared['pods']} pods"
        lines.append(f"  claim {claim['podClaimName']} -> {claim['claim']} ({state})")
    for binding in report.get("bindingConditions", []):
        lines.append(f"  {binding['message']}")
    for entry in report.get("extendedResources", []):
        lines.append(f"  extended resource {entry['resource']} of container {entry['container']} -> request "
                     f"{entry['request']} (device class {entry['deviceClass']})")
    for pool in report.get("driverLost", []):
        left = "grace period over" if pool.get("expired") else f"{pool.get('seconds_left', 0):.0f}s left"
        lines.append(
            f"  driver lost: pool {pool.get('driver')}/{pool.get('pool')}: {len(pool.get('devices') or [])} "
            f"device(s) still held by {', '.join(pool.get('claims') or [])} ({left})"
        )
    for node in report["nodes"]:
        if node["fits"]:
            lines.append(f"{node['node']}: fits")
            for claim in node["allocation"]:
                for device in claim["devices"]:
                    lines.append(f"  claim {claim['claim']}, request {device['request']}: {device['device']}")
            for status in node.get("nodeAllocatable", []):
                lines.append(f"  node allocatable resources of claim {status['resourceClaimName']}: "
                             f"{_footprint(status)}")
            continue
        kind = "unresolvable" if node["unresolvable"] else "unschedulable"
        lines.append(f"{node['node']}: does not fit ({kind}): {node['message']}")
        for request in node["requests"]:
            name = request.get("request", "")
            if request.get("subrequest"):
                name += f"/{request['subrequest']}"
            lines.append(
                f"  claim {request.get('claim')}, request {name}: needs {request.get('needed')}, "
                f"{request.get('considered')} candidate(s); rejected: {_rejections(request)}"
            )
    return "\n".join(lines) + "\n"
