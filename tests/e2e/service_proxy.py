"""A stand-in for a Service in front of several dra-extender replicas, on loopback: each new connection
goes to a backend whose probe passed at the last check (every `period_s`, as kubelet probes and
endpoint updates would), TLS passed through untouched. A `ready` route takes the replicas whose /readyz
answers 200 (the leader); an `alive` route those whose /healthz does (the webhook, which standbys serve,
as `publishNotReadyAddresses: true` gives)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from dataclasses import dataclass, field

import urllib3


@dataclass
class Route:
    port: int                                  # where the callers connect
    backends: list[tuple[int, int]]            # (backend port, its debug port)
    probe: str                                 # "/readyz" or "/healthz"
    eligible: list[int] = field(default_factory=list)
    connections: int = 0


class ServiceProxy:
    def __init__(self, routes: list[Route], *, period_s: float = 0.5) -> None:
        self.routes = routes
        self.period_s = period_s
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="service-proxy", daemon=True)
        self._stop = threading.Event()
        self._prober = threading.Thread(target=self._probe_loop, name="service-probes", daemon=True)
        self._servers: list[asyncio.base_events.Server] = []
        self._http = urllib3.PoolManager(retries=False, timeout=1)

    def start(self) -> None:
        self._probe_once()
        self._prober.start()
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(10)

    def stop(self) -> None:
        self._stop.set()
        asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._prober.join(10)

    # ---- probes (a thread of their own: urllib3 blocks) ------------------------------------------

    def _probe_loop(self) -> None:
        while not self._stop.wait(self.period_s):
            self._probe_once()

    def _probe_once(self) -> None:
        for route in self.routes:
            eligible = []
            for port, debug_port in route.backends:
                try:
                    answer = self._http.request("GET", f"http://127.0.0.1:{debug_port}{route.probe}")
                except urllib3.exceptions.HTTPError:
                    continue
                if answer.status == 200:
                    eligible.append(port)
            route.eligible = eligible

    # ---- forwarding ------------------------------------------------------------------------------

    async def _listen(self) -> None:
        for route in self.routes:
            server = await asyncio.start_server(
                lambda reader, writer, route=route: self._forward(route, reader, writer),
                "127.0.0.1", route.port)
            self._servers.append(server)

    async def _close(self) -> None:
        for server in self._servers:
            server.close()
        for server in self._servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 2)

    async def _forward(self, route: Route, reader: asyncio.StreamReader,
                       writer: asyncio.StreamWriter) -> None:
        route.connections += 1
        if not route.eligible:
            writer.close()  # no endpoint: the caller sees the connection refused-ish and retries
            return
        port = route.eligible[route.connections % len(route.eligible)]
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            writer.close()
            return

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            try:
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                with contextlib.suppress(Exception):
                    sink.close()

        await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))


def free_ports(count: int) -> list[int]:
    sockets = []
    for _ in range(count):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sockets.append(sock)
    ports = [sock.getsockname()[1] for sock in sockets]
    for sock in sockets:
        sock.close()
    return ports


def wait_until(condition: object, timeout_s: float, interval_s: float = 0.1) -> float | None:
    """Seconds until `condition()` held, or None."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if condition():  # type: ignore[operator]
            return time.monotonic() - started
        time.sleep(interval_s)
    return None
