"""Validating webhook: derivedAttributes (DRADerivedAttributes) of resourceclaims and
resourceclaimtemplates CREATE, checked as the API server with the gate on checks them, with our engine."""

from __future__ import annotations

from typing import Any

from webhook_fixtures import admission_review, claim, decide, exact_request, first_available, subrequest

from allocator import FeatureGates
from webhook.admission import AdmissionHandler
from webhook.lookup import StaticClusterLookup

NUMA = 'device.attributes["gpu.example.com"].numa'


def handler(**gates: bool) -> AdmissionHandler:
    return AdmissionHandler(StaticClusterLookup(), features=FeatureGates(gates))


def with_derived(
    request: dict[str, Any], name: str = "derived/numa", expression: str = NUMA
) -> dict[str, Any]:
    body = request.get("exactly", request)
    body["derivedAttributes"] = [{"name": name, "expression": expression}]
    return request


def derived_claim(*requests: dict[str, Any], attribute: str = "derived/numa") -> dict[str, Any]:
    obj = claim("c", *requests)
    obj["spec"]["devices"]["constraints"] = [{"matchAttribute": attribute}]
    return obj


def review(obj: dict[str, Any]) -> dict[str, Any]:
    return admission_review("CREATE", "resourceclaims", obj)


def test_derived_attributes_used_by_a_constraint_are_allowed() -> None:
    obj = derived_claim(with_derived(exact_request("a")), with_derived(exact_request("b")))
    assert decide(handler(DRADerivedAttributes=True), "validate", review(obj))["allowed"] is True


def test_without_the_gate_here_the_claim_is_denied_as_unschedulable() -> None:
    response = decide(handler(), "validate", review(derived_claim(with_derived(exact_request("a")))))
    assert response["allowed"] is False
    assert "derivedAttributes need the DRADerivedAttributes feature gate" in response["status"]["message"]


def test_problems_name_their_fields() -> None:
    obj = derived_claim(
        with_derived(exact_request("a"), expression="1.5"),
        first_available("b", with_derived(subrequest("x"), name="derived/other")),
    )
    response = decide(handler(DRADerivedAttributes=True), "validate", review(obj))
    assert response["allowed"] is False and response["status"]["code"] == 422
    message = response["status"]["message"]
    assert (
        "spec.devices.requests[0].exactly.derivedAttributes[0].expression: must evaluate to a primitive"
        in message
    )
    assert (
        "spec.devices.requests[1].firstAvailable[0].derivedAttributes[0].name: Invalid value: "
        "'derived/other': must be referenced by at least one matchAttribute or distinctAttribute" in message
    )


def test_a_list_result_needs_list_type_attributes() -> None:
    obj = derived_claim(with_derived(exact_request("a"), expression="[1, 2]"))
    assert decide(handler(DRADerivedAttributes=True), "validate", review(obj))["allowed"] is False
    on = handler(DRADerivedAttributes=True, DRAListTypeAttributes=True)
    assert decide(on, "validate", review(obj))["allowed"] is True
