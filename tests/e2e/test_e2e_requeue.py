"""With deploy/'s configuration (kube-scheduler's default backoff and 5-minute unschedulable retry,
the extender's default --reasons and the --requeue-claim of deploy/base), on the real control plane:

- a pod that fits no node gets the FailedScheduling line the in-tree plugin gives, and our
  DRAExplanation event beside it;
- a pod rejected for lack of devices is bound within 10 s of its driver publishing them (a
  ResourceSlice update, which kube-scheduler does not requeue extender-rejected pods on by itself).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from e2e_api import Api, temporary_namespace, wait_for
from e2e_cluster import ControlPlane, deployed_requeue_flag, own_control_plane
from e2e_objects import (
    RESOURCE,
    claim_of_pod,
    claim_spec,
    create_driver,
    create_pod,
    create_template,
    scheduling_failures,
)

REQUEUE_DELAY_LIMIT_S = 10.0


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    # The fixture's shared plane retries unschedulable pods every 5 s and backs off 2 s at most; this
    # one keeps kube-scheduler's defaults, as deploy/'s KubeSchedulerConfiguration does.
    defaults = {"podInitialBackoffSeconds": 1, "podMaxBackoffSeconds": 10}
    with own_control_plane(tmp_path_factory.mktemp("requeue-plane"), {}, [deployed_requeue_flag()],
                           unschedulable_retry=None, scheduler_config=defaults) as plane:
        yield plane


@pytest.fixture
def rapi(plane: ControlPlane) -> Api:
    assert plane.api is not None
    return plane.api


@pytest.fixture
def rnamespace(rapi: Api) -> Iterator[str]:
    with temporary_namespace(rapi) as name:
        yield name


def events_of(api: Api, namespace: str, pod: str, reason: str) -> list[dict[str, Any]]:
    return api.items(f"/api/v1/namespaces/{namespace}/events",
                     fieldSelector=f"involvedObject.name={pod},reason={reason}")


def test_upstreams_failed_scheduling_line_and_our_explanation_beside_it(rapi: Api, rnamespace: str) -> None:
    driver = create_driver(rapi, nodes=2, devices=1)
    try:
        create_template(rapi, rnamespace, "two-gpus", claim_spec(driver.device_class, count=2))
        create_pod(rapi, rnamespace, "too-big", template="two-gpus")
        line = ("0/2 nodes are available: 2 cannot allocate all claims. preemption: 0/2 nodes are available: "
                "2 Preemption is not helpful for scheduling.")
        wait_for("the in-tree plugin's FailedScheduling line",
                 lambda: line in scheduling_failures(rapi, rnamespace, "too-big"), timeout_s=30)
        claim = claim_of_pod(rapi, rnamespace, "too-big")["metadata"]["name"]
        [event] = wait_for("a DRAExplanation event",
                           lambda: events_of(rapi, rnamespace, "too-big", "DRAExplanation"), timeout_s=30)
        said = f"request gpu of claim {rnamespace}/{claim}: 0 of 2 nodes (2 too few devices)"
        assert event["message"] == said
        assert event["type"] == "Warning" and event["source"] == {"component": "dra-extender"}
    finally:
        driver.cleanup()


def test_a_pod_waiting_for_devices_is_bound_within_10_s_of_them_appearing(
        rapi: Api, rnamespace: str, plane: ControlPlane) -> None:
    driver = create_driver(rapi, nodes=1, devices=1)
    node = driver.node_names[0]
    try:
        create_template(rapi, rnamespace, "two-gpus", claim_spec(driver.device_class, count=2))
        create_pod(rapi, rnamespace, "waiter", template="two-gpus")
        wait_for("the pod rejected for lack of devices",
                 lambda: any("cannot allocate all claims" in m for m in scheduling_failures(rapi, rnamespace,
                                                                                           "waiter")),
                 timeout_s=30)
        # Parked in the unschedulable queue, its backoff over: only an event requeues it now.
        time.sleep(12)
        assert not rapi.get(f"/api/v1/namespaces/{rnamespace}/pods/waiter")["spec"].get("nodeName")

        path = f"{RESOURCE}/resourceslices/{driver.slice_name(node)}"
        current = rapi.get(path)
        current["spec"]["devices"].append({"name": "dev-1", "attributes": {"index": {"int": 1}}})
        published = time.monotonic()
        rapi.update(path, current)
        wait_for("the pod bound",
                 lambda: rapi.get(f"/api/v1/namespaces/{rnamespace}/pods/waiter")["spec"].get("nodeName"),
                 timeout_s=60, interval_s=0.1)
        delay = time.monotonic() - published
        print(f"requeue delay: {delay:.2f} s from the ResourceSlice update to the pod bound")
        assert delay < REQUEUE_DELAY_LIMIT_S
        namespace, name = deployed_requeue_flag().split("=", 1)[1].split("/")
        nudged = rapi.get(f"{RESOURCE}/namespaces/{namespace}/resourceclaims/{name}")
        assert "dra-extender.io/requeue" in nudged["metadata"]["annotations"]
    finally:
        for pod in rapi.items(f"/api/v1/namespaces/{rnamespace}/pods"):
            name = pod["metadata"]["name"]
            rapi.delete(f"/api/v1/namespaces/{rnamespace}/pods/{name}", grace_period_seconds=0)
        driver.cleanup()
