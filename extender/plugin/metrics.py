"""Prometheus metrics of the extender (served with the controllers' on the debug port's /metrics).
Each Scheduler gets its own registry unless given one, so tests can run several."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from common.metrics import MetricSet

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# Filter must stay far below kube-scheduler's 5 s extender timeout; buckets resolve the fast path.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.015, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class _StateCollector(Collector):
    """Gauges read at scrape time from the live objects (nothing to keep in sync)."""

    def __init__(self, sources: Callable[[], dict[str, Any]]) -> None:
        self.sources = sources

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        state = self.sources()
        in_flight = GaugeMetricFamily("dra_extender_allocations_in_flight",
                                      "Claim allocations chosen at bind, status not written yet.")
        in_flight.add_metric([], state.get("in_flight", 0))
        yield in_flight
        objects = GaugeMetricFamily("dra_extender_cache_objects", "Objects in the cluster cache.",
                                    labels=["kind"])
        for kind, count in sorted((state.get("objects") or {}).items()):
            objects.add_metric([kind], count)
        yield objects
        # Counters read from running totals kept elsewhere (the watches', the claim writer's): they only
        # grow while the process lives, which is all a counter promises, so rate() and increase() apply.
        restarts = CounterMetricFamily("dra_extender_watch_restarts",
                                       "Watch restarts (reconnects and re-lists).", labels=["kind"])
        for kind, count in sorted((state.get("watch_restarts") or {}).items()):
            restarts.add_metric([kind], count)
        yield restarts
        conflicts = CounterMetricFamily("dra_extender_bind_write_conflicts",
                                        "Claim status writes answered with 409 Conflict and retried.")
        conflicts.add_metric([], state.get("write_conflicts", 0))
        yield conflicts
        lost = GaugeMetricFamily("dra_extender_bind_write_answers_lost",
                                 "Bind writes whose answer was lost (5xx, timeout, cut connection) and whose "
                                 "outcome was read back from the API server.")
        lost.add_metric([], state.get("unknown_outcomes", 0))
        yield lost
        without = GaugeMetricFamily("dra_extender_bound_pods_without_devices",
                                    "Bound pods whose claims are not allocated and reserved for them, and "
                                    "that could not be repaired (see /debug/state, repair).")
        without.add_metric([], state.get("pods_without_devices", 0))
        yield without


class Metrics(MetricSet):
    def __init__(self, registry: CollectorRegistry) -> None:
        super().__init__(registry)
        self.filter_seconds = Histogram("dra_extender_filter_duration_seconds", "Filter request latency.",
                                        buckets=LATENCY_BUCKETS, registry=self.registry)
        self.prioritize_seconds = Histogram("dra_extender_prioritize_duration_seconds",
                                            "Prioritize request latency.", buckets=LATENCY_BUCKETS,
                                            registry=self.registry)
        self.bind_seconds = Histogram("dra_extender_bind_duration_seconds", "Bind request latency.",
                                      buckets=LATENCY_BUCKETS, registry=self.registry)
        self.filter_outcomes = Counter("dra_extender_filter_node_outcomes",
                                       "Per-node filter verdicts by reason (fits, devices, ...).",
                                       ["reason"], registry=self.registry)
        # reason -> its child of filter_outcomes: labels() costs more than inc(), twice per filter.
        self._outcomes: dict[str, Any] = {}
        self.bind_conflicts = Counter("dra_extender_bind_conflicts",
                                      "Binds whose re-check found the chosen node no longer fits.",
                                      registry=self.registry)
        # kube-scheduler's extender client keeps 2 idle connections: with more requests in flight (binds
        # run beside the next pod's filter) it opens new ones, each a TLS handshake on both sides.
        self.scheduler_connections = Counter("dra_extender_scheduler_connections",
                                             "Connections accepted on the extender port.",
                                             registry=self.registry)
        # Over TLS its client offers HTTP/2, which carries every call on one connection (common/http2.py).
        self.scheduler_http2_connections = Counter(
            "dra_extender_scheduler_http2_connections",
            "Connections on the extender port that negotiated HTTP/2 (counted in scheduler_connections too).",
            registry=self.registry)
        self.bind_failures = Counter("dra_extender_bind_failures",
                                     "Failed binds (kube-scheduler retries the pod) by stage.", ["stage"],
                                     registry=self.registry)
        self.binding_conditions = Counter(
            "dra_extender_binding_conditions",
            "Bind calls for pods whose devices have binding conditions, by outcome: ready (bound), waiting "
            "(answered with an error, kube-scheduler retries), failed or timed out (claim deallocated).",
            ["outcome"], registry=self.registry)
        # extender.plugin.bindchecks: a bind kube-scheduler could not have asked for, refused before
        # anything is reserved or written. Any of them is worth a look: a scheduler name missing from
        # --scheduler-names, or a caller that is not kube-scheduler.
        self.bind_refusals = Counter("dra_extender_bind_refusals",
                                     "Binds refused before anything was written, by reason.", ["reason"],
                                     registry=self.registry)
        self.verbs_unauthenticated = Gauge(
            "dra_extender_verbs_unauthenticated",
            "1 while the extender verbs answer network clients without a client certificate "
            "(--extender-allow-unauthenticated).", registry=self.registry)
        self.repairs = Counter("dra_extender_bound_pod_repairs",
                               "Attempts to allocate the claims of pods bound without them, by outcome.",
                               ["outcome"], registry=self.registry)

    def count_filter_outcome(self, reason: str, count: int) -> None:
        child = self._outcomes.get(reason)
        if child is None:
            child = self._outcomes[reason] = self.filter_outcomes.labels(reason=reason)
        child.inc(count)

    def watch_state(self, sources: Callable[[], dict[str, Any]]) -> None:
        """Export gauges from `sources()`:
        {"in_flight": n, "objects": {kind: n}, "watch_restarts": {kind: n}, "write_conflicts": n}."""
        self.registry.register(_StateCollector(sources))

    def render(self) -> bytes:
        return generate_latest(self.registry)



BUILD_LABELS = ("version", "cel_backend", "event_loop")


class ProcessMetrics(MetricSet, Collector):
    """process_* (CPU, memory, file descriptors, start time), python_info, python_gc_* and
    dra_extender_build_info{version,cel_backend,event_loop} on `registry` (the debug port's).

    prometheus_client's process, platform and GC collectors describe the whole process, so one of each
    serves every registry that asks, read through this collector."""

    def __init__(self, registry: CollectorRegistry) -> None:
        super().__init__(registry)
        self.build_labels: dict[str, str] = {}
        registry.register(self)

    def collect(self) -> Iterator[Any]:
        for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
            yield from collector.collect()
        build = GaugeMetricFamily("dra_extender_build_info",
                                  "Always 1: the version, CEL backend and event loop of this process.",
                                  labels=list(BUILD_LABELS))
        build.add_metric([self.build_labels.get(name, "") for name in BUILD_LABELS], 1)
        yield build
