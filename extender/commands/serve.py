"""`dra-extender serve`: the scheduler extender, its debug port and the admission webhook.

The cluster comes from a kubeconfig / in-cluster credentials (list+watch), or from a directory of
YAML files with `--snapshot DIR` (binds then only change the in-memory objects).
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
from dataclasses import dataclass
from typing import Any

import orjson

from allocator import AllocationError, FeatureGates, cel
from extender import controllers, eventloop
from extender.commands.output import EXIT_ERROR, examples
from extender.httpguard import (
    DEFAULT_IDLE_TIMEOUT_S,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_REQUEST_BYTES,
    HttpLimits,
)
from extender.podclaims import has_claims
from extender.podgroups import WORKLOAD_CLAIMS
from extender.rules import parse_positive_duration
from extender.scheduling import DEFAULT_FILTER_TIMEOUT_S, DEFAULT_NODE_TIMEOUT_S
from extender.scoring import POLICIES
from extender.server import DEFAULT_PREFIX, ExtenderServer
from extender.tls import ReloadingTLS
from webhook import server as webhook_server

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
    net = parser.add_argument_group("network")
    net.add_argument(
        "--bind-address",
        default="127.0.0.1",
        help="address all ports listen on (default 127.0.0.1; use 0.0.0.0 in a cluster)",
    )
    net.add_argument(
        "--extender-port",
        type=_port,
        default=8888,
        help=f"scheduler-extender port, verbs under {DEFAULT_PREFIX}/ (default 8888)",
    )
    net.add_argument(
        "--debug-port",
        type=_port,
        default=8889,
        help="read-only /debug/*, /metrics, /healthz, /readyz (default 8889)",
    )
    net.add_argument(
        "--webhook-port", type=_port, default=8443, help="admission webhook port (TLS, default 8443)"
    )
    net.add_argument(
        "--extender-tls-cert-file", help="serve the extender port over HTTPS with this certificate"
    )
    net.add_argument("--extender-tls-private-key-file", help="private key of --extender-tls-cert-file")
    net.add_argument(
        "--extender-client-ca-file",
        help="require extender clients (kube-scheduler) to present a certificate signed by this CA",
    )
    net.add_argument(
        "--max-request-bytes",
        type=_positive_int,
        default=DEFAULT_MAX_REQUEST_BYTES,
        help="largest filter, prioritize or preempt body accepted (413 beyond; bind takes at most 64 KiB). "
        "The default fits a Pod and node names (nodeCacheCapable: true, as deploy/ configures); raise it "
        f"only for full NodeLists (default {DEFAULT_MAX_REQUEST_BYTES})",
    )
    net.add_argument(
        "--max-connections",
        type=_positive_int,
        default=DEFAULT_MAX_CONNECTIONS,
        help="connections each port keeps open at once; more are closed at once (default "
        f"{DEFAULT_MAX_CONNECTIONS}). Keep the ports' sum below the process's file-descriptor limit",
    )
    net.add_argument(
        "--idle-timeout",
        type=parse_positive_duration,
        default=DEFAULT_IDLE_TIMEOUT_S,
        help="seconds a connection may stay open without sending a complete request, from when it opens "
        f"or got its last answer (default {DEFAULT_IDLE_TIMEOUT_S:g})",
    )
    net.add_argument(
        "--debug-from-anywhere",
        action="store_true",
        help="answer /debug/ pages (pods and claims of the cluster) on every address of the debug port; by "
        "default only loopback connections (kubectl port-forward) get them. /healthz, /readyz and "
        "/metrics answer everyone either way",
    )
    sched = parser.add_argument_group("scheduling")
    sched.add_argument(
        "--scoring",
        choices=POLICIES,
        default="binpack",
        help="device placement policy for prioritize; pods override it with the annotation "
        "dra-extender.io/scoring (default binpack)",
    )
    sched.add_argument(
        "--filter-holds-devices",
        action="store_true",
        help="filter returns one chosen node and holds its devices until bind or --hold-timeout",
    )
    sched.add_argument(
        "--no-filter-cache",
        dest="filter_cache",
        action="store_false",
        help="recompute every node on every filter instead of reusing outcomes while the node's pools "
        "are unchanged",
    )
    sched.add_argument(
        "--hold-timeout",
        type=parse_positive_duration,
        default=30.0,
        help="how long a filter hold lasts without a bind (plain seconds or a Go duration such as 90s, 5m; "
        "default 30)",
    )
    sched.add_argument(
        "--node-timeout",
        type=parse_positive_duration,
        default=DEFAULT_NODE_TIMEOUT_S,
        help="seconds one node's device search may run (filter, bind, explain); a node that takes longer "
        "is 'timed out', not 'does not fit'. The search holds the event loop meanwhile "
        f"(default {DEFAULT_NODE_TIMEOUT_S:g})",
    )
    sched.add_argument(
        "--filter-timeout",
        type=parse_positive_duration,
        default=DEFAULT_FILTER_TIMEOUT_S,
        help="seconds one filter (and prioritize, preempt) may spend on all its nodes together; nodes not "
        "checked by then count as timed out. Keep it below kube-scheduler's extender httpTimeout (5 s "
        "unless set; deploy/ sets 10 s) minus --node-timeout. Timed-out nodes are resolvable failures "
        "when another node fits; when none fits, filter answers with an error and kube-scheduler "
        f"retries the pod after its backoff (default {DEFAULT_FILTER_TIMEOUT_S:g})",
    )
    add_logging_arguments(parser)
    webhook_server.add_arguments(parser)
    controllers.add_arguments(parser)
    parser.set_defaults(func=run)


def add_source_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("cluster source (in-cluster credentials by default)")
    group.add_argument("--kubeconfig", help="kubeconfig file to use instead of in-cluster credentials")
    group.add_argument("--context", help="kubeconfig context to use")
    group.add_argument(
        "--snapshot", metavar="DIR", help="read the cluster from YAML/JSON files instead of an API server"
    )
    group.add_argument(
        "--feature-gates",
        default="",
        help="comma-separated Name=true|false overrides of the Kubernetes 1.37 defaults",
    )


def add_logging_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    parser.add_argument("--log-format", default="text", choices=("text", "json"))


def _port(value: str) -> int:
    try:
        port = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {value!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port must be 0-65535, got {port}")
    return port


def _positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {value!r}") from None
    if number <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value!r}")
    return number


def http_limits(args: argparse.Namespace) -> HttpLimits:
    return HttpLimits(
        max_request_bytes=getattr(args, "max_request_bytes", DEFAULT_MAX_REQUEST_BYTES),
        max_connections=getattr(args, "max_connections", DEFAULT_MAX_CONNECTIONS),
        idle_timeout_s=getattr(args, "idle_timeout", DEFAULT_IDLE_TIMEOUT_S),
    )


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": self.formatTime(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(entry).decode()


def configure_logging(level: str, log_format: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


def parse_features(text: str) -> FeatureGates:
    return FeatureGates.parse(text) if text else FeatureGates()


@dataclass
class Cluster:
    """The cache plus what keeps it current (nothing in snapshot mode)."""

    cache: Any
    client: Any = None
    watcher: Any = None

    async def close(self) -> None:
        if self.watcher is not None:
            await self.watcher.stop()
        if self.client is not None:
            await self.client.close()


async def open_cluster(
    args: argparse.Namespace, features: FeatureGates, *, wait_ready_s: float | None
) -> Cluster:
    """A ClusterCache from --snapshot or from the API server (watched until closed)."""
    from extender.cache import ClusterCache

    if args.snapshot:
        from extender.objects_io import load_objects

        return Cluster(ClusterCache.from_objects(load_objects([args.snapshot]), features))
    from extender.informer import ClusterWatcher, watched_kinds
    from extender.kubeapi import KubeClient

    client = await KubeClient.connect(kubeconfig=args.kubeconfig, context=args.context)
    cache = ClusterCache(features)
    watcher = ClusterWatcher(client, cache, kinds=watched_kinds(features))
    await watcher.start()
    cluster = Cluster(cache, client, watcher)
    if wait_ready_s is not None and not await watcher.wait_ready(wait_ready_s):
        await cluster.close()
        raise RuntimeError(f"the cluster cache did not sync within {wait_ready_s:g} s")
    return cluster


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


async def warm_node_views(cache: Any) -> None:
    """Build every node's view of its pools now, a batch per turn of the event loop, so that the first
    filters after a start do not build them all (at 5,000 nodes, most of the first full filter's time).
    A filter still builds any view a later change invalidates, as before."""
    names = cache.node_names()
    for first in range(0, len(names), WARM_BATCH):
        for name in names[first:first + WARM_BATCH]:
            node = cache.node(name)
            if node is not None:
                with contextlib.suppress(AllocationError):  # a filter reports it for that node
                    cache.inventory.node_pools(node, cache.features)
        await asyncio.sleep(0)


async def _warm_when_ready(cluster: Cluster) -> None:
    if cluster.watcher is not None:
        await cluster.watcher.wait_ready()
    await warm_node_views(cluster.cache)


def build_scheduler(cluster: Cluster, args: argparse.Namespace) -> Any:
    from extender.assume import AssumeCache
    from extender.claimwriter import ClaimWriter
    from extender.filtercache import FilterCache
    from extender.scheduling import Scheduler

    assume = AssumeCache()
    assume.attach(cluster.cache)
    filter_cache = FilterCache(cluster.cache, assume) if getattr(args, "filter_cache", True) else None
    return Scheduler(
        cluster.cache,
        assume,
        ClaimWriter(cluster.client, cluster.cache),
        scoring=getattr(args, "scoring", "binpack"),
        hold_devices=getattr(args, "filter_holds_devices", False),
        hold_ttl_s=getattr(args, "hold_timeout", 30.0),
        node_deadline_s=getattr(args, "node_timeout", DEFAULT_NODE_TIMEOUT_S),
        filter_deadline_s=getattr(args, "filter_timeout", DEFAULT_FILTER_TIMEOUT_S),
        filter_cache=filter_cache,
    )


# The banner's example filter names this many nodes: enough to show the shape, short enough to paste
# (every node of a 5,000-node cluster made a 60 KB curl line).
BANNER_NODES = 3


def example_pod(cache: Any) -> dict | None:
    """A pending pod with claims from the cache, for the printed curl commands (the first by key)."""
    pending = [raw for raw in cache.valid_objects("Pod")
               if not (raw.get("spec") or {}).get("nodeName") and has_claims(raw)]
    return min(pending, key=lambda raw: (raw["metadata"]["namespace"], raw["metadata"]["name"]), default=None)


def example_nodes(cache: Any) -> tuple[list[str], list[str]]:
    """The first few node names for the example filter, and a line saying how to ask about more."""
    names = cache.node_names()
    if len(names) <= BANNER_NODES:
        return names, []
    return names[:BANNER_NODES], [
        f"  (the example asks about {BANNER_NODES} of the {len(names)} nodes: list more in NodeNames, or "
        "save the JSON body to a file and pass it with -d @FILE)"]


def usage_banner(server: ExtenderServer, cache: Any, *, kubectl_template: bool = False) -> str:
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


def flag_problem(args: argparse.Namespace) -> str:
    """Why this flag combination cannot run ("" when it can). TLS flags fail closed: half a TLS setup
    never falls back to plain HTTP or to running without the webhook."""
    if args.snapshot and (args.kubeconfig or args.context):
        return "--snapshot cannot be combined with --kubeconfig or --context"
    if bool(args.extender_tls_cert_file) != bool(args.extender_tls_private_key_file):
        return "--extender-tls-cert-file and --extender-tls-private-key-file go together"
    if args.extender_client_ca_file and not args.extender_tls_cert_file:
        return ("--extender-client-ca-file needs --extender-tls-cert-file and "
                "--extender-tls-private-key-file: client certificates are only checked over HTTPS, "
                "and the extender would otherwise serve plain HTTP to anyone")
    if bool(getattr(args, "tls_cert_file", None)) != bool(getattr(args, "tls_private_key_file", None)):
        return ("--tls-cert-file and --tls-private-key-file go together (the admission webhook needs both; "
                "leave both out to run without it)")
    return ""


def run(args: argparse.Namespace) -> int:
    configure_logging(args.log_level, args.log_format)
    problem = flag_problem(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return EXIT_ERROR
    try:
        features = parse_features(args.feature_gates)
    except ValueError as error:
        print(f"error: --feature-gates: {error}", file=sys.stderr)
        return EXIT_ERROR
    try:
        # Checked without importing the engine: it is loaded by the first selector that needs it.
        cel.configured_engine_name()
    except ValueError as error:  # otherwise /readyz says ok and every filter fails
        print(f"error: {cel.BACKEND_ENV}: {error}", file=sys.stderr)
        return EXIT_ERROR
    try:
        return eventloop.run(serve(args, features))
    except KeyboardInterrupt:
        return 0


async def serve(args: argparse.Namespace, features: FeatureGates, stop: asyncio.Event | None = None) -> int:
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signum, stop.set)
    try:
        cluster = await open_cluster(args, features, wait_ready_s=None)
    except Exception as error:
        log.error("cannot read the cluster: %s", error)
        return EXIT_ERROR
    server = ExtenderServer(
        build_scheduler(cluster, args), watch_health=cluster.watcher.health if cluster.watcher else None,
        limits=http_limits(args), debug_from_anywhere=getattr(args, "debug_from_anywhere", False),
    )
    webhook = None
    running = None
    banner_task = None
    extender_tls: ReloadingTLS | None = None
    gc_task = asyncio.create_task(_tune_gc_when_ready(cluster))
    warm_task = asyncio.create_task(_warm_when_ready(cluster))
    try:
        if args.extender_tls_cert_file:
            extender_tls = ReloadingTLS(
                args.extender_tls_cert_file,
                args.extender_tls_private_key_file,
                client_ca_file=args.extender_client_ca_file,
                name="extender serving",
            )
        await server.start(
            args.bind_address,
            args.extender_port,
            args.debug_port,
            extender_tls.server_context if extender_tls else None,
        )
        if extender_tls:
            extender_tls.start()
        webhook = webhook_server.server_from_args(
            args, cluster.cache, features=features, host=args.bind_address, port=args.webhook_port,
            limits=http_limits(args),
        )
        if webhook is not None:  # otherwise server_from_args logged why the port stays closed
            await webhook.start()
        if args.controllers and cluster.client is None:
            log.warning(
                "--controllers %s need an API server: not started in snapshot mode",
                ",".join(args.controllers),
            )
        elif args.controllers:
            running = await controllers.start_from_args(
                cluster.cache, cluster.client, args, registry=server.metrics.registry,
                workload_claims=features.enabled(WORKLOAD_CLAIMS),
            )
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
        gc_task.cancel()
        warm_task.cancel()
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
