"""`dra-extender explain NS/NAME`: why a pod fits each node or not, from a snapshot or a live cluster.

The same report as GET /debug/explain, computed locally: per node, fits or not; per claim and
request, how many devices were candidates and which step rejected the rest.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

import orjson

from extender.commands.serve import (
    add_logging_arguments,
    add_source_arguments,
    build_scheduler,
    configure_logging,
    open_cluster,
    parse_features,
)

SYNC_TIMEOUT_S = 60.0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "explain",
        help="explain why a pod fits each node or not",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("pod", metavar="NAMESPACE/NAME", help="the pod to explain")
    parser.add_argument(
        "--node", action="append", default=None, help="only this node (repeatable); default: every node"
    )
    parser.add_argument("--format", choices=("text", "json"), default="text")
    add_source_arguments(parser)
    add_logging_arguments(parser)
    parser.set_defaults(func=run, log_level="warning")


def run(args: argparse.Namespace) -> int:
    configure_logging(args.log_level, args.log_format)
    namespace, _, name = args.pod.rpartition("/")
    if not namespace or not name:
        print(f"error: pod must be NAMESPACE/NAME, got {args.pod!r}", file=sys.stderr)
        return 2
    try:
        features = parse_features(args.feature_gates)
    except ValueError as error:
        print(f"error: --feature-gates: {error}", file=sys.stderr)
        return 2
    return asyncio.run(_explain(args, features, namespace, name))


async def _explain(args: argparse.Namespace, features: Any, namespace: str, name: str) -> int:
    from extender.explain import ExplainError, explain_pod, render_text

    try:
        cluster = await open_cluster(args, features, wait_ready_s=SYNC_TIMEOUT_S)
    except Exception as error:
        print(f"error: cannot read the cluster: {error}", file=sys.stderr)
        return 1
    try:
        report = await explain_pod(build_scheduler(cluster, args), namespace, name, args.node)
    except ExplainError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    finally:
        await cluster.close()
    if args.format == "json":
        sys.stdout.write(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        sys.stdout.write(render_text(report))
    return 0
