"""Validating webhook: resourceclaims/status UPDATE."""

from __future__ import annotations

import pytest
from webhook_fixtures import (
    allocation,
    claim,
    consumer,
    decide,
    exact_request,
    first_available,
    pod,
    result,
    status_update,
    subrequest,
    uid,
    with_status,
)

from webhook.admission import AdmissionHandler
from webhook.lookup import StaticClusterLookup


def reservations(count: int) -> list[dict]:
    return [
        {"apiGroup": "example.com", "resource": "jobs", "name": f"job-{i}", "uid": uid()}
        for i in range(count)
    ]


def allocated_claim(*requests: dict, **meta_extra: object) -> tuple[dict, dict]:
    c = claim("shared", *(requests or (exact_request("gpu"),)), **meta_extra)
    return c, with_status(c, allocation=allocation(result("gpu")), reserved_for=[])


def make_handler(*objects: dict, limit: int = 256, ready: bool = True) -> AdmissionHandler:
    return AdmissionHandler(
        StaticClusterLookup(objects, ready=ready), reserved_for_limit=limit, compile_selector=lambda _: None
    )


def reserve(old: dict, entries: list[dict]) -> dict:
    return with_status(old, allocation=old["status"]["allocation"], reserved_for=entries)


def test_reservations_within_the_limit_are_allowed() -> None:
    _, allocated = allocated_claim()
    response = decide(
        make_handler(), "validate", status_update(allocated, reserve(allocated, reservations(256)))
    )
    assert response["allowed"] is True


def test_more_than_256_reservations_are_denied_naming_field_and_limit() -> None:
    _, allocated = allocated_claim()
    response = decide(
        make_handler(), "validate", status_update(allocated, reserve(allocated, reservations(257)))
    )
    assert response["allowed"] is False
    assert response["status"]["code"] == 422
    message = response["status"]["message"]
    assert "status.reservedFor" in message and "257" in message and "limit of 256" in message


def test_cluster_limit_applies_to_growth_only() -> None:
    _, allocated = allocated_claim()
    handler = make_handler(limit=4)
    denied = decide(handler, "validate", status_update(allocated, reserve(allocated, reservations(5))))
    assert denied["allowed"] is False
    assert (
        "limit of 4" in denied["status"]["message"] and "--reserved-for-limit" in denied["status"]["message"]
    )
    # A claim that got above a newly lowered limit can still shrink.
    crowded = reserve(allocated, reservations(6))
    shrunk = reserve(crowded, crowded["status"]["reservedFor"][:5])
    assert decide(handler, "validate", status_update(crowded, shrunk))["allowed"] is True


def test_duplicate_uids_are_denied() -> None:
    _, allocated = allocated_claim()
    entries = reservations(2)
    entries[1]["uid"] = entries[0]["uid"]
    response = decide(make_handler(), "validate", status_update(allocated, reserve(allocated, entries)))
    assert response["allowed"] is False
    assert "status.reservedFor[1].uid: duplicate value" in response["status"]["message"]


@pytest.mark.parametrize("field", ["resource", "name", "uid"])
def test_entries_need_resource_name_and_uid(field: str) -> None:
    _, allocated = allocated_claim()
    entries = reservations(1)
    del entries[0][field]
    response = decide(make_handler(), "validate", status_update(allocated, reserve(allocated, entries)))
    assert response["allowed"] is False
    assert f"status.reservedFor[0]: {field} required" in response["status"]["message"]


def test_reservation_without_allocation_is_denied() -> None:
    c = claim("c", exact_request("gpu"))
    new = with_status(c, reserved_for=reservations(1))
    response = decide(make_handler(), "validate", status_update(c, new))
    assert response["allowed"] is False
    assert "may not be set without status.allocation" in response["status"]["message"]


def test_no_new_reservation_while_the_claim_is_being_deleted() -> None:
    _, allocated = allocated_claim(deletionTimestamp="2026-11-22T10:00:00Z")
    kept = reserve(allocated, reservations(2))
    grown = reserve(kept, [*kept["status"]["reservedFor"], *reservations(1)])
    denied = decide(make_handler(), "validate", status_update(kept, grown))
    assert denied["allowed"] is False
    assert (
        "status.reservedFor[2]: no new reservations while the claim is being deleted"
        in denied["status"]["message"]
    )
    shrunk = reserve(kept, kept["status"]["reservedFor"][:1])
    assert decide(make_handler(), "validate", status_update(kept, shrunk))["allowed"] is True


def test_pod_reservation_for_a_pod_that_uses_the_claim_is_allowed() -> None:
    _, allocated = allocated_claim()
    user = pod("user", {"name": "gpu", "resourceClaimName": "shared"})
    response = decide(
        make_handler(user), "validate", status_update(allocated, reserve(allocated, [consumer(user)]))
    )
    assert response["allowed"] is True
    assert "warnings" not in response


def test_pod_reservation_for_a_missing_pod_is_denied_naming_it() -> None:
    _, allocated = allocated_claim()
    ghost = pod("ghost", {"name": "gpu", "resourceClaimName": "shared"})
    response = decide(
        make_handler(), "validate", status_update(allocated, reserve(allocated, [consumer(ghost)]))
    )
    assert response["allowed"] is False
    assert "pod ns/ghost does not exist" in response["status"]["message"]


def test_stale_pod_uid_is_denied() -> None:
    _, allocated = allocated_claim()
    user = pod("user", {"name": "gpu", "resourceClaimName": "shared"})
    stale = {**consumer(user), "uid": uid()}
    response = decide(make_handler(user), "validate", status_update(allocated, reserve(allocated, [stale])))
    assert response["allowed"] is False
    message = response["status"]["message"]
    assert "status.reservedFor[0].uid: pod ns/user has UID" in message and "stale reference" in message


def test_pod_that_does_not_reference_the_claim_is_denied() -> None:
    _, allocated = allocated_claim()
    foreign = pod("foreign", {"name": "gpu", "resourceClaimName": "other"})
    response = decide(
        make_handler(foreign), "validate", status_update(allocated, reserve(allocated, [consumer(foreign)]))
    )
    assert response["allowed"] is False
    assert "pod ns/foreign does not reference claim shared" in response["status"]["message"]


def test_pod_in_another_namespace_does_not_count() -> None:
    _, allocated = allocated_claim()
    elsewhere = pod("user", {"name": "gpu", "resourceClaimName": "shared"}, namespace="other")
    response = decide(
        make_handler(elsewhere),
        "validate",
        status_update(allocated, reserve(allocated, [consumer(elsewhere)])),
    )
    assert response["allowed"] is False
    assert "pod ns/user does not exist" in response["status"]["message"]


def test_template_generated_claim_is_resolved_through_pod_status() -> None:
    _, allocated = allocated_claim()
    user = pod(
        "user",
        {"name": "gpu", "resourceClaimTemplateName": "gpu-template"},
        status={"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "shared"}]},
    )
    response = decide(
        make_handler(user), "validate", status_update(allocated, reserve(allocated, [consumer(user)]))
    )
    assert response["allowed"] is True


def test_template_generated_claim_is_resolved_through_its_owner_when_pod_status_lags() -> None:
    user = pod("user", {"name": "gpu", "resourceClaimTemplateName": "gpu-template"})
    owner = {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "user",
        "uid": user["metadata"]["uid"],
        "controller": True,
    }
    _, allocated = allocated_claim(
        ownerReferences=[owner], annotations={"resource.kubernetes.io/pod-claim-name": "gpu"}
    )
    response = decide(
        make_handler(user), "validate", status_update(allocated, reserve(allocated, [consumer(user)]))
    )
    assert response["allowed"] is True
    # The same claim owned by another pod is foreign.
    other = pod("other", {"name": "gpu", "resourceClaimTemplateName": "gpu-template"})
    response = decide(
        make_handler(other), "validate", status_update(allocated, reserve(allocated, [consumer(other)]))
    )
    assert response["allowed"] is False


def test_extended_resource_claim_is_resolved_through_pod_status() -> None:
    _, allocated = allocated_claim()
    user = pod(
        "user", status={"extendedResourceClaimStatus": {"resourceClaimName": "shared", "requestMappings": []}}
    )
    response = decide(
        make_handler(user), "validate", status_update(allocated, reserve(allocated, [consumer(user)]))
    )
    assert response["allowed"] is True


def test_existing_stale_entries_do_not_block_updates() -> None:
    _, allocated = allocated_claim()
    gone = pod("gone", {"name": "gpu", "resourceClaimName": "shared"})
    user = pod("user", {"name": "gpu", "resourceClaimName": "shared"})
    before = reserve(allocated, [consumer(gone)])
    after = reserve(before, [consumer(gone), consumer(user)])
    assert decide(make_handler(user), "validate", status_update(before, after))["allowed"] is True


def test_pod_checks_are_skipped_with_a_warning_before_the_cluster_view_is_ready() -> None:
    _, allocated = allocated_claim()
    ghost = pod("ghost", {"name": "gpu", "resourceClaimName": "shared"})
    response = decide(
        make_handler(ready=False), "validate", status_update(allocated, reserve(allocated, [consumer(ghost)]))
    )
    assert response["allowed"] is True
    assert response["warnings"] and all(len(w) < 120 for w in response["warnings"])


def test_non_pod_consumers_are_not_looked_up() -> None:
    _, allocated = allocated_claim()
    group = {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "g", "uid": uid()}
    assert (
        decide(make_handler(), "validate", status_update(allocated, reserve(allocated, [group])))["allowed"]
        is True
    )


@pytest.mark.parametrize(
    ("reference", "allowed"),
    [
        ("gpu", True),
        ("multi/small", True),
        ("multi", True),
        ("nosuch", False),
        ("multi/huge", False),
        ("gpu/x", False),
    ],
)
def test_allocation_results_must_name_existing_requests(reference: str, allowed: bool) -> None:
    c = claim("c", exact_request("gpu"), first_available("multi", subrequest("big"), subrequest("small")))
    new = with_status(c, allocation=allocation(result("gpu", "gpu-0"), result(reference, "gpu-1")))
    response = decide(make_handler(), "validate", status_update(c, new))
    assert response["allowed"] is allowed
    if not allowed:
        assert (
            f"status.allocation.devices.results[1].request: '{reference}' names no request"
            in response["status"]["message"]
        )


def test_all_problems_are_reported_together() -> None:
    c = claim("c", exact_request("gpu"))
    entries = reservations(2)
    entries[1]["uid"] = entries[0]["uid"]
    response = decide(make_handler(), "validate", status_update(c, with_status(c, reserved_for=entries)))
    message = response["status"]["message"]
    assert "duplicate value" in message and "without status.allocation" in message


def test_dry_run_is_evaluated_the_same_way() -> None:
    _, allocated = allocated_claim()
    review = status_update(allocated, reserve(allocated, reservations(257)), dry_run=True)
    assert decide(make_handler(), "validate", review)["allowed"] is False


def test_a_denial_with_many_problems_says_how_many_and_names_a_few() -> None:
    _, allocated = allocated_claim()
    missing_pods = [{"resource": "pods", "name": f"pod-{i}", "uid": uid()} for i in range(257)]
    response = decide(make_handler(), "validate", status_update(allocated, reserve(allocated, missing_pods)))
    message = response["status"]["message"]
    assert response["allowed"] is False and len(message) < 1000
    assert message.startswith("258 problems, the first 3: status.reservedFor: 257 entries exceed the limit")
    assert "pod ns/pod-0 does not exist" in message and "pod-256" not in message
    assert message.endswith("and 255 more")
