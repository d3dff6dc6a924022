"""Device binding conditions on the real control plane: a test driver publishes a device with
bindingConditions ("attached") and bindingFailureConditions ("failed"), and reports on it in the claim's
status.devices as a DRA driver attaching a network device would.

- conditions True: the pod, held back meanwhile, is bound;
- a failure condition True: the claim is freed and the pod scheduled again, on another device;
- nothing reported within --binding-timeout (the shared plane's BINDING_TIMEOUT_S): the same, and the
  pod's FailedScheduling event says "binding timeout".
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from e2e_api import Api, ApiStatusError, wait_for
from e2e_cluster import BINDING_TIMEOUT_S
from e2e_objects import (
    RESOURCE,
    Driver,
    allocated_devices,
    claim_of_pod,
    claim_spec,
    create_driver,
    create_node,
    create_pod,
    create_template,
)

ATTACHED, FAILED = "attached", "failed"


def with_binding_conditions(driver: Driver, node: str) -> None:
    """The node's devices need the driver's attach before a pod may use them."""
    path = f"{RESOURCE}/resourceslices/{driver.slice_name(node)}"
    current = driver.api.get(path)
    for device in current["spec"]["devices"]:
        device["bindingConditions"] = [ATTACHED]
        device["bindingFailureConditions"] = [FAILED]
        device["bindsToNode"] = True
    driver.api.update(path, current)


def add_plain_node(driver: Driver) -> str:
    """One more node with one device that needs no attach (cleaned up with the driver)."""
    node = f"{driver.node_names[0].rsplit('-', 1)[0]}-{len(driver.node_names)}"
    create_node(driver.api, node)
    driver.api.create(f"{RESOURCE}/resourceslices", {
        "metadata": {"name": driver.slice_name(node)},
        "spec": {"driver": driver.name, "nodeName": node,
                 "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                 "devices": [{"name": "dev-0", "attributes": {"index": {"int": 0}}}]},
    })
    driver.node_names.append(node)
    return node


def claim_path(claim: dict[str, Any]) -> str:
    meta = claim["metadata"]
    return f"{RESOURCE}/namespaces/{meta['namespace']}/resourceclaims/{meta['name']}"


def add_plain_pool(driver: Driver, node: str) -> None:
    """A second pool on `node` with one device that needs no attach (remove_plain_pool deletes it)."""
    driver.api.create(f"{RESOURCE}/resourceslices", {
        "metadata": {"name": f"{driver.slice_name(node)}-plain"},
        "spec": {"driver": driver.name, "nodeName": node,
                 "pool": {"name": f"{node}-plain", "generation": 1, "resourceSliceCount": 1},
                 "devices": [{"name": "dev-0", "attributes": {"index": {"int": 0}}}]},
    })


def remove_plain_pool(driver: Driver, node: str) -> None:
    driver.api.delete(f"{RESOURCE}/resourceslices/{driver.slice_name(node)}-plain")


def report(api: Api, claim: dict[str, Any], *conditions: dict[str, str]) -> None:
    """The test driver's status update of the claim's allocated device (retried on conflicts)."""
    path = claim_path(claim)
    for _ in range(10):
        current = api.get(path)
        [(driver, pool, device)] = allocated_devices(current)
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        generation = current["metadata"].get("generation", 1)
        stamped = [{**condition, "lastTransitionTime": now, "observedGeneration": generation}
                   for condition in conditions]
        current["status"]["devices"] = [{"driver": driver, "pool": pool, "device": device,
                                         "conditions": stamped}]
        try:
            api.update(f"{path}/status", current)
            return
        except ApiStatusError as error:
            if error.status != 409:
                raise
    raise AssertionError(f"could not write the device conditions of {path}")


def condition(kind: str, status: str = "True") -> dict[str, str]:
    return {"type": kind, "status": status, "reason": "E2E", "message": f"the test driver says {kind}"}


def allocated(api: Api, namespace: str, pod: str) -> dict[str, Any]:
    path = claim_path(claim_of_pod(api, namespace, pod))

    def allocated_claim() -> dict[str, Any] | None:
        current = api.get(path)
        return current if (current.get("status") or {}).get("allocation") else None

    return wait_for(f"the claim of {pod} allocated", allocated_claim, timeout_s=30, interval_s=0.1)


def node_of(api: Api, namespace: str, pod: str) -> str:
    return str(api.get(f"/api/v1/namespaces/{namespace}/pods/{pod}")["spec"].get("nodeName") or "")


def pod_condition(api: Api, namespace: str, pod: str) -> str:
    status = api.get(f"/api/v1/namespaces/{namespace}/pods/{pod}").get("status", {})
    conditions = status.get("conditions") or []
    return " ".join(str(c.get("message", "")) for c in conditions if c.get("type") == "PodScheduled")


def events(api: Api, namespace: str, pod: str, reason: str) -> list[dict[str, Any]]:
    return api.items(f"/api/v1/namespaces/{namespace}/events",
                     fieldSelector=f"involvedObject.name={pod},reason={reason}")


def start_pod(api: Api, namespace: str, driver: Driver, pod: str) -> dict[str, Any]:
    create_template(api, namespace, "one-device", claim_spec(driver.device_class))
    create_pod(api, namespace, pod, template="one-device")
    claim = allocated(api, namespace, pod)
    [result] = claim["status"]["allocation"]["devices"]["results"]
    assert result["bindingConditions"] == [ATTACHED] and result["bindingFailureConditions"] == [FAILED]
    assert claim["status"]["allocation"]["allocationTimestamp"]
    return claim


@pytest.fixture
def driver(api: Api) -> Iterator[Driver]:
    """A driver with one node, whose one device needs the driver's attach."""
    created = create_driver(api, nodes=1, devices=1)
    try:
        with_binding_conditions(created, created.node_names[0])
        yield created
    finally:
        remove_plain_pool(created, created.node_names[0])
        created.cleanup()


def test_the_pod_is_bound_once_the_driver_reports_the_device_attached(api: Api, namespace: str,
                                                                      driver: Driver) -> None:
    [node] = driver.node_names
    claim = start_pod(api, namespace, driver, "waiter")
    wait_for("the pod's condition naming what it waits for",
             lambda: "waiting for device binding conditions" in pod_condition(api, namespace, "waiter"),
             timeout_s=30)
    assert f"claim {namespace}/{claim['metadata']['name']}, device {driver.name}/{node}/dev-0" in \
        pod_condition(api, namespace, "waiter")
    # Within the binding timeout, which the first bind call's wait (--bind-wait, 3 s) has begun to use.
    assert not node_of(api, namespace, "waiter"), "bound before its device is attached"
    report(api, claim, condition(ATTACHED, "False"))
    time.sleep(1)
    assert not node_of(api, namespace, "waiter"), "bound while its device is not attached"
    reported = time.monotonic()
    report(api, claim, condition(ATTACHED))
    wait_for("the pod bound", lambda: node_of(api, namespace, "waiter"), timeout_s=30, interval_s=0.1)
    print(f"bound {time.monotonic() - reported:.2f} s after the device was reported attached")
    assert node_of(api, namespace, "waiter") == node
    assert events(api, namespace, "waiter", "BindingConditionsPending")
    final = api.get(claim_path(claim))
    assert final["status"]["allocation"] == claim["status"]["allocation"], "one allocation throughout"


def test_a_failure_condition_reschedules_the_pod_elsewhere(api: Api, namespace: str, driver: Driver) -> None:
    [node] = driver.node_names
    claim = start_pod(api, namespace, driver, "moved")
    # The attach fails: the driver taints the device and says so; another node has a device.
    driver.set_taints(node, {"dev-0": [{"key": "e2e.example.com/attach-failed", "value": "true",
                                        "effect": "NoSchedule"}]})
    other = add_plain_node(driver)
    report(api, claim, condition(ATTACHED, "False"), condition(FAILED))
    wait_for("the pod bound elsewhere", lambda: node_of(api, namespace, "moved"), timeout_s=30)
    assert node_of(api, namespace, "moved") == other
    final = api.get(claim_path(claim))
    assert allocated_devices(final) == [(driver.name, other, "dev-0")]
    assert not final["status"].get("devices"), "the failed device's conditions were cleared with it"
    [event] = events(api, namespace, "moved", "BindingConditionsFailed")
    assert event["type"] == "Warning"
    assert (f"device binding failed: claim {namespace}/{claim['metadata']['name']}, device "
            f"{driver.name}/{node}/dev-0: binding failure condition failed is True (E2E: the test driver "
            "says failed); the claim was deallocated; the pod is scheduled again") == event["message"]


def test_the_binding_timeout_reschedules_the_pod(api: Api, namespace: str, driver: Driver) -> None:
    """As upstream's TimeoutRecover: a device needing no attach appears on the same node while the pod
    waits; once the timeout frees the claim, the pod gets that one (a node's pools with binding
    conditions come last)."""
    [node] = driver.node_names
    claim = start_pod(api, namespace, driver, "patient")
    allocated_at = time.monotonic()
    add_plain_pool(driver, node)

    # The pod's condition carries the latest attempt's message (its FailedScheduling events are one
    # series that keeps the first): polled as upstream's TimeoutReached does.
    def timed_out() -> str:
        said = pod_condition(api, namespace, "patient")
        return said if "binding timeout" in said else ""

    said = wait_for("the pod's condition saying binding timeout", timed_out,
                    timeout_s=BINDING_TIMEOUT_S + 30, interval_s=0.1)
    elapsed = time.monotonic() - allocated_at
    print(f"binding timeout reported {elapsed:.1f} s after the allocation (--binding-timeout "
          f"{BINDING_TIMEOUT_S:g} s)")
    assert BINDING_TIMEOUT_S - 1 <= elapsed <= BINDING_TIMEOUT_S + 10
    assert (f"device binding timeout: claim {namespace}/{claim['metadata']['name']}, device "
            f"{driver.name}/{node}/dev-0: attached not True {BINDING_TIMEOUT_S:g}s after its "
            "allocation") in said
    wait_for("the pod bound", lambda: node_of(api, namespace, "patient"), timeout_s=30)
    final = api.get(claim_path(claim))
    assert allocated_devices(final) == [(driver.name, f"{node}-plain", "dev-0")]
    [event] = events(api, namespace, "patient", "BindingConditionsFailed")
    assert event["message"].startswith("device binding timeout: ")
