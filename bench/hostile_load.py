"""Hostile load against a real `dra-extender serve` on loopback; prints JSON.

Starts `serve --snapshot examples/cluster` (with a webhook certificate, the file-descriptor limit at
--fd-limit) from the source tree given by --source (default: this checkout, so the same script measures
an older checkout too) and runs, one after the other:

  large_bodies  (issue 16 item 2): --large-requests concurrent filters, each a body of --large-mb MB of
                node names the extender does not know, while one normal filter of a pending pod runs in
                a loop. Reports the normal filter's p99/max latency, the large requests' HTTP statuses
                and answer sizes, and the server's peak RSS (VmHWM).
  webhook_labels (item 3): --reviews AdmissionReviews, each naming a made-up resource. Reports the size
                of /metrics and the RSS before and after.
  connections   (item 8): --idle-connections idle TCP connections, then whether /healthz still answers;
                whether an idle connection is closed by the server within --idle-wait seconds; what a
                request with `Expect: 100-continue` and a 10 GB Content-Length gets back first.

Everything stays on 127.0.0.1 and every loop is bounded. Run small to check it works
(`--large-mb 4 --large-requests 2 --reviews 500 --idle-connections 50 --idle-wait 5`); the issue's
figures come from the defaults on a quiet machine.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import os
import resource
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from extender.kube.objects_io import load_objects  # noqa: E402
from webhook import certs  # noqa: E402

HOST = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def percentile(samples: list[float], fraction: float) -> float:
    if not samples:
        return 0.0
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def rss_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


class Server:
    def __init__(self, source: Path, fd_limit: int, workdir: Path, extra: list[str]) -> None:
        self.source = source
        self.extra = extra
        self.fd_limit = fd_limit
        self.extender_port, self.debug_port, self.webhook_port = free_port(), free_port(), free_port()
        ca = certs.generate_ca()
        serving = certs.generate_serving_cert(ca, ["localhost"], [HOST])
        self.cert, self.key = workdir / "tls.crt", workdir / "tls.key"
        self.cert.write_bytes(serving.certificate_pem())
        self.key.write_bytes(serving.key_pem())
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        command = [
            sys.executable, "-m", "extender.cli", "serve",
            "--snapshot", str(self.source / "examples/cluster"),
            "--bind-address", HOST, "--extender-port", str(self.extender_port),
            "--debug-port", str(self.debug_port), "--webhook-port", str(self.webhook_port),
            "--tls-cert-file", str(self.cert), "--tls-private-key-file", str(self.key),
            "--log-level", "error", *self.extra,
        ]

        def limit_fds() -> None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (self.fd_limit, self.fd_limit))

        env = {**os.environ, "PYTHONPATH": str(self.source)}
        self.process = subprocess.Popen(command, cwd=self.source, env=env, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL, preexec_fn=limit_fds)

    async def wait_ready(self, session: aiohttp.ClientSession) -> None:
        for _ in range(300):
            with contextlib.suppress(aiohttp.ClientError):
                async with session.get(f"http://{HOST}:{self.debug_port}/readyz") as response:
                    if response.status == 200:
                        return
            await asyncio.sleep(0.1)
        raise RuntimeError("serve did not become ready")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid


def normal_filter_body(source: Path) -> bytes:
    objects = load_objects([source / "examples/cluster"])
    nodes = [o["metadata"]["name"] for o in objects if o.get("kind") == "Node"]
    pod = next(o for o in objects if o.get("kind") == "Pod" and not (o.get("spec") or {}).get("nodeName")
               and (o.get("spec") or {}).get("resourceClaims"))
    pod["metadata"].setdefault("namespace", "default")
    pod["metadata"].setdefault("uid", str(uuid.uuid4()))
    return orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": nodes})


def large_filter_body(pod_body: bytes, megabytes: float) -> bytes:
    pod = orjson.loads(pod_body)["Pod"]
    count = int(megabytes * 1024 * 1024 / 24)
    return orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": [f"ghost-{i:013d}" for i in range(count)]})


async def large_bodies(server: Server, args: argparse.Namespace, session: aiohttp.ClientSession) -> dict:
    url = f"http://{HOST}:{server.extender_port}/scheduler/filter"
    normal = normal_filter_body(server.source)
    big = large_filter_body(normal, args.large_mb)
    headers = {"Content-Type": "application/json"}
    latencies: list[float] = []
    done = asyncio.Event()

    async def normal_loop() -> None:
        while not done.is_set():
            started = time.perf_counter()
            async with session.post(url, data=normal, headers=headers) as response:
                await response.read()
            latencies.append(time.perf_counter() - started)
            await asyncio.sleep(0.01)

    def send_big() -> dict:
        # Blocking sockets in threads: sending and receiving release the GIL, so the bench's own event
        # loop, which times the normal filter, is not held up by pushing the big bodies.
        connection = http.client.HTTPConnection(HOST, server.extender_port, timeout=120)
        try:
            connection.request("POST", "/scheduler/filter", body=big, headers=headers)
            response = connection.getresponse()
            return {"status": response.status, "answerBytes": len(response.read())}
        except OSError as error:
            return {"status": None, "error": type(error).__name__}
        finally:
            connection.close()

    async def hostile() -> dict:
        return await asyncio.to_thread(send_big)

    before = rss_kib(server.pid, "VmRSS")
    ticker = asyncio.create_task(normal_loop())
    await asyncio.sleep(0.3)
    started = time.perf_counter()
    answers = await asyncio.gather(*(hostile() for _ in range(args.large_requests)))
    elapsed = time.perf_counter() - started
    await asyncio.sleep(0.3)
    done.set()
    await ticker
    statuses: dict[str, int] = {}
    for answer in answers:
        statuses[str(answer["status"])] = statuses.get(str(answer["status"]), 0) + 1
    return {
        "bodyMB": round(len(big) / 1024 / 1024, 1),
        "requests": args.large_requests,
        "statuses": statuses,
        "largestAnswerBytes": max((a.get("answerBytes", 0) for a in answers), default=0),
        "seconds": round(elapsed, 2),
        "normalFilter": {"count": len(latencies), "p99Ms": round(percentile(latencies, 0.99) * 1000, 1),
                         "maxMs": round(max(latencies, default=0) * 1000, 1)},
        "rssBeforeMiB": round(before / 1024, 1),
        "peakRssMiB": round(rss_kib(server.pid, "VmHWM") / 1024, 1),
    }


async def webhook_labels(server: Server, args: argparse.Namespace, session: aiohttp.ClientSession) -> dict:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    url = f"https://{HOST}:{server.webhook_port}/webhook/validate"
    metrics_url = f"http://{HOST}:{server.debug_port}/metrics"

    async def metrics_size() -> int:
        sizes = []
        for candidate in (metrics_url, f"https://{HOST}:{server.webhook_port}/metrics"):
            async with session.get(candidate, ssl=context if candidate.startswith("https") else None) as resp:
                sizes.append(len(await resp.read()) if resp.status == 200 else 0)
        return max(sizes)

    size_before, rss_before = await metrics_size(), rss_kib(server.pid, "VmRSS")
    statuses: dict[str, int] = {}

    async def send(index: int) -> None:
        review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": str(uuid.uuid4()), "kind": {"group": "x.io", "version": "v1", "kind": "X"},
            "resource": {"group": f"g{index}.example.com", "version": "v1", "resource": f"things{index}"},
            "name": "x", "namespace": "default", "operation": "CREATE",
            "userInfo": {"username": "someone"}, "object": {"metadata": {"name": "x"}}, "oldObject": None}}
        async with session.post(url, data=orjson.dumps(review), ssl=context,
                                headers={"Content-Type": "application/json"}) as response:
            await response.read()
            statuses[str(response.status)] = statuses.get(str(response.status), 0) + 1

    for first in range(0, args.reviews, 50):
        await asyncio.gather(*(send(i) for i in range(first, min(first + 50, args.reviews))))
    return {
        "reviews": args.reviews,
        "statuses": statuses,
        "metricsBytesBefore": size_before,
        "metricsBytesAfter": await metrics_size(),
        "rssGrowthMiB": round((rss_kib(server.pid, "VmRSS") - rss_before) / 1024, 1),
    }


async def connections(server: Server, args: argparse.Namespace, session: aiohttp.ClientSession) -> dict:
    idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    refused = 0
    for _ in range(args.idle_connections):
        try:
            idle.append(await asyncio.open_connection(HOST, server.extender_port))
        except OSError:
            refused += 1
    await asyncio.sleep(0.5)
    try:
        async with session.get(f"http://{HOST}:{server.debug_port}/healthz",
                               timeout=aiohttp.ClientTimeout(total=5)) as response:
            healthz: Any = response.status
    except (aiohttp.ClientError, TimeoutError) as error:
        healthz = type(error).__name__
    closed_after = None
    started = time.perf_counter()
    reader = idle[0][0] if idle else None
    if reader is not None:
        try:
            if await asyncio.wait_for(reader.read(1), args.idle_wait) == b"":
                closed_after = round(time.perf_counter() - started, 1)
        except (TimeoutError, ConnectionError):
            pass
    for _, writer in idle:
        writer.close()
    reader, writer = await asyncio.open_connection(HOST, server.extender_port)
    writer.write(b"POST /scheduler/filter HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 10000000000\r\nExpect: 100-continue\r\n\r\n")
    await writer.drain()
    try:
        first_line = (await asyncio.wait_for(reader.readline(), 5)).decode().strip()
    except (TimeoutError, ConnectionError) as error:
        first_line = type(error).__name__
    writer.close()
    return {
        "idleConnections": len(idle),
        "refused": refused,
        "healthzWithIdleConnections": healthz,
        "idleClosedAfterS": closed_after,
        "idleWaitS": args.idle_wait,
        "expect100With10GB": first_line,
    }


async def run(args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory() as workdir:
        server = Server(Path(args.source).resolve(), args.fd_limit, Path(workdir), args.serve_arg)
        server.start()
        try:
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
                await server.wait_ready(session)
                result: dict[str, Any] = {"source": str(server.source), "fdLimit": args.fd_limit}
                result["large_bodies"] = await large_bodies(server, args, session)
                result["webhook_labels"] = await webhook_labels(server, args, session)
                result["connections"] = await connections(server, args, session)
                result["peakRssMiB"] = round(rss_kib(server.pid, "VmHWM") / 1024, 1)
                return result
        finally:
            server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--serve-arg", action="append", default=[],
                        help="extra argument for serve (repeat), e.g. --serve-arg=--idle-timeout=10")
    parser.add_argument("--source", default=str(ROOT), help="source tree to run serve from (default: here)")
    parser.add_argument("--large-mb", type=float, default=52.0)
    parser.add_argument("--large-requests", type=int, default=10)
    parser.add_argument("--reviews", type=int, default=20_000)
    parser.add_argument("--idle-connections", type=int, default=300)
    parser.add_argument("--idle-wait", type=float, default=330.0)
    parser.add_argument("--fd-limit", type=int, default=256)
    args = parser.parse_args()
    print(orjson.dumps(asyncio.run(run(args)), option=orjson.OPT_INDENT_2).decode())
    return 0


if __name__ == "__main__":
    from termination import stop_on_sigterm

    stop_on_sigterm()
    sys.exit(main())
