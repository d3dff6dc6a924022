"""`dra-extender serve`: the scheduler extender, its debug port and the admission webhook.

The cluster comes from a kubeconfig / in-cluster credentials (list+watch), or from a directory of
YAML files with `--snapshot DIR` (binds then only change the in-memory objects). The flags, their
options and the components they build are extender.wiring's; this module runs them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import gc
import logging
import shlex
import signal
import sys
from typing import Any

import orjson

from allocator import AllocationError
from common.tls import ReloadingTLS
from extender import eventloop
from extender.commands.output import EXIT_ERROR, add_logging_arguments, configure_logging, examples
from extender.http.server import ExtenderServer
from extender.plugin.filtercache import FilterCache
from extender.plugin.podclaims import has_claims
from extender.state.cache import ClusterCache
from extender.wiring import (
    Cluster,
    OptionsError,
    ServeOptions,
    add_controller_arguments,
    add_network_arguments,
    add_scheduler_arguments,
    add_source_arguments,
    add_webhook_arguments,
    build_scheduler,
    build_webhook,
    controllers_for,
    open_cluster,
    serve_options,
)

log = logging.getLogger("dra-extender")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="run the scheduler extender (filter, prioritize, bind, preempt) and its debug endpoints",
        description=__doc__,
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
    parser.set_defaults(func=run)


# The allocator makes many short-lived objects per node; collecting every 700 allocations (the default)
# costs more than it frees. Measured on 500 nodes x 10 devices: full collections over the synced
# cache paused the event loop for up to ~100 ms, and the frozen heap brings them to a few ms.
GC_THRESHOLDS = (20_000, 20, 20)


def tune_gc_after_sync() -> None:
    """Move everything alive now (the synced cache) out of the collector's sight and collect less often;
    give the memory the initial lists left free back to the system."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    return_free_memory()


def return_free_memory() -> None:
    """Ask the C allocator to return its free pages (glibc's malloc_trim; elsewhere nothing happens).
    Decoding the initial lists leaves part of the heap free but held (tens of MB at 5,000 nodes)."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return
    trim(0)


# The initial lists allocate millions of objects that all stay alive: collecting while they arrive
# only walks a growing heap again and again, with nothing to free. The collector is off until the
# cache is synced, but for at most this long (an API server that never answers must not leave it off).
SYNC_GC_PAUSE_S = 120.0


async def _tune_gc_when_ready(cluster: Cluster) -> None:
    if cluster.watcher is not None:
        gc.disable()
        try:
            await cluster.watcher.wait_ready(SYNC_GC_PAUSE_S)
        finally:
            gc.enable()
        await cluster.watcher.wait_ready()
    tune_gc_after_sync()


# Nodes whose view of their pools is built per turn of the event loop when warming them after the sync.
WARM_BATCH = 250


async def warm_node_views(cache: ClusterCache, filter_cache: FilterCache | None = None) -> None:
    """Build every node's view of its pools now, a batch per turn of the event loop, so that the first
    filters after a start do not build them all (at 5,000 nodes, most of the first full filter's time),
    and the filter cache's per-node memos with them (another ~30 ms of it). A filter still builds
    any view a later change invalidates, as before."""
    names = cache.node_names()
    for first in range(0, len(names), WARM_BATCH):
        for name in names[first:first + WARM_BATCH]:
            node = cache.node(name)
            if node is not None:
                with contextlib.suppress(AllocationError):  # a filter reports it for that node
                    cache.inventory.node_pools(node, cache.features)
                    if filter_cache is not None:
                        filter_cache.warm(node)
        await asyncio.sleep(0)


async def _after_sync(cluster: Cluster, filter_cache: FilterCache | None = None) -> None:
    """Once synced: tune the collector, warm the node views, then move the views out of the collector's
    sight too. Built after the freeze, the views (hundreds of thousands of objects at 5,000 nodes) would
    otherwise sit in the young generations and be walked again by the next collections of generation 1:
    measured at 5,000 nodes, one such collection paused a cold filter for ~85 ms."""
    await _tune_gc_when_ready(cluster)
    await warm_node_views(cluster.cache, filter_cache)
    gc.freeze()


# The banner's example filter names this many nodes: enough to show the shape, short enough to paste
# (every node of a 5,000-node cluster made a 60 KB curl line).
BANNER_NODES = 3


def example_pod(cache: ClusterCache) -> dict | None:
    """A pending pod with claims from the cache, for the printed curl commands (the first by key)."""
    pending = [raw for raw in cache.valid_objects("Pod")
               if not (raw.get("spec") or {}).get("nodeName") and has_claims(raw)]
    return min(pending, key=lambda raw: (raw["metadata"]["namespace"], raw["metadata"]["name"]), default=None)


def example_nodes(cache: ClusterCache) -> tuple[list[str], list[str]]:
    """The first few node names for the example filter, and a line saying how to ask about more."""
    names = cache.node_names()
    if len(names) <= BANNER_NODES:
        return names, []
    return names[:BANNER_NODES], [
        f"  (the example asks about {BANNER_NODES} of the {len(names)} nodes: list more in NodeNames, or "
        "save the JSON body to a file and pass it with -d @FILE)"]


def usage_banner(server: ExtenderServer, cache: ClusterCache, *, kubectl_template: bool = False) -> str:
    """URLs and ready-to-paste curl commands for a pending pod with claims; without such a pod, with
    `kubectl_template` (an API server to read pods from), a curl template that fetches one."""
    extender, debug = server.urls["extender"], server.urls["debug"]
    insecure = "-k " if extender.startswith("https") else ""
    lines = [
        f"dra-extender: extender verbs at {extender}/{{filter,prioritize,bind,preempt}}",
        f"dra-extender: device map at {debug}/debug/ui",
        f"dra-extender: debug at {debug}/debug/explain?pod=NS/NAME, {debug}/debug/state, "
        f"{debug}/debug/snapshot, {debug}/metrics, {debug}/healthz, {debug}/readyz",
    ]
    post = f"curl -s {insecure}-X POST -H 'Content-Type: application/json' {extender}/filter"
    pod = example_pod(cache)
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


async def print_banner_when_synced(server: ExtenderServer, cluster: Cluster) -> None:
    """The banner, once the cache holds the cluster (its example pod and node names come from it)."""
    if cluster.watcher is not None:
        await cluster.watcher.wait_ready()
    print(usage_banner(server, cluster.cache, kubectl_template=cluster.client is not None), flush=True)


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
        cluster = await open_cluster(options.source, wait_ready_s=None)
    except Exception as error:
        log.error("cannot read the cluster: %s", error)
        return EXIT_ERROR
    network = options.network
    scheduler = build_scheduler(cluster, options.scheduler)
    server = ExtenderServer(
        scheduler,
        watch_health=cluster.watcher.health if cluster.watcher else None,
        limits=network.limits, debug_from_anywhere=network.debug_from_anywhere,
    )
    webhook = None
    running = None
    banner_task = None
    extender_tls: ReloadingTLS | None = None
    after_sync_task = asyncio.create_task(_after_sync(cluster, scheduler.filter_cache))
    try:
        if network.extender_tls_cert_file and network.extender_tls_private_key_file:
            extender_tls = ReloadingTLS(
                network.extender_tls_cert_file,
                network.extender_tls_private_key_file,
                client_ca_file=network.extender_client_ca_file,
                name="extender serving",
            )
        await server.start(
            network.bind_address,
            network.extender_port,
            network.debug_port,
            extender_tls.server_context if extender_tls else None,
        )
        if extender_tls:
            extender_tls.start()
        webhook = build_webhook(options.webhook, cluster.cache, features=options.source.features,
                                host=network.bind_address, limits=network.limits)
        if webhook is not None:  # otherwise build_webhook logged why the port stays closed
            await webhook.start()
        running = await controllers_for(options.controllers, cluster, registry=server.metrics.registry)
        if running is not None:
            server.add_state("controllers", running.state)
            server.driver_lost = running.driver_lost
        banner_task = asyncio.create_task(print_banner_when_synced(server, cluster))
        await stop.wait()
        log.info("shutting down")
        return 0
    except Exception as error:  # bad certificate, port in use, ...: say it in one line
        log.error("cannot start: %s", error)
        return EXIT_ERROR
    finally:
        after_sync_task.cancel()
        if banner_task is not None:
            banner_task.cancel()
        if running is not None:
            await running.stop()
        if webhook is not None:
            await webhook.stop()
        if extender_tls is not None:
            await extender_tls.stop()
        await server.stop()
        await cluster.close()
