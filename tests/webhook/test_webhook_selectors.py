"""Validating webhook: CEL selectors of resourceclaims and resourceclaimtemplates CREATE."""

from __future__ import annotations

import pytest
from webhook_fixtures import (
    admission_review,
    claim,
    decide,
    exact_request,
    first_available,
    gpu,
    meta,
    resource_slice,
    subrequest,
)

from webhook.admission import AdmissionHandler
from webhook.lookup import StaticClusterLookup
from webhook.selectors import EXPRESSION_MAX_LENGTH, indexed_names

CLUSTER = [resource_slice("s1", [gpu("gpu-0", model="A100", numa=0)])]


@pytest.fixture
def handler() -> AdmissionHandler:
    """The real CEL engine with the default (Kubernetes 1.37) feature gates."""
    return AdmissionHandler(StaticClusterLookup(CLUSTER))


def template(*requests: dict) -> dict:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": meta("t"),
        "spec": {"metadata": {"labels": {"app": "x"}}, "spec": {"devices": {"requests": list(requests)}}},
    }


def create(obj: dict) -> dict:
    resource = "resourceclaimtemplates" if obj["kind"] == "ResourceClaimTemplate" else "resourceclaims"
    return admission_review("CREATE", resource, obj)


GOOD = 'device.attributes["gpu.example.com"].model == "A100"'


def test_valid_selectors_are_allowed_without_warnings(handler: AdmissionHandler) -> None:
    capacity = 'device.capacity["gpu.example.com"].memory.compareTo(quantity("40Gi")) >= 0'
    obj = claim("c", exact_request("gpu", selectors=(GOOD, capacity)))
    response = decide(handler, "validate", create(obj))
    assert response["allowed"] is True and "warnings" not in response


def test_selector_that_does_not_compile_is_denied_naming_the_field(handler: AdmissionHandler) -> None:
    obj = claim(
        "c",
        exact_request("ok", selectors=(GOOD,)),
        exact_request("gpu", selectors=(GOOD, "device.driver ==")),
    )
    response = decide(handler, "validate", create(obj))
    assert response["allowed"] is False and response["status"]["code"] == 422
    message = response["status"]["message"]
    assert message.startswith("spec.devices.requests[1].exactly.selectors[1].cel.expression: ")
    assert "\n" not in message  # one line per problem, without the engine's source excerpt


def test_subrequest_and_template_selectors_are_checked(handler: AdmissionHandler) -> None:
    obj = template(
        first_available("gpu", subrequest("big", selectors=(GOOD,)), subrequest("small", selectors=("1 +",)))
    )
    response = decide(handler, "validate", create(obj))
    assert response["allowed"] is False
    assert response["status"]["message"].startswith(
        "spec.spec.devices.requests[0].firstAvailable[1].selectors[0].cel.expression: "
    )


def test_selector_with_a_non_boolean_result_is_denied(handler: AdmissionHandler) -> None:
    response = decide(
        handler, "validate", create(claim("c", exact_request("gpu", selectors=('device.driver + "x"',))))
    )
    assert response["allowed"] is False


def test_too_long_selector_is_denied_naming_the_limit(handler: AdmissionHandler) -> None:
    expression = " || ".join([GOOD] * (EXPRESSION_MAX_LENGTH // len(GOOD)))
    assert len(expression) > EXPRESSION_MAX_LENGTH
    response = decide(handler, "validate", create(claim("c", exact_request("gpu", selectors=(expression,)))))
    assert response["allowed"] is False
    assert f"exceed the limit of {EXPRESSION_MAX_LENGTH} bytes" in response["status"]["message"]


def test_too_expensive_selector_is_denied_naming_the_limit(handler: AdmissionHandler) -> None:
    loops = "device.attributes.all(d, device.attributes.all(e, device.attributes.all(f, d == f)))"
    loops = f"device.attributes.all(g, {loops})"
    response = decide(handler, "validate", create(claim("c", exact_request("gpu", selectors=(loops,)))))
    assert response["allowed"] is False
    message = response["status"]["message"]
    assert message.startswith("spec.devices.requests[0].exactly.selectors[0].cel.expression: estimated cost")
    assert "limit of 1000000" in message


def test_selector_indexing_an_attribute_no_device_has_gets_a_warning(handler: AdmissionHandler) -> None:
    typo = 'device.attributes["gpu.example.com"].modle == "A100"'
    response = decide(handler, "validate", create(claim("c", exact_request("gpu", selectors=(GOOD, typo)))))
    assert response["allowed"] is True
    assert response["warnings"] == [
        "spec.devices.requests[0].exactly.selectors[1]: no device has attribute gpu.example.com/modle; "
        "guard it with has()"
    ]


def test_guarded_or_known_attributes_get_no_warning(handler: AdmissionHandler) -> None:
    guarded = (
        'has(device.attributes["gpu.example.com"].modle) && device.attributes["gpu.example.com"].modle == "x"'
    )
    optional = 'device.attributes["gpu.example.com"].?modle.orValue("") == "x"'
    response = decide(
        handler, "validate", create(claim("c", exact_request("gpu", selectors=(guarded, optional))))
    )
    assert response["allowed"] is True and "warnings" not in response


def test_no_name_warnings_before_the_cluster_view_is_ready() -> None:
    handler = AdmissionHandler(StaticClusterLookup(CLUSTER, ready=False))
    typo = 'device.attributes["gpu.example.com"].modle == "A100"'
    response = decide(handler, "validate", create(claim("c", exact_request("gpu", selectors=(typo,)))))
    assert response["allowed"] is True and "warnings" not in response


def test_claim_updates_are_not_recompiled(handler: AdmissionHandler) -> None:
    obj = claim("c", exact_request("gpu", selectors=("broken (",)))
    review = admission_review("UPDATE", "resourceclaims", obj, old=obj)
    assert decide(handler, "validate", review)["allowed"] is True


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        (GOOD, [("attributes", "gpu.example.com/model")]),
        ("device.attributes['a.io']['b'] == 1", [("attributes", "a.io/b")]),
        ('device.capacity["a.io"].mem.isGreaterThan(quantity("1"))', [("capacity", "a.io/mem")]),
        ('has(device.attributes["a.io"].b) && device.attributes["a.io"].b', []),
        ('device.attributes["a.io"].?b.orValue(1) == 1', []),
        ('"b" in device.attributes["a.io"]', []),
        ('device.attributes["a.io"].b == 1 || device.attributes["a.io"].b == 2', [("attributes", "a.io/b")]),
        ('device.driver == "x"', []),
    ],
)
def test_indexed_names(expression: str, expected: list[tuple[str, str]]) -> None:
    assert list(indexed_names(expression)) == expected
