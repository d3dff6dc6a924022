"""The composition root: builds the components from their options (extender.options) and runs them.

    cluster = await open_cluster(options.source, wait_ready_s=None)
    scheduler = build_scheduler(cluster, options.scheduler)
    async with App(options) as app: ...          # serve: every port, TLS, webhook and controller

Only here is the environment read (the CEL engine, for every command).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Callable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry

from allocator import FeatureGates, cel
from common.httpguard import HttpLimits
from common.objects import parse_namespaced_name
from extender.controllers import (
    ControllerOptions,
    Controllers,
    start_controllers,
)
from extender.controllers.clock import RealClock
from extender.kube.events import EventRecorder
from extender.plugin.authority import Authority
from extender.plugin.explanation import Explanations
from extender.plugin.headroom import Headroom, HeadroomGauges
from extender.plugin.requeue import RequeueNudge
from extender.plugin.scheduling import (
    Scheduler,
)
from extender.plugin.verdicts import Words
from extender.state.cache import ClusterCache
from extender.state.lookup import ClusterCacheLookup
from webhook.server import WebhookServer

if TYPE_CHECKING:
    from extender.kube.client import KubeClient
    from extender.kube.informer import ClusterWatcher
    from extender.kube.leader import LeaderElector, LeaseFollower
    from extender.plugin.fence import Stewardship
from common import http2
from common.tls import ReloadingTLS
from extender.http.server import ExtenderServer
from extender.options import (
    SCHEDULER,
    LeaderOptions,
    NetworkOptions,
    OptionsError,
    SchedulerOptions,
    ServeOptions,
    SourceOptions,
    WebhookOptions,
)
from extender.tuning import after_sync

log = logging.getLogger(__name__)

EVENT_COMPONENT = "dra-extender"  # the source of the pod Events the scheduler writes


# Picks the CEL engine for every command (`dra-extender --version` names the one in use).
CEL_ENGINE_ENV = "DRA_EXTENDER_CEL_BACKEND"
# The pod's namespace: from the downward API (deploy/ sets it), else the service account's mount.
POD_NAMESPACE_ENV = "POD_NAMESPACE"
SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
# /readyz fails once this many attempts in a row could not read or write the Lease (403, no API server).
ELECTION_FAILURES_NOT_READY = 2


def lease_namespace(options: LeaderOptions, environ: Mapping[str, str] = os.environ,
                    service_account_file: str = SERVICE_ACCOUNT_NAMESPACE) -> str:
    """--leader-elect-namespace, else the pod's own namespace; OptionsError when there is none (a Lease
    in a namespace the deployment's RBAC does not reach would never be acquired)."""
    if options.namespace:
        return options.namespace
    namespace = environ.get(POD_NAMESPACE_ENV, "").strip()
    if not namespace:
        try:
            with open(service_account_file) as found:
                namespace = found.read().strip()
        except OSError:
            namespace = ""
    if not namespace:
        raise OptionsError(
            f"--leader-elect: no --leader-elect-namespace, and not in a pod (${POD_NAMESPACE_ENV} unset, "
            f"{service_account_file} unreadable): name the namespace of the Lease")
    return namespace


def choose_cel_engine(environ: Mapping[str, str] = os.environ) -> None:
    """Hand ``$DRA_EXTENDER_CEL_BACKEND`` (if set) to the allocator; OptionsError names the variable when
    it names no usable engine, so a server never starts whose every filter would fail."""
    requested = environ.get(CEL_ENGINE_ENV, "").strip()
    try:
        cel.use_engine(requested or None)
    except ValueError as error:
        raise OptionsError(f"{CEL_ENGINE_ENV}: {error}") from None


def build_info() -> dict[str, str]:
    """What `dra-extender version` prints and dra_extender_build_info carries."""
    from importlib.metadata import PackageNotFoundError, version

    from extender import eventloop

    try:
        own = version("dra-extender")
    except PackageNotFoundError:
        own = "unknown"
    return {"version": own, "cel_backend": cel.default_engine().name, "event_loop": eventloop.name()}


@dataclass
class Cluster:
    """The cache plus what keeps it current (nothing in snapshot mode)."""

    cache: ClusterCache
    client: KubeClient | None = None
    watcher: ClusterWatcher | None = None

    async def close(self) -> None:
        if self.watcher is not None:
            await self.watcher.stop()
        if self.client is not None:
            await self.client.close()


Progress = Callable[[str], None]


async def connect(source: SourceOptions) -> KubeClient:
    from extender.kube.client import KubeClient

    return await KubeClient.connect(kubeconfig=source.kubeconfig, context=source.context,
                                    request_timeout_s=source.request_timeout_s)


async def open_cluster(source: SourceOptions, *, wait_ready_s: float | None,
                       progress: Progress | None = None, client: KubeClient | None = None) -> Cluster:
    """A ClusterCache from the snapshot or from the API server (watched until closed).

    With `wait_ready_s` (a command someone waits for) the user's permissions are checked first, every
    missing one named at once (extender.kube.access.AccessDenied); a refusal met while listing ends
    the wait at once too, and `progress` hears how far the lists got every second after the first."""
    if source.snapshot:
        from extender.kube.objects_io import load_objects

        return Cluster(ClusterCache.from_objects(load_objects([source.snapshot]), source.features))
    from extender.kube import access
    from extender.kube.informer import ClusterWatcher, watched_kinds

    kinds = watched_kinds(source.features)
    client = client or await connect(source)
    waiting = wait_ready_s is not None
    if waiting:
        try:
            await access.check(client, [need for kind in kinds
                                        for need in access.needs_of_path(kind.path, ("list", "watch"))])
        except BaseException:
            await client.close()
            raise
    cache = ClusterCache(source.features)
    watcher = ClusterWatcher(client, cache, kinds=kinds, fail_fast=waiting)
    await watcher.start()
    cluster = Cluster(cache, client, watcher)
    if wait_ready_s is not None and not await _wait_synced(watcher, wait_ready_s, progress):
        await cluster.close()
        if watcher.failure is not None:
            raise ClusterUnreadable(f"refused: {watcher.failure}")
        raise ClusterUnreadable(f"the cluster cache did not sync within {wait_ready_s:g} s")
    return cluster


# Gates under which checking one pod reads other pods (the pods of its PodGroup, the pods whose
# requests take a node's cpu and memory): one pod's objects no longer suffice.
OTHER_PODS_GATES = ("DRAWorkloadResourceClaims", "DRANodeAllocatableResources")


class PodNotFound(LookupError):
    """The pod asked about does not exist."""


async def read_for_pod(client: KubeClient, features: FeatureGates, namespace: str,
                       name: str) -> Cluster | None:
    """A cache of what checking one pod needs, read once (no watch): the pod, every ResourceClaim (the
    devices they hold are in use), DeviceClasses, ResourceSlices, Nodes and DeviceTaintRules; None when
    a feature gate makes other pods matter (OTHER_PODS_GATES). It needs `get` of that one pod instead
    of `list` and `watch` of every pod in the cluster. Raises AccessDenied naming what the user may not
    read, PodNotFound for a pod that does not exist. The client stays open."""
    if any(features.enabled(gate) for gate in OTHER_PODS_GATES):
        return None
    from extender.kube import access
    from extender.kube.client import ApiError
    from extender.kube.informer import DEFAULT_KINDS

    kinds = [kind for kind in DEFAULT_KINDS if kind.kind not in ("Pod", "ResourceClaimTemplate")]
    needs = [access.Need("get", "pods", "", namespace)]
    needs += [need for kind in kinds for need in access.needs_of_path(kind.path, ("list",))]
    await access.check(client, needs)
    try:
        pod = await client.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
    except ApiError as error:
        if error.not_found:
            raise PodNotFound(f"pod {namespace}/{name} not found") from None
        raise

    async def listed(path: str, optional: bool) -> list[dict[str, Any]]:
        try:
            return await client.list_all(path)
        except ApiError as error:
            if optional and error.not_found:
                return []
            raise

    lists = await asyncio.gather(*(listed(kind.path, kind.optional) for kind in kinds))
    cache = ClusterCache(features)
    cache.replace("Pod", [pod])
    for kind, items in zip(kinds, lists, strict=True):
        cache.replace(kind.kind, items)
    cache.ready = True
    return Cluster(cache)


async def _wait_synced(watcher: ClusterWatcher, timeout_s: float, progress: Progress | None) -> bool:
    loop = asyncio.get_running_loop()
    started = loop.time()
    while True:
        left = timeout_s - (loop.time() - started)
        if left <= 0:
            return False
        if await watcher.wait_ready(min(1.0, left)):
            return True
        if watcher.failure is not None:
            return False
        if progress is not None:
            counts = ", ".join(f"{kind} {count}" + ("" if health["listed"] else " so far")
                               for (kind, count), health in zip(
                                   watcher.listed_items.items(), watcher.health()["kinds"].values(),
                                   strict=True))
            progress(f"reading the cluster ({loop.time() - started:.0f} s): {counts}")


def build_scheduler(cluster: Cluster, options: SchedulerOptions = SCHEDULER, *,
                    authority: Authority | None = None) -> Scheduler:
    """The scheduler; `authority` (extender/plugin/authority.py) decides when it may allocate (from the
    start when not given: snapshot mode, explain, simulate)."""
    from extender.plugin.claimwriter import ClaimWriter
    from extender.plugin.filtercache import FilterCache
    from extender.state.assume import AssumeCache

    authority = authority if authority is not None else Authority.always()
    assume = AssumeCache()
    assume.attach(cluster.cache)
    return Scheduler(
        cluster.cache,
        assume,
        ClaimWriter(cluster.client, cluster.cache, authority=authority),
        authority=authority,
        scoring=options.scoring,
        hold_devices=options.hold_devices,
        hold_ttl_s=options.hold_timeout_s,
        node_deadline_s=options.node_timeout_s,
        filter_deadline_s=options.filter_timeout_s,
        filter_cache=FilterCache(cluster.cache, assume) if options.filter_cache else None,
        reasons=Words(options.reasons),
        scheduler_names=options.scheduler_names,
        binding_timeout_s=options.binding_timeout_s,
        bind_wait_s=options.bind_wait_s,
    )


def build_webhook(options: WebhookOptions, cache: ClusterCache, *, features: FeatureGates, host: str,
                  limits: HttpLimits | None = None) -> WebhookServer | None:
    """The webhook server to start, or None (logged) when no certificate was given."""
    if not options.enabled:
        log.warning(
            "admission webhook disabled: --tls-cert-file and --tls-private-key-file are both required"
        )
        return None
    assert options.tls_cert_file is not None and options.tls_private_key_file is not None
    return WebhookServer(
        ClusterCacheLookup(cache),
        cert_file=options.tls_cert_file,
        key_file=options.tls_private_key_file,
        host=host,
        port=options.port,
        reserved_for_limit=options.reserved_for_limit,
        features=features,
        limits=limits,
    )


async def controllers_for(options: ControllerOptions, cluster: Cluster, *,
                          registry: CollectorRegistry) -> Controllers | None:
    """The running controllers, or None when none were asked for or (logged) there is no API server."""
    if not options.names:
        return None
    if cluster.client is None:
        log.warning(
            "--controllers %s need an API server: not started in snapshot mode", ",".join(options.names)
        )
        return None
    return await start_controllers(cluster.cache, cluster.client, options, registry=registry)


class App:
    """Everything `serve` runs, built from its options: the cluster cache and its watches, the scheduler,
    the extender and debug ports (with the extender's TLS), the admission webhook and the controllers.

    `async with App(options) as app:` starts them in that order; leaving the block, or a failure while
    starting, stops whatever was started, in reverse order. ClusterUnreadable says that the cluster
    itself could not be read; any other exception, that something could not start."""

    def __init__(self, options: ServeOptions) -> None:
        self.options = options
        self._stack = AsyncExitStack()
        self.cluster: Cluster
        self.scheduler: Scheduler
        self.server: ExtenderServer
        self.webhook: WebhookServer | None = None
        self.controllers: Controllers | None = None
        self.stewardship: Stewardship | None = None
        self.events: EventRecorder | None = None  # the pod Events of the scheduler and the stewardship
        self.elector: LeaderElector | None = None
        self.follower: LeaseFollower | None = None

    async def __aenter__(self) -> App:
        try:
            await self._start(self._stack)
        except BaseException:
            await self._stack.aclose()
            raise
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self._stack.aclose()

    async def _start(self, stack: AsyncExitStack) -> None:
        options, network = self.options, self.options.network
        try:
            self.cluster = await open_cluster(options.source, wait_ready_s=None)
        except Exception as error:
            raise ClusterUnreadable(str(error)) from error
        stack.push_async_callback(self.cluster.close)
        in_cluster = self.cluster.client is not None
        authority = None
        if in_cluster:
            self.elector = self._elector(options.leader)
            self.follower = self._follower(options.leader)
            verbs_elected = self.elector is not None and options.leader.verbs
            if self.follower is not None:
                authority = Authority(valid=self.follower.leading)
                authority.reason = f"standby: {self._not_following()}"
            else:
                authority = Authority(valid=self.elector.leading if verbs_elected and self.elector else None)
            if verbs_elected and self.elector is not None:
                authority.reason = f"standby: waiting for the Lease {self.elector.lease}"
        else:
            for flag, given in (("--leader-elect", options.leader.enabled),
                                ("--follow-scheduler-lease", options.leader.follow_scheduler_lease)):
                if given:
                    log.warning("%s needs an API server: ignored in snapshot mode", flag)
        self.scheduler = build_scheduler(self.cluster, options.scheduler, authority=authority)
        if self.cluster.client is not None:  # in snapshot mode there is nobody to tell
            recorder = self.events = EventRecorder(self.cluster.client, RealClock(), EVENT_COMPONENT)
            recorder.start()
            stack.push_async_callback(recorder.stop)
            self.scheduler.explanations = Explanations(recorder)
            self.scheduler.events = recorder
            if options.scheduler.requeue_claim:
                namespace, name = parse_namespaced_name(options.scheduler.requeue_claim)
                nudge = RequeueNudge(self.cluster.client, namespace, name)
                self.cluster.cache.subscribe(nudge.on_change)
                stack.push_async_callback(nudge.stop)
                self.scheduler.requeue = nudge
        elif options.scheduler.requeue_claim:
            log.warning("--requeue-claim needs an API server: not used in snapshot mode")
        self.server = ExtenderServer(
            self.scheduler,
            watch_health=self.cluster.watcher.health if self.cluster.watcher else None,
            limits=network.limits, debug_from_anywhere=network.debug_from_anywhere,
            driver_lost=self._driver_lost,
        )
        stack.push_async_callback(self.server.stop)
        self.server.process_metrics.build_labels = build_info()
        if options.headroom:
            self.server.add_headroom(HeadroomGauges(Headroom(self.cluster.cache, self.scheduler.assume),
                                                    options.headroom))
        tuning = asyncio.create_task(
            after_sync(self.cluster.cache, self.cluster.watcher, self.scheduler.filter_cache,
                       fenced=lambda: self.scheduler.authority.term is not None))
        stack.callback(tuning.cancel)
        extender_tls = extender_serving_tls(network)
        await self.server.start(network.bind_address, network.extender_port, network.debug_port,
                                extender_tls.server_context if extender_tls else None,
                                extender_host=network.extender_bind_address)
        if network.verbs_unauthenticated:  # only with --extender-allow-unauthenticated (NetworkOptions)
            log.warning("--extender-allow-unauthenticated: the extender verbs at %s answer anyone who "
                        "reaches %s without a client certificate; any of them can bind any pending pod to "
                        "any node", self.server.urls["extender"], network.extender_bind_address)
            self.server.metrics.verbs_unauthenticated.set(1)
        elif network.extender_allow_unauthenticated:
            log.info("--extender-allow-unauthenticated has no effect: the verbs %s",
                     "require client certificates" if network.extender_client_ca_file
                     else f"listen on loopback ({network.extender_bind_address})")
        if extender_tls is not None:
            extender_tls.start()
            stack.push_async_callback(extender_tls.stop)
        self.webhook = build_webhook(options.webhook, self.cluster.cache, features=options.source.features,
                                     host=network.bind_address, limits=network.limits)
        if self.webhook is not None:  # otherwise build_webhook logged why the port stays closed
            await self.webhook.start()
            stack.push_async_callback(self.webhook.stop)
        if in_cluster:
            await self._start_stewardship(stack)
        self.controllers = await controllers_for(options.controllers, self.cluster,
                                                 registry=self.server.metrics.registry)
        if self.controllers is not None:
            self.server.add_state("controllers", self.controllers.state)
            stack.push_async_callback(self.controllers.stop)
        verbs_wait = (self.elector is not None and options.leader.verbs) or self.follower is not None
        if self.stewardship is not None and not verbs_wait:
            self.stewardship.begin()
        if self.follower is not None:
            self.server.add_state("schedulerLease", self.follower.describe)
            self.server.standby_ready = True
            self.follower.start()
            stack.push_async_callback(self.follower.stop)  # stops writing before the rest stops
        if self.elector is not None:
            self.server.add_state("leaderElection", self.elector.describe)
            self.server.readiness = self._election_problem
            self.elector.start()
            # First of all on the way out: stop writing, then hand the Lease over at once.
            stack.push_async_callback(self._stop_leading)

    def _elector(self, options: LeaderOptions) -> LeaderElector | None:
        """The leader election of --leader-elect, in the Lease's namespace (the pod's own by default)."""
        if not options.enabled:
            return None
        from extender.kube.leader import LeaderElector, MonotonicClock, default_identity

        assert self.cluster.client is not None
        return LeaderElector(
            self.cluster.client, MonotonicClock(), identity=options.identity or default_identity(),
            namespace=lease_namespace(options), name=options.name,
            lease_duration=options.lease_duration_s, renew_deadline=options.renew_deadline_s,
            retry_period=options.retry_period_s, on_started=self._lead, on_stopped=self._stand_down)

    def _follower(self, options: LeaderOptions) -> LeaseFollower | None:
        """--follow-scheduler-lease: the verbs follow this pod's kube-scheduler's election."""
        if not options.follow_scheduler_lease:
            return None
        from extender.kube.leader import LeaseFollower, MonotonicClock

        assert self.cluster.client is not None
        namespace, name = parse_namespaced_name(options.follow_scheduler_lease)
        # kube-scheduler's identity in its Lease is <hostname>_<uuid>; in a pod both containers share
        # the pod's hostname.
        return LeaseFollower(self.cluster.client, MonotonicClock(), holder_prefix=f"{socket.gethostname()}_",
                             namespace=namespace, name=name, on_started=self._follow_started,
                             on_stopped=self._follow_stopped)

    def _not_following(self) -> str:
        lease = self.follower.lease if self.follower is not None else "?"
        return f"this pod's kube-scheduler does not hold the Lease {lease}"

    async def _follow_started(self) -> None:
        if self.stewardship is not None:
            self.stewardship.begin()

    async def _follow_stopped(self) -> None:
        if self.stewardship is not None:
            await self.stewardship.end(f"standby: {self._not_following()}")

    async def _lead(self) -> None:
        """This replica holds the Lease: the fence, then the verbs (when elected) and the controllers."""
        if self.options.leader.verbs and self.stewardship is not None:
            self.stewardship.begin()
        if self.controllers is not None:
            await self.controllers.lead()

    async def _stand_down(self) -> None:
        if self.options.leader.verbs and self.stewardship is not None:
            lease = self.elector.lease if self.elector is not None else "?"
            await self.stewardship.end(f"standby: another replica holds the Lease {lease}")
        if self.controllers is not None:
            await self.controllers.stand_down()

    async def _stop_leading(self) -> None:
        if self.stewardship is not None:
            await self.stewardship.end("stopping")
        if self.controllers is not None:
            await self.controllers.stand_down()
        if self.elector is not None:
            await self.elector.stop(release=True)

    def _election_problem(self) -> str:
        """/readyz: an election that cannot read or write its Lease (every attempt fails) is not ready,
        even for a replica that would only run controllers."""
        elector = self.elector
        if elector is None or elector.failures < ELECTION_FAILURES_NOT_READY:
            return ""
        return (f"leader election: {elector.failures} attempts in a row could not get the Lease "
                f"{elector.lease}: {elector.last_error}")

    async def _start_stewardship(self, stack: AsyncExitStack) -> None:
        """The fence, the sweeper of half-written claims, the repair of pods bound without their devices
        (extender/plugin/fence.py, repair.py), the sweeper of claims whose device binding failed
        (bindingconditions.py); the repair and that sweeper record events through the scheduler's recorder."""
        from extender.plugin.bindingconditions import BindingSweeper
        from extender.plugin.claimwriter import ClaimWriter
        from extender.plugin.fence import ClaimFence, HalfWrittenSweeper, Stewardship
        from extender.plugin.repair import BoundPodRepair

        client = self.cluster.client
        assert client is not None
        writer = self.scheduler.writer
        assert isinstance(writer, ClaimWriter)
        cache, authority = self.cluster.cache, self.scheduler.authority
        events = self.events
        assert events is not None
        fence = ClaimFence(cache, writer, authority)
        sweeper = HalfWrittenSweeper(cache, writer, authority)
        def warn(pod: dict, reason: str, message: str) -> None:
            events.record(pod, reason, message, event_type="Warning")

        repair = BoundPodRepair(self.scheduler, report=warn)
        bindings = BindingSweeper(cache, writer, self.scheduler.binding, authority, report=warn)
        self.stewardship = Stewardship(cache, fence, [sweeper.sweep_once, repair.repair_due,
                                                      bindings.sweep_once])
        self.server.add_state("fence", lambda: {**fence.describe(), **sweeper.describe()})
        self.server.add_state("repair", repair.describe)
        self.server.add_state("bindingSweeper", bindings.describe)
        self.server.add_gauges(lambda: {"pods_without_devices": len(repair.unrepairable)})
        stack.push_async_callback(self.stewardship.end, "stopping")

    def _driver_lost(self) -> list[dict[str, Any]] | None:
        return self.controllers.driver_lost() if self.controllers is not None else None


class ClusterUnreadable(RuntimeError):
    """The cluster could not be read: no credentials, no API server, an unreadable snapshot."""


def extender_serving_tls(network: NetworkOptions) -> ReloadingTLS | None:
    """The extender port's certificate (reloaded when it changes), or None for plain HTTP."""
    if not (network.extender_tls_cert_file and network.extender_tls_private_key_file):
        return None
    # h2 first: kube-scheduler's client then sends every call on one connection (common/http2.py).
    return ReloadingTLS(network.extender_tls_cert_file, network.extender_tls_private_key_file,
                        client_ca_file=network.extender_client_ca_file, name="extender serving",
                        alpn=(http2.ALPN_H2, "http/1.1"))
