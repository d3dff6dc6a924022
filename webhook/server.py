"""The webhook's HTTPS server: /webhook/mutate and /webhook/validate on their own TLS port. Its flags and
options are extender.wiring's, which builds it for `serve`."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from allocator import FeatureGates
from common.httpguard import GuardedListener, HttpLimits, expect_handler
from common.rules import RESERVED_FOR_MAX
from common.tls import ReloadingTLS
from webhook.admission import AdmissionHandler, Webhook
from webhook.lookup import ClusterLookup

log = logging.getLogger(__name__)

# A review carries the object and the old object; etcd caps objects at 1.5 MiB.
MAX_REVIEW_BYTES = 8 * 1024 * 1024


def build_app(handler: AdmissionHandler) -> web.Application:
    def endpoint(webhook: Webhook) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def serve(request: web.Request) -> web.Response:
            status, body = handler.handle(webhook, await request.read())
            return web.Response(status=status, body=body, content_type="application/json")

        return serve

    async def metrics(_: web.Request) -> web.Response:
        body = generate_latest(handler.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application(client_max_size=MAX_REVIEW_BYTES)
    expect = expect_handler(lambda _: MAX_REVIEW_BYTES)
    app.router.add_post("/webhook/mutate", endpoint("mutate"), expect_handler=expect)
    app.router.add_post("/webhook/validate", endpoint("validate"), expect_handler=expect)
    app.router.add_get("/metrics", metrics)
    return app


class WebhookServer:
    def __init__(
        self,
        lookup: ClusterLookup,
        *,
        cert_file: str,
        key_file: str,
        host: str,
        port: int,
        reserved_for_limit: int = RESERVED_FOR_MAX,
        features: FeatureGates,
        cert_poll_interval_s: float = 1.0,
        limits: HttpLimits | None = None,
    ) -> None:
        """`lookup` answers the rules' questions about the cluster (the extender's cache through
        extender.state.lookup when both run in one process)."""
        self.handler = AdmissionHandler(lookup, reserved_for_limit=reserved_for_limit, features=features)
        self.cert_file = cert_file
        self.key_file = key_file
        self.host = host
        self.port = port
        self.cert_poll_interval_s = cert_poll_interval_s
        self.limits = limits or HttpLimits()
        self.tls: ReloadingTLS | None = None
        self._listener: GuardedListener | None = None

    async def start(self) -> None:
        """Raises common.tls.CertificateLoadError when the certificate cannot be loaded, OSError on bind."""
        self.tls = ReloadingTLS(
            self.cert_file,
            self.key_file,
            name="webhook serving",
            poll_interval_s=self.cert_poll_interval_s,
            on_reload=lambda outcome: self.handler.metrics.cert_reloads.labels(outcome).inc(),
        )
        listener = GuardedListener(build_app(self.handler), self.limits)
        self.port = await listener.start(self.host, self.port, ssl_context=self.tls.server_context)
        self._listener = listener
        self.tls.start()
        log.info(
            "admission webhook listening on https://%s:%d (/webhook/mutate, /webhook/validate)",
            self.host,
            self.port,
        )

    async def stop(self) -> None:
        if self.tls is not None:
            await self.tls.stop()
        if self._listener is not None:
            await self._listener.stop()
            self._listener = None
