"""The API client's kept-alive HTTP/1.1 pool, against a scripted server that writes exact bytes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import orjson
import pytest

from extender.kube.client import KubeClient
from extender.kube.httppool import HttpPool, HttpProtocolError, StaleConnection

Reply = Callable[[bytes], list[bytes] | None]
MakeClient = Callable[["ScriptedServer"], KubeClient]
CLOSE = b"<the server closes the connection here>"


class ScriptedServer:
    """Answers each request (head and Content-Length body read) with `reply(request)`: a list of byte
    pieces written with a pause between them (so the client sees them in separate reads; CLOSE closes
    the connection there), or None to close the connection without answering."""

    def __init__(self, reply: Reply) -> None:
        self.reply = reply
        self.requests: list[bytes] = []
        self.connections = 0
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []

    async def __aenter__(self) -> ScriptedServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port: int = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._server is not None
        for writer in self._writers:
            writer.close()
        self._server.close()
        await self._server.wait_closed()

    def close_idle(self) -> None:
        for writer in self._writers:
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._writers.append(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                request = head + await reader.readexactly(length)
                self.requests.append(request)
                pieces = self.reply(request)
                if pieces is None:
                    writer.close()
                    return
                for piece in pieces:
                    if piece is CLOSE:
                        writer.close()
                        return
                    writer.write(piece)
                    await writer.drain()
                    await asyncio.sleep(0.005)
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()


def ok(body: bytes, *extra: str) -> list[bytes]:
    headers = "".join(f"{line}\r\n" for line in extra)
    return [f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n{headers}\r\n".encode() + body]


def head_of(request: bytes) -> str:
    return request.split(b"\r\n\r\n")[0].decode()


@pytest.fixture
async def kube_for() -> AsyncIterator[MakeClient]:
    clients: list[KubeClient] = []

    def make(server: ScriptedServer) -> KubeClient:
        client = KubeClient(f"http://127.0.0.1:{server.port}", auth=lambda: "Bearer t0ken",
                            request_timeout_s=2.0)
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.close()


async def test_requests_are_sent_as_the_api_server_expects_on_one_connection(kube_for: MakeClient) -> None:
    async with ScriptedServer(lambda request: ok(b'{"kind":"Pod"}')) as server:
        kube = kube_for(server)
        assert await kube.update("/api/v1/namespaces/ns/pods/p", {"a": 1}) == {"kind": "Pod"}
        assert await kube.get("/api/v1/namespaces/ns/pods/p") == {"kind": "Pod"}
        assert await kube.list("/api/v1/pods", labelSelector="app in (a b)") == {"kind": "Pod"}
    assert server.connections == 1
    put, get, listing = server.requests
    assert head_of(put).split("\r\n") == [
        "PUT /api/v1/namespaces/ns/pods/p HTTP/1.1", f"Host: 127.0.0.1:{server.port}",
        "User-Agent: dra-extender", "Accept: application/json", "Authorization: Bearer t0ken",
        "Content-Type: application/json", "Content-Length: 7"]
    assert put.endswith(b'\r\n\r\n{"a":1}')
    assert head_of(get).startswith("GET /api/v1/namespaces/ns/pods/p HTTP/1.1\r\n")
    assert "Content-Length" not in head_of(get)
    assert head_of(listing).startswith("GET /api/v1/pods?labelSelector=app+in+(a+b) HTTP/1.1\r\n")


async def test_chunked_answers_split_anywhere_are_joined(kube_for: MakeClient) -> None:
    body = orjson.dumps({"items": [{"metadata": {"name": f"n-{index}"}} for index in range(300)]})
    chunks = [body[:1000], body[1000:1001], body[1001:]]
    wire = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"".join(
        f"{len(chunk):x};ext=1\r\n".encode() + chunk + b"\r\n" for chunk in chunks) + b"0\r\n\r\n"
    pieces = [wire[start:start + 7] for start in range(0, 203, 7)] + [wire[203:-3], wire[-3:]]
    async with ScriptedServer(lambda request: pieces) as server:
        kube = kube_for(server)
        assert await kube.list("/api/v1/nodes") == orjson.loads(body)
        assert await kube.list("/api/v1/nodes") == orjson.loads(body)
    assert server.connections == 1


async def test_interim_answers_no_content_and_errors(kube_for: MakeClient) -> None:
    answers = iter([
        [b"HTTP/1.1 100 Continue\r\n\r\n", b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"],
        [b"HTTP/1.1 204 No Content\r\n\r\n"],
        [b'HTTP/1.1 409 Conflict\r\nContent-Length: 62\r\n\r\n'
         b'{"kind":"Status","code":409,"reason":"Conflict","message":"x"}'],
    ])
    async with ScriptedServer(lambda request: next(answers)) as server:
        kube = kube_for(server)
        assert await kube.get("/a") == {}
        assert await kube.delete("/b") == {}
        with pytest.raises(Exception, match="409 Conflict: x") as raised:
            await kube.update("/c", {})
        assert raised.value.conflict  # type: ignore[attr-defined]
    assert server.connections == 1


async def test_connection_close_and_a_body_read_to_the_end_are_not_reused(kube_for: MakeClient) -> None:
    answers = iter([ok(b"{}", "Connection: close"),
                    [b'HTTP/1.1 200 OK\r\n\r\n{"to":', b'"eof"}', CLOSE],
                    [b'HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n{}'],
                    ok(b'{"kept":1}'), ok(b'{"kept":2}')])
    async with ScriptedServer(lambda request: next(answers)) as server:
        kube = kube_for(server)
        assert await kube.get("/a") == {}
        assert await kube.get("/b") == {"to": "eof"}
        assert await kube.get("/c") == {}   # HTTP/1.0 without keep-alive: closed by the client
        assert await kube.get("/d") == {"kept": 1}
        assert await kube.get("/e") == {"kept": 2}
    assert server.connections == 4


async def test_a_kept_alive_connection_the_server_closed_is_retried_for_idempotent_requests() -> None:
    async with ScriptedServer(lambda request: ok(b"{}")) as server:
        pool = HttpPool("127.0.0.1", server.port, ssl_context=None)
        get = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
        assert await pool.request("GET", get, None) == (200, b"{}")
        server.close_idle()
        await asyncio.sleep(0.05)   # the close is seen: the idle connection is dropped when taken
        assert await pool.request("GET", get, None) == (200, b"{}")
        assert pool.opened == 2

        # The server closes without answering a connection the pool still thinks alive.
        answers = iter([None, ok(b"{}")])
        server.reply = lambda request: next(answers)
        assert await pool.request("PUT", get.replace(b"GET", b"PUT"), None) == (200, b"{}")
        assert pool.opened == 3

        answers = iter([None])
        post = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n"
        with pytest.raises(StaleConnection, match="before answering"):
            await pool.request("POST", post, b"{}")
        pool.close()


@pytest.mark.parametrize(("wire", "message"), [
    (b"SPDY/3 200 OK\r\n\r\n", "not an HTTP/1.1 status line"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 1x\r\n\r\n", "bad Content-Length"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n{}", "more than its Content-Length"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", "unsupported Transfer-Encoding"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "bad chunk size"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}xx", "does not end with CRLF"),
])
async def test_answers_that_are_not_http_11_fail_the_request_and_drop_the_connection(
        wire: bytes, message: str) -> None:
    async with ScriptedServer(lambda request: [wire]) as server:
        pool = HttpPool("127.0.0.1", server.port, ssl_context=None)
        with pytest.raises(HttpProtocolError, match=message):
            await pool.request("GET", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", None)
        assert pool._take_idle() is None
        pool.close()


async def test_an_answer_cut_in_the_middle_is_a_connection_error(kube_for: MakeClient) -> None:
    answers = iter([[b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}", CLOSE], ok(b"{}")])
    async with ScriptedServer(lambda request: next(answers)) as server:
        kube = kube_for(server)
        with pytest.raises(ConnectionError, match="middle of its answer"):
            await kube.get("/a")   # not sent again: an answer had begun
        assert await kube.get("/b") == {}
    assert len(server.requests) == 2


async def test_a_server_that_never_answers_times_out() -> None:
    async with ScriptedServer(lambda request: [b"HTTP/1.1 200 OK\r\n"]) as server:
        kube = KubeClient(f"http://127.0.0.1:{server.port}", request_timeout_s=0.3)
        try:
            with pytest.raises(TimeoutError):
                await kube.get("/a")
            # The cancelled exchange's connection is dropped, not handed to the next request.
            server.reply = lambda request: ok(b"{}")
            assert await kube.get("/b") == {}
            assert server.connections == 2
        finally:
            await kube.close()


async def test_bad_addresses_and_header_values_are_refused() -> None:
    kube = KubeClient("ftp://example.invalid")
    with pytest.raises(Exception, match="is not an http"):
        await kube.get("/a")
    kube = KubeClient("http://127.0.0.1:1", auth=lambda: "Bearer a\r\nX-Injected: 1")
    with pytest.raises(Exception, match="line break"):
        await kube.get("/a")
    await kube.close()
