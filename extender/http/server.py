"""HTTP front of the extender: the scheduler-extender verbs on one port, read-only debug on another.

Extender port (`{prefix}/filter`, `/prioritize`, `/bind`, `/preempt`): exactly kube-scheduler's JSON.
kube-scheduler ignores the body of any answer but a 200, so a malformed filter or bind request is
answered 200 with the problem in `Error` (which kube-scheduler logs); prioritize and preempt have no
such field and get HTTP 400 with a message. A scheduling problem is an answer, not an HTTP error.
Body sizes, slow and idle connections are bounded (common.httpguard).
Debug port: `/debug/explain`, `/debug/state`, `/debug/snapshot`, `/debug/ui` (extender/http/devicemap.py),
`/healthz`, `/livez`, `/readyz`, `/metrics`. The `/debug/` pages describe the cluster's pods and claims:
unless `debug_from_anywhere`, they answer only connections from loopback (`kubectl port-forward` arrives
there); kubelet's probes and Prometheus reach the rest from the pod network.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import yaml
from aiohttp import web

from common import http2
from common.addresses import is_loopback
from common.claimrefs import pod_key
from common.httpguard import BodyReader, GuardedListener, HttpLimits, RequestRefused, expect_handler
from extender.http import devicemap, wire
from extender.http.explain import ExplainError, explain_pod, render_text
from extender.http.names import split_ref
from extender.plugin.extendedresources import requested_names
from extender.plugin.headroom import Headroom, HeadroomGauges, parse_shape_flag
from extender.plugin.headroom import report as headroom_report
from extender.plugin.metrics import CONTENT_TYPE, ProcessMetrics
from extender.plugin.podclaims import has_claims
from extender.plugin.scheduling import BindFailed, Scheduler

log = logging.getLogger(__name__)

DEFAULT_PREFIX = "/scheduler"
_YAML_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)

DEBUG_LOOPBACK_ONLY = ("dra-extender: /debug/ pages answer only loopback connections (use kubectl "
                       "port-forward, or start serve with --debug-from-anywhere)\n")
NOT_SYNCED = "dra-extender: the cluster cache has not synced yet (initial lists in progress); try again"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _json(body: bytes, status: int = 200) -> web.Response:
    return web.Response(body=body, status=status, content_type="application/json")


def _from_loopback(request: web.Request) -> bool:
    # No peer address: a unix socket, not a network client.
    return request.remote is None or is_loopback(request.remote)


def _debug_gate(from_anywhere: bool) -> Any:
    @web.middleware
    async def gate(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not from_anywhere and request.path.startswith("/debug/") and not _from_loopback(request):
            return web.Response(status=403, text=DEBUG_LOOPBACK_ONLY)
        return await handler(request)

    return gate


def _error_response(method: str, path: str, error: Exception) -> web.Response:
    """The answer to a request whose handler raised `error` (not an aiohttp HTTPException)."""
    if isinstance(error, RequestRefused):
        return web.Response(status=error.status, text=f"{error}\n")
    if isinstance(error, wire.BadRequest):
        if path.endswith("/filter"):
            return _json(wire.encode_filter_error(str(error)))
        if path.endswith("/bind"):
            return _json(wire.encode_binding_result(str(error)))
        return web.Response(status=400, text=f"{error}\n")
    # A bug, not bad input: say so and keep serving.
    log.error("%s %s failed", method, path, exc_info=error)
    return _json(orjson.dumps({"Error": f"internal error: {type(error).__name__}: {error}"}), status=500)


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except web.HTTPException:
        raise
    except Exception as error:
        response = _error_response(request.method, request.path, error)
        if isinstance(error, RequestRefused) and error.status in (408, 413):
            response.force_close()  # the rest of the body is not worth reading
        return response


def _elsewhere(response: web.Response) -> web.Response:
    """A verb refused because this replica may not answer (not synced, a standby): the connection is
    closed after it, so kube-scheduler's next call opens a new one, which the Service sends to a ready
    replica. Without that, a kept-alive connection (HTTP/2 carries every call on one) would stay
    on a replica that lost its lease, refusing every pod until it restarts."""
    response.force_close()
    return response


def _answer(response: web.Response) -> http2.Answer:
    body = response.body
    assert isinstance(body, bytes)
    return http2.Answer(response.status, response.headers["Content-Type"], body,
                        close=response.keep_alive is False)


def _probe(request: web.Request, name: str, checks: list[tuple[str, bool]]) -> web.Response:
    """A probe's answer as kube components give it: `ok`, or with `?verbose` one line per check."""
    passed = all(ok for _, ok in checks)
    if "verbose" not in request.query:
        return web.Response(status=200 if passed else 503, text="ok\n" if passed else f"{name} failed\n")
    lines = [f"[{'+' if ok else '-'}]{check} {'ok' if ok else 'failed'}" for check, ok in checks]
    lines.append(f"{name} check {'passed' if passed else 'failed'}")
    return web.Response(status=200 if passed else 503, text="\n".join(lines) + "\n")


class ExtenderServer:
    def __init__(
        self,
        scheduler: Scheduler,
        *,
        prefix: str = DEFAULT_PREFIX,
        watch_health: Callable[[], dict[str, Any]] | None = None,
        limits: HttpLimits | None = None,
        debug_from_anywhere: bool = False,
        driver_lost: Callable[[], list[dict[str, Any]] | None] | None = None,
    ) -> None:
        self.debug_from_anywhere = debug_from_anywhere
        self.scheduler = scheduler
        self.limits = limits or HttpLimits()
        self.bodies = BodyReader(self.limits)
        self.cache = scheduler.cache
        self.metrics = scheduler.metrics  # the scheduler counts filter outcomes and bind failures there
        self.prefix = "/" + prefix.strip("/") if prefix.strip("/") else ""
        self.watch_health = watch_health
        self.metrics.watch_state(self._gauges)
        self.process_metrics = ProcessMetrics.on(self.metrics.registry)
        self._listeners: list[GuardedListener] = []
        self._extra_state: dict[str, Callable[[], Any]] = {}
        self._extra_gauges: list[Callable[[], dict[str, Any]]] = []
        # The driver-loss controller's lost pools (None while it does not run) join explanations.
        self.driver_lost = driver_lost
        self.urls: dict[str, str] = {}
        # Another reason not to be ready (a leader election that cannot reach its Lease), or "".
        self.readiness: Callable[[], str] | None = None
        # A standby is ready (second-scheduler mode: its pod must count as available for rollouts and
        # the PodDisruptionBudget; nothing routes verbs by readiness there), though its verbs refuse.
        self.standby_ready = False
        self.addresses: dict[str, list[str]] = {}  # "extender", "debug" -> where their sockets listen
        self.headroom_gauges: HeadroomGauges | None = None

    def add_headroom(self, gauges: HeadroomGauges) -> None:
        """Serve the headroom of serve's --headroom shapes on /metrics and the device map."""
        self.headroom_gauges = gauges
        self.metrics.registry.register(gauges)

    def _headroom_reports(self, asked: str) -> list[tuple[str, dict[str, Any]]]:
        if asked:
            parse_shape_flag(asked)  # a ValueError naming what is wrong: the URL's fault
            return [headroom_report(Headroom(self.cache, self.scheduler.assume), asked)]
        return self.headroom_gauges.reports() if self.headroom_gauges is not None else []

    def _maps_extended(self, resource: str) -> bool:
        return self.scheduler.planner.extended.class_for(resource) is not None

    def add_state(self, name: str, provider: Callable[[], Any]) -> None:
        """Show `provider()` under `name` in /debug/state (e.g. the controllers)."""
        self._extra_state[name] = provider

    def add_gauges(self, provider: Callable[[], dict[str, Any]]) -> None:
        """Add `provider()`'s values to the gauges /metrics reads (see Metrics.watch_state)."""
        self._extra_gauges.append(provider)

    # ---- apps ---------------------------------------------------------------------------------

    def extender_app(self) -> web.Application:
        app = web.Application(middlewares=[_errors], client_max_size=self.limits.max_request_bytes)
        expect = expect_handler(self.limits.body_limit)
        for path, verb in self._verbs().items():
            app.router.add_post(path, self._over_http1(verb), expect_handler=expect)
        return app

    def _verbs(self) -> dict[str, Callable[[bytes], Awaitable[web.Response]]]:
        return {f"{self.prefix}/filter": self.filter, f"{self.prefix}/prioritize": self.prioritize,
                f"{self.prefix}/bind": self.bind, f"{self.prefix}/preempt": self.preempt}

    def _over_http1(self, verb: Callable[[bytes], Awaitable[web.Response]]) -> Handler:
        async def handle(request: web.Request) -> web.Response:
            return await verb(await self.bodies.read(request))

        return handle

    def _http2_router(self) -> http2.Router:
        """The verbs for common.http2: the same handlers, limits and error answers as over HTTP/1.1."""
        verbs = self._verbs()
        not_found = http2.text_answer(404, "404: Not Found")
        not_allowed = http2.text_answer(405, "405: Method Not Allowed")

        def route(method: str, path: str) -> http2.Verb | http2.Answer:
            verb = verbs.get(path)
            if verb is None:
                return not_found
            if method != "POST":
                return not_allowed

            async def serve(request: http2.Request) -> http2.Answer:
                try:
                    return _answer(await verb(request.body))
                except Exception as error:
                    return _answer(_error_response(request.method, request.path, error))

            return serve

        return route

    def _http2_connection(self, budget: http2.StreamBudget) -> Callable[[Callable[[Any], None]], Any]:
        route = self._http2_router()

        def connection(forget: Callable[[Any], None]) -> http2.H2Protocol:
            self.metrics.scheduler_http2_connections.inc()
            # filter and prioritize are steps of kube-scheduler's one-pod-at-a-time scheduling cycle,
            # which waits for them; binds run concurrently, and their answers may share writes.
            return http2.H2Protocol(route, self.limits, self.bodies, budget, on_close=forget,
                                    answer_at_once=(f"{self.prefix}/filter", f"{self.prefix}/prioritize"))

        return connection

    def debug_app(self) -> web.Application:
        app = web.Application(middlewares=[_debug_gate(self.debug_from_anywhere), _errors])
        app.router.add_get("/debug/explain", self.explain)
        app.router.add_get("/debug/state", self.state)
        app.router.add_get("/debug/snapshot", self.snapshot)
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/livez", self.livez)
        app.router.add_get("/readyz", self.readyz)
        app.router.add_get("/metrics", self.metrics_endpoint)
        devicemap.register(app, lambda: devicemap.take_view(self.cache, self.scheduler.in_flight(),
                                                            self._maps_extended, self.scheduler.binding),
                           self._headroom_reports)
        return app

    async def start(self, host: str, extender_port: int, debug_port: int,
                    ssl_context: ssl.SSLContext | None = None, *, extender_host: str | None = None) -> None:
        """Listen: the debug port on `host`, the verbs on `extender_host` (`host` unless given)."""
        extender_host = host if extender_host is None else extender_host
        for name, app, address, port, context in (
                ("extender", self.extender_app(), extender_host, extender_port, ssl_context),
                ("debug", self.debug_app(), host, debug_port, None)):
            counted = self.metrics.scheduler_connections.inc if name == "extender" else None
            # HTTP/2 for the verbs when the TLS context offers it by ALPN (kube-scheduler then sends
            # every call on one connection instead of opening one for most pods).
            h2 = self._http2_connection(http2.StreamBudget(self.limits.max_connections)) \
                if name == "extender" else None
            listener = GuardedListener(app, self.limits, on_connection=counted, http2=h2)
            bound = await listener.start(address, port, ssl_context=context)
            self._listeners.append(listener)
            self.addresses[name] = listener.addresses
            scheme = "https" if context is not None else "http"
            # A wildcard address is not something to paste into curl: show loopback instead.
            shown = {"0.0.0.0": "127.0.0.1", "::": "[::1]", "": "127.0.0.1"}.get(address, address)
            shown = f"[{shown}]" if ":" in shown and not shown.startswith("[") else shown
            self.urls[name] = f"{scheme}://{shown}:{bound}" + (self.prefix if name == "extender" else "")

    async def stop(self) -> None:
        for listener in reversed(self._listeners):
            await listener.stop()
        self._listeners.clear()

    # ---- extender verbs -----------------------------------------------------------------------

    # Until the initial lists are done, claims allocated in the cluster may be missing from the cache
    # and their devices would look free; until the fence is done (extender/plugin/fence.py), a write of
    # the previous process may still land; a standby must not answer at all. kube-scheduler does not
    # consult /readyz (a sidecar is called on loopback, and a Service's endpoints lag), so every verb
    # that depends on these refuses by itself.
    def _not_synced(self) -> str:
        if not self.cache.ready:
            return NOT_SYNCED
        reason = self.scheduler.authority.reason if self.scheduler.authority.term is None else ""
        return f"dra-extender is not ready: {reason}" if reason else ""

    async def filter(self, body: bytes) -> web.Response:
        started = time.perf_counter()
        args = wire.parse_extender_args(body, "filter")
        # Before the DeviceClasses are listed, any extended resource may turn out to be backed by DRA.
        not_ready = self._not_synced()
        if not_ready and (has_claims(args.pod) or requested_names(args.pod)):
            body = wire.encode_filter_result(args, [], {}, {}, not_ready)
            return _elsewhere(_json(body))
        result = await self.scheduler.filter(args.pod, args.node_names, node_objects=args.node_objects,
                                             brief=True)
        body = wire.encode_filter_result(
            args, result.passed, result.failed, result.unresolvable, result.error
        )
        took = time.perf_counter() - started
        self.metrics.filter_seconds.observe(took)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("filter: %d of %d node(s) fit", len(result.passed), len(args.node_names or ()),
                      extra={"verb": "filter", "pod": pod_key(args.pod), "duration": round(took, 6)})
        return _json(body)

    async def prioritize(self, body: bytes) -> web.Response:
        started = time.perf_counter()
        args = wire.parse_extender_args(body, "prioritize")
        not_ready = self._not_synced()
        if not_ready:
            # kube-scheduler ignores the scores of an extender that fails
            return _elsewhere(web.Response(status=503, text=f"{not_ready}\n"))
        scores = await self.scheduler.prioritize(args.pod, args.node_names, node_objects=args.node_objects)
        took = time.perf_counter() - started
        self.metrics.prioritize_seconds.observe(took)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("prioritize: %d node(s) scored", len(scores),
                      extra={"verb": "prioritize", "pod": pod_key(args.pod), "duration": round(took, 6)})
        return _json(wire.encode_host_priorities(scores))

    async def bind(self, body: bytes) -> web.Response:
        started = time.perf_counter()
        args = wire.parse_binding_args(body)
        error = not_ready = self._not_synced()
        try:
            if not error:
                await self.scheduler.bind(args.pod_namespace, args.pod_name, uid=args.pod_uid,
                                          node_name=args.node)
        except BindFailed as failed:
            error = str(failed)
        took = time.perf_counter() - started
        self.metrics.bind_seconds.observe(took)
        fields = {"verb": "bind", "pod": f"{args.pod_namespace}/{args.pod_name}", "node": args.node,
                  "duration": round(took, 6)}
        if error:
            log.info("bind failed: %s", error, extra=fields)
        elif log.isEnabledFor(logging.DEBUG):
            log.debug("bound", extra=fields)
        response = _json(wire.encode_binding_result(error))
        return _elsewhere(response) if not_ready else response

    async def preempt(self, body: bytes) -> web.Response:
        args = wire.parse_preemption_args(body)
        not_ready = self._not_synced()
        if not_ready:
            return _elsewhere(web.Response(status=503, text=f"{not_ready}\n"))
        return _json(wire.encode_preemption_result(await self.scheduler.preempt(args.pod, args.victims)))

    # ---- debug --------------------------------------------------------------------------------

    async def explain(self, request: web.Request) -> web.Response:
        try:  # NAME alone is in the default namespace, as on the command line
            namespace, name = split_ref(request.query.get("pod", ""))
        except ValueError as error:
            raise wire.BadRequest(f"query parameter pod: {error}") from None
        text_format = request.query.get("format", "json")
        if text_format not in ("json", "text"):
            raise wire.BadRequest(f"format must be json or text, got {text_format!r}")
        nodes = request.query.getall("node", []) or None
        try:
            lost = self.driver_lost() if self.driver_lost else None
            report = await explain_pod(self.scheduler, namespace, name, nodes, driver_lost=lost)
        except ExplainError as error:
            return web.Response(status=404, text=f"{error}\n")
        if text_format == "text":
            return web.Response(text=render_text(report))
        return _json(orjson.dumps(report, option=orjson.OPT_INDENT_2))

    async def state(self, request: web.Request) -> web.Response:
        # `section` (repeated or comma-separated) picks top-level keys. The cache's counts and the pools
        # are built only when asked: on 20,000 nodes they held the event loop for tens of ms.
        asked = {name for value in request.query.getall("section", []) for name in value.split(",") if name}
        costly: dict[str, Callable[[], Any]] = {
            "cache": self.cache.stats,
            "pools": lambda: self.cache.inventory.describe_pools(self.cache.features),
        }
        rest = {
            **self.scheduler.describe_state(),
            "watch": self.watch_health() if self.watch_health else {"mode": "snapshot"},
            **{name: provider() for name, provider in self._extra_state.items()},
        }
        unknown = asked - costly.keys() - rest.keys()
        if unknown:
            known = ", ".join([*costly, *rest])
            raise wire.BadRequest(f"query parameter section: unknown {', '.join(sorted(unknown))} "
                                  f"(known: {known})")
        body = {name: build() for name, build in costly.items() if not asked or name in asked}
        body.update((name, value) for name, value in rest.items() if not asked or name in asked)
        return _json(orjson.dumps(body, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS))

    async def snapshot(self, request: web.Request) -> web.Response:
        # Serialising a large cluster takes seconds: do it off the event loop so filters keep flowing.
        # The cache replaces objects on change and never edits a stored one, so the list is stable.
        # Only a shallow copy is taken here: the objects kept packed are unpacked in the thread as well.
        objects = self.cache.objects_taken()
        text = await asyncio.to_thread(lambda: yaml.dump_all(objects(), Dumper=_YAML_DUMPER, sort_keys=False))
        return web.Response(text=text, content_type="application/yaml")

    async def healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def livez(self, request: web.Request) -> web.Response:
        # Answered by the event loop every verb runs on: an answer means the loop is not stuck. Nothing
        # else is checked, so a cluster that is slow to list never gets the pod restarted.
        return _probe(request, "livez", [("ping", True)])

    async def readyz(self, request: web.Request) -> web.Response:
        problem = (self.readiness() if self.readiness is not None else "") or (
            "" if self.standby_ready and self.cache.ready else self._not_synced())
        if "verbose" in request.query:
            return _probe(request, "readyz", [("ping", True), ("informer-sync", self.cache.ready),
                                              ("leader-election", not problem or not self.cache.ready)])
        if not self.cache.ready:
            return web.Response(status=503, text="cluster cache not synced yet\n")
        if problem:
            return web.Response(status=503, text=f"{problem}\n")
        return web.Response(text="ok\n")

    async def metrics_endpoint(self, request: web.Request) -> web.Response:
        response = web.Response(body=self.metrics.render())
        response.headers["Content-Type"] = CONTENT_TYPE
        return response

    def _gauges(self) -> dict[str, Any]:
        health = self.watch_health() if self.watch_health else {}
        restarts = {
            kind: info["restarts"]
            for kind, info in (health.get("kinds") or {}).items()
            if isinstance(info, dict) and "restarts" in info
        }
        gauges = {
            **self.scheduler.gauges(),
            "objects": self.cache.object_counts(),
            "watch_restarts": restarts,
        }
        for provider in self._extra_gauges:
            gauges.update(provider())
        return gauges
