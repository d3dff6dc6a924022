"""DRADeviceCompatibilityGroups (alpha) end to end, on a control plane of its own with the gate on in
kube-apiserver (which only then stores the field) and in dra-extender.

One GPU pool: a counter slice and three partitions that draw from the same counter set, declaring
"vgpu" (listed first), "mig" and "mig". A pod that wants a "mig" partition gets one; the next pod,
which takes any partition, must skip the free "vgpu" one (the first in the search order) for the other
"mig"; a pod that wants the "vgpu" partition then cannot be placed, and the scheduler's event says why.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from e2e_api import Api, temporary_namespace, wait_for
from e2e_cluster import DETAILED_REASONS, ControlPlane, own_control_plane
from e2e_objects import (
    REQUEST,
    RESOURCE,
    allocated_devices,
    claim_of_pod,
    create_node,
    create_pod,
    create_template,
    unique,
    wait_for_reason,
)

GATE = "--feature-gates=DRADeviceCompatibilityGroups=true"
PARTITIONS = (("a-vgpu", "vgpu"), ("b-mig", "mig"), ("c-mig", "mig"))


@pytest.fixture(scope="module")
def groups_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    extra_args = {"kube-apiserver": [GATE], "kube-scheduler": [GATE], "dra-extender": [GATE]}
    with own_control_plane(tmp_path_factory.mktemp("compatibility-groups-plane"), extra_args,
                           [DETAILED_REASONS]) as plane:
        yield plane


@pytest.fixture
def gapi(groups_plane: ControlPlane) -> Api:
    assert groups_plane.api is not None
    return groups_plane.api


def partition(name: str, group: str) -> dict[str, Any]:
    return {
        "name": name,
        "attributes": {"kind": {"string": group}},
        "consumesCounters": [
            {"counterSet": "gpu-0", "counters": {"memory": {"value": "10Gi"}}, "compatibilityGroups": [group]}
        ],
    }


def publish_gpu(api: Api, driver: str, node: str) -> str:
    """A DeviceClass for `driver` and its pool of three partitions on `node`; returns the class."""
    api.create(
        f"{RESOURCE}/deviceclasses",
        {
            "metadata": {"name": driver},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]},
        },
    )
    create_node(api, node)
    pool = {"name": node, "generation": 1, "resourceSliceCount": 2}
    api.create(
        f"{RESOURCE}/resourceslices",
        {
            "metadata": {"name": f"{node}-counters"},
            "spec": {
                "driver": driver,
                "nodeName": node,
                "pool": pool,
                "sharedCounters": [{"name": "gpu-0", "counters": {"memory": {"value": "40Gi"}}}],
            },
        },
    )
    api.create(
        f"{RESOURCE}/resourceslices",
        {
            "metadata": {"name": f"{node}-partitions"},
            "spec": {
                "driver": driver,
                "nodeName": node,
                "pool": pool,
                "devices": [partition(name, group) for name, group in PARTITIONS],
            },
        },
    )
    return driver


def one_partition(device_class: str, kind: str | None) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": device_class, "allocationMode": "ExactCount", "count": 1}
    if kind is not None:
        exactly["selectors"] = [
            {"cel": {"expression": f'device.attributes["{device_class}"].kind == "{kind}"'}}
        ]
    return {"devices": {"requests": [{"name": REQUEST, "exactly": exactly}]}}


def bound_device(api: Api, namespace: str, pod: str) -> str:
    wait_for(
        f"{pod} bound", lambda: api.get(f"/api/v1/namespaces/{namespace}/pods/{pod}")["spec"].get("nodeName")
    )
    ((_, _, device),) = allocated_devices(claim_of_pod(api, namespace, pod))
    return device


def test_partitions_of_one_counter_set_share_a_compatibility_group(gapi: Api) -> None:
    driver = unique("cg") + ".example.com"
    node = driver.split(".")[0] + "-node"
    device_class = publish_gpu(gapi, driver, node)
    stored = gapi.get(f"{RESOURCE}/resourceslices/{node}-partitions")
    assert stored["spec"]["devices"][0]["consumesCounters"][0].get("compatibilityGroups") == ["vgpu"], (
        "kube-apiserver dropped compatibilityGroups: is DRADeviceCompatibilityGroups on?"
    )
    with temporary_namespace(gapi, "cg") as namespace:
        create_template(gapi, namespace, "mig", one_partition(device_class, "mig"))
        create_template(gapi, namespace, "any", one_partition(device_class, None))
        create_template(gapi, namespace, "vgpu", one_partition(device_class, "vgpu"))

        create_pod(gapi, namespace, "first-mig", template="mig")
        assert bound_device(gapi, namespace, "first-mig") == "b-mig"
        create_pod(gapi, namespace, "any", template="any")
        assert bound_device(gapi, namespace, "any") == "c-mig"  # not a-vgpu, listed first

        create_pod(gapi, namespace, "vgpu", template="vgpu")
        wait_for_reason(gapi, namespace, "vgpu", "1 sharing no compatibility group with allocated devices")
        assert not gapi.get(f"/api/v1/namespaces/{namespace}/pods/vgpu")["spec"].get("nodeName")
