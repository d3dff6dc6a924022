"""Prometheus metrics of the admission webhook (default registry, served on the webhook port's /metrics,
see webhook/server.py; the extender's debug port renders only its own registry)."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

DECISIONS = Counter(
    "dra_extender_webhook_decisions",
    "Admission decisions by webhook, operation, resource and outcome "
    "(allowed, patched, denied, error, malformed).",
    ["webhook", "operation", "resource", "outcome"],
)
LATENCY = Histogram(
    "dra_extender_webhook_review_duration_seconds",
    "Time from receiving an AdmissionReview body to having the response ready.",
    ["webhook"],
    buckets=(0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5),
)
CERT_RELOADS = Counter(
    "dra_extender_webhook_certificate_reloads",
    "Serving certificate reload attempts by result (loaded, failed).",
    ["result"],
)
