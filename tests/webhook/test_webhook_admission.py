"""AdmissionReview handling shared by all rules: envelope, routing, 400s, internal errors, metrics, logs."""

from __future__ import annotations

import logging

import orjson
import pytest
from prometheus_client import REGISTRY
from webhook_fixtures import (
    admission_review,
    allocation,
    claim,
    decide,
    exact_request,
    pod,
    result,
    status_update,
    uid,
    with_status,
)

from webhook.admission import AdmissionHandler
from webhook.lookup import StaticClusterLookup
from webhook.review import WARNING_MAX_LENGTH, Decision, clip_warning, review_response


def handler(lookup: object | None = None) -> AdmissionHandler:
    return AdmissionHandler(lookup or StaticClusterLookup(), compile_selector=lambda _: None)  # type: ignore[arg-type]


def over_limit_review() -> dict:
    c = claim("c", exact_request("gpu"))
    allocated = with_status(c, allocation=allocation(result("gpu")), reserved_for=[])
    entries = [{"resource": "jobs", "apiGroup": "x.io", "name": f"j{i}", "uid": uid()} for i in range(257)]
    return status_update(
        allocated, with_status(c, allocation=allocation(result("gpu")), reserved_for=entries)
    )


def decisions(webhook: str, operation: str, resource: str, outcome: str) -> float:
    labels = {"webhook": webhook, "operation": operation, "resource": resource, "outcome": outcome}
    return REGISTRY.get_sample_value("dra_extender_webhook_decisions_total", labels) or 0.0


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (b"not json", "body is not JSON"),
        (b"[]", "expected an AdmissionReview object"),
        (
            b'{"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {}}',
            "apiVersion/kind",
        ),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}', "request: missing"),
    ],
)
def test_malformed_envelopes_get_400_naming_the_problem(body: bytes, problem: str) -> None:
    before = decisions("validate", "", "", "malformed")
    status, answer = handler().handle("validate", body)
    assert status == 400 and problem in orjson.loads(answer)["error"]
    assert decisions("validate", "", "", "malformed") == before + 1


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("uid", None, "request.uid: missing"),
        ("uid", 7, "request.uid: expected a string"),
        ("operation", "PATCH", "request.operation: 'PATCH' is not one of"),
        ("resource", "pods", "request.resource: expected an object"),
        ("oldObject", None, "request.oldObject: UPDATE requires the old object"),
        ("object", [], "request.object: UPDATE requires the object"),
        ("dryRun", "yes", "request.dryRun: expected a boolean"),
    ],
)
def test_malformed_requests_get_400(field: str, value: object, problem: str) -> None:
    review = over_limit_review()
    review["request"][field] = value
    status, answer = handler().handle("validate", orjson.dumps(review))
    assert status == 400 and problem in orjson.loads(answer)["error"]


def test_malformed_object_content_gets_400_naming_the_field() -> None:
    review = over_limit_review()
    review["request"]["object"]["status"]["reservedFor"] = "everyone"
    status, answer = handler().handle("validate", orjson.dumps(review))
    assert status == 400
    assert "status.reservedFor: expected a list, got str" in orjson.loads(answer)["error"]


@pytest.mark.parametrize(
    "review",
    [
        admission_review("DELETE", "pods", None, old=pod("p")),
        admission_review("UPDATE", "pods", pod("p"), old=pod("p")),
        admission_review("CREATE", "resourceclaims", claim("c", exact_request("gpu"))),  # mutate: not ours
    ],
)
def test_requests_without_a_rule_are_allowed_untouched(review: dict) -> None:
    response = decide(handler(), "mutate", review)
    assert response == {"uid": review["request"]["uid"], "allowed": True}


def test_unknown_group_with_a_known_resource_name_is_not_ours() -> None:
    review = over_limit_review()
    review["request"]["resource"]["group"] = "example.com"
    assert decide(handler(), "validate", review)["allowed"] is True


def test_denials_are_counted_and_logged_with_the_request_uid(caplog: pytest.LogCaptureFixture) -> None:
    review = over_limit_review()
    before = decisions("validate", "UPDATE", "resourceclaims/status", "denied")
    with caplog.at_level(logging.WARNING, logger="webhook.admission"):
        response = decide(handler(), "validate", review)
    assert response["allowed"] is False
    assert decisions("validate", "UPDATE", "resourceclaims/status", "denied") == before + 1
    assert any(review["request"]["uid"] in record.getMessage() for record in caplog.records)


class BrokenLookup(StaticClusterLookup):
    def pod(self, namespace: str, name: str) -> dict | None:
        raise RuntimeError("cache exploded")

    def devices(self):  # type: ignore[no-untyped-def]
        raise RuntimeError("cache exploded")


def test_internal_errors_fail_open_for_advisory_checks(caplog: pytest.LogCaptureFixture) -> None:
    c = claim("c", exact_request("gpu"))
    allocated = with_status(c, allocation=allocation(result("gpu")), reserved_for=[])
    user = pod("p", {"name": "g", "resourceClaimName": "c"})
    entry = {"resource": "pods", "name": "p", "uid": user["metadata"]["uid"]}
    review = status_update(
        allocated, with_status(c, allocation=allocation(result("gpu")), reserved_for=[entry])
    )
    before = decisions("validate", "UPDATE", "resourceclaims/status", "error")
    with caplog.at_level(logging.ERROR, logger="webhook.admission"):
        response = decide(handler(BrokenLookup()), "validate", review)
    assert response["allowed"] is True and "internal error" in response["warnings"][0]
    assert decisions("validate", "UPDATE", "resourceclaims/status", "error") == before + 1
    assert "cache exploded" in caplog.text


def test_internal_errors_fail_closed_for_cluster_wide_eviction() -> None:
    rule = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": "r", "uid": uid()},
        "spec": {"deviceSelector": {}, "taint": {"key": "k", "effect": "NoExecute"}},
    }
    response = decide(
        handler(BrokenLookup()), "validate", admission_review("CREATE", "devicetaintrules", rule)
    )
    assert response["allowed"] is False and response["status"]["code"] == 500


def test_response_shape() -> None:
    body = review_response(
        "abc",
        Decision(allowed=True, warnings=["x" * 300], patch=[{"op": "remove", "path": "/a"}]),
    )
    response = orjson.loads(body)["response"]
    assert response["uid"] == "abc" and response["patchType"] == "JSONPatch"
    assert len(response["warnings"][0]) == WARNING_MAX_LENGTH < 120
    denied = orjson.loads(review_response("u", Decision.deny("no", code=422, reason="Invalid")))["response"]
    assert denied == {
        "uid": "u",
        "allowed": False,
        "status": {"code": 422, "reason": "Invalid", "message": "no"},
    }
    assert clip_warning("short") == "short"


def _resource_label_values() -> set[str]:
    return {
        sample.labels["resource"]
        for metric in REGISTRY.collect()
        if metric.name == "dra_extender_webhook_decisions"
        for sample in metric.samples
    }


def test_metric_resource_labels_come_from_a_closed_set() -> None:
    """A sender choosing the resource name must not mint a new time series per review."""
    review = admission_review("CREATE", "pods", pod("p"))
    webhook_handler = handler()
    for index in range(50):
        review["request"]["resource"] = {"group": f"g{index}.io", "version": "v1",
                                         "resource": f"made-up-{index}"}
        review["request"]["uid"] = uid()
        assert decide(webhook_handler, "validate", review)["allowed"] is True
    labels = _resource_label_values()
    assert not any(label.startswith("made-up-") for label in labels)
    assert "other" in labels
    # A resource with a rule keeps its own label.
    webhook_handler.handle("validate", orjson.dumps(over_limit_review()))
    assert "resourceclaims/status" in _resource_label_values()
