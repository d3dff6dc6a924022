"""The webhook on the special claim of a pod with extended resources backed by DRA, shaped exactly as
dra-extender's bind creates and writes it (before the pod's extendedResourceClaimStatus names it)."""

from __future__ import annotations

from webhook_fixtures import allocation, consumer, decide, pod, result, status_update, with_status

from allocator import ResourceClaim
from extender.plugin.extendedresources import creation_body, in_memory_claim
from webhook.admission import AdmissionHandler
from webhook.lookup import StaticClusterLookup

REQUEST = "container-0-request-0"


def created_claim(owner: dict) -> dict:
    """What the API server stores from bind's create: a generated name and UID."""
    requests = [{"name": REQUEST, "exactly": {"deviceClassName": "gpu.example.com",
                                              "allocationMode": "ExactCount", "count": 1}}]
    body = creation_body(ResourceClaim.from_api(in_memory_claim(owner, requests)),
                         "resource.kubernetes.io/delete-protection")
    meta = {**body["metadata"], "name": f"{owner['metadata']['name']}-extended-resources-x7k2p",
            "uid": "3f6c2f8e-5b1e-4a49-9d59-0c1f4f0c9a11", "resourceVersion": "11"}
    return {**body, "metadata": meta}


def handler(*objects: dict) -> AdmissionHandler:
    return AdmissionHandler(StaticClusterLookup(objects, ready=True), reserved_for_limit=256,
                            compile_selector=lambda _: None)


def test_extended_special_claim_reserved_for_its_owner_pod_is_allowed_and_not_for_another() -> None:
    owner, other = pod("owner"), pod("other")
    claim = created_claim(owner)
    written = with_status(claim, allocation=allocation(result(REQUEST)), reserved_for=[consumer(owner)])
    response = decide(handler(owner, other), "validate", status_update(claim, written))
    assert response["allowed"] is True
    foreign = with_status(claim, allocation=allocation(result(REQUEST)), reserved_for=[consumer(other)])
    response = decide(handler(owner, other), "validate", status_update(claim, foreign))
    assert response["allowed"] is False
    assert "does not reference claim owner-extended-resources-x7k2p" in response["status"]["message"]


def test_extended_special_claim_allocation_gets_the_tolerations_rule_like_any_claim() -> None:
    owner = pod("owner")
    claim = created_claim(owner)
    toleration = {"key": "maintenance", "operator": "Exists", "effect": "NoSchedule"}
    claim["spec"]["devices"]["requests"][0]["exactly"]["tolerations"] = [toleration]
    written = with_status(claim, allocation=allocation(result(REQUEST)), reserved_for=[consumer(owner)])
    response = decide(handler(owner), "mutate", status_update(claim, written))
    assert response["allowed"] is True and response.get("patch"), "request tolerations copied into results"
