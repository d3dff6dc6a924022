"""Device taint eviction end to end: dra-extender's controller (kube-controller-manager's own
device-taint-eviction-controller is disabled in this control plane)."""

from __future__ import annotations

import time

import pytest
from e2e_api import Api, wait_for
from e2e_cluster import ControlPlane, extender_supports
from e2e_objects import (
    allocated_devices,
    claim_of_pod,
    claim_spec,
    create_driver,
    create_pod,
    create_template,
)

TAINT = {"key": "example.com/broken", "value": "true", "effect": "NoExecute"}
TOLERATION = {"key": "example.com/broken", "operator": "Exists", "effect": "NoExecute"}


def _evicted(api: Api, namespace: str, name: str) -> bool:
    pod = api.get_or_none(f"/api/v1/namespaces/{namespace}/pods/{name}")
    return pod is None or bool(pod["metadata"].get("deletionTimestamp"))


def test_no_execute_taint_evicts_the_pod_and_spares_the_tolerating_one(
    control_plane: ControlPlane, api: Api, namespace: str
) -> None:
    if not extender_supports("--controllers"):
        pytest.fail(
            "`dra-extender serve --help` has no --controllers flag: the taint-eviction controller is not "
            "wired into serve, so nothing can evict pods from tainted devices"
        )
    driver = create_driver(api, nodes=1, devices=2)
    try:
        create_template(api, namespace, "plain", claim_spec(driver.device_class))
        create_template(api, namespace, "tolerant", claim_spec(driver.device_class, tolerations=[TOLERATION]))
        create_pod(api, namespace, "fragile", template="plain")
        create_pod(api, namespace, "sturdy", template="tolerant")
        for name in ("fragile", "sturdy"):
            wait_for(
                f"{name} bound",
                lambda n=name: api.get(f"/api/v1/namespaces/{namespace}/pods/{n}")["spec"].get("nodeName"),
            )
        sturdy_claim = claim_of_pod(api, namespace, "sturdy")
        assert sturdy_claim["status"]["allocation"]["devices"]["results"][0].get("tolerations") == [
            TOLERATION
        ]
        used = [d for _, _, d in allocated_devices(claim_of_pod(api, namespace, "fragile"))]
        used += [d for _, _, d in allocated_devices(sturdy_claim)]
        assert sorted(used) == ["dev-0", "dev-1"]

        driver.set_taints(driver.node_names[0], {d: [TAINT] for d in used})

        wait_for("fragile evicted", lambda: _evicted(api, namespace, "fragile"), timeout_s=30)
        pod = api.get_or_none(f"/api/v1/namespaces/{namespace}/pods/fragile")
        if pod is not None:
            conditions = {c["type"] for c in pod.get("status", {}).get("conditions") or []}
            assert "DisruptionTarget" in conditions
        # The controller acted on the fragile pod; give it the same time again to (wrongly) act on
        # the tolerating one.
        time.sleep(3)
        assert not _evicted(api, namespace, "sturdy")
    finally:
        for name in ("fragile", "sturdy"):
            api.delete(f"/api/v1/namespaces/{namespace}/pods/{name}", grace_period_seconds=0)
        driver.cleanup()
