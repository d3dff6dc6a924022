"""Mutating webhook: tolerations of the request copied into the results of a new allocation."""

from __future__ import annotations

import pytest
from webhook_fixtures import (
    allocation,
    apply_patch,
    claim,
    decide,
    exact_request,
    first_available,
    patch_of,
    result,
    status_update,
    subrequest,
    with_status,
)

from webhook.admission import AdmissionHandler
from webhook.lookup import StaticClusterLookup

TOLERATE_MAINTENANCE = [{"key": "maintenance", "operator": "Exists", "effect": "NoExecute"}]
TOLERATE_FLAKY = [
    {"key": "flaky", "operator": "Equal", "value": "yes", "effect": "NoSchedule", "tolerationSeconds": 30}
]


@pytest.fixture
def handler() -> AdmissionHandler:
    return AdmissionHandler(StaticClusterLookup(), compile_selector=lambda _: None)


def allocate(claim_obj: dict, *results: dict, dry_run: bool = False) -> dict:
    return status_update(claim_obj, with_status(claim_obj, allocation=allocation(*results)), dry_run=dry_run)


@pytest.mark.parametrize("dry_run", [False, True])
def test_missing_tolerations_are_copied_from_the_request(handler: AdmissionHandler, dry_run: bool) -> None:
    c = claim("c", exact_request("gpu", tolerations=TOLERATE_MAINTENANCE), exact_request("nic"))
    review = allocate(
        c, result("gpu", "gpu-0"), result("nic", "nic-0"), result("gpu", "gpu-1"), dry_run=dry_run
    )
    response = decide(handler, "mutate", review)
    assert response["allowed"] is True
    patched = apply_patch(review["request"]["object"], patch_of(response))
    results = patched["status"]["allocation"]["devices"]["results"]
    assert results[0]["tolerations"] == TOLERATE_MAINTENANCE
    assert "tolerations" not in results[1]
    assert results[2]["tolerations"] == TOLERATE_MAINTENANCE


def test_results_that_already_carry_the_tolerations_produce_no_patch(handler: AdmissionHandler) -> None:
    c = claim("c", exact_request("gpu", tolerations=TOLERATE_MAINTENANCE), exact_request("nic"))
    review = allocate(
        c, result("gpu", tolerations=TOLERATE_MAINTENANCE), result("nic", "nic-0", tolerations=[])
    )
    response = decide(handler, "mutate", review)
    assert response["allowed"] is True
    assert "patch" not in response and "patchType" not in response


def test_different_tolerations_are_replaced(handler: AdmissionHandler) -> None:
    c = claim("c", exact_request("gpu", tolerations=TOLERATE_MAINTENANCE))
    review = allocate(c, result("gpu", tolerations=TOLERATE_FLAKY))
    patched = apply_patch(review["request"]["object"], patch_of(decide(handler, "mutate", review)))
    assert patched["status"]["allocation"]["devices"]["results"][0]["tolerations"] == TOLERATE_MAINTENANCE


def test_tolerations_the_request_does_not_have_are_removed(handler: AdmissionHandler) -> None:
    c = claim("c", exact_request("gpu"))
    review = allocate(c, result("gpu", tolerations=TOLERATE_MAINTENANCE))
    patch = patch_of(decide(handler, "mutate", review))
    assert patch == [{"op": "remove", "path": "/status/allocation/devices/results/0/tolerations"}]


def test_subrequest_tolerations_are_used_for_first_available_results(handler: AdmissionHandler) -> None:
    c = claim(
        "c",
        first_available(
            "gpu",
            subrequest("big", tolerations=TOLERATE_FLAKY),
            subrequest("small", tolerations=TOLERATE_MAINTENANCE),
        ),
    )
    review = allocate(c, result("gpu/small"))
    patched = apply_patch(review["request"]["object"], patch_of(decide(handler, "mutate", review)))
    assert patched["status"]["allocation"]["devices"]["results"][0]["tolerations"] == TOLERATE_MAINTENANCE


def test_existing_allocation_is_left_alone(handler: AdmissionHandler) -> None:
    c = claim("c", exact_request("gpu", tolerations=TOLERATE_MAINTENANCE))
    allocated = with_status(c, allocation=allocation(result("gpu")))
    reserved = with_status(c, allocation=allocation(result("gpu")), reserved_for=[])
    response = decide(handler, "mutate", status_update(allocated, reserved))
    assert "patch" not in response


def test_unknown_requests_and_whole_first_available_references_are_not_patched(
    handler: AdmissionHandler,
) -> None:
    c = claim("c", first_available("gpu", subrequest("big", tolerations=TOLERATE_FLAKY)))
    response = decide(handler, "mutate", allocate(c, result("gpu"), result("nosuch")))
    assert response["allowed"] is True and "patch" not in response


def test_mutating_webhook_ignores_other_resources(handler: AdmissionHandler) -> None:
    c = claim("c", exact_request("gpu", tolerations=TOLERATE_MAINTENANCE))
    review = allocate(c, result("gpu"))
    review["request"]["subResource"] = ""
    review["request"]["resource"]["resource"] = "resourceclaims"
    assert "patch" not in decide(handler, "mutate", review)
