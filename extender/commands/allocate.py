"""`dra-extender allocate`: allocate claims for one node from objects in files, as the scheduler would.

ResourceClaims in the input that already have status.allocation count as the allocated state. Exit
status: 0 the claims fit (their AllocationResults are printed), 1 they do not fit on the node (the
reasons are printed), 2 a hard error (bad input, CEL error, ...).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from allocator import (
    AllocatedState,
    AllocationError,
    AllocationOutcome,
    Allocator,
    FeatureGates,
    Inventory,
    NodeAllocationError,
    Reason,
)
from extender.commands import output
from extender.flags import add_feature_gates_argument, add_snapshot_argument
from extender.http.names import split_ref
from extender.kube.objects_io import ObjectLoadError, Snapshot, load_snapshot


class UsageError(ValueError):
    """The command line names something that is not in the input."""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "allocate",
        help="allocate ResourceClaims for a node from objects in YAML/JSON files",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=output.examples(
            "dra-extender allocate --snapshot examples/cluster --node node-1 --claim a100-80gb",
            "dra-extender allocate --snapshot snap/ -f my-claims.yaml --node n3 --claim team-a/big -o yaml",
            "kubectl get resourceslices,deviceclasses,resourceclaims -A -o yaml | "
            "dra-extender allocate -f - --node n1 --claim x -n team-a",
        ),
    )
    add_snapshot_argument(parser)
    parser.add_argument(
        "-f",
        "--filename",
        dest="files",
        action="append",
        default=[],
        metavar="FILE",
        help="YAML/JSON file or directory of more objects, such as the claims (repeatable; '-' reads "
        "stdin); read together with --snapshot",
    )
    parser.add_argument("--node", required=True, metavar="NAME", help="the Node to allocate for")
    parser.add_argument(
        "--claim",
        dest="claims",
        action="append",
        required=True,
        metavar="[NAMESPACE/]NAME",
        help="a ResourceClaim to allocate (repeatable; allocated together, in this order)",
    )
    output.add_namespace_argument(parser, "claim", default="default")
    add_feature_gates_argument(parser)
    output.add_output_argument(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    files = [*([args.snapshot] if args.snapshot else []), *args.files]
    if not files:
        return output.error("name the objects with --snapshot DIR and/or -f FILE")
    try:
        code, document = allocate(files, args.node, args.claims, args.feature_gates, args.namespace)
    except (ObjectLoadError, UsageError, ValueError, AllocationError) as exc:
        code, document = output.EXIT_ERROR, {"error": str(exc)}
    write(document, args.output)
    return code


def allocate(
    files: list[str], node_name: str, claim_keys: list[str], gates_text: str, namespace: str | None = None
) -> tuple[int, dict[str, Any]]:
    """The exit code and the document to print. Hard errors are raised."""
    gates = FeatureGates.parse(gates_text)
    snapshot = load_snapshot(files)
    node = snapshot.node(node_name)
    if node is None:
        raise UsageError(f"node {node_name!r} is not among the objects")
    claims = [_claim_to_allocate(snapshot, key, namespace) for key in claim_keys]

    inventory = Inventory()
    for device_class in snapshot.classes:
        inventory.upsert_class(device_class)
    for rule in snapshot.taint_rules:
        inventory.upsert_taint_rule(rule)
    for resource_slice in snapshot.slices:
        inventory.upsert_slice(resource_slice)
    allocated = AllocatedState()
    for claim in snapshot.claims:
        if claim.allocation is not None:
            allocated.add_claim(claim)

    try:
        outcome = Allocator(inventory, allocated, gates).allocate(node, claims)
    except NodeAllocationError as exc:
        # Upstream treats this as "does not fit on this node", not as an error for the pod.
        reasons = exc.outcome.reasons if isinstance(exc.outcome, AllocationOutcome) else []
        return output.EXIT_PROBLEMS, _unschedulable(node_name, reasons, str(exc))
    if not outcome.success:
        return output.EXIT_PROBLEMS, _unschedulable(node_name, outcome.reasons, outcome.summary())
    return output.EXIT_OK, {
        "node": node_name,
        "claims": [
            {"namespace": claim.namespace, "name": claim.name, "allocation": allocation}
            for claim, allocation in zip(claims, outcome.allocations, strict=True)
        ],
    }


def _claim_to_allocate(snapshot: Snapshot, ref: str, namespace: str | None) -> Any:
    try:
        key = "/".join(split_ref(ref, namespace))
    except ValueError as error:
        raise UsageError(f"--claim: {error}") from None
    claim = snapshot.claim(key)
    if claim is None:
        raise UsageError(f"ResourceClaim {key} is not among the objects")
    if claim.allocation is not None:
        raise UsageError(f"ResourceClaim {key} is already allocated (status.allocation is set)")
    return claim


def _unschedulable(node_name: str, reasons: list[Reason], summary: str) -> dict[str, Any]:
    return {
        "node": node_name,
        "unschedulable": True,
        "reasons": [reason.to_dict() for reason in reasons] or [{"message": summary}],
    }


def write(document: dict[str, Any], form: str) -> None:
    if form == "text" and "error" in document:
        print(f"error: {document['error']}", file=sys.stderr)
    else:
        output.write(document, form, render_text)


def render_text(document: dict[str, Any]) -> str:
    """A short table: claim, request, chosen devices; or, when nothing fits, one line per reason."""
    if document.get("unschedulable"):
        lines = [f"claims do not fit on node {document['node']}:"]
        lines.extend(f"  {reason['message']}" for reason in document["reasons"])
        return "\n".join(lines) + "\n"
    rows = [("CLAIM", "REQUEST", "DEVICES")]
    for entry in document["claims"]:
        by_request: dict[str, list[str]] = {}
        for res in entry["allocation"]["devices"]["results"]:
            label = f"{res['driver']}/{res['pool']}/{res['device']}"
            if res.get("adminAccess"):
                label += " (admin)"
            by_request.setdefault(res["request"], []).append(label)
        for request, devices in by_request.items():
            rows.append((f"{entry['namespace']}/{entry['name']}", request, ", ".join(devices)))
    widths = [max(len(row[i]) for row in rows) for i in range(2)]
    lines = [f"{row[0]:<{widths[0]}}  {row[1]:<{widths[1]}}  {row[2]}" for row in rows]
    return f"node {document['node']}:\n" + "\n".join(lines) + "\n"
