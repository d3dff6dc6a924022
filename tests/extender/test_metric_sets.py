"""common.metrics: every component's metrics go on a registry through MetricSet.on."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from extender.controllers.metrics import ControllerMetrics
from extender.plugin.metrics import Metrics
from webhook.metrics import WebhookMetrics


def test_on_registers_a_set_once_per_registry() -> None:
    registry = CollectorRegistry()
    first = ControllerMetrics.on(registry)
    assert ControllerMetrics.on(registry) is first  # a second registration would raise "Duplicated"
    assert ControllerMetrics.on(CollectorRegistry()) is not first
    assert first.registry is registry


def test_the_components_share_a_registry_and_each_series_is_there_once() -> None:
    registry = CollectorRegistry()
    for metric_set in (Metrics, ControllerMetrics, WebhookMetrics):
        metric_set.on(registry)
    Metrics.on(registry).bind_conflicts.inc()
    WebhookMetrics.on(registry).cert_reloads.labels("loaded").inc()
    text = generate_latest(registry).decode()
    assert text.count("# TYPE dra_extender_bind_conflicts_total counter") == 1
    assert "dra_extender_bind_conflicts_total 1.0" in text
    assert 'dra_extender_webhook_certificate_reloads_total{result="loaded"} 1.0' in text
    assert "# TYPE dra_extender_taint_eviction_queue_depth gauge" in text
