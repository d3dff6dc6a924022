"""`dra-extender explain [NAMESPACE/]NAME`: why a pod fits each node or not, from a cluster or a snapshot.

The same report as the extender's GET /debug/explain, worked out on your machine: per node, fits or
not; per claim and request, how many devices were candidates and which step rejected the rest.
Against a cluster it reads only what that pod needs (the pod, the claims, classes, slices and nodes),
so it also works for a user who may not list every pod. Without NAME it lists the pending pods that
use devices, with how many nodes each fits.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from common.objects import metadata_of
from extender.commands import output
from extender.flags import add_source_arguments, source_options
from extender.http.names import split_ref
from extender.options import OptionsError, SourceOptions
from extender.wiring import Cluster, ClusterUnreadable, build_scheduler, open_cluster

SYNC_TIMEOUT_S = 60.0
LIST_FORMATS = (*output.FORMATS, *output.LIST_FORMATS)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "explain",
        help="explain why a pod fits each node or not, or list the pending pods that use devices",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=output.examples(
            "dra-extender explain a100-job --snapshot examples/cluster",
            "dra-extender explain my-pod -n team-a --context prod -o yaml",
            "kubectl dra explain team-a/my-pod --node node-7 -o json",
            "dra-extender explain -A                      # every pending pod that uses devices",
            "dra-extender explain -n team-a -o jsonpath='{.pods[?(@.fittingNodes==0)].pod}'",
        ) + "\n  (0: fits at least one node, 1: fits none or cannot be scheduled yet (for a list: some pod "
        "fits none), 2: pod/node not found or cluster unreadable)",
    )
    parser.add_argument("pod", nargs="?", metavar="[NAMESPACE/]NAME",
                        help="the pod to explain; without it, list the pending pods that use devices")
    output.add_namespace_argument(parser, "pod", all_namespaces=True)
    parser.add_argument(
        "--node", action="append", default=None, metavar="NAME",
        help="only this node (repeatable; default: every node)",
    )
    output.add_output_argument(parser, LIST_FORMATS)
    add_source_arguments(parser)
    output.add_logging_arguments(parser, default_level="warning")
    parser.set_defaults(func=run)


def progress(text: str) -> None:
    print(f"dra-extender: {text}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    output.configure_logging(args.log_level, args.log_format)
    if args.pod is not None and args.all_namespaces:
        return output.error("-A lists pods: give no pod name with it")
    if args.pod is not None:
        try:
            split_ref(args.pod, args.namespace)
        except ValueError as error:
            return output.error(f"pod: {error}")
    try:
        source = source_options(args)
    except OptionsError as error:
        return output.error(str(error))
    return asyncio.run(_explain(args, source))


def pod_ref(args: argparse.Namespace, default_namespace: str) -> tuple[str, str]:
    """The pod's namespace and name: NAMESPACE/NAME as given, else -n, else `default_namespace` (the
    context's); only -n conflicts with a namespace written in the name."""
    namespace, name = split_ref(args.pod, args.namespace)
    return (default_namespace if args.namespace is None and "/" not in args.pod else namespace), name


async def _open(args: argparse.Namespace, source: SourceOptions) -> tuple[Cluster, str]:
    """The cluster to explain against and the namespace of a name given alone."""
    from extender.wiring import connect, read_for_pod

    if source.snapshot:
        return await open_cluster(source, wait_ready_s=None), args.namespace or "default"
    client = await connect(source)
    try:
        namespace = args.namespace or client.namespace
        if args.pod is not None:
            pod_namespace, name = pod_ref(args, namespace)
            narrow = await read_for_pod(client, source.features, pod_namespace, name)
            if narrow is not None:
                await client.close()
                return narrow, namespace
        return await open_cluster(source, wait_ready_s=SYNC_TIMEOUT_S, progress=progress,
                                  client=client), namespace
    except BaseException:
        await client.close()
        raise


async def _explain(args: argparse.Namespace, source: SourceOptions) -> int:
    from extender.http.explain import ExplainError, explain_pod, render_text
    from extender.kube.access import AccessDenied
    from extender.kube.client import ApiError, KubeConfigError
    from extender.kube.objects_io import ObjectLoadError
    from extender.wiring import PodNotFound

    try:
        cluster, namespace = await _open(args, source)
    except AccessDenied as denied:
        return output.error(f"permission denied: {denied}")
    except PodNotFound as error:
        return output.error(str(error))
    except (ClusterUnreadable, KubeConfigError, ApiError, ObjectLoadError, OSError, TimeoutError) as error:
        return output.error(f"cannot read the cluster: {error}")
    try:
        # explain has no scheduling flags: it checks nodes as serve does with its defaults.
        scheduler = build_scheduler(cluster)
        if args.pod is None:
            document = await _pending(scheduler, None if args.all_namespaces else namespace, args.node)
        else:
            pod_namespace, name = pod_ref(args, namespace)
            document = await explain_pod(scheduler, pod_namespace, name, args.node)
    except ExplainError as error:
        return output.error(str(error))
    finally:
        await cluster.close()
    if args.pod is None:
        output.write(document, args.output, render_list, wide=render_wide,
                     names=lambda doc: [f"pod/{entry['pod'].split('/', 1)[1]}" for entry in doc["pods"]])
        fits_all = all(entry["fittingNodes"] for entry in document["pods"])
        return output.EXIT_OK if fits_all else output.EXIT_PROBLEMS
    output.write(document, args.output, render_text, names=lambda doc: [f"pod/{doc['pod'].split('/', 1)[1]}"])
    # A pod that cannot be scheduled yet (a claim missing, ...) is a finding, like one that fits nowhere.
    return output.EXIT_OK if document.get("fittingNodes") and not document["error"] else output.EXIT_PROBLEMS


async def _pending(scheduler: Any, namespace: str | None, nodes: list[str] | None) -> dict[str, Any]:
    """One line per pending pod that uses devices (claims, or extended resources a DeviceClass maps)."""
    from extender.http.explain import explain_pod

    pods = []
    for pod in scheduler.cache.valid_objects("Pod"):
        meta = metadata_of(pod)
        if namespace is not None and meta.get("namespace") != namespace:
            continue
        if (pod.get("spec") or {}).get("nodeName") or (pod.get("status") or {}).get("phase") in (
                "Succeeded", "Failed") or not scheduler.planner.needs_dra(pod):
            continue
        report = await explain_pod(scheduler, meta.get("namespace", ""), meta.get("name", ""), nodes)
        fitting = [node["node"] for node in report["nodes"] if node["fits"]]
        failing = [node["message"] for node in report["nodes"] if not node["fits"] and node["message"]]
        pods.append({
            "pod": report["pod"],
            "claims": [claim["claim"] for claim in report["claims"]],
            "fittingNodes": len(fitting),
            "nodes": len(report["nodes"]),
            "fits": fitting,
            "reason": report["error"] or (failing[0] if failing and not fitting else ""),
        })
    pods.sort(key=lambda entry: entry["pod"])
    return {"namespace": namespace, "pods": pods}


def _rows(document: dict[str, Any], *, wide: bool) -> list[tuple[str, ...]]:
    every = document["namespace"] is None
    head = (*(("NAMESPACE",) if every else ()), "NAME", "FITS", *(("CLAIMS", "NODES") if wide else ()),
            "REASON")
    rows = [head]
    for entry in document["pods"]:
        namespace, name = entry["pod"].split("/", 1)
        fitting = entry["fits"]
        rows.append((*((namespace,) if every else ()), name, f"{entry['fittingNodes']}/{entry['nodes']}",
                     *((",".join(entry["claims"]) or "-",
                        ",".join(fitting[:3]) + (",..." if len(fitting) > 3 else "") or "-") if wide else ()),
                     entry["reason"]))
    return rows


def render_list(document: dict[str, Any]) -> str:
    if not document["pods"]:
        where = "any namespace" if document["namespace"] is None else f"namespace {document['namespace']}"
        return f"no pending pod uses devices in {where}\n"
    return output.table(_rows(document, wide=False))


def render_wide(document: dict[str, Any]) -> str:
    return output.table(_rows(document, wide=True)) if document["pods"] else render_list(document)

