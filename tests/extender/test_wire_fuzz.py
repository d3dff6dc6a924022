"""No payload shaped like kube-scheduler's, with any field given another shape, gets a 500: every verb
answers 200 (an answer or `Error`) or 400 naming the problem."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import orjson
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from json_mutations import mutations
from test_server import EXAMPLES, JSON, PAYLOADS, build_server

from extender.kube.objects_io import load_objects

VERB_PAYLOADS = {
    "filter": ["filter_node_cache_capable.json", "filter_full_nodes.json"],
    "prioritize": ["prioritize_node_cache_capable.json"],
    "bind": ["bind.json"],
    "preempt": ["preempt_meta_victims.json"],
}
FULL_VICTIMS = {
    "Pod": orjson.loads((PAYLOADS / "preempt_meta_victims.json").read_bytes())["Pod"],
    "NodeNameToVictims": {"node-2": {"Pods": [{"metadata": {"name": "v", "namespace": "default",
                                                            "uid": "u1"}}],
                                     "NumPDBViolations": 1}},
}
CASES = [(verb, orjson.loads((PAYLOADS / name).read_bytes())) for verb, names in VERB_PAYLOADS.items()
         for name in names] + [("preempt", FULL_VICTIMS)]


class _Served:
    """One server on one loop for all examples (a server per example would make the test slow)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        server = build_server(load_objects([EXAMPLES]))
        self.client = TestClient(TestServer(server.extender_app()), loop=self.loop)
        self.loop.run_until_complete(self.client.start_server())

    def post(self, verb: str, body: Any) -> tuple[int, bytes]:
        async def call() -> tuple[int, bytes]:
            response = await self.client.post(f"/scheduler/{verb}", data=json.dumps(body), headers=JSON)
            return response.status, await response.read()

        return self.loop.run_until_complete(call())


_served: _Served | None = None


def served() -> _Served:
    global _served
    if _served is None:
        _served = _Served()
    return _served


@st.composite
def verb_and_body(draw: st.DrawFn) -> tuple[str, Any]:
    verb, payload = draw(st.sampled_from(CASES))
    return verb, draw(mutations(payload))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(verb_and_body())
def test_wrong_shapes_never_get_a_500(case: tuple[str, Any]) -> None:
    verb, body = case
    status, answer = served().post(verb, body)
    assert status in (200, 400), (status, answer[:500])
    if status == 200 and verb in ("filter", "bind"):
        assert isinstance(orjson.loads(answer)["Error"], str)


def test_reported_shapes_get_a_clear_error() -> None:
    """The shapes of the issue, each named in the answer."""
    filter_payload = dict(CASES[0][1])
    pod = filter_payload["Pod"]
    for spec_change, expected in (
        ({"resourceClaims": "oops"}, "Pod.spec.resourceClaims must be a list"),
        ({"resourceClaims": [None]}, "Pod.spec.resourceClaims[0] must be an object"),
    ):
        body = {**filter_payload, "Pod": {**pod, "spec": {**pod["spec"], **spec_change}}}
        status, answer = served().post("filter", body)
        assert status == 200 and expected in orjson.loads(answer)["Error"]
    full = dict(CASES[1][1])
    full["Nodes"] = {"items": [{"metadata": None}]}
    status, answer = served().post("filter", full)
    assert status == 200 and "Nodes.items[0].metadata.name is missing" in orjson.loads(answer)["Error"]
    victims = {**FULL_VICTIMS, "NodeNameToVictims": {"node-2": {"Pods": [{"metadata": "x"}]}}}
    status, answer = served().post("preempt", victims)
    assert status == 400 and b"has no UID" in answer


def teardown_module() -> None:
    if _served is not None:
        _served.loop.run_until_complete(_served.client.close())
        _served.loop.close()


