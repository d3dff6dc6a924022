"""`dra-extender allocate`: allocate claims for one node from objects in files, as the scheduler would.

ResourceClaims in the input that already have status.allocation count as the allocated state. Exit
status: 0 the claims fit (their AllocationResults are printed), 1 they do not fit on the node (the
reasons are printed), 2 a hard error (bad input, CEL error, ...).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import orjson
import yaml

from allocator import (
    AllocatedState,
    AllocationError,
    Allocator,
    FeatureGates,
    Inventory,
    NodeAllocationError,
    Reason,
)
from allocator.outcome import AllocationOutcome
from extender.objects_io import ObjectLoadError, Snapshot, load_snapshot

EXIT_FITS = 0
EXIT_UNSCHEDULABLE = 1
EXIT_ERROR = 2


class UsageError(ValueError):
    """The command line names something that is not in the input."""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "allocate",
        help="allocate ResourceClaims for a node from objects in YAML/JSON files",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "-f",
        "--filename",
        dest="files",
        action="append",
        required=True,
        metavar="FILE",
        help="YAML/JSON file or directory of objects (repeatable; '-' reads stdin)",
    )
    parser.add_argument("--node", required=True, metavar="NAME", help="the Node to allocate for")
    parser.add_argument(
        "--claim",
        dest="claims",
        action="append",
        required=True,
        metavar="NS/NAME",
        help="a ResourceClaim to allocate (repeatable; allocated together, in this order)",
    )
    parser.add_argument(
        "--feature-gates",
        default="",
        metavar="NAME=true|false,...",
        help="override the Kubernetes 1.37 feature-gate defaults",
    )
    parser.add_argument("-o", "--output", choices=("json", "yaml", "text"), default="text")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        code, document = allocate(args.files, args.node, args.claims, args.feature_gates)
    except (ObjectLoadError, UsageError, ValueError, AllocationError) as exc:
        code, document = EXIT_ERROR, {"error": str(exc)}
    write(document, args.output)
    return code


def allocate(
    files: list[str], node_name: str, claim_keys: list[str], gates_text: str
) -> tuple[int, dict[str, Any]]:
    """The exit code and the document to print. Hard errors are raised."""
    gates = FeatureGates.parse(gates_text)
    snapshot = load_snapshot(files)
    node = snapshot.node(node_name)
    if node is None:
        raise UsageError(f"node {node_name!r} is not among the objects")
    claims = [_claim_to_allocate(snapshot, key) for key in claim_keys]

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
        return EXIT_UNSCHEDULABLE, _unschedulable(node_name, reasons, str(exc))
    if not outcome.success:
        return EXIT_UNSCHEDULABLE, _unschedulable(node_name, outcome.reasons, outcome.summary())
    return EXIT_FITS, {
        "node": node_name,
        "claims": [
            {"namespace": claim.namespace, "name": claim.name, "allocation": allocation}
            for claim, allocation in zip(claims, outcome.allocations, strict=True)
        ],
    }


def _claim_to_allocate(snapshot: Snapshot, key: str) -> Any:
    namespace, sep, name = key.partition("/")
    if not sep or not namespace or not name or "/" in name:
        raise UsageError(f"--claim {key!r}: expected NAMESPACE/NAME")
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


def write(document: dict[str, Any], output: str) -> None:
    if output == "json":
        sys.stdout.write(orjson.dumps(document, option=orjson.OPT_INDENT_2).decode() + "\n")
    elif output == "yaml":
        sys.stdout.write(yaml.safe_dump(document, sort_keys=False))
    elif "error" in document:
        print(f"error: {document['error']}", file=sys.stderr)
    else:
        sys.stdout.write(render_text(document))


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
