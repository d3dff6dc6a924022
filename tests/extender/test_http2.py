"""The verbs over HTTP/2 (common/http2.py), as kube-scheduler's client reaches them over TLS: the same
answers, byte for byte, as over HTTP/1.1; the same limits and error answers; malformed frames end the
connection with GOAWAY, never a crash; HTTP/1.1 clients on the same port are served as before."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import h2.config
import h2.connection
import h2.events
import orjson
import pytest
from h2.errors import ErrorCodes
from h2.settings import SettingCodes
from h2client import H2Client
from test_server import EXAMPLES, JSON, PAYLOADS, build_server
from tls_material import TLSFiles, write_ca_and_certs

from common import http2
from common.http2 import ALPN_H2
from common.httpguard import LARGE_BODY_BYTES, LARGE_BODY_SLOTS, MAX_BIND_BYTES, BodyReader, HttpLimits
from common.tls import ReloadingTLS
from extender.http.server import ExtenderServer
from extender.kube.objects_io import load_objects

FILTER = (PAYLOADS / "filter_node_cache_capable.json").read_bytes()
VERBS = ("filter", "prioritize", "preempt", "bind")  # bind last: it changes what the others answer
BODIES = {"filter": "filter_node_cache_capable.json", "prioritize": "prioritize_node_cache_capable.json",
          "preempt": "preempt_meta_victims.json", "bind": "bind.json"}


@pytest.fixture
def files(tmp_path: Path) -> TLSFiles:
    return write_ca_and_certs(tmp_path)


def client_context(files: TLSFiles, alpn: tuple[str, ...] = (ALPN_H2,)) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=files.ca)
    context.load_cert_chain(files.client_cert, files.client_key)
    context.set_alpn_protocols(list(alpn))
    return context


async def start(files: TLSFiles, limits: HttpLimits | None = None) -> ExtenderServer:
    server = build_server(load_objects([EXAMPLES]))
    if limits is not None:
        server.limits = limits
        server.bodies.limits = limits
    tls = ReloadingTLS(files.server_cert, files.server_key, client_ca_file=files.ca,
                       alpn=(ALPN_H2, "http/1.1"))
    await server.start("127.0.0.1", 0, 0, tls.server_context)
    return server


@pytest.fixture
async def server(files: TLSFiles) -> AsyncIterator[ExtenderServer]:
    server = await start(files, HttpLimits(max_request_bytes=4 * LARGE_BODY_BYTES, max_connections=4,
                                           idle_timeout_s=1.0, body_timeout_s=1.0))
    yield server
    await server.stop()


def port_of(server: ExtenderServer) -> int:
    return int(server.urls["extender"].rsplit(":", 1)[1].split("/")[0])


async def connect(server: ExtenderServer, files: TLSFiles) -> H2Client:
    return await H2Client.connect(port_of(server), client_context(files))


async def test_answers_are_byte_identical_over_http2_and_http11(files: TLSFiles) -> None:
    """Each verb with kube-scheduler's payloads, on two fresh servers: one called over HTTP/2 on one
    connection, the other over HTTP/1.1; status, content type and body are the same."""
    answers: dict[str, list[tuple[int, str, bytes]]] = {}
    for transport in ("h2", "http/1.1"):
        server = await start(files)
        try:
            answers[transport] = []
            if transport == "h2":
                client = await connect(server, files)
                for verb in VERBS:
                    reply = await client.request(f"/scheduler/{verb}", (PAYLOADS / BODIES[verb]).read_bytes())
                    answers[transport].append((reply.status, reply.headers["content-type"], reply.body))
                await client.close()
            else:
                async with aiohttp.ClientSession() as session:
                    for verb in VERBS:
                        async with session.post(f"{server.urls['extender']}/{verb}", headers=JSON,
                                                data=(PAYLOADS / BODIES[verb]).read_bytes(),
                                                ssl=client_context(files, ("http/1.1",))) as response:
                            answers[transport].append((response.status, response.headers["Content-Type"],
                                                       await response.read()))
        finally:
            await server.stop()
    assert answers["h2"] == answers["http/1.1"]
    assert [status for status, _, _ in answers["h2"]] == [200] * len(VERBS)
    filtered = orjson.loads(answers["h2"][0][2])
    assert filtered["Error"] == "" and filtered["NodeNames"]


async def test_one_connection_carries_concurrent_calls(server: ExtenderServer, files: TLSFiles) -> None:
    client = await connect(server, files)
    body = FILTER
    replies = await asyncio.gather(*(client.request("/scheduler/filter", body) for _ in range(3)))
    assert {reply.status for reply in replies} == {200}
    assert len({reply.body for reply in replies}) == 1
    assert client.settings[SettingCodes.MAX_CONCURRENT_STREAMS] == server.limits.max_connections
    await client.close()


async def test_http11_clients_still_get_http11_on_the_same_port(server: ExtenderServer,
                                                                files: TLSFiles) -> None:
    for alpn in (("http/1.1",), ()):  # asked for, or no ALPN at all (curl --http1.1, older clients)
        async with aiohttp.ClientSession() as session, session.post(
            server.urls["extender"] + "/filter", data=FILTER, headers=JSON,
            ssl=client_context(files, alpn),
        ) as response:
            assert response.status == 200 and response.version == aiohttp.HttpVersion11


async def test_a_body_larger_than_the_windows_arrives_through_flow_control(server: ExtenderServer,
                                                                          files: TLSFiles) -> None:
    """A filter of a few MiB (within the limit): more than the stream and connection windows the server
    opens at first, so it needs its WINDOW_UPDATEs and a large-body slot."""
    payload = orjson.loads(FILTER)
    payload["NodeNames"] = [f"ghost-{index:07d}-{'x' * 200}" for index in range(12_000)]
    body = orjson.dumps(payload)
    assert LARGE_BODY_BYTES < len(body) < server.limits.max_request_bytes
    client = await connect(server, files)
    reply = await client.request("/scheduler/filter", body)
    assert reply.status == 200
    assert orjson.loads(reply.body)["FailedAndUnresolvableNodes"]
    await client.close()


async def test_bodies_over_the_limit_get_413(server: ExtenderServer, files: TLSFiles) -> None:
    client = await connect(server, files)
    # Announced: refused from the headers, before any of the body is sent.
    stream = client.start("/scheduler/bind", length=MAX_BIND_BYTES + 1)
    reply = await client.reply(stream)
    assert reply.status == 413 and b"over the limit of 65536 bytes for /scheduler/bind" in reply.body
    # Not announced: cut off once the limit is passed; the stream is reset, the connection goes on.
    stream = client.start("/scheduler/filter")
    await client.send(stream, b"x" * (server.limits.max_request_bytes + 1))
    reply = await client.reply(stream)
    assert reply.status == 413 and b"over the limit" in reply.body
    assert (await client.request("/scheduler/filter", FILTER)).status == 200
    await client.close()


async def test_refusals_are_clear_4xx(server: ExtenderServer, files: TLSFiles) -> None:
    client = await connect(server, files)
    body = FILTER
    wrong_type = await client.request("/scheduler/filter", body, content_type="text/plain")
    assert wrong_type.status == 415 and b"application/json" in wrong_type.body
    unknown = await client.request("/scheduler/nothing", body)
    assert unknown.status == 404
    get = await client.reply(client.start("/scheduler/filter", method="GET", content_type=None, end=True))
    assert get.status == 405
    # A broken body is answered as over HTTP/1.1: filter and bind in their Error field, 200.
    broken = await client.request("/scheduler/filter", b"{not json")
    assert broken.status == 200 and orjson.loads(broken.body)["Error"]
    broken = await client.request("/scheduler/prioritize", b"[]")
    assert broken.status == 400
    await client.close()


async def test_a_body_that_does_not_come_gets_408(server: ExtenderServer, files: TLSFiles) -> None:
    client = await connect(server, files)
    stream = client.start("/scheduler/filter", length=100)
    reply = await client.reply(stream, timeout=5)
    assert reply.status == 408 and b"not received within 1 s" in reply.body
    await client.close()


async def test_large_bodies_wait_for_a_slot(server: ExtenderServer, files: TLSFiles) -> None:
    """Large announced bodies beyond the slots are not acknowledged (flow control holds their senders)
    and time out with 503 or 408; a normal call on the same connection is answered meanwhile."""
    client = await connect(server, files)
    held = [client.start("/scheduler/filter", length=2 * LARGE_BODY_BYTES)
            for _ in range(LARGE_BODY_SLOTS + 1)]
    await asyncio.sleep(0.1)
    normal = await client.request("/scheduler/filter", FILTER)
    assert normal.status == 200
    statuses = sorted([(await client.reply(stream, timeout=5)).status for stream in held])
    assert statuses[:LARGE_BODY_SLOTS] == [408] * LARGE_BODY_SLOTS and statuses[-1] in (408, 503)
    await client.close()


async def test_malformed_frames_close_the_connection_with_goaway(server: ExtenderServer,
                                                                 files: TLSFiles) -> None:
    client = await connect(server, files)
    await asyncio.sleep(0.05)
    # A DATA frame on stream 0 (RFC 9113 6.1: a connection error of type PROTOCOL_ERROR).
    client.writer.write(b"\x00\x00\x04\x00\x00\x00\x00\x00\x00" + b"oops")
    await asyncio.wait_for(client.closed.wait(), 5)
    assert client.goaway is not None and client.goaway.error_code == ErrorCodes.PROTOCOL_ERROR
    # Garbage instead of the client preface.
    reader, writer = await asyncio.open_connection("127.0.0.1", port_of(server), ssl=client_context(files),
                                                   server_hostname="localhost")
    writer.write(b"GET / HTTP/1.1\r\n\r\n" * 4)
    assert goaway_code(await asyncio.wait_for(reader.read(), 5)) == ErrorCodes.PROTOCOL_ERROR
    writer.close()
    # The server goes on serving.
    fresh = await connect(server, files)
    assert (await fresh.request("/scheduler/filter", FILTER)).status == 200
    await fresh.close()


def goaway_code(data: bytes) -> int | None:
    """The error code of the GOAWAY frame among raw HTTP/2 frames (None without one)."""
    while len(data) >= 9:
        length, kind = int.from_bytes(data[:3], "big"), data[3]
        if kind == 0x7:
            return int.from_bytes(data[9 + 4:9 + 8], "big")
        data = data[9 + length:]
    return None


async def test_streams_beyond_the_budget_are_refused(server: ExtenderServer, files: TLSFiles) -> None:
    """At most max_connections requests in flight over all HTTP/2 connections: one more stream is
    refused (REFUSED_STREAM, which clients retry), not queued."""
    client, other = await connect(server, files), await connect(server, files)
    held = [client.start("/scheduler/filter", length=10) for _ in range(server.limits.max_connections)]
    await asyncio.sleep(0.05)
    extra = other.start("/scheduler/filter", length=10)
    reply = await other.reply(extra, timeout=5)
    assert reply.reset == ErrorCodes.REFUSED_STREAM
    for stream in held:
        assert (await client.reply(stream, timeout=5)).status == 408
    await client.close()
    await other.close()
    fresh = await connect(server, files)
    assert (await fresh.request("/scheduler/filter", FILTER)).status == 200
    await fresh.close()


async def test_connection_cap_and_idle_timeout(server: ExtenderServer, files: TLSFiles) -> None:
    held = [await connect(server, files) for _ in range(server.limits.max_connections)]
    await asyncio.sleep(0.1)
    with pytest.raises((ConnectionError, ssl.SSLError, AssertionError, asyncio.IncompleteReadError)):
        extra = await connect(server, files)
        await asyncio.wait_for(extra.closed.wait(), 2)
        raise ConnectionError("closed")
    # Idle (no stream open) for idle_timeout_s: GOAWAY, then closed.
    for client in held:
        await asyncio.wait_for(client.closed.wait(), 5)
        assert client.goaway is not None and client.goaway.error_code == ErrorCodes.NO_ERROR
    fresh = await connect(server, files)
    assert (await fresh.request("/scheduler/filter", FILTER)).status == 200
    await fresh.close()


async def test_serve_offers_http2_on_the_mutual_tls_verbs_port(files: TLSFiles) -> None:
    """As `serve` starts the port (extender.wiring): h2 by ALPN, counted among the connections."""
    from test_verbs_access import BIND, mutual_tls, serve_options

    from extender.wiring import App

    async with App(serve_options(**mutual_tls(files))) as app:
        port = int(app.server.urls["extender"].rsplit(":", 1)[1].split("/")[0])
        client = await H2Client.connect(port, client_context(files))
        reply = await client.request("/scheduler/bind", BIND)
        assert reply.status == 200 and orjson.loads(reply.body) == {"Error": ""}
        await client.close()
        metrics = app.server.metrics.render().decode()
        assert "dra_extender_scheduler_http2_connections_total 1.0" in metrics
        assert "dra_extender_scheduler_connections_total 1.0" in metrics


async def test_a_replica_that_may_not_answer_sends_kube_scheduler_elsewhere(server: ExtenderServer,
                                                                            files: TLSFiles) -> None:
    """A verb refused because this replica is not ready (not synced, or a standby) ends its connection:
    over HTTP/2 with GOAWAY once the calls in flight are answered, over HTTP/1.1 with Connection: close.
    kube-scheduler's next call then opens a new connection, which a Service sends to a ready replica,
    instead of staying on this one for every pod."""
    server.cache.ready = False
    client = await connect(server, files)
    reply = await client.request("/scheduler/filter", FILTER)
    assert reply.status == 200 and "not synced" in orjson.loads(reply.body)["Error"]
    await asyncio.wait_for(client.closed.wait(), 5)
    assert client.goaway is not None and client.goaway.error_code == ErrorCodes.NO_ERROR
    async with aiohttp.ClientSession() as session, session.post(
        server.urls["extender"] + "/prioritize", data=FILTER, headers=JSON,
        ssl=client_context(files, ("http/1.1",)),
    ) as response:
        assert response.status == 503 and response.headers.get("Connection") == "close"
    # Ready again: connections are kept.
    server.cache.ready = True
    client = await connect(server, files)
    assert (await client.request("/scheduler/filter", FILTER)).status == 200
    assert (await client.request("/scheduler/filter", FILTER)).status == 200
    assert not client.closed.is_set()
    await client.close()


class _Writes(asyncio.Transport):
    """A transport that keeps what is written (the protocol's only use of it here)."""

    def __init__(self) -> None:
        super().__init__()
        self.data: list[bytes] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.data.append(bytes(data))

    def close(self) -> None:
        pass


async def test_scheduling_cycle_answers_are_written_without_waiting_for_the_loops_turn() -> None:
    """kube-scheduler waits for filter and prioritize in its one-pod-at-a-time cycle: their answers go
    out as soon as they are ready. A bind's waits for the rest of the loop's turn, to share a write with
    answers finished in the same turn."""
    limits = HttpLimits()

    async def verb(request: http2.Request) -> http2.Answer:
        return http2.Answer(200, "application/json", b"{}")

    protocol = http2.H2Protocol(lambda method, path: verb, limits, BodyReader(limits),
                                http2.StreamBudget(4), answer_at_once=("/filter",))
    transport = _Writes()
    protocol.connection_made(transport)
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    client.initiate_connection()
    protocol.data_received(client.data_to_send())
    client.receive_data(b"".join(transport.data))
    for stream_id, path in ((1, "/filter"), (3, "/bind")):
        transport.data.clear()
        client.send_headers(stream_id, [(":method", "POST"), (":path", path), (":scheme", "https"),
                                        (":authority", "x"), ("content-type", "application/json"),
                                        ("content-length", "2")])
        client.send_data(stream_id, b"{}", end_stream=True)
        protocol.data_received(client.data_to_send())
        transport.data.clear()  # acknowledgements of the request's data
        await asyncio.sleep(0)  # one turn of the loop: the verb runs and answers
        answered = [event for event in client.receive_data(b"".join(transport.data))
                    if isinstance(event, h2.events.StreamEnded)]
        if path == "/filter":
            assert [event.stream_id for event in answered] == [stream_id]
        else:
            assert answered == []
            await asyncio.sleep(0)
            ended = [event for event in client.receive_data(b"".join(transport.data))
                     if isinstance(event, h2.events.StreamEnded)]
            assert [event.stream_id for event in ended] == [stream_id]
