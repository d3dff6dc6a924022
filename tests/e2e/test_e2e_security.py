"""Only kube-scheduler reaches the extender verbs, and bind never places a pod where kube-scheduler could not,
on the real control plane. The fixture runs the extender with mutual TLS set up as docs/operations.md
tells an operator without cert-manager (`dra-extender certs`, then `certs --client` for kube-scheduler,
whose configuration presents that certificate): every scheduling test of the suite goes through it.
Here, other callers: one without the certificate gets no answer; one with it (a stand-in for a
compromised or confused caller) is refused every bind kube-scheduler could not have asked for, and
nothing is written."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
import urllib3
from e2e_api import Api, wait_for
from e2e_cluster import ControlPlane
from e2e_objects import (
    RESOURCE,
    Driver,
    allocated_devices,
    claim_spec,
    create_claim,
    create_driver,
    create_node,
    pod_body,
)

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
TAINT = {"key": "e2e.example.com/dedicated", "value": "infra", "effect": "NoSchedule"}


@pytest.fixture
def driver(api: Api) -> Iterator[Driver]:
    created = create_driver(api, nodes=2, devices=2)
    yield created
    created.cleanup()


def extender(plane: ControlPlane, *, client_certificate: bool) -> urllib3.PoolManager:
    """An HTTPS client of the extender port trusting its CA, with or without kube-scheduler's pair."""
    cert_file, key_file = plane.extender_client_files() if client_certificate else (None, None)
    return urllib3.PoolManager(cert_reqs="CERT_REQUIRED", ca_certs=str(plane.extender_pki / "ca.crt"),
                               server_hostname=plane.extender_server_name, cert_file=cert_file,
                               key_file=key_file, retries=False, timeout=10,
                               ssl_minimum_version=ssl.TLSVersion.TLSv1_2)


def bind(plane: ControlPlane, pod: dict[str, Any], node: str, *, client_certificate: bool = True) -> str:
    """POST ExtenderBindingArgs as kube-scheduler encodes them; the answer's Error."""
    meta = pod["metadata"]
    args = {"PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": meta["uid"], "Node": node}
    url = f"https://127.0.0.1:{plane.extender_port}/scheduler/bind"
    response = extender(plane, client_certificate=client_certificate).request(
        "POST", url, body=orjson.dumps(args), headers={"Content-Type": "application/json"})
    assert response.status == 200, response.data
    return str(orjson.loads(response.data)["Error"])


def refusals(plane: ControlPlane) -> dict[str, float]:
    metrics = urllib3.PoolManager(retries=False, timeout=5).request(
        "GET", f"http://127.0.0.1:{plane.debug_port}/metrics").data.decode()
    counts = {}
    for line in metrics.splitlines():
        if line.startswith("dra_extender_bind_refusals_total{"):
            labels, value = line.rsplit(" ", 1)
            counts[labels.split('reason="', 1)[1].split('"', 1)[0]] = float(value)
    return counts


def pending_pod(api: Api, namespace: str, name: str, driver: Driver, **spec: Any) -> dict[str, Any]:
    """A pod with a claim of its own, with `spec` added (which keeps kube-scheduler from placing it, but
    for the test that lets it)."""
    create_claim(api, namespace, f"{name}-gpu", claim_spec(driver.device_class))
    body = pod_body(name, claim=f"{name}-gpu")
    body["spec"].update(spec)
    return api.create(f"/api/v1/namespaces/{namespace}/pods", body)


def assert_untouched(api: Api, namespace: str, name: str) -> None:
    pod = api.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
    claim = api.get(f"{RESOURCE}/namespaces/{namespace}/resourceclaims/{name}-gpu")
    assert not pod["spec"].get("nodeName")
    assert not allocated_devices(claim) and not (claim.get("status") or {}).get("reservedFor")


def test_kube_scheduler_binds_through_mutual_tls(api: Api, namespace: str, driver: Driver,
                                                 control_plane: ControlPlane) -> None:
    pod = pending_pod(api, namespace, "scheduled", driver)
    node = wait_for("pod bound by kube-scheduler through the extender", lambda: api.get(
        f"/api/v1/namespaces/{namespace}/pods/scheduled")["spec"].get("nodeName"))
    assert node in driver.node_names
    claim = api.get(f"{RESOURCE}/namespaces/{namespace}/resourceclaims/scheduled-gpu")
    assert claim["status"]["reservedFor"][0]["uid"] == pod["metadata"]["uid"]


def test_a_caller_without_kube_schedulers_certificate_gets_no_answer(
        api: Api, namespace: str, driver: Driver, control_plane: ControlPlane) -> None:
    pod = pending_pod(api, namespace, "elsewhere", driver, schedulerName="nobody")
    with pytest.raises(urllib3.exceptions.HTTPError):
        bind(control_plane, pod, driver.node_names[0], client_certificate=False)
    assert_untouched(api, namespace, "elsewhere")


def refused(plane: ControlPlane, pod: dict[str, Any], node: str, expected: str) -> str:
    """Bind until the refusal says `expected` (until the extender's watch has shown it the pod or node,
    the refusal says they are not known): every answer on the way is a refusal too."""

    def attempt() -> str | None:
        message = bind(plane, pod, node)
        assert message, f"bound {pod['metadata']['name']} to {node}"
        return message if expected in message else None

    what = f"bind of {pod['metadata']['name']} refused with {expected!r}"
    return str(wait_for(what, attempt, timeout_s=10))


def test_bind_refuses_what_kube_scheduler_could_not_ask_for_and_writes_nothing(
        api: Api, namespace: str, driver: Driver, control_plane: ControlPlane) -> None:
    node = driver.node_names[0]
    before = refusals(control_plane)
    # A pod of a scheduler that is not ours.
    other = pending_pod(api, namespace, "other", driver, schedulerName="nobody")
    refused(control_plane, other, node, "is for scheduler 'nobody'")
    # A pod whose required node affinity names a node that does not exist (so kube-scheduler keeps it
    # pending), bound to a real one.
    affinity = {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": ["no-such-node"]}]}]}}}
    pinned = pending_pod(api, namespace, "pinned", driver, affinity=affinity)
    refused(control_plane, pinned, node, "matches none of the terms")
    # A node whose NoSchedule taint the pod does not tolerate: tainted from its creation on, and the
    # pod's nodeSelector keeps kube-scheduler from every other node.
    tainted_node = f"{node}-tainted"
    create_node(api, tainted_node)
    try:
        api.patch(f"/api/v1/nodes/{tainted_node}", {"spec": {"taints": [TAINT]}})
        tainted = pending_pod(api, namespace, "tainted", driver,
                              nodeSelector={"kubernetes.io/hostname": tainted_node})
        refused(control_plane, tainted, tainted_node, "does not tolerate the node's taint "
                                                      "e2e.example.com/dedicated=infra:NoSchedule")
    finally:
        api.delete(f"/api/v1/nodes/{tainted_node}")
    # A pod bound already (by whoever created it with spec.nodeName).
    placed = pod_body("placed")
    placed["spec"].update(nodeName=node, resourceClaims=[], containers=[{"name": "c", "image": "x"}])
    placed = api.create(f"/api/v1/namespaces/{namespace}/pods", placed)
    assert refused(control_plane, placed, driver.node_names[1], "already bound") == (
        f"pod {namespace}/placed is already bound to node {node}")
    for name in ("other", "pinned", "tainted"):
        assert_untouched(api, namespace, name)
    after = refusals(control_plane)
    for reason in ("scheduler-name", "node-affinity", "taint", "already-bound"):
        assert after.get(reason, 0) > before.get(reason, 0), reason
