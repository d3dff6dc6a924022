"""A loopback HTTPS proxy between dra-extender and kube-apiserver that injects the faults a real network
and a loaded API server produce: writes that take seconds to land (they are forwarded even when their
client has gone: a dead process's writes still arrive), answers lost after the API server applied the
request (a 504, or the connection cut), connections cut before forwarding, 429/5xx refusals, and
watches cut or ended with 410 Gone (expiry).

It runs on its own event loop in a thread of the test process, so it outlives the extender processes the
tests kill. `faults` is replaced as a whole (one attribute assignment) to change what it does.
"""

from __future__ import annotations

import asyncio
import random
import ssl
import threading
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import orjson
from aiohttp import web

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "host",
              "content-length", "proxy-authorization", "proxy-connection"}
WRITES = {"POST", "PUT", "PATCH", "DELETE"}


@dataclass(frozen=True)
class Faults:
    """Shares are probabilities per request of the kind named."""

    write_delay_s: tuple[float, float] = (0.0, 0.0)  # a write waits uniform(lo, hi) before it is sent on
    refused: float = 0.0       # any request but a watch: answered 429, 500 or 503, not forwarded
    cut_before: float = 0.0    # any request but a watch: connection cut, not forwarded
    answer_lost: float = 0.0   # writes: forwarded and applied, then answered 504 or cut (half each)
    binding_lost: float = 0.0  # Bindings: forwarded and applied, answer lost as above
    pod_reads_failing: float = 0.0  # GET of one pod: answered 503
    watch_cut_after_s: float = 0.0  # > 0: every watch is cut after uniform(0, this) seconds
    watch_expired: float = 0.0  # watches that resume from a resourceVersion: answered 410 Gone

    @property
    def clean(self) -> bool:
        return self == Faults()


def _status(code: int, reason: str, message: str) -> bytes:
    return orjson.dumps({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                         "message": message, "reason": reason, "code": code})


class FaultProxy:
    def __init__(self, upstream: str, ca_file: Path, cert_file: Path, key_file: Path, *,
                 seed: int = 0) -> None:
        self.upstream = upstream.rstrip("/")
        self.faults = Faults()
        self.injected: Counter[str] = Counter()
        self._random = random.Random(seed)
        self._ca, self._cert, self._key = ca_file, cert_file, key_file
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fault-proxy", daemon=True)
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self.url = ""

    # ---- lifecycle (called from the test's thread) ---------------------------------------------

    def start(self) -> str:
        self._thread.start()
        self.url = asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(30)
        return self.url

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def counts(self) -> dict[str, int]:
        return dict(self.injected)

    async def _start(self) -> str:
        server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        server_tls.load_cert_chain(self._cert, self._key)
        client_tls = ssl.create_default_context(cafile=str(self._ca))
        # Only the client's own headers go upstream: aiohttp would add Accept-Encoding, and kube-apiserver
        # would then gzip large lists for a client that never asked for it.
        self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_tls, limit=200),
                                              auto_decompress=False,
                                              skip_auto_headers=("Accept-Encoding", "User-Agent"))
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=5.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=server_tls)
        await site.start()
        port = self._runner.addresses[0][1]
        return f"https://127.0.0.1:{port}"

    async def _stop(self) -> None:
        # The upstream session first: the watch streams it carries end, and so do their handlers.
        if self._session is not None:
            await self._session.close()
        if self._runner is not None:
            await self._runner.cleanup()

    # ---- requests --------------------------------------------------------------------------------

    def _chance(self, share: float) -> bool:
        return share > 0 and self._random.random() < share

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        faults = self.faults
        body = await request.read()
        if request.method == "GET" and request.query.get("watch") in ("true", "1"):
            return await self._watch(request, faults)
        if self._chance(faults.refused):
            code, reason = self._random.choice(((429, "TooManyRequests"), (500, "InternalError"),
                                               (503, "ServiceUnavailable")))
            self.injected[f"refused {code}"] += 1
            return web.Response(body=_status(code, reason, "injected by the fault proxy"), status=code,
                                content_type="application/json")
        if self._chance(faults.cut_before):
            self.injected["cut before forwarding"] += 1
            return self._cut(request)
        binding = request.method == "POST" and request.path.endswith("/binding")
        pod_read = (request.method == "GET" and "/pods/" in request.path
                    and request.path.count("/") == 6 and not request.query)
        if pod_read and self._chance(faults.pod_reads_failing):
            self.injected["pod read failed"] += 1
            return web.Response(body=_status(503, "ServiceUnavailable", "injected"), status=503,
                                content_type="application/json")
        write = request.method in WRITES
        if write and faults.write_delay_s[1] > 0:
            await asyncio.sleep(self._random.uniform(*faults.write_delay_s))
        lose = (binding and self._chance(faults.binding_lost)) or (write and self._chance(faults.answer_lost))
        status, headers, payload = await self._forward(request, body)
        if lose:
            if self._random.random() < 0.5:
                self.injected["answer lost (cut)"] += 1
                return self._cut(request)
            self.injected["answer lost (504)"] += 1
            return web.Response(body=_status(504, "Timeout", "injected: the answer was lost"), status=504,
                                content_type="application/json")
        return web.Response(body=payload, status=status, headers=headers)

    async def _forward(self, request: web.Request, body: bytes) -> tuple[int, dict[str, str], bytes]:
        """The upstream answer; a 502 when kube-apiserver cannot be reached (being restarted)."""
        assert self._session is not None
        headers = {name: value for name, value in request.headers.items() if name.lower() not in HOP_BY_HOP}
        try:
            async with self._session.request(request.method, self.upstream + request.path_qs, headers=headers,
                                             data=body or None,
                                             timeout=aiohttp.ClientTimeout(total=120)) as answer:
                payload = await answer.read()
                kept = {name: value for name, value in answer.headers.items()
                        if name.lower() not in HOP_BY_HOP}
                return answer.status, kept, payload
        except (aiohttp.ClientError, OSError, TimeoutError) as error:
            return 502, {"Content-Type": "application/json"}, _status(502, "BadGateway", f"upstream: {error}")

    @staticmethod
    def _cut(request: web.Request) -> web.Response:
        if request.transport is not None:
            request.transport.close()
        return web.Response(status=500)  # never reaches the client

    async def _watch(self, request: web.Request, faults: Faults) -> web.StreamResponse:
        assert self._session is not None
        resuming = bool(request.query.get("resourceVersion")) and not request.query.get("sendInitialEvents")
        if resuming and self._chance(faults.watch_expired):
            self.injected["watch expired (410)"] += 1
            response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
            await response.prepare(request)
            gone = {"type": "ERROR", "object": orjson.loads(_status(
                410, "Expired", f"too old resource version: {request.query['resourceVersion']} (injected)"))}
            await response.write(orjson.dumps(gone) + b"\n")
            return response
        headers = {name: value for name, value in request.headers.items() if name.lower() not in HOP_BY_HOP}
        loop = asyncio.get_running_loop()
        cut_at: float | None = None
        response = web.StreamResponse()
        try:
            async with self._session.get(self.upstream + request.path_qs, headers=headers,
                                         timeout=aiohttp.ClientTimeout(total=None, sock_read=None)) as answer:
                response.set_status(answer.status)
                response.content_type = answer.content_type
                await response.prepare(request)
                while True:
                    # The faults of now, not of when the watch began: watches last minutes.
                    cut_after = self.faults.watch_cut_after_s
                    if cut_after <= 0:
                        cut_at = None
                    elif cut_at is None:
                        cut_at = loop.time() + self._random.uniform(0, cut_after)
                    if cut_at is not None and loop.time() >= cut_at:
                        self.injected["watch cut"] += 1
                        if request.transport is not None:
                            request.transport.close()
                        break
                    try:
                        chunk = await asyncio.wait_for(answer.content.readany(), 0.5)
                    except TimeoutError:
                        continue
                    if not chunk:
                        break
                    await response.write(chunk)
        except (aiohttp.ClientError, ConnectionError, OSError):
            if request.transport is not None:
                request.transport.close()
        return response
