"""`dra-extender explain [NAMESPACE/]NAME`: why a pod fits each node or not, from a snapshot or a cluster.

The same report as GET /debug/explain, computed locally: per node, fits or not; per claim and
request, how many devices were candidates and which step rejected the rest.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from extender.commands import output
from extender.flags import add_source_arguments, source_options
from extender.http.names import split_ref
from extender.options import OptionsError, SourceOptions
from extender.wiring import build_scheduler, open_cluster

SYNC_TIMEOUT_S = 60.0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "explain",
        help="explain why a pod fits each node or not",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=output.examples(
            "dra-extender explain a100-job --snapshot examples/cluster",
            "dra-extender explain my-pod -n team-a --context prod -o yaml",
            "kubectl dra explain team-a/my-pod --node node-7 -o json",
        ) + "\n  (0: fits at least one node, 1: fits none or cannot be scheduled yet, "
        "2: pod/node not found or cluster unreadable)",
    )
    parser.add_argument("pod", metavar="[NAMESPACE/]NAME", help="the pod to explain")
    output.add_namespace_argument(parser, "pod")
    parser.add_argument(
        "--node", action="append", default=None, help="only this node (repeatable); default: every node"
    )
    output.add_output_argument(parser)
    add_source_arguments(parser)
    output.add_logging_arguments(parser, default_level="warning")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    output.configure_logging(args.log_level, args.log_format)
    try:
        namespace, name = split_ref(args.pod, args.namespace)
    except ValueError as error:
        return output.error(f"pod: {error}")
    try:
        source = source_options(args)
    except OptionsError as error:
        return output.error(str(error))
    return asyncio.run(_explain(args, source, namespace, name))


async def _explain(args: argparse.Namespace, source: SourceOptions, namespace: str, name: str) -> int:
    from extender.http.explain import ExplainError, explain_pod, render_text

    try:
        cluster = await open_cluster(source, wait_ready_s=SYNC_TIMEOUT_S)
    except Exception as error:
        return output.error(f"cannot read the cluster: {error}")
    try:
        # explain has no scheduling flags: it checks nodes as serve does with its defaults.
        report = await explain_pod(build_scheduler(cluster), namespace, name, args.node)
    except ExplainError as error:
        return output.error(str(error))
    finally:
        await cluster.close()
    output.write(report, args.output, render_text)
    # A pod that cannot be scheduled yet (a claim missing, ...) is a finding, like one that fits nowhere.
    return output.EXIT_OK if report.get("fittingNodes") and not report["error"] else output.EXIT_PROBLEMS
