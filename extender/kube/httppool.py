"""Kept-alive HTTP/1.1 connections for the API client's request/response calls.

aiohttp's client builds much per request (request and response objects, header multidicts, timers,
tracing hooks), and a bind makes three writes, on the path of every pod (docs/operations.md has the
measurement). The API server's answers need little of that, so
this pool speaks only that part of HTTP/1.1: one request at a time per connection, bodies sized by
Content-Length or sent chunked (or, with neither, read to the end of the connection), and
`Connection: close`. Watches stay on aiohttp: they are few, long streams.

A kept-alive connection the server has just closed is found when it is taken from the pool (the close
was seen) or when its request gets no answer byte at all; like aiohttp, the pool then sends an
idempotent request once more on a fresh connection, and reports any other as a ConnectionError.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import deque

IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"})
# Below the API server's own idle timeout (90 s), so the pool rarely races the server's close.
IDLE_S = 30.0
# An answer's head (status line and headers) larger than this is refused, as Go's default is 1 MiB.
MAX_HEAD_BYTES = 1 << 20
NO_ANSWER = "the server closed the connection before answering"


class HttpProtocolError(ConnectionError):
    """The server's answer is not HTTP/1.1 this pool can read; the connection is dropped."""


class StaleConnection(ConnectionError):
    """A kept-alive connection closed before any byte of the answer arrived."""


class _Connection(asyncio.Protocol):
    """One connection; `exchange()` sends a request and waits for the whole answer."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self.keep_alive = True
        self._answer: asyncio.Future[tuple[int, bytes]] | None = None
        self._buffer = bytearray()
        self._received = False
        self._status = 0
        self._length: int | None = None   # Content-Length, once the head is read
        self._chunked = False
        self._to_eof = False
        self._head_read = False
        self._chunks: list[bytes] = []

    # ---- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a stream transport

    def data_received(self, data: bytes) -> None:
        if self._answer is None or self._answer.done():
            self._fail(HttpProtocolError("the server sent bytes no request asked for"))
            return
        self._received = True
        self._buffer += data
        try:
            self._read()
        except HttpProtocolError as err:
            self._fail(err)

    def eof_received(self) -> bool:
        self.closed = True
        if self._answer is not None and not self._answer.done():
            if self._to_eof:
                self._finish(bytes(self._buffer))
            elif self._received:
                self._fail(ConnectionError("the server closed the connection in the middle of its answer"))
            else:
                self._fail(StaleConnection(NO_ANSWER))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._answer is not None and not self._answer.done():
            if self._received or exc is not None:
                reason = f": {exc}" if exc else ""
                self._answer.set_exception(ConnectionError(f"connection to the API server lost{reason}"))
            else:
                self._answer.set_exception(StaleConnection(NO_ANSWER))

    # ---- one exchange -------------------------------------------------------------------------

    async def exchange(self, head: bytes, body: bytes | None) -> tuple[int, bytes]:
        assert self.transport is not None, "exchange() on a connection that was never made"
        self._answer = asyncio.get_running_loop().create_future()
        self._received = False
        self._head_read = self._chunked = self._to_eof = False
        self._length = None
        self._chunks = []
        self.transport.write(head + body if body else head)
        return await self._answer

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def _fail(self, err: Exception) -> None:
        if self._answer is not None and not self._answer.done():
            self._answer.set_exception(err)
        self.close()

    def _finish(self, payload: bytes) -> None:
        self._buffer.clear()
        assert self._answer is not None
        self._answer.set_result((self._status, payload))

    def _read(self) -> None:
        if not self._head_read and not self._read_head():
            return
        if self._chunked:
            self._read_chunks()
        elif self._length is not None and len(self._buffer) >= self._length:
            if len(self._buffer) > self._length:
                raise HttpProtocolError("the server sent more than its Content-Length")
            self._finish(bytes(self._buffer))

    def _read_head(self) -> bool:
        while True:
            end = self._buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buffer) > MAX_HEAD_BYTES:
                    raise HttpProtocolError("the answer's headers are larger than 1 MiB")
                return False
            lines = self._buffer[:end].decode("latin-1").split("\r\n")
            del self._buffer[:end + 4]
            version, _, rest = lines[0].partition(" ")
            code = rest[:3]
            if not version.startswith("HTTP/1.") or not code.isdigit():
                raise HttpProtocolError(f"not an HTTP/1.1 status line: {lines[0][:100]!r}")
            self._status = int(code)
            if 100 <= self._status < 200:
                continue   # an interim answer: the real one follows
            break
        self.keep_alive = version == "HTTP/1.1"
        for line in lines[1:]:
            name, _, value = line.partition(":")
            name = name.strip().lower()
            if name == "content-length":
                value = value.strip()
                if not value.isdigit():
                    raise HttpProtocolError(f"bad Content-Length {value[:40]!r}")
                self._length = int(value)
            elif name == "transfer-encoding":
                self._chunked = value.strip().lower() == "chunked"
                if not self._chunked:
                    raise HttpProtocolError(f"unsupported Transfer-Encoding {value.strip()[:40]!r}")
            elif name == "connection":
                tokens = {token.strip().lower() for token in value.split(",")}
                if "close" in tokens:
                    self.keep_alive = False
                elif "keep-alive" in tokens:
                    self.keep_alive = True
        self._head_read = True
        if self._status in (204, 304):
            self._chunked, self._length = False, 0
        elif not self._chunked and self._length is None:
            self._to_eof = True
            self.keep_alive = False
        return True

    def _read_chunks(self) -> None:
        buffer = self._buffer
        start = 0
        try:
            while True:
                line_end = buffer.find(b"\r\n", start)
                if line_end < 0:
                    return
                size_text = bytes(buffer[start:line_end]).split(b";", 1)[0].strip()
                try:
                    size = int(size_text, 16)
                except ValueError:
                    raise HttpProtocolError(f"bad chunk size {size_text[:40]!r}") from None
                if size == 0:
                    # The last chunk; trailers (which the API server never sends) end at an empty line.
                    if buffer.find(b"\r\n\r\n", line_end) < 0:
                        return
                    self._finish(b"".join(self._chunks))   # clears the buffer
                    start = 0
                    return
                data_end = line_end + 2 + size
                if len(buffer) < data_end + 2:
                    return
                if buffer[data_end:data_end + 2] != b"\r\n":
                    raise HttpProtocolError("a chunk does not end with CRLF")
                self._chunks.append(bytes(buffer[line_end + 2:data_end]))
                start = data_end + 2
        finally:
            if start:
                del buffer[:start]


class HttpPool:
    """Kept-alive connections to one server, at most `limit` at a time."""

    def __init__(self, host: str, port: int, *, ssl_context: ssl.SSLContext | None,
                 server_hostname: str | None = None, limit: int = 64) -> None:
        self._address = (host, port)
        self._ssl = ssl_context
        self._server_hostname = server_hostname if ssl_context is not None else None
        self._idle: deque[_Connection] = deque()
        self._slots = asyncio.Semaphore(limit)
        self.opened = 0   # connections opened so far (tests and the benchmark read it)

    async def request(self, method: str, head: bytes, body: bytes | None) -> tuple[int, bytes]:
        """Send one request (`head` is its request line and headers, ending with the empty line) and
        return the status and the whole body."""
        async with self._slots:
            for attempt in (1, 2):
                connection = self._take_idle()
                reused = connection is not None
                if connection is None:
                    connection = await self._open()
                try:
                    answer = await connection.exchange(head, body)
                except StaleConnection:
                    connection.close()
                    if reused and attempt == 1 and method in IDEMPOTENT:
                        continue
                    raise
                except BaseException:
                    connection.close()   # cancelled or failed half-way: its state is unknown
                    raise
                if connection.keep_alive and not connection.closed:
                    connection.idle_since = time.monotonic()
                    self._idle.append(connection)
                else:
                    connection.close()
                return answer
        raise AssertionError("unreachable")

    def close(self) -> None:
        while self._idle:
            self._idle.pop().close()

    def _take_idle(self) -> _Connection | None:
        now = time.monotonic()
        while self._idle:
            connection = self._idle.pop()
            if not connection.closed and now - connection.idle_since < IDLE_S:
                return connection
            connection.close()
        return None

    async def _open(self) -> _Connection:
        loop = asyncio.get_running_loop()
        host, port = self._address
        if self._ssl is None:
            transport, connection = await loop.create_connection(_Connection, host, port)
        else:
            transport, connection = await loop.create_connection(
                _Connection, host, port, ssl=self._ssl, server_hostname=self._server_hostname)
        # uvloop may return before it has called connection_made.
        connection.transport = transport
        self.opened += 1
        return connection
