"""`dra-extender serve`: the scheduler extender, its debug port and the admission webhook.

The cluster comes from a kubeconfig / in-cluster credentials (list+watch), or from a directory of
YAML files with `--snapshot DIR` (binds then only change the in-memory objects). The flags, their
options and the components they build are extender.wiring's; this module runs them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import logging
import shlex
import signal
import sys
from collections.abc import Iterable
from typing import Any

import orjson

from extender import eventloop
from extender.commands.output import EXIT_ERROR, add_logging_arguments, configure_logging, examples
from extender.flags import (
    add_controller_arguments,
    add_headroom_arguments,
    add_network_arguments,
    add_scheduler_arguments,
    add_source_arguments,
    add_webhook_arguments,
    serve_options,
)
from extender.http.server import ExtenderServer
from extender.options import OptionsError, ServeOptions
from extender.plugin.podclaims import has_claims
from extender.state.cache import ClusterCache
from extender.wiring import App, Cluster, ClusterUnreadable

log = logging.getLogger("dra-extender")

DESCRIPTION = """Run DRA Extender: the scheduler extender kube-scheduler calls (filter, prioritize, bind,
preempt) on --extender-port, the read-only debug port (/debug/ui device map, /debug/explain,
/debug/state, /metrics, /livez, /readyz) and, given a serving certificate, the admission webhook.

The cluster is read from the pod's service account, a kubeconfig (--kubeconfig, --context), or a
snapshot of objects (--snapshot DIR, where binds change only the copy in memory)."""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="run the scheduler extender (filter, prioritize, bind, preempt) and its debug endpoints",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=examples(
            "dra-extender serve --snapshot examples/cluster --extender-port 9000 --debug-port 9001",
            "dra-extender serve --kubeconfig ~/.kube/config --context prod --log-level debug",
            "dra-extender serve --bind-address 0.0.0.0 --controllers=taint-eviction --leader-elect",
        ) + "\n  (serve: 0 stopped by a signal, 2 bad flags or could not start)",
    )
    add_source_arguments(parser)
    add_network_arguments(parser)
    add_scheduler_arguments(parser)
    add_logging_arguments(parser)
    add_webhook_arguments(parser)
    add_controller_arguments(parser)
    add_headroom_arguments(parser)
    parser.set_defaults(func=run)


# The banner's example filter names this many nodes: enough to show the shape, short enough to paste
# (every node of a 5,000-node cluster made a 60 KB curl line).
BANNER_NODES = 3


# Pods looked at per event-loop step while the banner looks for its example (80,000 pods in one step
# held the loop for about 150 ms just as the server turned ready).
BANNER_PODS_PER_STEP = 5_000


def example_pod(pods: Iterable[dict]) -> dict | None:
    """A pending pod with claims, for the printed curl commands (the first by namespace and name)."""
    pending = [raw for raw in pods if not (raw.get("spec") or {}).get("nodeName") and has_claims(raw)]
    return min(pending, key=lambda raw: (raw["metadata"]["namespace"], raw["metadata"]["name"]), default=None)


async def find_example_pod(cache: ClusterCache) -> dict | None:
    """`example_pod` of the cache's pods, a slice of them per event-loop step."""
    pods = cache.each_valid("Pod")
    found = []
    while step := list(itertools.islice(pods, BANNER_PODS_PER_STEP)):
        pod = example_pod(step)
        if pod is not None:
            found.append(pod)
        await asyncio.sleep(0)
    return example_pod(found)


def example_nodes(cache: ClusterCache) -> tuple[list[str], list[str]]:
    """The first few node names for the example filter, and a line saying how to ask about more."""
    names = cache.node_names()
    if len(names) <= BANNER_NODES:
        return names, []
    return names[:BANNER_NODES], [
        f"  (the example asks about {BANNER_NODES} of the {len(names)} nodes: list more in NodeNames, or "
        "save the JSON body to a file and pass it with -d @FILE)"]


def usage_banner(server: ExtenderServer, cache: ClusterCache, pod: dict | None, *,
                 kubectl_template: bool = False) -> str:
    """URLs and ready-to-paste curl commands for `pod` (a pending pod with claims, `example_pod`);
    without one, with `kubectl_template` (an API server to read pods from), a curl template that
    fetches one."""
    extender, debug = server.urls["extender"], server.urls["debug"]
    insecure = "-k " if extender.startswith("https") else ""
    lines = [
        f"dra-extender: extender verbs at {extender}/{{filter,prioritize,bind,preempt}}",
        f"dra-extender: device map at {debug}/debug/ui",
        f"dra-extender: debug at {debug}/debug/explain?pod=NS/NAME, {debug}/debug/state, "
        f"{debug}/debug/snapshot, {debug}/metrics, {debug}/livez, {debug}/readyz",
    ]
    post = f"curl -s {insecure}-X POST -H 'Content-Type: application/json' {extender}/filter"
    node_names, more_nodes = example_nodes(cache)
    if pod is not None:
        meta = pod["metadata"]
        body = orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": node_names}).decode()
        lines += [
            f"try filter for pod {meta['namespace']}/{meta['name']}:",
            f"  {post} -d {shlex.quote(body)}",
            *more_nodes,
            "explain it:",
            f"  curl -s '{debug}/debug/explain?pod={meta['namespace']}/{meta['name']}&format=text'",
        ]
    elif kubectl_template:
        nodes = orjson.dumps(node_names).decode()
        body = (_double_quoted('{"Pod": ') + "$(kubectl get pod -n NAMESPACE NAME -o json)"
                + _double_quoted(f', "Nodes": null, "NodeNames": {nodes}}}'))
        lines += [
            "no pending pod with resource claims yet; filter a pod (replace NAMESPACE and NAME):",
            f'  {post} -d "{body}"',
            *more_nodes,
            "explain it:",
            f"  curl -s '{debug}/debug/explain?pod=NAMESPACE/NAME&format=text'",
        ]
    return "\n".join(lines)


def _double_quoted(text: str) -> str:
    """`text` escaped for a double-quoted shell word (which must stay open for a $(...) inside)."""
    for special in ("\\", '"', "$", "`"):
        text = text.replace(special, "\\" + special)
    return text


# After the sync, how long the banner waits for the fence (extender/plugin/fence.py) before it prints
# anyway (a standby of a leader election never gets a term).
BANNER_FENCE_WAIT_S = 5.0


async def print_banner_when_synced(server: ExtenderServer, cluster: Cluster) -> None:
    """The banner, once the cache holds the cluster (its example pod and node names come from it) and
    this replica may allocate (or is a standby)."""
    if cluster.watcher is not None:
        await cluster.watcher.wait_ready()
    authority = server.scheduler.authority
    loop = asyncio.get_running_loop()
    until = loop.time() + BANNER_FENCE_WAIT_S
    while authority.term is None and loop.time() < until:
        await asyncio.sleep(0.02)
    pod = await find_example_pod(cluster.cache)
    print(usage_banner(server, cluster.cache, pod, kubectl_template=cluster.client is not None), flush=True)


def run(args: argparse.Namespace) -> int:
    configure_logging(args.log_level, args.log_format)
    try:
        options = serve_options(args)
    except OptionsError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_ERROR
    try:
        return eventloop.run(serve(options))
    except KeyboardInterrupt:
        return 0


async def serve(options: ServeOptions, stop: asyncio.Event | None = None) -> int:
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signum, stop.set)
    try:
        async with App(options) as app:
            banner = asyncio.create_task(print_banner_when_synced(app.server, app.cluster))
            try:
                await stop.wait()
            finally:
                banner.cancel()
            log.info("shutting down")
            return 0
    except ClusterUnreadable as error:
        log.error("cannot read the cluster: %s", error)
        return EXIT_ERROR
    except Exception as error:  # bad certificate, port in use, ...: say it in one line
        log.error("cannot start: %s", error)
        return EXIT_ERROR
