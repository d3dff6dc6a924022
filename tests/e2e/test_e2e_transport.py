"""How the real kube-scheduler reaches the verbs port: over mutual TLS its extender client offers HTTP/2
by ALPN, the port accepts it, and every call of a batch of pods then travels on one connection
(no new TLS connection per pod, as over HTTP/1.1 with its 2 idle connections)."""

from __future__ import annotations

import urllib3
from e2e_api import Api, wait_for
from e2e_cluster import ControlPlane
from e2e_objects import bound, claim_spec, create_driver, create_pod, create_template, pods

PODS = 12


def connections(plane: ControlPlane) -> dict[str, float]:
    metrics = urllib3.PoolManager(retries=False, timeout=5).request(
        "GET", f"http://127.0.0.1:{plane.debug_port}/metrics").data.decode()
    counts = {}
    for line in metrics.splitlines():
        for name in ("scheduler_connections", "scheduler_http2_connections"):
            if line.startswith(f"dra_extender_{name}_total "):
                counts[name] = float(line.rsplit(" ", 1)[1])
    return counts


def test_kube_scheduler_sends_its_calls_over_http2_on_one_connection(
        control_plane: ControlPlane, api: Api, namespace: str) -> None:
    driver = create_driver(api, nodes=3, devices=4)
    try:
        before = connections(control_plane)
        create_template(api, namespace, "one-gpu", claim_spec(driver.device_class))
        for i in range(PODS):
            create_pod(api, namespace, f"h2-{i:02d}", template="one-gpu")
        wait_for(f"{PODS} pods bound", lambda: len(bound(pods(api, namespace))) == PODS, timeout_s=120,
                 interval_s=0.5)
        after = connections(control_plane)
        opened = after["scheduler_connections"] - before["scheduler_connections"]
        opened_h2 = after["scheduler_http2_connections"] - before["scheduler_http2_connections"]
        # Every connection kube-scheduler opened negotiated h2; at most one was needed (none when the
        # one of an earlier test is still open).
        assert after["scheduler_http2_connections"] >= 1, after
        assert opened == opened_h2 <= 1, (before, after)
    finally:
        for pod in pods(api, namespace):
            name = pod["metadata"]["name"]
            api.delete(f"/api/v1/namespaces/{namespace}/pods/{name}", grace_period_seconds=0)
        driver.cleanup()
