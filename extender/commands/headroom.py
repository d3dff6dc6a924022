"""`dra-extender headroom`: how many more pods of a shape fit right now, and where.

Name the shape by a DeviceClass and count (--class, --count, with --selector and --match-attribute), by
a ResourceClaimTemplate (--template [NAMESPACE/]NAME from the cluster, or in a file given with -f), or
by a pod (-f pod.yaml: one claim per template it names, and its nodeSelector). The answer comes from
the allocator the extender schedules with, against the devices in use now: per node, how many pods of
the shape it takes, and the devices left stranded (free, of the kind the shape asks for, but unusable
for it: a taint, used-up shared counters, capacity, constraints, or too few left). Pods are placed
one after another as the scheduler would place them, which is not always the most that could fit.
Node taints, cpu and memory are kube-scheduler's to check and are not counted here.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from common.objects import metadata_of
from extender.commands import output
from extender.commands.explain import SYNC_TIMEOUT_S, progress
from extender.flags import add_source_arguments, source_options
from extender.http.names import split_ref
from extender.options import OptionsError

FORMS = (*output.FORMATS, *output.LIST_FORMATS)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "headroom",
        help="how many more pods of a shape fit now, on which nodes, and which devices are stranded",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=output.examples(
            "dra-extender headroom --class gpu.example.com --snapshot examples/cluster",
            "dra-extender headroom --class gpu.example.com --count 4 --match-attribute gpu.example.com/numa",
            "dra-extender headroom --template team-a/a100 -o wide",
            "dra-extender headroom -f my-pod.yaml --context prod -o jsonpath='{.total}'",
        ) + "\n  (0: at least one more pod fits, 1: none fits, 2: bad shape or cluster unreadable)",
    )
    shape = parser.add_argument_group("the shape (one of --class, --template, -f)")
    shape.add_argument("--class", dest="device_class", metavar="NAME",
                       help="a DeviceClass: each pod gets --count devices of it")
    shape.add_argument("--count", type=int, default=1, metavar="N",
                       help="devices per pod with --class (default 1)")
    shape.add_argument("--selector", action="append", default=[], metavar="CEL",
                       help="with --class: a CEL expression the devices must match (repeatable)")
    shape.add_argument("--match-attribute", action="append", default=[], metavar="DOMAIN/NAME",
                       help="with --class: an attribute all of a pod's devices share, e.g. a NUMA node "
                       "(repeatable)")
    shape.add_argument("--template", metavar="[NAMESPACE/]NAME",
                       help="a ResourceClaimTemplate: each pod gets one claim made from it")
    shape.add_argument("-f", "--filename", dest="files", action="append", default=[], metavar="FILE",
                       help="a pod (its claim templates, from the file or the cluster) or a "
                       "ResourceClaimTemplate, in YAML/JSON ('-' reads stdin)")
    output.add_namespace_argument(parser, "template")
    parser.add_argument("--node", action="append", default=None, metavar="NAME",
                        help="only this node (repeatable; default: every node)")
    output.add_output_argument(parser, FORMS)
    add_source_arguments(parser)
    output.add_logging_arguments(parser, default_level="warning")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    output.configure_logging(args.log_level, args.log_format)
    given = [bool(args.device_class), bool(args.template), bool(args.files)]
    if sum(given) != 1:
        return output.error("name the shape with exactly one of --class, --template or -f")
    if not args.device_class and (args.selector or args.match_attribute or args.count != 1):
        return output.error("--count, --selector and --match-attribute go with --class")
    try:
        source = source_options(args)
    except OptionsError as error:
        return output.error(str(error))
    return asyncio.run(_headroom(args, source))


async def _headroom(args: argparse.Namespace, source: Any) -> int:
    from extender.kube.access import AccessDenied
    from extender.kube.client import ApiError, KubeConfigError
    from extender.kube.objects_io import ObjectLoadError, load_objects
    from extender.plugin.headroom import Headroom, ShapeError
    from extender.wiring import ClusterUnreadable, build_scheduler, connect, open_cluster

    try:
        files = load_objects(args.files) if args.files else []
    except ObjectLoadError as error:
        return output.error(str(error))
    try:
        client = None if source.snapshot else await connect(source)
        namespace = args.namespace or (client.namespace if client is not None else "default")
        cluster = await open_cluster(source, wait_ready_s=SYNC_TIMEOUT_S, progress=progress, client=client)
    except AccessDenied as denied:
        return output.error(f"permission denied: {denied}")
    except (ClusterUnreadable, KubeConfigError, ApiError, ObjectLoadError, OSError, TimeoutError) as error:
        return output.error(f"cannot read the cluster: {error}")
    try:
        scheduler = build_scheduler(cluster)
        shape = _shape(args, files, namespace, scheduler.cache)
        report = Headroom(scheduler.cache, scheduler.assume).compute(shape, args.node)
    except (ShapeError, ValueError) as error:
        return output.error(str(error))
    finally:
        await cluster.close()
    output.write(report, args.output, render_text, wide=render_wide,
                 names=lambda doc: [f"node/{entry['node']}" for entry in doc["nodes"] if entry["count"]])
    return output.EXIT_OK if report["total"] else output.EXIT_PROBLEMS


def _shape(args: argparse.Namespace, files: list[dict[str, Any]], namespace: str, cache: Any) -> Any:
    from extender.plugin.headroom import ShapeError, class_shape, pod_shape, template_shape

    if args.device_class:
        return class_shape(args.device_class, args.count, selectors=args.selector,
                           match_attributes=args.match_attribute)

    def template_of(template_namespace: str, name: str) -> dict[str, Any] | None:
        for raw in files:
            meta = metadata_of(raw)
            if raw.get("kind") == "ResourceClaimTemplate" and meta.get("name") == name and (
                    meta.get("namespace") or template_namespace) == template_namespace:
                return raw
        found: dict[str, Any] | None = cache.raw("ResourceClaimTemplate", f"{template_namespace}/{name}")
        return found

    if args.template:
        template_namespace, name = split_ref(args.template, args.namespace)
        if args.namespace is None and "/" not in args.template:
            template_namespace = namespace
        template = template_of(template_namespace, name)
        if template is None:
            raise ShapeError(f"ResourceClaimTemplate {template_namespace}/{name} not found")
        return template_shape(template)
    pods = [raw for raw in files if raw.get("kind") == "Pod"]
    templates = [raw for raw in files if raw.get("kind") == "ResourceClaimTemplate"]
    if len(pods) == 1:
        pod = pods[0]
        if not metadata_of(pod).get("namespace"):
            pod = {**pod, "metadata": {**metadata_of(pod), "namespace": namespace}}
        return pod_shape(pod, template_of)
    if not pods and len(templates) == 1:
        return template_shape(templates[0])
    raise ShapeError(f"-f: expected one Pod or one ResourceClaimTemplate, found {len(pods)} pod(s) and "
                     f"{len(templates)} template(s)")


def _rows(report: dict[str, Any], *, wide: bool) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = [("NODE", "PODS", "STRANDED", *(("DEVICES",) if wide else ()))]
    for entry in sorted(report["nodes"], key=lambda e: (-e["count"], e["node"])):
        reasons: dict[str, int] = {}
        for stranded in entry["stranded"]:
            reasons[stranded["reason"]] = reasons.get(stranded["reason"], 0) + 1
        count = f"{entry['count']}+" if entry.get("capped") else str(entry["count"])
        summary = ", ".join(f"{n} {why}" for why, n in sorted(reasons.items())) or entry.get("error", "-")
        devices = ", ".join(f"{s['device'].rsplit('/', 1)[1]} ({s['reason']})" for s in entry["stranded"])
        rows.append((entry["node"], count, summary or "-", *((devices or "-",) if wide else ())))
    return rows


def _head(report: dict[str, Any]) -> str:
    skipped = f"; {len(report['skipped'])} node(s) skipped" if report["skipped"] else ""
    return (f"{report['total']} more pod(s) of shape {report['shape']} fit on {report['nodesWithRoom']} of "
            f"{len(report['nodes'])} node(s) as of {report['asOf']}{skipped}\n")


def render_text(report: dict[str, Any]) -> str:
    return _head(report) + output.table(_rows(report, wide=False))


def render_wide(report: dict[str, Any]) -> str:
    skipped = "".join(f"skipped {node}: {why}\n" for node, why in sorted(report["skipped"].items()))
    return _head(report) + output.table(_rows(report, wide=True)) + skipped
