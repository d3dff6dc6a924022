"""No AdmissionReview shaped like the API server's, with any field given another shape, gets a 500 or
makes a rule fail inside: the answer is a decision (200) or a 400 naming the problem."""

from __future__ import annotations

import json
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from json_mutations import mutations
from webhook_fixtures import (
    admission_review,
    allocation,
    claim,
    consumer,
    exact_request,
    gpu,
    meta,
    pod,
    resource_slice,
    result,
    status_update,
    with_status,
)

from allocator import FeatureGates
from webhook.admission import AdmissionHandler
from webhook.lookup import StaticClusterLookup

USER = pod("user", {"name": "g", "resourceClaimName": "taken"})
TAKEN = with_status(claim("taken", exact_request("gpu", selectors=('device.driver == "gpu.example.com"',))),
                    allocation=allocation(result("gpu", "gpu-0")), reserved_for=[consumer(USER)])
CLUSTER = [resource_slice("s1", [gpu("gpu-0"), gpu("gpu-1")]), USER, TAKEN]
FRESH = claim("fresh", exact_request("gpu", selectors=('device.attributes["gpu.example.com"].index > 0',)))
TEMPLATE = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": meta("t"),
            "spec": {"spec": FRESH["spec"]}}
RULE = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule", "metadata": meta("drain", None),
        "spec": {"deviceSelector": {"driver": "gpu.example.com"},
                 "taint": {"key": "maintenance", "value": "planned", "effect": "NoExecute"}}}
REVIEWS: list[tuple[str, dict]] = [
    ("mutate", status_update(FRESH, with_status(FRESH, allocation=allocation(result("gpu", "gpu-1")),
                                                reserved_for=[]))),
    ("validate", status_update(FRESH, with_status(FRESH, allocation=allocation(result("gpu", "gpu-1")),
                                                  reserved_for=[consumer(USER)]))),
    ("validate", admission_review("CREATE", "pods", pod("p", {"name": "g", "resourceClaimName": "taken"}))),
    ("validate", admission_review("CREATE", "resourceclaims", FRESH)),
    ("validate", admission_review("CREATE", "resourceclaimtemplates", TEMPLATE)),
    ("validate", admission_review("CREATE", "devicetaintrules", RULE)),
    ("validate", admission_review("UPDATE", "devicetaintrules", RULE, old=RULE)),
]
HANDLER = AdmissionHandler(StaticClusterLookup(CLUSTER), features=FeatureGates())


@st.composite
def webhook_and_review(draw: st.DrawFn) -> tuple[str, Any]:
    webhook, review = draw(st.sampled_from(REVIEWS))
    return webhook, draw(mutations(review))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(webhook_and_review())
def test_wrong_shapes_are_answered_never_crash(case: tuple[str, Any]) -> None:
    webhook, review = case
    status, body = HANDLER.handle(webhook, json.dumps(review).encode())  # type: ignore[arg-type]
    assert status in (200, 400), body
    answer = orjson.loads(body)
    if status == 200:
        response = answer["response"]
        assert "internal error" not in orjson.dumps(response).decode(), response
