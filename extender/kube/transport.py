"""How KubeClient's requests reach the API server: one small interface per kind of exchange, each with
the implementation that suits it.

- Requests (get, list, create, update, patch, delete): `PooledRequests`, kept-alive HTTP/1.1
  connections of our own (extender.kube.httppool), one short answer each.
- Streams (watches): `AiohttpStreams`, aiohttp's client, for the few long streams.

KubeClient builds the headers, the credentials and the retry once, above both: a transport only
carries a request whose target (path and query, percent-encoded) and headers are already made.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Protocol

import aiohttp
from yarl import URL

from extender.kube.httppool import HttpPool


@dataclass
class StreamAnswer:
    """The status of a streamed answer and its body, chunk by chunk as it arrives."""

    status: int
    chunks: AsyncIterator[bytes]

    async def read(self) -> bytes:
        """The rest of the body at once (an error answer's Status)."""
        return b"".join([chunk async for chunk in self.chunks])


class Requests(Protocol):
    async def send(self, method: str, target: str, headers: Mapping[str, str],
                   body: bytes | None) -> tuple[int, bytes]:
        """Send one request and return its status and whole body."""
        ...

    async def close(self) -> None: ...


class Streams(Protocol):
    def open(self, target: str, headers: Mapping[str, str], *, connect_timeout_s: float | None,
             read_timeout_s: float) -> AbstractAsyncContextManager[StreamAnswer]:
        """A GET whose body is read as it arrives; no data for `read_timeout_s` raises
        aiohttp.ServerTimeoutError, a dropped connection aiohttp.ClientError."""
        ...

    async def close(self) -> None: ...


# Distinct header sets kept rendered (content types times credentials seen lately).
MAX_HEADER_SETS = 16


class PooledRequests:
    """Requests over HttpPool's kept-alive HTTP/1.1 connections."""

    def __init__(self, host: str, port: int, *, ssl_context: ssl.SSLContext | None,
                 server_hostname: str | None, host_header: str) -> None:
        self.pool = HttpPool(host, port, ssl_context=ssl_context, server_hostname=server_hostname)
        self._host_line = f" HTTP/1.1\r\nHost: {host_header}\r\n"
        # Header sets rendered as header lines, by identity: KubeClient hands the same mapping again
        # while the credentials and content type stay the same, so most requests render nothing.
        self._rendered: dict[int, tuple[Mapping[str, str], str]] = {}

    async def send(self, method: str, target: str, headers: Mapping[str, str],
                   body: bytes | None) -> tuple[int, bytes]:
        head = method + " " + target + self._host_line + self._lines(headers)
        if body is not None:
            head += f"Content-Length: {len(body)}\r\n"
        return await self.pool.request(method, (head + "\r\n").encode("latin-1"), body)

    def _lines(self, headers: Mapping[str, str]) -> str:
        rendered = self._rendered.get(id(headers))
        if rendered is not None and rendered[0] is headers:
            return rendered[1]
        lines = "".join([f"{name}: {value}\r\n" for name, value in headers.items()])
        if len(self._rendered) >= MAX_HEADER_SETS:
            self._rendered.clear()
        self._rendered[id(headers)] = (headers, lines)   # the mapping is kept: its id stays its own
        return lines

    async def close(self) -> None:
        self.pool.close()


class AiohttpStreams:
    """Streams over aiohttp's client (its session is made on first use)."""

    def __init__(self, origin: str, *, ssl_context: ssl.SSLContext | None,
                 server_hostname: str | None) -> None:
        self._origin = origin
        self._ssl = ssl_context
        self._server_hostname = server_hostname
        self._session: aiohttp.ClientSession | None = None

    def open(self, target: str, headers: Mapping[str, str], *, connect_timeout_s: float | None,
             read_timeout_s: float) -> AbstractAsyncContextManager[StreamAnswer]:
        return self._open(target, headers, connect_timeout_s, read_timeout_s)

    @asynccontextmanager
    async def _open(self, target: str, headers: Mapping[str, str], connect_timeout_s: float | None,
                    read_timeout_s: float) -> AsyncIterator[StreamAnswer]:
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout_s, sock_read=read_timeout_s)
        url = URL(self._origin + target, encoded=True)
        async with self._session_().get(url, headers=dict(headers), timeout=timeout,
                                        server_hostname=self._server_hostname) as response:
            yield StreamAnswer(response.status, response.content.iter_any())

    def _session_(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(ssl=self._ssl or True, limit=64)
            self._session = aiohttp.ClientSession(connector=connector)
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
