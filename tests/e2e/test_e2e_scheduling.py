"""The real kube-scheduler schedules DRA pods through dra-extender (DynamicResources disabled)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from e2e_api import Api, wait_for
from e2e_objects import (
    FINALIZER,
    REQUEST,
    Driver,
    allocated_devices,
    assert_devices_consistent,
    bound,
    claim_of_pod,
    claim_spec,
    create_claim,
    create_driver,
    create_pod,
    create_template,
    pods,
    wait_for_reason,
)


@pytest.fixture
def small_driver(api: Api) -> Iterator[Driver]:
    driver = create_driver(api, nodes=2, devices=2)
    yield driver
    driver.cleanup()


def test_template_claim_is_allocated_reserved_and_pod_bound_to_the_device_node(
    api: Api, namespace: str, small_driver: Driver
) -> None:
    create_template(api, namespace, "one-gpu", claim_spec(small_driver.device_class))
    pod = create_pod(api, namespace, "worker", template="one-gpu")

    node = wait_for(
        "pod bound", lambda: api.get(f"/api/v1/namespaces/{namespace}/pods/worker")["spec"].get("nodeName")
    )
    claim = claim_of_pod(api, namespace, "worker")

    devices = allocated_devices(claim)
    assert len(devices) == 1
    driver, pool, device = devices[0]
    assert driver == small_driver.name
    assert pool == node, "each node publishes its own pool: the device must be on the pod's node"
    assert device in small_driver.device_names()
    result = claim["status"]["allocation"]["devices"]["results"][0]
    assert result["request"] == REQUEST
    assert FINALIZER in claim["metadata"].get("finalizers", [])
    assert claim["status"]["reservedFor"] == [
        {"resource": "pods", "name": "worker", "uid": pod["metadata"]["uid"]}
    ]
    terms = claim["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"]
    assert any(node in str(term) for term in terms), terms
    # dra-extender writes claims back without managedFields (its cache drops them): the server keeps
    # the creator's entry and adds ours.
    fields = claim["metadata"]["managedFields"]
    managers = {(entry["manager"], entry.get("subresource", "")) for entry in fields}
    assert {("kube-controller-manager", ""), ("dra-extender", "status")} <= managers, managers


def test_shared_claim_gets_one_allocation_and_every_pod_in_reserved_for(
    api: Api, namespace: str, small_driver: Driver
) -> None:
    create_claim(api, namespace, "shared", claim_spec(small_driver.device_class))
    uids = {create_pod(api, namespace, f"user-{i}", claim="shared")["metadata"]["uid"] for i in range(3)}

    scheduled = wait_for(
        "3 pods bound", lambda: len(bound(pods(api, namespace))) == 3 and bound(pods(api, namespace))
    )
    claim = api.get(f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/shared")
    devices = allocated_devices(claim)
    assert len(devices) == 1
    assert {p["spec"]["nodeName"] for p in scheduled} == {devices[0][1]}
    assert {r["uid"] for r in claim["status"]["reservedFor"]} == uids
    assert len(claim["status"]["reservedFor"]) == 3


def test_pod_that_cannot_fit_stays_pending_with_our_reason(
    api: Api, namespace: str, small_driver: Driver
) -> None:
    create_template(api, namespace, "three-gpus", claim_spec(small_driver.device_class, count=3))
    create_pod(api, namespace, "too-big", template="three-gpus")

    wait_for_reason(api, namespace, "too-big", f"request {REQUEST}: needs 3 devices, 2 match")
    pod = api.get(f"/api/v1/namespaces/{namespace}/pods/too-big")
    assert not pod["spec"].get("nodeName")
    assert allocated_devices(claim_of_pod(api, namespace, "too-big")) == []


def test_120_pods_race_for_100_devices(api: Api, namespace: str) -> None:
    driver = create_driver(api, nodes=10, devices=10)
    try:
        create_template(api, namespace, "one-gpu", claim_spec(driver.device_class))
        for i in range(120):
            create_pod(api, namespace, f"racer-{i:03d}", template="one-gpu")

        wait_for(
            "100 pods bound", lambda: len(bound(pods(api, namespace))) == 100, timeout_s=180, interval_s=1
        )
        all_pods = pods(api, namespace)
        pending = [p for p in all_pods if not p["spec"].get("nodeName")]
        assert len(pending) == 20
        assert_devices_consistent(api, namespace, in_use=100)
        # Each pending pod is told why, in our words (an early attempt may have found its claim
        # not created yet).
        for pod in pending:
            messages = wait_for_reason(
                api, namespace, pod["metadata"]["name"], f"request {REQUEST}: needs 1 device, 0 match"
            )
            assert any("in use" in m for m in messages), messages

        # Free 20 devices: the resourceclaim controller deallocates the deleted pods' claims, and the
        # pending pods take them.
        victims = [p["metadata"]["name"] for p in bound(all_pods)[:20]]
        for name in victims:
            api.delete(f"/api/v1/namespaces/{namespace}/pods/{name}", grace_period_seconds=0)
        wait_for(
            "the 20 pending pods bound",
            lambda: len(bound(pods(api, namespace))) == 100 and len(pods(api, namespace)) == 100,
            timeout_s=180,
            interval_s=1,
        )
        assert all(p["spec"].get("nodeName") for p in pods(api, namespace))
        assert_devices_consistent(api, namespace, in_use=100)
    finally:
        for pod in pods(api, namespace):
            api.delete(
                f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}", grace_period_seconds=0
            )
        driver.cleanup()
