"""dra-extender's admission webhook, called by the real kube-apiserver.

kube-apiserver validates an object before it calls validating webhooks, so a 257-entry reservedFor
is refused by its own validation (422) and never reaches ours. Our webhook's limit is shown through
the apiserver with a lowered `--reserved-for-limit`, on status writes and on pod creation.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from e2e_api import Api, ApiStatusError, wait_for
from e2e_cluster import ControlPlane
from e2e_objects import REQUEST, RESOURCE, Driver, claim_spec, create_claim, create_driver, pod_body

TOLERATION = {"key": "example.com/maintenance", "operator": "Exists", "effect": "NoExecute"}
LIMIT = 2


@pytest.fixture
def driver(api: Api) -> Iterator[Driver]:
    created = create_driver(api, nodes=1, devices=2)
    yield created
    created.cleanup()


@pytest.fixture
def lowered_limit(control_plane: ControlPlane) -> Iterator[int]:
    """dra-extender restarted with --reserved-for-limit, and restored afterwards."""
    normal_flags = list(control_plane.extender_flags)
    control_plane.stop_extender()
    control_plane.start_extender([*normal_flags, f"--reserved-for-limit={LIMIT}"])
    yield LIMIT
    control_plane.stop_extender()
    control_plane.start_extender(normal_flags)


def _unscheduled_pod(api: Api, namespace: str, name: str, claim: str) -> dict[str, Any]:
    body = pod_body(name, claim=claim)
    body["spec"]["schedulerName"] = "nobody"  # the test writes the claim status itself
    return api.create(f"/api/v1/namespaces/{namespace}/pods", body)


def _allocation(driver: Driver, node: str, device: str) -> dict[str, Any]:
    # Written as a client that does not copy tolerations would write it.
    return {
        "devices": {"results": [{"request": REQUEST, "driver": driver.name, "pool": node, "device": device}]},
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
            ]
        },
    }


def _write_status(api: Api, namespace: str, claim: str, status: dict[str, Any]) -> dict[str, Any]:
    path = f"{RESOURCE}/namespaces/{namespace}/resourceclaims/{claim}/status"
    current = api.get(path)
    current["status"] = status
    return api.update(path, current)


def _consumers(pod_list: list[dict[str, Any]]) -> list[dict[str, str]]:
    return [
        {"resource": "pods", "name": p["metadata"]["name"], "uid": p["metadata"]["uid"]} for p in pod_list
    ]


def test_apiserver_refuses_257_reservations(api: Api, namespace: str, driver: Driver) -> None:
    create_claim(api, namespace, "crowded", claim_spec(driver.device_class))
    node = driver.node_names[0]
    reserved = [
        {"resource": "pods", "name": f"p{i}", "uid": f"00000000-0000-0000-0000-{i:012d}"} for i in range(257)
    ]
    with pytest.raises(ApiStatusError) as denied:
        _write_status(
            api,
            namespace,
            "crowded",
            {"allocation": _allocation(driver, node, "dev-0"), "reservedFor": reserved},
        )
    assert denied.value.status == 422
    assert "256" in denied.value.message


def test_webhook_copies_tolerations_and_enforces_the_reservation_limit(
    api: Api, namespace: str, driver: Driver, lowered_limit: int
) -> None:
    create_claim(api, namespace, "shared", claim_spec(driver.device_class, tolerations=[TOLERATION]))
    users = [_unscheduled_pod(api, namespace, f"user-{i}", "shared") for i in range(lowered_limit + 1)]
    node = driver.node_names[0]
    allocation = _allocation(driver, node, "dev-0")

    # One reservation more than the limit: our webhook refuses it, in its own words.
    with pytest.raises(ApiStatusError) as denied:
        _write_status(api, namespace, "shared", {"allocation": allocation, "reservedFor": _consumers(users)})
    assert f"status.reservedFor: {lowered_limit + 1} entries exceed the limit of {lowered_limit}" in (
        denied.value.message
    ), denied.value.message
    assert "admission webhook" in denied.value.message

    # Up to the limit it passes (once the webhook's cache has seen the new pods), and the mutating
    # webhook has copied the request's tolerations into the result the client wrote without them.
    def write_at_limit() -> dict[str, Any] | None:
        try:
            return _write_status(
                api,
                namespace,
                "shared",
                {"allocation": allocation, "reservedFor": _consumers(users[:lowered_limit])},
            )
        except ApiStatusError as err:
            if "does not exist" in err.message or "not found" in err.message.lower():
                return None
            raise

    stored = wait_for("the status write at the limit to pass", write_at_limit, timeout_s=20)
    result = stored["status"]["allocation"]["devices"]["results"][0]
    assert result["tolerations"] == [TOLERATION]
    assert len(stored["status"]["reservedFor"]) == lowered_limit

    # A further pod naming the full claim could never start: its creation is refused.
    with pytest.raises(ApiStatusError) as refused:
        wait_for(
            "the webhook to see the full claim",
            lambda: _create_expecting_denial(api, namespace),
            timeout_s=20,
        )
    assert f"the limit is {lowered_limit}" in refused.value.message, refused.value.message
    assert "ResourceClaimTemplate" in refused.value.message


def _create_expecting_denial(api: Api, namespace: str) -> None:
    """Create the extra pod; if the webhook let it through (cache not caught up yet), remove it and retry."""
    body = pod_body("one-too-many", claim="shared")
    body["spec"]["schedulerName"] = "nobody"
    api.create(f"/api/v1/namespaces/{namespace}/pods", body)
    api.delete(f"/api/v1/namespaces/{namespace}/pods/one-too-many", grace_period_seconds=0)
    wait_for(
        "the extra pod gone",
        lambda: api.get_or_none(f"/api/v1/namespaces/{namespace}/pods/one-too-many") is None,
    )
    return None
