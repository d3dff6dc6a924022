"""`dra-extender simulate --snapshot DIR -f FILE`: filter and prioritize a pod against a snapshot.

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
from extender.flags import (
    add_feature_gates_argument,
    add_scoring_argument,
    add_snapshot_argument,
    features_of,
)
from extender.options import SchedulerOptions


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "simulate",
        help="filter and prioritize one pod against a snapshot",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=output.examples(
            "dra-extender simulate --snapshot examples/cluster -f my-pod.yaml",
            "dra-extender simulate --snapshot snapshot.yaml -f pod-and-claims.yaml --scoring spread -o json",
            "dra-extender simulate --snapshot examples/cluster -f my-pod.yaml -o name   # the nodes that fit",
        ) + "\n  (0: fits at least one node, 1: fits none, 2: bad input)",
    )
    add_snapshot_argument(parser)
    parser.add_argument(
        "-f", "--filename", "--pod", dest="filenames", action="append", metavar="FILE",
        help="YAML/JSON file with the pod and, optionally, the claims it uses ('-' reads stdin; "
        "--pod is the older spelling)",
    )
    parser.add_argument("--node", action="append", default=None, metavar="NAME",
                        help="only this node (repeatable; default: every node)")
    add_scoring_argument(parser)
    add_feature_gates_argument(parser)
    output.add_output_argument(parser, (*output.FORMATS, "name"))
    output.add_logging_arguments(parser, default_level="warning")
    parser.set_defaults(func=run)


def _key(raw: dict) -> tuple[str, str, str]:
    meta = metadata_of(raw)
    return raw.get("kind", ""), meta.get("namespace") or "default", meta.get("name", "")


def run(args: argparse.Namespace) -> int:
    from extender.kube.objects_io import ObjectLoadError, load_objects

    output.configure_logging(args.log_level, args.log_format)
    if not args.snapshot or not args.filenames:
        # Before -f/--filename named the pod's file, `simulate -f DIR --pod FILE` named the snapshot.
        return output.error("simulate needs the cluster (--snapshot DIR) and the pod (-f FILE), e.g. "
                            "simulate --snapshot examples/cluster -f my-pod.yaml")
    try:
        features = features_of(args)
        snapshot = load_objects([args.snapshot])
        extra = load_objects(args.filenames)
    except (ObjectLoadError, ValueError) as error:  # OptionsError is a ValueError
        return output.error(str(error))
    pods = [raw for raw in extra if raw.get("kind") == "Pod"]
    if len(pods) != 1:
        return output.error(f"{', '.join(args.filenames)} must contain exactly one Pod, found {len(pods)}")
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
    output.write({"pod": f"{namespace}/{name}", "nodes": rows}, args.output, render_table,
                 names=lambda doc: [f"node/{row['node']}" for row in doc["nodes"] if row["fits"]])
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
