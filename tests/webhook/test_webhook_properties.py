"""Property-based: whatever arrives, the webhook answers 200 with a decision or 400, never fails inside.

Objects are drawn half-shaped: every field is either of the right type or an arbitrary JSON value, so the
rules get deep into their logic before meeting the odd value.
"""

from __future__ import annotations

import asyncio
import http.client
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from webhook_fixtures import (
    allocation,
    claim,
    consumer,
    exact_request,
    gpu,
    pod,
    resource_slice,
    result,
    with_status,
)

from allocator import FeatureGates
from webhook import certs
from webhook.admission import AdmissionHandler
from webhook.lookup import StaticClusterLookup
from webhook.server import WebhookServer

NAMES = st.sampled_from(["a", "b", "shared", "gpu", "gpu/big", "", "x/y/z"])
EXPRESSIONS = st.sampled_from(
    [
        'device.attributes["gpu.example.com"].model == "A100"',
        'device.attributes["x.io"].nope == 1',
        "device.driver ==",
        "true",
        "",
    ]
)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=12,
)


def sometimes_wrong(strategy: st.SearchStrategy, one_in: int) -> st.SearchStrategy:
    """`strategy`, replaced by an arbitrary JSON value once in `one_in` draws."""
    # The integer is drawn from the middle of its range: hypothesis favours the ends.
    return st.integers(0, one_in).flatmap(lambda n: json_values if n == one_in // 2 else strategy)


def maybe(strategy: st.SearchStrategy) -> st.SearchStrategy:
    """Object fields: mostly the right shape, sometimes anything."""
    return sometimes_wrong(strategy, 4)


def rarely_wrong(strategy: st.SearchStrategy) -> st.SearchStrategy:
    """Envelope fields: wrong once in a while, so most examples reach the rules."""
    return sometimes_wrong(strategy, 40)


def obj(
    required: dict[str, st.SearchStrategy] | None = None, **optional: st.SearchStrategy
) -> st.SearchStrategy:
    return maybe(st.fixed_dictionaries(required or {}, optional=optional))


def lists(element: st.SearchStrategy, max_size: int = 3) -> st.SearchStrategy:
    return maybe(st.lists(element, max_size=max_size))


toleration = obj(
    key=maybe(st.sampled_from(["maintenance", ""])),
    operator=maybe(st.sampled_from(["Exists", "Equal", "Gt"])),
    value=maybe(st.text(max_size=4)),
    effect=maybe(st.sampled_from(["NoExecute", "NoSchedule", ""])),
)
selectors = lists(obj(cel=obj(expression=maybe(EXPRESSIONS))))
exactly = obj(selectors=selectors, tolerations=lists(toleration))
subrequests = lists(obj({"name": maybe(NAMES)}, selectors=selectors, tolerations=lists(toleration)))
claim_spec = obj(
    devices=obj(requests=lists(obj({"name": maybe(NAMES)}, exactly=exactly, firstAvailable=subrequests)))
)
reference = obj(
    apiGroup=maybe(st.sampled_from(["", "example.com"])),
    resource=maybe(st.sampled_from(["pods", "jobs"])),
    name=maybe(NAMES),
    uid=maybe(st.sampled_from(["u1", "u2", "pod-a-uid"])),
)
result_entry = obj(
    request=maybe(NAMES), driver=maybe(st.just("gpu.example.com")), tolerations=lists(toleration)
)
claim_status = obj(
    allocation=obj(devices=obj(results=lists(result_entry))), reservedFor=lists(reference, max_size=4)
)
metadata = obj(
    name=maybe(NAMES),
    namespace=maybe(st.just("ns")),
    uid=maybe(st.sampled_from(["pod-a-uid", "u1"])),
    deletionTimestamp=maybe(st.just("2026-11-22T10:00:00Z")),
    annotations=maybe(
        st.dictionaries(st.sampled_from(["dra-extender.io/allow-cluster-wide-eviction"]), json_values)
    ),
    ownerReferences=lists(obj(uid=maybe(st.just("pod-a-uid")), controller=maybe(st.booleans()))),
)
claim_like = obj(metadata=metadata, spec=claim_spec, status=claim_status)
pod_like = obj(
    metadata=metadata,
    spec=obj(resourceClaims=lists(obj(name=maybe(NAMES), resourceClaimName=maybe(NAMES)))),
    status=obj(resourceClaimStatuses=lists(obj(name=maybe(NAMES), resourceClaimName=maybe(NAMES)))),
)
template_like = obj(metadata=metadata, spec=obj(spec=claim_spec))
taint_rule_like = obj(
    metadata=metadata,
    spec=obj(
        deviceSelector=maybe(st.fixed_dictionaries({}, optional={"driver": maybe(NAMES)})),
        taint=obj(key=maybe(NAMES), effect=maybe(st.sampled_from(["NoExecute", "None"]))),
    ),
)
OBJECTS = {
    ("resource.k8s.io", "resourceclaims"): claim_like,
    ("resource.k8s.io", "resourceclaimtemplates"): template_like,
    ("resource.k8s.io", "devicetaintrules"): taint_rule_like,
    ("", "pods"): pod_like,
}


ROUTES = [
    ("resource.k8s.io", "resourceclaims", "status", "UPDATE"),
    ("resource.k8s.io", "resourceclaims", "", "CREATE"),
    ("resource.k8s.io", "resourceclaimtemplates", "", "CREATE"),
    ("resource.k8s.io", "devicetaintrules", "", "CREATE"),
    ("resource.k8s.io", "devicetaintrules", "", "UPDATE"),
    ("", "pods", "", "CREATE"),
    ("", "pods", "", "DELETE"),
]


@st.composite
def reviews(draw: st.DrawFn) -> Any:
    group, resource, sub_resource, operation = draw(st.sampled_from(ROUTES))
    shape = OBJECTS[(group, resource)]
    request = {
        "uid": draw(rarely_wrong(st.uuids().map(str))),
        "kind": {"group": group, "version": "v1", "kind": "X"},
        "resource": draw(rarely_wrong(st.just({"group": group, "version": "v1", "resource": resource}))),
        "subResource": draw(rarely_wrong(st.just(sub_resource))),
        "operation": draw(rarely_wrong(st.just(operation))),
        "namespace": draw(rarely_wrong(st.just("ns"))),
        "name": draw(maybe(NAMES)),
        "userInfo": draw(rarely_wrong(st.just({"username": "u", "uid": "1", "groups": [], "extra": {}}))),
        "object": draw(shape),
        "oldObject": draw(shape),
        "dryRun": draw(rarely_wrong(st.booleans())),
    }
    drop = draw(st.sets(st.sampled_from(sorted(request)), max_size=1))
    envelope = {
        "apiVersion": draw(rarely_wrong(st.just("admission.k8s.io/v1"))),
        "kind": draw(rarely_wrong(st.just("AdmissionReview"))),
        "request": {k: v for k, v in request.items() if k not in drop},
    }
    return draw(rarely_wrong(st.just(envelope)))


def cluster() -> list[dict]:
    user = pod("a", {"name": "gpu", "resourceClaimName": "shared"})
    user["metadata"]["uid"] = "pod-a-uid"
    shared = with_status(
        claim("shared", exact_request("gpu")),
        allocation=allocation(result("gpu")),
        reserved_for=[consumer(user)],
    )
    return [user, shared, resource_slice("s", [gpu("gpu-0", model="A100")])]


HANDLER = AdmissionHandler(StaticClusterLookup(cluster()), reserved_for_limit=2)


def check_answer(status: int, body: bytes, sent: Any) -> None:
    assert status in (200, 400), (status, body)
    answer = orjson.loads(body)
    if status == 400:
        assert answer["error"].startswith("malformed AdmissionReview")
        return
    response = answer["response"]
    assert response["uid"] == sent["request"]["uid"]
    assert isinstance(response["allowed"], bool)
    assert "internal error" not in orjson.dumps(response).decode(), response
    assert all(len(w) < 120 for w in response.get("warnings", []))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(review=reviews(), webhook=st.sampled_from(["mutate", "validate"]))
def test_random_reviews_get_a_decision_or_400(review: Any, webhook: str) -> None:
    status, body = HANDLER.handle(webhook, orjson.dumps(review))  # type: ignore[arg-type]
    check_answer(status, body, review)


@settings(max_examples=100, deadline=None)
@given(body=st.binary(max_size=64) | json_values.map(orjson.dumps))
def test_arbitrary_bodies_get_400(body: bytes) -> None:
    status, answer = HANDLER.handle("validate", body)
    assert status == 400 and orjson.loads(answer)["error"]


@pytest.fixture(scope="module")
def https_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, ssl.SSLContext]]:
    """A webhook server on its own event loop thread, so hypothesis can drive it synchronously."""
    directory: Path = tmp_path_factory.mktemp("tls")
    ca = certs.generate_ca()
    certs.write_serving_files(directory, ca, certs.generate_serving_cert(ca, ["localhost"]))
    server = WebhookServer(
        StaticClusterLookup(cluster()),
        cert_file=str(directory / certs.CERT_FILE),
        key_file=str(directory / certs.KEY_FILE),
        host="127.0.0.1",
        port=0,
        reserved_for_limit=2,
        features=FeatureGates(),
    )
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(server.start(), loop).result(10)
    yield server.port, ssl.create_default_context(cadata=ca.certificate_pem().decode())
    asyncio.run_coroutine_threadsafe(server.stop(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(review=reviews(), path=st.sampled_from(["/webhook/mutate", "/webhook/validate"]))
def test_random_reviews_over_https(https_server: tuple[int, ssl.SSLContext], review: Any, path: str) -> None:
    port, context = https_server
    connection = http.client.HTTPSConnection("localhost", port, context=context, timeout=10)
    try:
        connection.request(
            "POST", path, body=orjson.dumps(review), headers={"Content-Type": "application/json"}
        )
        response = connection.getresponse()
        check_answer(response.status, response.read(), review)
    finally:
        connection.close()
