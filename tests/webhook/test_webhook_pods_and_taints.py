"""Validating webhook: pods CREATE and devicetaintrules CREATE/UPDATE."""

from __future__ import annotations

import pytest
from webhook_fixtures import (
    admission_review,
    allocation,
    claim,
    consumer,
    decide,
    exact_request,
    gpu,
    meta,
    pod,
    resource_slice,
    result,
    uid,
    with_status,
)

from webhook.admission import AdmissionHandler
from webhook.lookup import StaticClusterLookup
from webhook.taint_rules import ALLOW_CLUSTER_WIDE_EVICTION, tolerates


def make_handler(*objects: dict, limit: int = 256, ready: bool = True) -> AdmissionHandler:
    return AdmissionHandler(
        StaticClusterLookup(objects, ready=ready), reserved_for_limit=limit, compile_selector=lambda _: None
    )


def shared_claim(consumers: int) -> dict:
    c = claim("shared", exact_request("gpu"))
    entries = [{"resource": "pods", "name": f"p{i}", "uid": uid()} for i in range(consumers)]
    return with_status(c, allocation=allocation(result("gpu")), reserved_for=entries)


def create_pod(*refs: dict) -> dict:
    new = pod("new", *refs)
    # Pods are often created with generateName: no name, the namespace only in the request.
    del new["metadata"]["namespace"]
    review = admission_review("CREATE", "pods", new)
    review["request"]["namespace"] = "ns"
    return review


def test_pod_joining_a_full_shared_claim_is_denied_with_advice() -> None:
    response = decide(
        make_handler(shared_claim(256)), "validate", create_pod({"name": "g", "resourceClaimName": "shared"})
    )
    assert response["allowed"] is False
    message = response["status"]["message"]
    assert message.startswith("spec.resourceClaims[0].resourceClaimName: ResourceClaim ns/shared")
    assert "256 consumers" in message and "limit is 256" in message and "ResourceClaimTemplate" in message


def test_pod_joining_a_shared_claim_with_room_is_allowed() -> None:
    response = decide(
        make_handler(shared_claim(255)), "validate", create_pod({"name": "g", "resourceClaimName": "shared"})
    )
    assert response["allowed"] is True and "warnings" not in response


def test_pod_create_honours_the_cluster_limit() -> None:
    handler = make_handler(shared_claim(8), limit=8)
    response = decide(handler, "validate", create_pod({"name": "g", "resourceClaimName": "shared"}))
    assert response["allowed"] is False and "limit is 8" in response["status"]["message"]


def test_pod_referencing_a_missing_claim_is_allowed_with_a_warning() -> None:
    response = decide(make_handler(), "validate", create_pod({"name": "g", "resourceClaimName": "later"}))
    assert response["allowed"] is True
    assert response["warnings"] == [
        "spec.resourceClaims[0].resourceClaimName: claim later does not exist yet; the pod waits for it"
    ]


def test_pods_with_templates_or_without_claims_are_allowed() -> None:
    handler = make_handler(shared_claim(256))
    assert decide(handler, "validate", create_pod({"name": "g", "resourceClaimTemplateName": "t"}))["allowed"]
    assert decide(handler, "validate", create_pod())["allowed"]


def test_an_unknown_scoring_annotation_is_a_warning() -> None:
    review = create_pod({"name": "g", "resourceClaimTemplateName": "t"})
    review["request"]["object"]["metadata"]["annotations"] = {"dra-extender.io/scoring": "pack"}
    response = decide(make_handler(), "validate", review)
    assert response["allowed"] is True
    assert response["warnings"] == [
        "dra-extender: dra-extender.io/scoring='pack' is unknown (binpack, spread, none): "
        "the default policy applies"]
    review["request"]["object"]["metadata"]["annotations"] = {"dra-extender.io/scoring": "spread"}
    assert "warnings" not in decide(make_handler(), "validate", review)


def test_pod_checks_wait_for_the_cluster_view() -> None:
    response = decide(
        make_handler(shared_claim(256), ready=False),
        "validate",
        create_pod({"name": "g", "resourceClaimName": "shared"}),
    )
    assert response["allowed"] is True and response["warnings"]


# ---- DeviceTaintRule ---------------------------------------------------------------------------------


def taint_rule(selector: dict | None, effect: str = "NoExecute", annotations: dict | None = None) -> dict:
    spec: dict = {"taint": {"key": "maintenance", "value": "planned", "effect": effect}}
    if selector is not None:
        spec["deviceSelector"] = selector
    metadata = meta("drain", None)
    if annotations:
        metadata["annotations"] = annotations
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule", "metadata": metadata, "spec": spec}


def cluster() -> list[dict]:
    """Three devices; pods a and b use devices without tolerations, pod c tolerates the taint."""
    objects: list[dict] = [resource_slice("s1", [gpu("gpu-0"), gpu("gpu-1"), gpu("gpu-2")])]
    tolerating = [{"key": "maintenance", "operator": "Exists", "effect": "NoExecute"}]
    for name, device, tolerations in (("a", "gpu-0", None), ("b", "gpu-1", None), ("c", "gpu-2", tolerating)):
        user = pod(name, {"name": "g", "resourceClaimName": f"claim-{name}"})
        extra = {"tolerations": tolerations} if tolerations else {}
        c = with_status(
            claim(f"claim-{name}", exact_request("gpu")),
            allocation=allocation(result("gpu", device, **extra)),
            reserved_for=[consumer(user)],
        )
        objects += [user, c]
    return objects


def test_cluster_wide_no_execute_rule_is_denied_with_its_impact() -> None:
    response = decide(
        make_handler(*cluster()), "validate", admission_review("CREATE", "devicetaintrules", taint_rule({}))
    )
    assert response["allowed"] is False
    message = response["status"]["message"]
    assert message.startswith("spec.deviceSelector: ")
    assert "all 3 devices" in message and "evict 2 pods" in message and ALLOW_CLUSTER_WIDE_EVICTION in message


def test_opt_in_annotation_allows_cluster_wide_eviction_with_a_warning() -> None:
    rule = taint_rule({}, annotations={ALLOW_CLUSTER_WIDE_EVICTION: "true"})
    response = decide(
        make_handler(*cluster()), "validate", admission_review("CREATE", "devicetaintrules", rule)
    )
    assert response["allowed"] is True and response["warnings"]


@pytest.mark.parametrize(
    "rule",
    [
        taint_rule({}, effect="NoSchedule"),
        taint_rule({}, effect="None"),
        taint_rule({"driver": "gpu.example.com"}),
        taint_rule({"pool": "node-1", "device": "gpu-0"}),
        taint_rule(None),
        taint_rule({}, annotations={ALLOW_CLUSTER_WIDE_EVICTION: "false", "other": "x"})
        | {"spec": {"taint": {}}},
    ],
)
def test_other_rules_are_allowed(rule: dict) -> None:
    assert decide(make_handler(*cluster()), "validate", admission_review("CREATE", "devicetaintrules", rule))[
        "allowed"
    ]


def test_update_that_widens_a_rule_to_every_device_is_denied() -> None:
    narrow = taint_rule({"driver": "gpu.example.com"})
    wide = taint_rule({})
    review = admission_review("UPDATE", "devicetaintrules", wide, old=narrow)
    assert decide(make_handler(*cluster()), "validate", review)["allowed"] is False


def test_update_of_a_rule_already_in_force_is_allowed() -> None:
    old = taint_rule({}, annotations={ALLOW_CLUSTER_WIDE_EVICTION: "true"})
    new = taint_rule({})
    review = admission_review("UPDATE", "devicetaintrules", new, old=old)
    assert decide(make_handler(*cluster()), "validate", review)["allowed"] is True


def test_denial_without_a_synced_cluster_view_still_explains() -> None:
    handler = make_handler(*cluster(), ready=False)
    response = decide(handler, "validate", admission_review("CREATE", "devicetaintrules", taint_rule({})))
    assert response["allowed"] is False and "every device" in response["status"]["message"]


@pytest.mark.parametrize(
    ("toleration", "expected"),
    [
        ({"key": "maintenance", "operator": "Exists"}, True),
        ({"operator": "Exists"}, True),
        ({"key": "maintenance", "operator": "Equal", "value": "planned", "effect": "NoExecute"}, True),
        ({"key": "maintenance", "value": "planned"}, True),
        ({"key": "maintenance", "operator": "Equal", "value": "other"}, False),
        ({"key": "other", "operator": "Exists"}, False),
        ({"key": "maintenance", "operator": "Exists", "effect": "NoSchedule"}, False),
        ({"key": "maintenance", "operator": "Gt", "value": "planned"}, False),
    ],
)
def test_toleration_matching(toleration: dict, expected: bool) -> None:
    assert (
        tolerates(toleration, {"key": "maintenance", "value": "planned", "effect": "NoExecute"}) is expected
    )
