"""The extender port under hostile clients: body limits, large-body slots, slow and idle connections,
the connection cap (real sockets on loopback)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import orjson
import pytest
from test_server import EXAMPLES, JSON, PAYLOADS, build_server

from common.httpguard import LARGE_BODY_BYTES, LARGE_BODY_SLOTS, MAX_BIND_BYTES, HttpLimits
from extender.http import wire
from extender.http.server import ExtenderServer
from extender.kube.objects_io import load_objects
from extender.plugin.verdicts import NAMED_UNKNOWN_NODES


@pytest.fixture
async def guarded() -> AsyncIterator[ExtenderServer]:
    server = build_server(load_objects([EXAMPLES]))
    server.limits = HttpLimits(max_request_bytes=4 * LARGE_BODY_BYTES, max_connections=8, idle_timeout_s=1.0,
                               body_timeout_s=1.0)
    server.bodies.limits = server.limits
    await server.start("127.0.0.1", 0, 0)
    yield server
    await server.stop()


def port_of(server: ExtenderServer) -> int:
    return int(server.urls["extender"].rsplit(":", 1)[1].split("/")[0])


async def raw_request(port: int, head: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head.encode())
    await writer.drain()
    return reader, writer


async def status_line(reader: asyncio.StreamReader, timeout: float = 5) -> str:
    return (await asyncio.wait_for(reader.readline(), timeout)).decode().strip()


async def normal_filter(server: ExtenderServer) -> tuple[int, dict, float]:
    started = time.perf_counter()
    async with aiohttp.ClientSession() as session, session.post(
        server.urls["extender"] + "/filter", data=(PAYLOADS / "filter_node_cache_capable.json").read_bytes(),
        headers=JSON,
    ) as response:
        return response.status, await response.json(), time.perf_counter() - started


def head(path: str, length: int, extra: str = "") -> str:
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n{extra}\r\n")


async def test_an_oversized_expect_100_continue_gets_413_not_100(guarded: ExtenderServer) -> None:
    reader, writer = await raw_request(port_of(guarded), head("/scheduler/filter", 10 * 1024**3,
                                                               "Expect: 100-continue\r\n"))
    assert "413" in await status_line(reader)
    writer.close()
    # Within the limit the client is told to go on.
    reader, writer = await raw_request(port_of(guarded),
                                       head("/scheduler/filter", 100, "Expect: 100-continue\r\n"))
    assert await status_line(reader) == "HTTP/1.1 100 Continue"
    writer.close()


async def test_bodies_over_the_limit_are_refused_before_or_while_read(guarded: ExtenderServer) -> None:
    reader, writer = await raw_request(port_of(guarded), head("/scheduler/bind", MAX_BIND_BYTES + 1))
    assert "413" in await status_line(reader)
    writer.close()
    # Chunked: no length announced, cut off once the limit is passed.
    reader, writer = await raw_request(
        port_of(guarded),
        "POST /scheduler/filter HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\n\r\n")
    chunk = b"x" * 65536
    try:
        for _ in range(4 * LARGE_BODY_BYTES // len(chunk) + 2):
            writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            await writer.drain()
    except ConnectionError:
        pass
    assert "413" in await status_line(reader)
    writer.close()


async def test_verbs_take_only_json(guarded: ExtenderServer) -> None:
    async with aiohttp.ClientSession() as session, session.post(
        guarded.urls["extender"] + "/filter", data=b"{}", headers={"Content-Type": "text/plain"}
    ) as response:
        assert response.status == 415 and "application/json" in await response.text()


async def test_large_bodies_wait_for_a_slot_and_slow_ones_time_out(guarded: ExtenderServer) -> None:
    """Senders that announce large bodies and never send them hold the large-body slots only until the
    body timeout; one more large request is not read meanwhile (it times out waiting, 503, or once
    given a slot has too little time left, 408); a normal filter is answered at once meanwhile."""
    slow = [await raw_request(port_of(guarded), head("/scheduler/filter", 2 * LARGE_BODY_BYTES))
            for _ in range(LARGE_BODY_SLOTS)]
    await asyncio.sleep(0.1)
    extra_reader, extra_writer = await raw_request(port_of(guarded), head("/scheduler/filter",
                                                                           2 * LARGE_BODY_BYTES))
    status, answer, seconds = await normal_filter(guarded)
    assert status == 200 and answer["Error"] == "" and seconds < 0.9
    for reader, writer in slow:
        assert "408" in await status_line(reader)
        writer.close()
    assert (await status_line(extra_reader)).split()[1] in ("408", "503")
    extra_writer.close()


async def test_idle_connections_are_closed(guarded: ExtenderServer) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port_of(guarded))
    started = time.perf_counter()
    assert await asyncio.wait_for(reader.read(1), 5) == b""
    assert time.perf_counter() - started < 4
    writer.close()


async def test_connections_beyond_the_cap_are_closed_at_once(guarded: ExtenderServer) -> None:
    held = [await asyncio.open_connection("127.0.0.1", port_of(guarded)) for _ in range(8)]
    await asyncio.sleep(0.1)
    reader, writer = await asyncio.open_connection("127.0.0.1", port_of(guarded))
    assert await asyncio.wait_for(reader.read(1), 0.5) == b""
    writer.close()
    # The debug port has its own cap: health checks still get through.
    async with aiohttp.ClientSession() as session, session.get(guarded.urls["debug"] + "/healthz") as reply:
        assert reply.status == 200
    for _, held_writer in held:
        held_writer.close()
    await asyncio.sleep(0.1)
    assert (await normal_filter(guarded))[0] == 200


async def test_unknown_nodes_get_a_compact_answer(guarded: ExtenderServer) -> None:
    payload = orjson.loads((PAYLOADS / "filter_node_cache_capable.json").read_bytes())
    payload["NodeNames"] = [f"ghost-{i:06d}" for i in range(20_000)]
    body = orjson.dumps(payload)
    async with aiohttp.ClientSession() as session, session.post(
        guarded.urls["extender"] + "/filter", data=body, headers=JSON
    ) as response:
        answer = await response.read()
    assert response.status == 200
    # A few are named; kube-scheduler counts the others, left out, as unresolvable all the same.
    assert len(answer) < 10_000
    failures = orjson.loads(answer)["FailedAndUnresolvableNodes"]
    assert len(failures) == NAMED_UNKNOWN_NODES
    assert set(failures.values()) == {"node not known to dra-extender"}


def test_a_request_with_more_nodes_than_any_cluster_is_refused() -> None:
    pod = {"metadata": {"name": "p", "namespace": "d", "uid": "u"}}
    names = [f"n{i}" for i in range(wire.MAX_NODES + 1)]
    with pytest.raises(wire.BadRequest, match="at most"):
        wire.parse_extender_args(orjson.dumps({"Pod": pod, "NodeNames": names}), "filter")


def test_limits_of_serve_flags() -> None:
    from extender.cli import build_parser
    from extender.flags import http_limits

    args = build_parser().parse_args(["serve", "--snapshot", str(Path("x")), "--max-request-bytes", "1000",
                                      "--max-connections", "5", "--idle-timeout", "3"])
    assert http_limits(args) == HttpLimits(max_request_bytes=1000, max_connections=5, idle_timeout_s=3.0)


async def test_a_body_received_with_its_headers_is_read_without_a_slot_or_a_wait() -> None:
    """A large body already in full (it came with the headers) needs no large-body slot: it is read at
    once while slow senders hold every slot."""
    from unittest import mock

    from aiohttp import streams
    from aiohttp.test_utils import make_mocked_request

    from common.httpguard import BodyReader

    reader = BodyReader(HttpLimits(max_request_bytes=4 * LARGE_BODY_BYTES, body_timeout_s=1.0))
    for _ in range(LARGE_BODY_SLOTS):
        await reader._large.acquire()
    body = b"[" + b"1," * LARGE_BODY_BYTES + b"1]"
    payload = streams.StreamReader(mock.Mock(_reading_paused=False), 2**16, loop=asyncio.get_running_loop())
    payload.feed_data(body)
    payload.feed_eof()
    request = make_mocked_request("POST", "/scheduler/filter", payload=payload, headers={
        "Content-Type": "application/json", "Content-Length": str(len(body))})
    started = time.perf_counter()
    assert await reader.read(request) == body
    assert time.perf_counter() - started < 0.5


async def test_connections_to_the_extender_port_are_counted(guarded: ExtenderServer) -> None:
    def counted() -> float:
        for line in guarded.metrics.render().decode().splitlines():
            if line.startswith("dra_extender_scheduler_connections_total "):
                return float(line.split()[1])
        raise AssertionError("no dra_extender_scheduler_connections_total")

    before = counted()
    for _ in range(2):  # a session per filter: a connection each
        assert (await normal_filter(guarded))[0] == 200
    body = (PAYLOADS / "filter_node_cache_capable.json").read_bytes()
    async with aiohttp.ClientSession() as session:  # one connection, kept alive, for three requests
        for _ in range(3):
            async with session.post(guarded.urls["extender"] + "/filter", headers=JSON, data=body) as answer:
                assert answer.status == 200
    assert counted() == before + 3
