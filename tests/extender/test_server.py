"""The extender and debug ports over real HTTP on loopback, with kube-scheduler-shaped payloads."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import dra_objects as o
import orjson
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from allocator import FeatureGates
from common.tls import ReloadingTLS
from extender.http.server import ExtenderServer
from extender.kube.objects_io import load_objects
from extender.plugin.claimwriter import ClaimWriter
from extender.plugin.scheduling import Scheduler
from extender.plugin.verdicts import CANNOT_ALLOCATE, Words
from extender.state.assume import AssumeCache
from extender.state.cache import ClusterCache

PAYLOADS = Path(__file__).parent / "payloads"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "cluster"
JSON = {"Content-Type": "application/json"}


def build_server(objs: list[dict[str, Any]]) -> ExtenderServer:
    cache = ClusterCache.from_objects(objs, FeatureGates())
    assume = AssumeCache()
    assume.attach(cache)
    return ExtenderServer(Scheduler(cache, assume, ClaimWriter(None, cache)))


async def post(url: str, body: bytes) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=body, headers={"Content-Type": "application/json"}) as response,
    ):
        raw = await response.read()
        try:
            return response.status, orjson.loads(raw)
        except orjson.JSONDecodeError:
            return response.status, raw.decode()


async def get(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, await response.text()


async def test_filter_node_cache_capable_payload(example: ExtenderServer) -> None:
    status, body = await post(
        example.urls["extender"] + "/filter", (PAYLOADS / "filter_node_cache_capable.json").read_bytes()
    )
    assert status == 200
    assert set(body) == {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}
    assert body["Nodes"] is None and body["Error"] == ""
    assert isinstance(body["NodeNames"], list) and body["NodeNames"]
    assert set(body["NodeNames"]) | set(body["FailedNodes"]) | set(body["FailedAndUnresolvableNodes"]) == {
        "node-1",
        "node-2",
        "node-3",
    }


async def test_filter_full_node_list_payload(example: ExtenderServer) -> None:
    payload = orjson.loads((PAYLOADS / "filter_full_nodes.json").read_bytes())
    status, body = await post(example.urls["extender"] + "/filter", orjson.dumps(payload))
    assert status == 200 and body["NodeNames"] is None
    returned = {node["metadata"]["name"] for node in body["Nodes"]["items"]}
    assert returned and returned <= {"node-1", "node-2", "node-3"}
    sent = {node["metadata"]["name"]: node for node in payload["Nodes"]["items"]}
    assert all(node == sent[node["metadata"]["name"]] for node in body["Nodes"]["items"])


async def test_pod_without_claims_passes_unchanged(example: ExtenderServer) -> None:
    status, body = await post(
        example.urls["extender"] + "/filter", (PAYLOADS / "filter_pod_without_claims.json").read_bytes()
    )
    assert status == 200
    assert body == {
        "Nodes": None,
        "NodeNames": ["node-1", "node-2", "node-3"],
        "FailedNodes": {},
        "FailedAndUnresolvableNodes": {},
        "Error": "",
    }


async def test_prioritize_bind_and_state(example: ExtenderServer) -> None:
    base = example.urls["extender"]
    status, scores = await post(
        base + "/prioritize", (PAYLOADS / "prioritize_node_cache_capable.json").read_bytes()
    )
    assert status == 200 and isinstance(scores, list)
    assert {entry["Host"] for entry in scores} == {"node-1", "node-2", "node-3"}
    assert all(set(entry) == {"Host", "Score"} and 0 <= entry["Score"] <= 10 for entry in scores)

    status, body = await post(base + "/bind", (PAYLOADS / "bind.json").read_bytes())
    assert (status, body) == (200, {"Error": ""})
    claim = example.cache.claim("default", "single-gpu")
    assert claim.allocation is not None and claim.raw["status"]["reservedFor"][0]["name"] == "inference"
    # Binding twice to another node is refused with a message, not an HTTP error, before any attempt.
    again = orjson.loads((PAYLOADS / "bind.json").read_bytes()) | {"Node": "node-2"}
    status, body = await post(base + "/bind", orjson.dumps(again))
    assert status == 200 and "already bound to node node-1" in body["Error"]

    status, text = await get(example.urls["debug"] + "/debug/state")
    state = orjson.loads(text)
    assert status == 200 and state["binds"]["attempts"] == 1 and state["cache"]["ready"] is True
    assert {pool["pool"] for pool in state["pools"]} >= {"node-1", "node-2"}


async def test_preempt_accepts_empty_victim_lists(example: ExtenderServer) -> None:
    status, body = await post(
        example.urls["extender"] + "/preempt", (PAYLOADS / "preempt_meta_victims.json").read_bytes()
    )
    assert status == 200 and set(body) == {"NodeNameToMetaVictims"}
    # The pod fits node-2 as it is, so the candidate without victims stays.
    assert body["NodeNameToMetaVictims"]["node-2"] == {"Pods": [], "NumPDBViolations": 0}


@pytest.mark.parametrize("verb", ["filter", "prioritize", "bind", "preempt"])
@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"{",
        b"[1,2]",
        b'{"Pod": 7}',
        b'{"Pod": {"metadata": {"name": 5}}}',
        b'{"PodName": "x"}',
        b"\xff\xfe",
    ],
)
async def test_malformed_bodies_get_a_message_kube_scheduler_logs(
    example: ExtenderServer, verb: str, body: bytes
) -> None:
    """kube-scheduler reads `Error` only from a 200: filter and bind say it there; prioritize and
    preempt have no such field and answer 400."""
    status, answer = await post(f"{example.urls['extender']}/{verb}", body)
    if verb in ("filter", "bind"):
        assert status == 200 and answer["Error"].startswith(verb)
        if verb == "filter":
            assert answer["NodeNames"] is None and answer["Nodes"] is None
    else:
        assert status == 400 and isinstance(answer, str) and answer.startswith(verb)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=5),
        lambda children: (
            st.lists(children, max_size=3)
            | st.dictionaries(
                st.sampled_from(
                    [
                        "Pod",
                        "NodeNames",
                        "Nodes",
                        "metadata",
                        "spec",
                        "name",
                        "namespace",
                        "resourceClaims",
                        "items",
                        "uid",
                    ]
                ),
                children,
                max_size=4,
            )
        ),
        max_leaves=12,
    )
)
def test_random_json_never_gets_a_500(value: Any) -> None:
    async def scenario() -> set[int]:
        server = build_server(o.cluster(1, 1))
        app = server.extender_app()
        from aiohttp.test_utils import TestClient, TestServer

        async with TestClient(TestServer(app)) as client:
            statuses = set()
            for verb in ("filter", "prioritize", "bind", "preempt"):
                response = await client.post(f"/scheduler/{verb}", data=orjson.dumps(value),
                                             headers={"Content-Type": "application/json"})
                statuses.add(response.status)
            return statuses

    assert asyncio.run(scenario()) <= {200, 400}


async def test_debug_explain_json_and_text(example: ExtenderServer) -> None:
    debug = example.urls["debug"]
    status, text = await get(debug + "/debug/explain?pod=default/inference")
    report = orjson.loads(text)
    assert status == 200 and report["pod"] == "default/inference"
    assert {node["node"] for node in report["nodes"]} == {"node-1", "node-2", "node-3"}
    status, text = await get(debug + "/debug/explain?pod=default/inference&node=node-1&format=text")
    assert status == 200 and text.startswith("pod default/inference: fits") and "node-1" in text
    assert (await get(debug + "/debug/explain?pod=default/nobody"))[0] == 404
    assert (await get(debug + "/debug/explain?pod=default/inference&node=ghost"))[0] == 404
    assert (await get(debug + "/debug/explain"))[0] == 400
    assert (await get(debug + "/debug/explain?pod=a/b/c"))[0] == 400
    # A name without a namespace means the default namespace, as on the command line.
    status, text = await get(debug + "/debug/explain?pod=inference&node=node-1&format=text")
    assert status == 200 and text.startswith("pod default/inference: fits")
    assert (await get(debug + "/debug/explain?pod=default/inference&format=xml"))[0] == 400


async def test_debug_state_sections(example: ExtenderServer) -> None:
    debug = example.urls["debug"] + "/debug/state"
    everything = orjson.loads((await get(debug))[1])
    assert {"cache", "pools", "binds", "watch"} <= set(everything)
    status, text = await get(debug + "?section=watch")
    assert status == 200 and orjson.loads(text) == {"watch": {"mode": "snapshot"}}
    status, text = await get(debug + "?section=pools,binds&section=cache")
    assert status == 200 and list(orjson.loads(text)) == ["cache", "pools", "binds"]
    assert orjson.loads(text)["pools"] == everything["pools"]
    status, text = await get(debug + "?section=watch,pool")
    assert status == 400 and "section: unknown pool (known: cache, pools, " in text


async def test_snapshot_reads_back_into_the_same_cache(example: ExtenderServer, tmp_path: Path) -> None:
    status, text = await get(example.urls["debug"] + "/debug/snapshot")
    assert status == 200
    (tmp_path / "snapshot.yaml").write_text(text)
    again = ClusterCache.from_objects(load_objects([tmp_path]), FeatureGates())
    assert again.stats()["objects"] == example.cache.stats()["objects"]
    assert len(list(yaml.safe_load_all(text))) == len(example.cache.objects())


async def test_health_ready_and_metrics(example: ExtenderServer) -> None:
    debug = example.urls["debug"]
    assert await get(debug + "/healthz") == (200, "ok\n")
    assert await get(debug + "/readyz") == (200, "ok\n")
    await post(
        example.urls["extender"] + "/filter", (PAYLOADS / "filter_node_cache_capable.json").read_bytes()
    )
    status, text = await get(debug + "/metrics")
    assert status == 200
    assert "dra_extender_filter_duration_seconds_count 1.0" in text
    assert 'dra_extender_cache_objects{kind="ResourceSlice"}' in text
    assert "dra_extender_allocations_in_flight 0.0" in text
    assert 'dra_extender_filter_node_outcomes_total{reason="fits"}' in text
    example.cache.ready = False
    assert (await get(debug + "/readyz"))[0] == 503


async def assert_client_certificate_required(url: str, ca_file: str, trusted: ssl.SSLContext) -> None:
    """A filter call with the client certificate in `trusted` is answered; one without is refused."""
    body = (PAYLOADS / "filter_pod_without_claims.json").read_bytes()
    async with aiohttp.ClientSession() as session:
        async with session.post(url, data=body, ssl=trusted, headers=JSON) as response:
            assert response.status == 200
        anonymous = ssl.create_default_context(cafile=ca_file)
        with pytest.raises(aiohttp.ClientError):
            async with session.post(url, data=body, ssl=anonymous, headers=JSON) as response:
                await response.read()


async def test_https_with_client_certificates(tmp_path: Path) -> None:
    from tls_material import write_ca_and_certs

    files = write_ca_and_certs(tmp_path)
    server = build_server(o.cluster(1, 1))
    tls = ReloadingTLS(files.server_cert, files.server_key, client_ca_file=files.ca)
    await server.start("127.0.0.1", 0, 0, tls.server_context)
    try:
        url = server.urls["extender"] + "/filter"
        assert url.startswith("https://")
        trusted = ssl.create_default_context(cafile=files.ca)
        trusted.load_cert_chain(files.client_cert, files.client_key)
        await assert_client_certificate_required(url, files.ca, trusted)
    finally:
        await server.stop()


async def test_https_certificate_rotation_keeps_client_verification(tmp_path: Path) -> None:
    from cryptography import x509
    from tls_material import write_ca_and_certs

    from webhook.certs import generate_serving_cert

    files = write_ca_and_certs(tmp_path)
    tls = ReloadingTLS(files.server_cert, files.server_key, client_ca_file=files.ca, poll_interval_s=0.05)
    server = build_server(o.cluster(1, 1))
    await server.start("127.0.0.1", 0, 0, tls.server_context)
    tls.start()
    port = int(server.urls["extender"].split(":")[2].split("/")[0])
    trusted = ssl.create_default_context(cafile=files.ca)
    trusted.load_cert_chain(files.client_cert, files.client_key)

    async def served_serial(context: ssl.SSLContext) -> int:
        _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="localhost")
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        writer.close()
        return x509.load_der_x509_certificate(der).serial_number

    try:
        first = await served_serial(trusted)
        rotated = generate_serving_cert(files.authority, ["localhost"], ["127.0.0.1"])
        Path(files.server_key).write_bytes(rotated.key_pem())
        Path(files.server_cert).write_bytes(rotated.certificate_pem())
        for _ in range(600):
            if await served_serial(trusted) == rotated.certificate.serial_number:
                break
            await asyncio.sleep(0.05)
        else:
            pytest.fail("the rotated extender certificate was never served")
        assert first != rotated.certificate.serial_number
        # The switched-to context still demands a client certificate signed by the CA.
        await assert_client_certificate_required(server.urls["extender"] + "/filter", files.ca, trusted)
    finally:
        await tls.stop()
        await server.stop()


async def test_wildcard_address_is_shown_as_loopback() -> None:
    server = build_server(o.cluster(1, 1))
    await server.start("0.0.0.0", 0, 0)
    try:
        assert server.urls["extender"].startswith("http://127.0.0.1:")
        assert server.urls["extender"].endswith("/scheduler")
        assert (await get(server.urls["debug"] + "/healthz"))[0] == 200
    finally:
        await server.stop()


@pytest.fixture
async def small() -> AsyncIterator[ExtenderServer]:
    """node-0 has 2 devices, node-1 one, node-2 none; pod p wants 2; pod broken hits a CEL runtime error."""
    bad_class = o.device_class("broken", expression='device.attributes["gpu.example.com"].nosuch == 1')
    broken = o.claim("broken", requests=[{"name": "gpu", "exactly": {"deviceClassName": "broken"}}])
    objs = [
        o.device_class(),
        bad_class,
        o.node("node-0"),
        o.gpu_slice("node-0", 2),
        o.node("node-1"),
        o.gpu_slice("node-1", 1),
        o.node("node-2"),
        o.claim("c", count=2),
        o.pod("p", ["c"]),
        broken,
        o.pod("broken", ["broken"]),
    ]
    server = build_server(objs)
    await server.start("127.0.0.1", 0, 0)
    yield server
    await server.stop()


def filter_args(server: ExtenderServer, pod: str, *, node_list: bool = False) -> dict[str, Any]:
    names = ["node-0", "node-1", "node-2"]
    body: dict[str, Any] = {"Pod": server.cache.pod("default", pod), "Nodes": None, "NodeNames": None}
    if node_list:
        body["Nodes"] = {"metadata": {}, "items": [server.cache.raw("Node", name) for name in names]}
    else:
        body["NodeNames"] = names
    return body


async def test_filter_answers_have_exactly_kube_schedulers_shape(small: ExtenderServer) -> None:
    url = small.urls["extender"] + "/filter"
    status, body = await post(url, orjson.dumps(filter_args(small, "p")))
    assert status == 200
    assert body == {
        "Nodes": None,
        "NodeNames": ["node-0"],
        "FailedNodes": {},
        # node-0 fits: the others say what upstream's plugin says, not why (see next test).
        "FailedAndUnresolvableNodes": {"node-1": CANNOT_ALLOCATE, "node-2": CANNOT_ALLOCATE},
        "Error": "",
    }
    # A real error: Error set, and still a list and two objects (never null) beside it.
    status, body = await post(url, orjson.dumps(filter_args(small, "broken")))
    assert status == 200 and "CEL runtime error" in body["Error"]
    assert body["NodeNames"] == [] and body["FailedNodes"] == {} and body["FailedAndUnresolvableNodes"] == {}


async def test_filter_says_why_for_every_node_when_no_node_fits_with_detailed_reasons(
        small: ExtenderServer) -> None:
    small.scheduler.reasons = Words.DETAILED
    args = filter_args(small, "p")
    args["NodeNames"] = ["node-1", "node-2"]
    status, body = await post(small.urls["extender"] + "/filter", orjson.dumps(args))
    assert status == 200 and body["NodeNames"] == [] and body["FailedNodes"] == {}
    assert body["FailedAndUnresolvableNodes"] == {
        "node-1": "claim default/c: request gpu: needs 2 devices, 1 matches",
        "node-2": "claim default/c: request gpu: needs 2 devices, 0 match",
    }


async def test_filter_speaks_upstreams_words_by_default_when_no_node_fits(small: ExtenderServer) -> None:
    # kube-scheduler then shows "0/2 nodes are available: 2 cannot allocate all claims." as with the
    # in-tree plugin; one entry whatever the counts on each node.
    args = filter_args(small, "p")
    args["NodeNames"] = ["node-1", "node-2"]
    status, body = await post(small.urls["extender"] + "/filter", orjson.dumps(args))
    assert status == 200 and body["NodeNames"] == [] and body["FailedNodes"] == {}
    assert body["FailedAndUnresolvableNodes"] == {"node-1": CANNOT_ALLOCATE, "node-2": CANNOT_ALLOCATE}


async def test_filter_without_node_cache_returns_only_fitting_nodes(small: ExtenderServer) -> None:
    args = filter_args(small, "p", node_list=True)
    status, body = await post(small.urls["extender"] + "/filter", orjson.dumps(args))
    assert status == 200 and body["NodeNames"] is None and body["Error"] == ""
    assert body["Nodes"]["items"] == [args["Nodes"]["items"][0]]
    assert set(body["FailedAndUnresolvableNodes"]) == {"node-1", "node-2"}
    # No node fits: an empty NodeList, not null (null would be read as "no answer").
    args["Nodes"]["items"] = args["Nodes"]["items"][1:]
    status, body = await post(small.urls["extender"] + "/filter", orjson.dumps(args))
    assert body["Nodes"] == {"metadata": {}, "items": []}


async def test_lowercase_keys_are_accepted_for_every_verb(small: ExtenderServer) -> None:
    base = small.urls["extender"]
    pod = small.cache.pod("default", "p")
    status, body = await post(base + "/filter", orjson.dumps({"pod": pod, "nodenames": ["node-0", "node-1"]}))
    assert status == 200 and body["NodeNames"] == ["node-0"]
    status, body = await post(base + "/prioritize", orjson.dumps({"pod": pod, "nodenames": ["node-0"]}))
    assert status == 200 and body == [{"Host": "node-0", "Score": body[0]["Score"]}]
    victims = {"node-0": {"pods": [{"uid": "v1"}], "numpdbviolations": 2}}
    status, body = await post(base + "/preempt", orjson.dumps({"pod": pod, "nodenametometavictims": victims}))
    assert status == 200
    assert body == {"NodeNameToMetaVictims": {"node-0": {"Pods": [{"UID": "v1"}], "NumPDBViolations": 2}}}
    bind = {"podname": "p", "podnamespace": "default", "poduid": pod["metadata"]["uid"], "node": "node-0"}
    status, body = await post(base + "/bind", orjson.dumps(bind))
    assert (status, body) == (200, {"Error": ""})


async def test_verbs_refuse_to_decide_before_the_cache_has_synced() -> None:
    """Before the initial lists, allocated claims may be missing from the cache: their devices would
    look free. kube-scheduler does not look at /readyz (the sidecar is reached on loopback), so the
    verbs themselves must refuse."""
    server = build_server([*o.cluster(1, 1), o.claim("c"), o.pod("p", ["c"])])
    server.cache.ready = False
    await server.start("127.0.0.1", 0, 0)
    try:
        base = server.urls["extender"]
        pod = server.cache.pod("default", "p")
        status, body = await post(base + "/filter", orjson.dumps({"Pod": pod, "NodeNames": ["node-0"]}))
        assert status == 200 and "not synced" in body["Error"] and body["NodeNames"] == []
        plain = {"metadata": {"name": "plain", "namespace": "default", "uid": "u"}}
        status, body = await post(base + "/filter", orjson.dumps({"Pod": plain, "NodeNames": ["node-0"]}))
        assert body["NodeNames"] == ["node-0"] and body["Error"] == "", "pods without claims need no cache"
        # An extended resource may turn out to be backed by DRA once the DeviceClasses are listed.
        extended = {"metadata": {"name": "gpu", "namespace": "default", "uid": "g"}, "spec": {"containers": [
            {"name": "main", "resources": {"requests": {"example.com/gpu": "1"}}}]}}
        status, body = await post(base + "/filter", orjson.dumps({"Pod": extended, "NodeNames": ["node-0"]}))
        assert status == 200 and "not synced" in body["Error"]
        odd = {"metadata": {"name": "odd", "namespace": "default", "uid": "o"}, "spec": {"resourceClaims": 5}}
        status, body = await post(base + "/filter", orjson.dumps({"Pod": odd, "NodeNames": ["node-0"]}))
        assert status == 200 and "Pod.spec.resourceClaims must be a list" in body["Error"]
        bind = {"PodName": "p", "PodNamespace": "default", "PodUID": pod["metadata"]["uid"], "Node": "node-0"}
        status, body = await post(base + "/bind", orjson.dumps(bind))
        assert status == 200 and "not synced" in body["Error"]
        assert server.cache.claim("default", "c").allocation is None
        status, _ = await post(base + "/prioritize", orjson.dumps({"Pod": pod, "NodeNames": ["node-0"]}))
        assert status == 503
        status, _ = await post(base + "/preempt", orjson.dumps({"Pod": pod, "NodeNameToMetaVictims": {}}))
        assert status == 503
        server.cache.ready = True
        status, body = await post(base + "/bind", orjson.dumps(bind))
        assert (status, body) == (200, {"Error": ""})
    finally:
        await server.stop()
