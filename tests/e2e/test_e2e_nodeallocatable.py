"""Node allocatable resources backed by DRA (DRANodeAllocatableResources, alpha) end to end, on a control
plane of its own with the gate on every component (the shared plane keeps the defaults).

Two nodes with 8 CPUs each and a CPU driver whose devices are 2 node CPUs each. The extender adds the
devices' CPUs to the pod's requests at filter, writes pod.status.nodeAllocatableResourceClaimStatuses at
bind, and kube-scheduler (gate on) counts that status in the node's requested CPUs for every later pod.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from e2e_api import Api, ApiStatusError, temporary_namespace, wait_for
from e2e_cluster import DETAILED_REASONS, ControlPlane, own_control_plane
from e2e_objects import RESOURCE, claim_spec, create_claim, unique, wait_for_reason

GATE = "--feature-gates=DRANodeAllocatableResources=true"
STATUS = "nodeAllocatableResourceClaimStatuses"


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    extra_args = {name: [GATE] for name in
                  ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "dra-extender")}
    with own_control_plane(tmp_path_factory.mktemp("node-allocatable-plane"), extra_args,
                           [DETAILED_REASONS]) as cluster:
        yield cluster


@pytest.fixture
def api(plane: ControlPlane) -> Api:
    assert plane.api is not None
    return plane.api


@pytest.fixture
def namespace(api: Api) -> Iterator[str]:
    with temporary_namespace(api, "nar") as name:
        yield name


class CpuDriver:
    """Nodes with 8 CPUs, each publishing 4 devices of 2 node CPUs."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.name = unique("cpu") + ".example.com"
        prefix = self.name.split(".")[0]
        self.nodes = [f"{prefix}-node-{i}" for i in range(2)]
        api.create(f"{RESOURCE}/deviceclasses", {
            "metadata": {"name": self.name},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{self.name}"'}}]}})
        for node in self.nodes:
            resources = {"cpu": "8", "memory": "32Gi", "pods": "110"}
            labels = {"kubernetes.io/hostname": node}
            api.create("/api/v1/nodes", {"metadata": {"name": node, "labels": labels}})
            api.patch(f"/api/v1/nodes/{node}", {"spec": {"taints": None}})
            ready = {"type": "Ready", "status": "True", "reason": "E2E", "message": "no kubelet"}
            # A kubelet with the gate declares the feature; the API server's NodeDeclaredFeatures admission
            # refuses slices with nodeAllocatableResources for nodes that do not.
            api.patch(f"/api/v1/nodes/{node}/status",
                      {"status": {"capacity": resources, "allocatable": resources, "conditions": [ready],
                                  "declaredFeatures": ["DRANodeAllocatableResources"]}})
            slice_ = {"metadata": {"name": f"{node}-{self.name}"},
                      "spec": {"driver": self.name, "nodeName": node,
                               "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                               "devices": [{"name": f"cpus-{i}", "nodeAllocatableResources": {
                                   "cpu": {"mapping": {"deviceMultiplier": "2"}}}} for i in range(4)]}}
            wait_for(f"slice of {node} admitted", lambda body=slice_: self._create_once_node_seen(body),
                     timeout_s=30)

    def _create_once_node_seen(self, body: dict[str, Any]) -> dict[str, Any] | None:
        """The admission plugin reads nodes from its informer, which can lag the status patch above by a
        moment (CI saw the 403 once); until it catches up, it refuses the slice."""
        try:
            return self.api.create(f"{RESOURCE}/resourceslices", body)
        except ApiStatusError as error:
            if error.status == 403 and "does not support DRANodeAllocatableResources" in error.message:
                return None
            raise

    def cleanup(self) -> None:
        for node in self.nodes:
            self.api.delete(f"{RESOURCE}/resourceslices/{node}-{self.name}")
            self.api.delete(f"/api/v1/nodes/{node}")
        self.api.delete(f"{RESOURCE}/deviceclasses/{self.name}")


@pytest.fixture
def driver(api: Api) -> Iterator[CpuDriver]:
    created = CpuDriver(api)
    yield created
    created.cleanup()


def create_pod(api: Api, namespace: str, name: str, cpu: str, claim: str | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "c", "image": "registry.invalid/pause",
                                 "resources": {"requests": {"cpu": cpu}}}
    spec: dict[str, Any] = {"terminationGracePeriodSeconds": 0, "containers": [container]}
    if claim is not None:
        spec["resourceClaims"] = [{"name": "cpus", "resourceClaimName": claim}]
        container["resources"]["claims"] = [{"name": "cpus"}]
    return api.create(f"/api/v1/namespaces/{namespace}/pods", {"metadata": {"name": name}, "spec": spec})


def bound_pod(api: Api, namespace: str, name: str) -> dict[str, Any]:
    def bound() -> dict[str, Any] | None:
        pod = api.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
        return pod if pod["spec"].get("nodeName") else None

    return wait_for(f"pod {name} bound", bound, timeout_s=60)


def test_e2e_node_allocatable_cpus_of_devices(plane: ControlPlane, api: Api, namespace: str,
                                              driver: CpuDriver) -> None:
    # a: 3 devices (6 CPUs) + 1 CPU of its container = 7 of a node's 8.
    create_claim(api, namespace, "a-cpus", claim_spec(driver.name, count=3))
    create_pod(api, namespace, "a", "1", claim="a-cpus")
    a = bound_pod(api, namespace, "a")
    first = a["spec"]["nodeName"]
    other = next(node for node in driver.nodes if node != first)
    assert a["status"][STATUS] == [{"resourceClaimName": "a-cpus", "containers": ["c"],
                                    "mapping": [{"name": "cpu", "quantity": "6"}]}]

    # b: 1 device + 1 CPU = 3. kube-scheduler's NodeResourcesFit alone would accept a's node (1 CPU free
    # for b's container); the extender adds the device's 2 CPUs and refuses it.
    create_claim(api, namespace, "b-cpus", claim_spec(driver.name, count=1))
    create_pod(api, namespace, "b", "1", claim="b-cpus")
    assert bound_pod(api, namespace, "b")["spec"]["nodeName"] == other

    # A plain pod of 5 CPUs: counting a's and b's statuses (kube-scheduler with the gate), a's node has 1
    # CPU free and the other 5; without them both would have 7 and a's node would do.
    create_pod(api, namespace, "plain", "5")
    assert bound_pod(api, namespace, "plain")["spec"]["nodeName"] == other

    # c: 1 device + 500m = 2500m. kube-scheduler passes a's node (500m of 1 CPU free) and refuses the
    # other (full); the extender refuses a's node, whose device is still free, and says why.
    create_claim(api, namespace, "c-cpus", claim_spec(driver.name, count=1))
    create_pod(api, namespace, "c", "500m", claim="c-cpus")
    messages = wait_for_reason(api, namespace, "c", "of it for its claims' devices")
    assert any("Insufficient cpu: the pod requests 2500m (2 of it for its claims' devices), the node has 1 "
               "of 8 allocatable free" in message for message in messages), messages

    # d shares a's claim, whose device maps node CPUs: refused as upstream does.
    create_pod(api, namespace, "d", "100m", claim="a-cpus")
    wait_for_reason(api, namespace, "d", "node allocatable resource claim a-cpus has a mapped device and "
                                         "cannot be shared across pods")
