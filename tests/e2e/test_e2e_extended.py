"""Extended resources backed by DRA (KEP-5004) on the real control plane: pods that ask for
`<driver>/gpu: N` in their container resources, with no ResourceClaim, scheduled through dra-extender.

Before dra-extender handled them, kube-scheduler's NodeResourcesFit left the resource to DRA and no one
allocated anything: all three pods of the first test were bound, two on one node with two devices."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from e2e_api import Api, wait_for
from e2e_objects import (
    FINALIZER,
    RESOURCE,
    Driver,
    allocated_devices,
    assert_devices_consistent,
    bound,
    claims,
    create_driver,
    create_node,
    pods,
)

ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
# How long a pod that must stay pending is watched: longer than kube-scheduler's retry of
# unschedulable pods in this control plane (UNSCHEDULABLE_RETRY).
PENDING_WATCH_S = 8.0


def extended_driver(api: Api, nodes: int, devices: int) -> tuple[Driver, str]:
    """A driver whose DeviceClass maps the extended resource `<driver name>/gpu`."""
    driver = create_driver(api, nodes=nodes, devices=devices)
    resource = f"{driver.name}/gpu"
    api.patch(f"{RESOURCE}/deviceclasses/{driver.device_class}", {"spec": {"extendedResourceName": resource}})
    return driver, resource


@pytest.fixture
def two_by_two(api: Api) -> Iterator[tuple[Driver, str]]:
    driver, resource = extended_driver(api, nodes=2, devices=2)
    yield driver, resource
    driver.cleanup()


def create_extended_pod(api: Api, namespace: str, name: str, resource: str, count: int) -> dict[str, Any]:
    quantity = {resource: str(count), "cpu": "10m"}
    body = {
        "metadata": {"name": name},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": "registry.invalid/pause",
                            "resources": {"requests": quantity, "limits": quantity}}],
        },
    }
    return api.create(f"/api/v1/namespaces/{namespace}/pods", body)


def special_claims(api: Api, namespace: str) -> list[dict[str, Any]]:
    return [c for c in claims(api, namespace)
            if (c["metadata"].get("annotations") or {}).get(ANNOTATION) == "true"]


def stays_pending(api: Api, namespace: str, name: str) -> None:
    deadline = time.monotonic() + PENDING_WATCH_S
    while time.monotonic() < deadline:
        assert not api.get(f"/api/v1/namespaces/{namespace}/pods/{name}")["spec"].get("nodeName"), (
            f"pod {name} was bound although no devices are left")
        time.sleep(0.5)


def test_extended_resource_two_nodes_two_devices_three_pods_exactly_two_bind(
    api: Api, namespace: str, two_by_two: tuple[Driver, str]
) -> None:
    """The probe from the issue: before, all three were bound (4 devices promised where 2 exist)."""
    _, resource = two_by_two
    for i in range(3):
        create_extended_pod(api, namespace, f"gpu-{i}", resource, 2)
    placed = wait_for("two pods bound",
                      lambda: len(bound(pods(api, namespace))) == 2 and bound(pods(api, namespace)))
    assert len({p["spec"]["nodeName"] for p in placed}) == 2, "two pods of 2 devices on one 2-device node"
    (pending,) = [p["metadata"]["name"] for p in pods(api, namespace) if not p["spec"].get("nodeName")]
    stays_pending(api, namespace, pending)
    assert len(bound(pods(api, namespace))) == 2
    assert_devices_consistent(api, namespace, in_use=4, no_leaks=True)


def test_extended_resource_pod_gets_two_devices_in_a_special_claim_and_frees_them_when_deleted(
    api: Api, namespace: str, two_by_two: tuple[Driver, str]
) -> None:
    driver, resource = two_by_two
    first = create_extended_pod(api, namespace, "first", resource, 2)
    node = wait_for("first bound", lambda: api.get(f"/api/v1/namespaces/{namespace}/pods/first")["spec"].get(
        "nodeName"))
    pod = api.get(f"/api/v1/namespaces/{namespace}/pods/first")
    (claim,) = special_claims(api, namespace)
    meta = claim["metadata"]
    assert meta["name"].startswith("first-extended-resources-")
    assert [(o["kind"], o["name"], o["uid"], o.get("controller")) for o in meta["ownerReferences"]] == [
        ("Pod", "first", first["metadata"]["uid"], True)]
    assert FINALIZER in meta.get("finalizers", [])
    requests = claim["spec"]["devices"]["requests"]
    assert requests == [{"name": "container-0-request-1", "exactly": {
        "deviceClassName": driver.device_class, "allocationMode": "ExactCount", "count": 2}}]
    devices = allocated_devices(claim)
    assert len(devices) == 2 and {d[1] for d in devices} == {node}
    owner = {"resource": "pods", "name": "first", "uid": first["metadata"]["uid"]}
    assert claim["status"]["reservedFor"] == [owner]
    assert pod["status"]["extendedResourceClaimStatus"] == {
        "resourceClaimName": meta["name"],
        "requestMappings": [{"containerName": "main", "resourceName": resource,
                             "requestName": "container-0-request-1"}],
    }
    create_extended_pod(api, namespace, "second", resource, 2)
    wait_for("second bound",
             lambda: api.get(f"/api/v1/namespaces/{namespace}/pods/second")["spec"].get("nodeName"))
    create_extended_pod(api, namespace, "third", resource, 2)
    stays_pending(api, namespace, "third")
    # The resourceclaim controller (kube-controller-manager) finds the claim through the pod status and
    # releases it once the pod is gone; the garbage collector deletes it (the pod owned it).
    api.delete(f"/api/v1/namespaces/{namespace}/pods/first", grace_period_seconds=0)
    wait_for("the first pod's claim gone", lambda: not api.get_or_none(
        f"{RESOURCE}/namespaces/{namespace}/resourceclaims/{meta['name']}"), timeout_s=60)
    wait_for("third bound on the freed devices", lambda: api.get(
        f"/api/v1/namespaces/{namespace}/pods/third")["spec"].get("nodeName") == node, timeout_s=60)
    assert_devices_consistent(api, namespace, in_use=4, no_leaks=True)


def test_extended_resource_device_plugin_node_is_used_without_a_claim(api: Api, namespace: str) -> None:
    driver, resource = extended_driver(api, nodes=1, devices=1)
    plugin_node = f"{driver.name.split('.')[0]}-plugin"
    try:
        create_node(api, plugin_node)
        allocatable = {"cpu": "64", "memory": "256Gi", "pods": "500", resource: "4"}
        api.patch(f"/api/v1/nodes/{plugin_node}/status", {"status": {"capacity": allocatable,
                                                                    "allocatable": allocatable}})
        create_extended_pod(api, namespace, "plugin-user", resource, 2)
        node = wait_for("pod bound", lambda: api.get(
            f"/api/v1/namespaces/{namespace}/pods/plugin-user")["spec"].get("nodeName"))
        assert node == plugin_node, "only the device plugin's node has 2 of the resource"
        assert special_claims(api, namespace) == []
        pod = api.get(f"/api/v1/namespaces/{namespace}/pods/plugin-user")
        assert "extendedResourceClaimStatus" not in pod["status"]
    finally:
        api.delete(f"/api/v1/nodes/{plugin_node}")
        driver.cleanup()


def test_extended_resource_forty_pods_race_for_thirty_devices(api: Api, namespace: str) -> None:
    driver, resource = extended_driver(api, nodes=3, devices=10)
    try:
        for i in range(40):
            create_extended_pod(api, namespace, f"racer-{i}", resource, 1)
        wait_for("30 pods bound", lambda: len(bound(pods(api, namespace))) >= 30, timeout_s=120)
        time.sleep(PENDING_WATCH_S)
        assert len(bound(pods(api, namespace))) == 30
        devices = [d for c in special_claims(api, namespace) for d in allocated_devices(c)]
        assert len(devices) == 30 == len(set(devices))
        assert_devices_consistent(api, namespace, in_use=30, no_leaks=True)
    finally:
        driver.cleanup()


def test_extended_resource_implicit_class_name_with_an_init_container(
    api: Api, namespace: str, two_by_two: tuple[Driver, str]
) -> None:
    """deviceclass.resource.kubernetes.io/<class>: the init container reuses the main container's
    devices; the API server accepts the mappings (they must name each container's own requests)."""
    driver, _ = two_by_two
    implicit = f"deviceclass.resource.kubernetes.io/{driver.device_class}"

    def container(name: str, count: int) -> dict[str, Any]:
        amount = {implicit: str(count)}
        return {"name": name, "image": "registry.invalid/pause",
                "resources": {"requests": amount, "limits": amount}}

    api.create(f"/api/v1/namespaces/{namespace}/pods", {
        "metadata": {"name": "staged"},
        "spec": {"terminationGracePeriodSeconds": 0, "initContainers": [container("setup", 1)],
                 "containers": [container("main", 2)]},
    })
    wait_for("pod bound",
             lambda: api.get(f"/api/v1/namespaces/{namespace}/pods/staged")["spec"].get("nodeName"))
    pod = api.get(f"/api/v1/namespaces/{namespace}/pods/staged")
    (claim,) = special_claims(api, namespace)
    assert [(r["name"], r["exactly"]["count"]) for r in claim["spec"]["devices"]["requests"]] == [
        ("container-1-request-0", 2)]
    assert len(allocated_devices(claim)) == 2
    assert pod["status"]["extendedResourceClaimStatus"]["requestMappings"] == [
        {"containerName": "main", "resourceName": implicit, "requestName": "container-1-request-0"},
        {"containerName": "setup", "resourceName": implicit, "requestName": "container-1-request-0"},
    ]


def test_extended_resource_stale_claim_of_an_earlier_attempt_is_deleted_and_replaced(
    api: Api, namespace: str
) -> None:
    """A special claim left behind (say, the extender died mid-bind) is deleted by the pod's next
    filter, which then allocates afresh."""
    driver, resource = extended_driver(api, nodes=1, devices=2)
    try:
        create_extended_pod(api, namespace, "blocker", resource, 2)
        wait_for("blocker bound",
                 lambda: api.get(f"/api/v1/namespaces/{namespace}/pods/blocker")["spec"].get("nodeName"))
        pod = create_extended_pod(api, namespace, "late", resource, 2)
        stale = api.create(f"{RESOURCE}/namespaces/{namespace}/resourceclaims", {
            "metadata": {
                "generateName": "late-extended-resources-",
                "annotations": {ANNOTATION: "true"},
                "finalizers": [FINALIZER],
                "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "late",
                                     "uid": pod["metadata"]["uid"], "controller": True}],
            },
            "spec": {"devices": {"requests": [{"name": "container-0-request-1", "exactly": {
                "deviceClassName": driver.device_class, "allocationMode": "ExactCount", "count": 2}}]}},
        })
        api.delete(f"/api/v1/namespaces/{namespace}/pods/blocker", grace_period_seconds=0)
        wait_for("late bound", lambda: api.get(f"/api/v1/namespaces/{namespace}/pods/late")["spec"].get(
            "nodeName"), timeout_s=60)
        names = {c["metadata"]["name"] for c in special_claims(api, namespace)}
        assert stale["metadata"]["name"] not in names
        status = api.get(f"/api/v1/namespaces/{namespace}/pods/late")["status"]["extendedResourceClaimStatus"]
        assert status["resourceClaimName"] in names
        assert_devices_consistent(api, namespace, in_use=2, no_leaks=True)
    finally:
        driver.cleanup()
