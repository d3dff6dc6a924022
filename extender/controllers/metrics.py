"""Prometheus metrics of the controllers (upstream's names where upstream has the metric)."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from common.metrics import MetricSet

# Upstream's buckets for device_taint_eviction_controller_pod_deletion_duration_seconds.
DELETION_LATENCY_BUCKETS = (0.005, 0.025, 0.1, 0.5, 1, 2.5, 10, 30, 60, 120, 180, 240)


class ControllerMetrics(MetricSet):
    def __init__(self, registry: CollectorRegistry) -> None:
        super().__init__(registry)
        self.pod_deletions = Counter(
            "device_taint_eviction_controller_pod_deletions",
            "Pods deleted because of NoExecute device taints (or lost drivers) since start.",
            registry=registry,
        )
        self.pod_deletion_latency = Histogram(
            "device_taint_eviction_controller_pod_deletion_duration_seconds",
            "Time from the moment a pod had to be evicted until it was deleted.",
            buckets=DELETION_LATENCY_BUCKETS,
            registry=registry,
        )
        self.queue_depth = Gauge(
            "dra_extender_taint_eviction_queue_depth",
            "Work items waiting in the eviction work queue (scheduled or ready).",
            registry=registry,
        )
        self.queue_in_flight = Gauge(
            "dra_extender_taint_eviction_queue_in_flight",
            "Work items being processed by the eviction workers.",
            registry=registry,
        )
        self.retries = Counter(
            "dra_extender_taint_eviction_retries",
            "Work items that failed and were scheduled again with backoff.",
            registry=registry,
        )
        self.driver_lost_devices = Gauge(
            "dra_extender_driver_lost_devices",
            "Allocated devices whose pool has no ResourceSlice (within or past the grace period).",
            registry=registry,
        )

    def watch_queue(self, depth: Callable[[], int], in_flight: Callable[[], int]) -> None:
        self.queue_depth.set_function(depth)
        self.queue_in_flight.set_function(in_flight)

    def watch_driver_lost(self, devices: Callable[[], int]) -> None:
        self.driver_lost_devices.set_function(devices)
