"""Prometheus metrics of the admission webhook, served on the webhook port's /metrics (webhook/server.py).

Their registry is prometheus_client's default one, which also carries the process_* and python_*
collectors; the extender's debug port serves registries of its own (extender.plugin.metrics).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

from common.metrics import MetricSet


class WebhookMetrics(MetricSet):
    def __init__(self, registry: CollectorRegistry) -> None:
        super().__init__(registry)
        self.decisions = Counter(
            "dra_extender_webhook_decisions",
            "Admission decisions by webhook, operation, resource and outcome "
            "(allowed, patched, denied, error, malformed).",
            ["webhook", "operation", "resource", "outcome"],
            registry=registry,
        )
        self.latency = Histogram(
            "dra_extender_webhook_review_duration_seconds",
            "Time from receiving an AdmissionReview body to having the response ready.",
            ["webhook"],
            buckets=(0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5),
            registry=registry,
        )
        self.cert_reloads = Counter(
            "dra_extender_webhook_certificate_reloads",
            "Serving certificate reload attempts by result (loaded, failed).",
            ["result"],
            registry=registry,
        )
