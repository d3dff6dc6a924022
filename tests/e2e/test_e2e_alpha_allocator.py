"""The alpha allocator features end to end, on a control plane of their own with DRADerivedAttributes
and DRAOptionalNodeOperations on kube-apiserver (which drops the fields while its gates are off) and on
dra-extender (the shared control plane of the other tests keeps the 1.37 defaults, both off).

- derived attributes: a claim whose constraint compares a value computed by CEL gets the devices that
  value groups, and one whose expression fails on the devices stays pending with the CEL error;
- optional node operations: devices of a slice with skipNodeOperations go only to the node whose
  status.declaredFeatures (GA in 1.37, written here as the kubelet would) lists the feature, and the
  allocation result copies the list.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from e2e_api import Api, temporary_namespace, wait_for
from e2e_cluster import DETAILED_REASONS, ControlPlane, own_control_plane
from e2e_objects import (
    RESOURCE,
    Driver,
    allocated_devices,
    bound,
    claim_spec,
    claims,
    create_claim,
    create_driver,
    create_pod,
    pods,
    wait_for_reason,
)

GATES = "--feature-gates=DRADerivedAttributes=true,DRAOptionalNodeOperations=true"
DECLARED = "DRAOptionalNodeOperations"


@pytest.fixture(scope="module")
def alpha_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    extra_args = {"kube-apiserver": [GATES], "kube-scheduler": [GATES], "dra-extender": [GATES]}
    with own_control_plane(tmp_path_factory.mktemp("alpha-plane"), extra_args, [DETAILED_REASONS]) as plane:
        yield plane


@pytest.fixture
def api(alpha_plane: ControlPlane) -> Api:
    assert alpha_plane.api is not None
    return alpha_plane.api


@pytest.fixture
def namespace(api: Api) -> Iterator[str]:
    with temporary_namespace(api, "alpha") as name:
        yield name


@pytest.fixture
def driver(api: Api) -> Iterator[Driver]:
    """Four devices (attribute index 0..3) on each of two nodes."""
    created = create_driver(api, nodes=2, devices=4)
    yield created
    created.cleanup()


def derived_spec(driver: Driver, expression: str, count: int) -> dict[str, Any]:
    spec = claim_spec(driver.device_class, count=count)
    spec["devices"]["requests"][0]["exactly"]["derivedAttributes"] = [
        {"name": "derived/key", "expression": expression}
    ]
    spec["devices"]["constraints"] = [{"matchAttribute": "derived/key"}]
    return spec


def wait_allocated(api: Api, namespace: str, claim: str) -> dict[str, Any]:
    path = f"{RESOURCE}/namespaces/{namespace}/resourceclaims/{claim}"
    return wait_for(
        f"claim {claim} allocated",
        lambda: api.get(path) if allocated_devices(api.get(path)) else None,
        timeout_s=60,
    )


def test_a_derived_attribute_groups_the_devices_a_constraint_matches(
    api: Api, namespace: str, driver: Driver
) -> None:
    # index % 2 groups dev-0 with dev-2 and dev-1 with dev-3; the devices' own indexes all differ.
    index = f'device.attributes["{driver.name}"].index'
    create_claim(api, namespace, "pair", derived_spec(driver, f"{index} % 2", count=2))
    create_pod(api, namespace, "pair-pod", claim="pair")
    claim = wait_allocated(api, namespace, "pair")
    devices = sorted(device for _, _, device in allocated_devices(claim))
    assert devices in (["dev-0", "dev-2"], ["dev-1", "dev-3"])
    assert claim["spec"]["devices"]["requests"][0]["exactly"]["derivedAttributes"]  # kept by the API server


def test_a_failing_derived_attribute_leaves_the_pod_pending_with_the_cel_error(
    api: Api, namespace: str, driver: Driver
) -> None:
    missing = f'device.attributes["{driver.name}"].missing'
    create_claim(api, namespace, "broken", derived_spec(driver, missing, count=1))
    create_pod(api, namespace, "broken-pod", claim="broken")
    messages = wait_for_reason(api, namespace, "broken-pod", "evaluate derived attribute derived/key")
    assert any("no such key: missing" in message for message in messages)


def test_devices_that_skip_node_operations_go_to_the_declaring_node(
    api: Api, namespace: str, driver: Driver
) -> None:
    declaring = driver.node_names[0]
    for node in driver.node_names:
        path = f"{RESOURCE}/resourceslices/{driver.slice_name(node)}"
        api.patch(path, {"spec": {"skipNodeOperations": ["*"]}})
    api.patch(f"/api/v1/nodes/{declaring}/status", {"status": {"declaredFeatures": [DECLARED]}})
    for index in range(5):  # the declaring node has 4 devices: one pod finds none
        create_claim(api, namespace, f"c{index}", claim_spec(driver.device_class))
        create_pod(api, namespace, f"p{index}", claim=f"c{index}")

    def allocated() -> list[dict[str, Any]] | None:
        found = [c for c in claims(api, namespace) if allocated_devices(c)]
        return found if len(found) == 4 else None

    for claim in wait_for("four claims allocated", allocated, timeout_s=60):
        results = claim["status"]["allocation"]["devices"]["results"]
        assert [(r["pool"], r["skipNodeOperations"]) for r in results] == [(declaring, ["*"])]
    wait_for("four pods bound", lambda: len(bound(pods(api, namespace))) == 4 or None, timeout_s=30)
    (pending,) = [p["metadata"]["name"] for p in pods(api, namespace) if not p["spec"].get("nodeName")]
    # The other node has free devices, but they skip node operations and it does not declare that.
    wait_for_reason(api, namespace, pending, "skipping node operations")
