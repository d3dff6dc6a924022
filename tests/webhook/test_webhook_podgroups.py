"""Webhook rules with PodGroup consumers (KEP-5729, gate DRAWorkloadResourceClaims).

Upstream validation (pkg/apis/resource/validation, validateResourceClaimUserReference) accepts any
reservedFor entry with resource, name and uid, unique by uid, at most 256 of them; a PodGroup entry is
one entry whatever the group's size. The webhook must accept exactly that for PodGroups.
"""

from __future__ import annotations

import pytest
from webhook_fixtures import (
    admission_review,
    allocation,
    claim,
    consumer,
    decide,
    exact_request,
    pod,
    result,
    status_update,
    uid,
    with_status,
)

from allocator import FeatureGates
from webhook.admission import AdmissionHandler
from webhook.lookup import StaticClusterLookup

ON = FeatureGates({"DRAWorkloadResourceClaims": True})


def group_entry(name: str = "train", group_uid: str | None = None) -> dict:
    return {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": name, "uid": group_uid or uid()}


def handler(*objects: dict, limit: int = 256, features: FeatureGates = ON) -> AdmissionHandler:
    return AdmissionHandler(StaticClusterLookup(objects), reserved_for_limit=limit, features=features,
                            compile_selector=lambda _: None)


def allocated(reserved_for: list[dict] | None = None) -> dict:
    return with_status(claim("shared", exact_request("gpu")), allocation=allocation(result("gpu")),
                       reserved_for=reserved_for or [])


def reserve(old: dict, entries: list[dict]) -> dict:
    return with_status(old, allocation=old["status"]["allocation"], reserved_for=entries)


def test_podgroup_consumer_is_accepted_without_looking_the_group_up() -> None:
    old = allocated()
    response = decide(handler(), "validate", status_update(old, reserve(old, [group_entry()])))
    assert response["allowed"] is True and "warnings" not in response


def test_podgroup_consumer_next_to_pods_counts_as_one_entry_of_256() -> None:
    old = allocated()
    pods = [{"resource": "pods", "name": f"p{i}", "uid": uid()} for i in range(255)]
    lookup = [pod(f"p{i}", {"name": "g", "resourceClaimName": "shared"}) for i in range(255)]
    for i, entry in enumerate(pods):
        lookup[i]["metadata"]["uid"] = entry["uid"]
    fits = decide(handler(*lookup), "validate", status_update(old, reserve(old, [*pods, group_entry()])))
    assert fits["allowed"] is True
    over = decide(handler(*lookup), "validate",
                  status_update(old, reserve(old, [*pods, group_entry(), group_entry("eval")])))
    assert over["allowed"] is False
    assert over["status"]["message"] == (
        "status.reservedFor: 257 entries exceed the limit of 256 (the API maximum)")


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "train"},
         "status.reservedFor[0]: uid required"),
        ({"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "uid": "u-1"},
         "status.reservedFor[0]: name required"),
        ({"apiGroup": "scheduling.k8s.io", "name": "train", "uid": "u-1"},
         "status.reservedFor[0]: resource required"),
    ],
)
def test_podgroup_consumer_needs_resource_name_and_uid_in_one_line(entry: dict, message: str) -> None:
    old = allocated()
    response = decide(handler(), "validate", status_update(old, reserve(old, [entry])))
    assert response["allowed"] is False and response["status"]["message"] == message
    assert "\n" not in response["status"]["message"]


def test_podgroup_consumer_uid_must_be_unique() -> None:
    old = allocated()
    twice = group_entry(group_uid="g-1")
    update = status_update(old, reserve(old, [twice, {**twice, "name": "b"}]))
    response = decide(handler(), "validate", update)
    assert response["status"]["message"] == (
        "status.reservedFor[1].uid: duplicate value 'g-1' (UIDs must be unique)")


def test_podgroup_member_may_join_a_claim_its_group_holds_even_when_the_list_is_full() -> None:
    full = allocated([{"resource": "pods", "name": f"p{i}", "uid": uid()} for i in range(255)]
                     + [group_entry()])
    new = pod("w0", {"name": "gpus", "resourceClaimName": "shared"})
    new["spec"]["schedulingGroup"] = {"podGroupName": "train"}
    allowed = decide(handler(full), "validate", admission_review("CREATE", "pods", new))
    assert allowed["allowed"] is True
    # Not a member, or the gate off: the pod would add itself, which can never fit.
    new["spec"]["schedulingGroup"] = {"podGroupName": "eval"}
    denied = decide(handler(full), "validate", admission_review("CREATE", "pods", new))
    assert denied["allowed"] is False and "256 consumers" in denied["status"]["message"]
    new["spec"]["schedulingGroup"] = {"podGroupName": "train"}
    review = admission_review("CREATE", "pods", new)
    gate_off = decide(handler(full, features=FeatureGates()), "validate", review)
    assert gate_off["allowed"] is False


def test_podgroup_pod_consumers_are_still_checked_against_the_cluster() -> None:
    member = pod("w0", {"name": "gpus", "resourceClaimName": "shared"})
    old = allocated([group_entry()])
    stale = {**consumer(member), "uid": uid()}
    response = decide(handler(member), "validate", status_update(old, reserve(old, [group_entry(), stale])))
    assert response["allowed"] is False and "(stale reference)" in response["status"]["message"]
