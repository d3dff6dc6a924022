"""`dra-extender simulate -f DIR --pod FILE`: run filter and prioritize for a pod against a snapshot.

FILE holds the pod and, optionally, the claims it uses (they replace same-named objects of the
snapshot). Prints one row per node: fits or not, the prioritize score and the reason.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from allocator import FeatureGates
from common.objects import metadata_of
from extender.commands import output
from extender.flags import add_feature_gates_argument, add_scoring_argument, features_of
from extender.options import SchedulerOptions


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "simulate",
        help="filter and prioritize one pod against a snapshot",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=output.examples(
            "dra-extender simulate -f examples/cluster --pod my-pod.yaml",
            "dra-extender simulate -f snapshot.yaml --pod pod-and-claims.yaml --scoring spread -o json",
        ) + "\n  (0: fits at least one node, 1: fits none, 2: bad input)",
    )
    parser.add_argument(
        "-f",
        "--snapshot",
        metavar="DIR",
        required=True,
        help="snapshot directory or file (YAML/JSON, e.g. from GET /debug/snapshot)",
    )
    parser.add_argument("--pod", metavar="FILE", required=True, help="the pod (and optionally its claims)")
    parser.add_argument("--node", action="append", default=None, help="only this node (repeatable)")
    add_scoring_argument(parser)
    add_feature_gates_argument(parser)
    output.add_output_argument(parser)
    output.add_logging_arguments(parser, default_level="warning")
    parser.set_defaults(func=run)


def _key(raw: dict) -> tuple[str, str, str]:
    meta = metadata_of(raw)
    return raw.get("kind", ""), meta.get("namespace") or "default", meta.get("name", "")


def run(args: argparse.Namespace) -> int:
    from extender.kube.objects_io import ObjectLoadError, load_objects

    output.configure_logging(args.log_level, args.log_format)
    try:
        features = features_of(args)
        snapshot = load_objects([args.snapshot])
        extra = load_objects([args.pod])
    except (ObjectLoadError, ValueError) as error:  # OptionsError is a ValueError
        return output.error(str(error))
    pods = [raw for raw in extra if raw.get("kind") == "Pod"]
    if len(pods) != 1:
        return output.error(f"{args.pod} must contain exactly one Pod, found {len(pods)}")
    replaced = {_key(raw) for raw in extra}
    objects = [raw for raw in snapshot if _key(raw) not in replaced] + extra
    return asyncio.run(_simulate(args, features, objects, pods[0]))


async def _simulate(args: argparse.Namespace, features: FeatureGates, objects: list[dict],
                    pod_raw: dict) -> int:
    from extender.state.cache import ClusterCache
    from extender.wiring import Cluster, build_scheduler

    cache = ClusterCache.from_objects(objects, features)
    _, namespace, name = _key(pod_raw)
    pod = cache.pod(namespace, name)
    if pod is None:
        return output.error(f"pod {namespace}/{name} is invalid: {cache.stats()['invalidObjects']}")
    scheduler = build_scheduler(Cluster(cache), SchedulerOptions(scoring=args.scoring))
    nodes = args.node or cache.node_names()
    result = await scheduler.filter(pod, nodes)
    if result.error:
        return output.error(result.error)
    scores = await scheduler.prioritize(pod, result.passed) if result.passed else {}
    rows: list[dict[str, Any]] = []
    for node in nodes:
        reason = result.failed.get(node) or result.unresolvable.get(node) or ""
        rows.append(
            {
                "node": node,
                "fits": node in result.passed,
                "score": scores.get(node),
                "unresolvable": node in result.unresolvable,
                "reason": reason,
            }
        )
    rows.sort(key=lambda row: (not row["fits"], -(row["score"] or 0), row["node"]))
    output.write({"pod": f"{namespace}/{name}", "nodes": rows}, args.output, render_table)
    return output.EXIT_OK if result.passed else output.EXIT_PROBLEMS


def render_table(document: dict) -> str:
    pod, rows = document["pod"], document["nodes"]
    width = max([4, *(len(row["node"]) for row in rows)])
    fitting = sum(1 for row in rows if row["fits"])
    lines = [f"pod {pod}: fits {fitting} of {len(rows)} node(s)", f"{'NODE':<{width}}  FITS  SCORE  REASON"]
    for row in rows:
        fits = "yes" if row["fits"] else "no"
        score = "-" if row["score"] is None else str(row["score"])
        reason = row["reason"] + (" (preemption cannot help)" if row["unresolvable"] else "")
        lines.append(f"{row['node']:<{width}}  {fits:<4}  {score:>5}  {reason}".rstrip())
    return "\n".join(lines) + "\n"
