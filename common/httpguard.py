"""Limits that keep the extender's HTTP ports standing under hostile or broken clients.

Sizes follow what kube-scheduler sends with `nodeCacheCapable: true` (what deploy/ configures): a Pod
(etcd keeps objects under 1.5 MiB) plus node names (at most 253 characters each; clusters stay well
under 15,000 nodes), or for preempt the victims' UIDs. The body is parsed on the event loop (orjson
holds the GIL, so a thread would not let other requests run meanwhile): the size limit and the
large-body slots are what bound that stall. A full NodeList (without nodeCacheCapable) of a
large cluster needs `--max-request-bytes` raised.

- A body over the limit is refused with 413 from its Content-Length, before it is read, also when the
  client asked `Expect: 100-continue` (it then never sends the body); a chunked body is cut off at
  the limit.
- Bodies over LARGE_BODY_BYTES (or of unknown length) wait for one of LARGE_BODY_SLOTS: a few huge
  requests at once bound the memory they take, and they cannot starve the loop for normal ones.
- A body must arrive within `body_timeout_s` (a slow sender holds no slot for long).
- Each port takes at most `max_connections` connections (more are closed at once, so file
  descriptors stay free for the other ports and /healthz), and a connection that sends no complete
  request for `idle_timeout_s` is closed (aiohttp's keep-alive timer, which also runs from the moment a
  connection opens, so it bounds slow headers too).
- The verbs take only `application/json`, what kube-scheduler sends.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

MIB = 1024 * 1024
# A 1.5 MiB Pod plus 15,000 names of 253 characters, or preempt's victims on 500 candidate nodes (10% of
# 5,000, kube-scheduler's default share) at 110 pods each, stay under it. Parsing holds the event loop
# for a time that grows with the body, so the limit also bounds how long one request can stall the others.
DEFAULT_MAX_REQUEST_BYTES = 8 * MIB
# A Binding names four strings.
MAX_BIND_BYTES = 64 * 1024
LARGE_BODY_BYTES = 1 * MIB
LARGE_BODY_SLOTS = 2
DEFAULT_MAX_CONNECTIONS = 64
DEFAULT_IDLE_TIMEOUT_S = 60.0
DEFAULT_BODY_TIMEOUT_S = 10.0


class RequestRefused(Exception):
    """The request cannot be served; `status` and the message say why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class HttpLimits:
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S

    def body_limit(self, path: str) -> int:
        return MAX_BIND_BYTES if path.endswith("/bind") else self.max_request_bytes


def too_large(body_limit: Callable[[str], int], request: web.BaseRequest) -> str:
    """Why the announced body is over the limit ("" when it is not, or has no Content-Length)."""
    return _over_limit(body_limit(request.path), request.path, request.content_length)


def _over_limit(limit: int, path: str, length: int | None) -> str:
    if length is not None and length > limit:
        return f"request body of {length} bytes is over the limit of {limit} bytes for {path}"
    return ""


def check_body_headers(limits: HttpLimits, path: str, content_type: str, length: int | None) -> None:
    """RequestRefused when a verb's headers already rule its body out: 415 not JSON, 413 too large."""
    if content_type != "application/json":
        raise RequestRefused(415, f"Content-Type must be application/json, got {content_type!r}")
    problem = _over_limit(limits.body_limit(path), path, length)
    if problem:
        raise RequestRefused(413, problem)


class BodyReader:
    """Reads request bodies within the limits, holding a large-body slot while a large one is read."""

    def __init__(self, limits: HttpLimits) -> None:
        self.limits = limits
        self._large = asyncio.Semaphore(LARGE_BODY_SLOTS)

    async def read(self, request: web.Request) -> bytes:
        """The body, or RequestRefused (415 wrong type, 413 too large, 408 too slow, 503 busy)."""
        length = request.content_length
        check_body_headers(self.limits, request.path, request.content_type, length)
        content = request.content
        if length is not None and content.is_eof() and not content.exception():
            # Already received with the headers (kube-scheduler's requests mostly are): no wait to bound.
            return content.read_nowait()
        large = length is None or length > LARGE_BODY_BYTES
        # Waiting for a slot and reading share one budget.
        deadline = asyncio.get_running_loop().time() + self.limits.body_timeout_s
        async with self._slot(large=large):
            try:
                async with asyncio.timeout_at(deadline):
                    return await self._read_within(request)
            except TimeoutError:
                raise RequestRefused(408, f"request body not received within "
                                          f"{self.limits.body_timeout_s:g} s") from None

    @contextlib.asynccontextmanager
    async def _slot(self, *, large: bool) -> AsyncIterator[None]:
        if not large:
            yield
            return
        try:
            await asyncio.wait_for(self.acquire_large(), self.limits.body_timeout_s)
        except TimeoutError:
            raise RequestRefused(503, self.busy_message()) from None
        try:
            yield
        finally:
            self.release_large()

    async def acquire_large(self) -> None:
        """Take one of the large-body slots (release_large gives it back)."""
        await self._large.acquire()

    def release_large(self) -> None:
        self._large.release()

    @staticmethod
    def busy_message() -> str:
        return f"too many large requests at once ({LARGE_BODY_SLOTS} are served at a time); try again"

    async def _read_within(self, request: web.Request) -> bytes:
        limit = self.limits.body_limit(request.path)
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.content.iter_any():
            size += len(chunk)
            if size > limit:
                raise RequestRefused(413, f"request body is over the limit of {limit} bytes for "
                                          f"{request.path}")
            chunks.append(chunk)
        return b"".join(chunks)


def expect_handler(body_limit: Callable[[str], int]) -> Any:
    """aiohttp's `Expect: 100-continue` handling, but an oversized announced body (over
    `body_limit(path)`) gets 413 instead."""

    async def handle(request: web.Request) -> web.StreamResponse | None:
        problem = too_large(body_limit, request)
        if problem:
            response = web.Response(status=413, text=f"{problem}\n")
            response.force_close()
            return response
        if request.version == (1, 1) and request.headers.get("Expect", "").lower() == "100-continue":
            await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        return None

    return handle


class _Refuse(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()


class _ByAlpn(asyncio.Protocol):
    """Hands a TLS connection, once its handshake is done, to the protocol its ALPN chose."""

    def __init__(self, choose: Callable[[str | None], asyncio.Protocol]) -> None:
        self._choose = choose

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        ssl_object = transport.get_extra_info("ssl_object")
        protocol = self._choose(ssl_object.selected_alpn_protocol() if ssl_object is not None else None)
        transport.set_protocol(protocol)
        protocol.connection_made(transport)


class GuardedListener:
    """One aiohttp application listening on one address, through aiohttp's public runner API: at most
    `limits.max_connections` connections at once (the next ones are closed as they are accepted),
    idle ones closed after `limits.idle_timeout_s`; `on_connection` is called for every connection
    taken. With `http2` (a factory of HTTP/2 connection protocols, given `forget` to call when the
    connection closes) and a TLS context offering `h2` by ALPN, the connections that choose HTTP/2
    are served by it, the others by the application; the cap counts both."""

    def __init__(self, app: web.Application, limits: HttpLimits, *,
                 on_connection: Callable[[], None] | None = None,
                 http2: Callable[[Callable[[Any], None]], asyncio.Protocol] | None = None) -> None:
        self._runner = web.AppRunner(app, keepalive_timeout=limits.idle_timeout_s, access_log=None)
        self._cap = limits.max_connections
        self._on_connection = on_connection
        self._listener: asyncio.Server | None = None
        self._http2 = http2
        self._http2_connections: set[Any] = set()

    async def start(self, host: str, port: int, *, ssl_context: ssl.SSLContext | None = None) -> int:
        """Listen; returns the port bound (the one the system chose for port 0)."""
        await self._runner.setup()
        server = self._runner.server
        assert server is not None
        http2 = self._http2 if ssl_context is not None else None

        def choose(alpn: str | None) -> asyncio.Protocol:
            if alpn == "h2" and http2 is not None:
                connection = http2(self._http2_connections.discard)
                self._http2_connections.add(connection)
                return connection
            return server()

        def protocol() -> asyncio.BaseProtocol:
            if len(server.connections) + len(self._http2_connections) >= self._cap:
                return _Refuse()
            if self._on_connection is not None:
                self._on_connection()
            return server() if http2 is None else _ByAlpn(choose)

        try:
            self._listener = await asyncio.get_running_loop().create_server(
                protocol, host, port, ssl=ssl_context)
        except BaseException:
            await self._runner.cleanup()
            raise
        sockets = self._listener.sockets
        return int(sockets[0].getsockname()[1]) if sockets else port

    @property
    def addresses(self) -> list[str]:
        """The addresses the listening sockets are bound to (none before start)."""
        sockets = self._listener.sockets if self._listener is not None else ()
        return [str(sock.getsockname()[0]) for sock in sockets]

    async def stop(self) -> None:
        """Stop accepting, then close the connections and the application."""
        if self._listener is not None:
            self._listener.close()
        for connection in list(self._http2_connections):
            connection.shutdown()
        await self._runner.cleanup()
        if self._listener is not None:
            await self._listener.wait_closed()
            self._listener = None
