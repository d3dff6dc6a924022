"""The CPU a Python extender spends per pod before it schedules anything (issue 17); prints JSON.

kube-scheduler makes three HTTPS calls per pod (filter, prioritize, bind), a bind makes three API
writes (claim finalizer, claim status, pods/binding), and the watches bring the pod's and its claim's
changes. This bench prices that transport alone, on the stack the project is built on (aiohttp on
uvloop, orjson, Python's ssl):

- server: a do-nothing aiohttp HTTPS app in a child process (TLS set up as serve sets it up) answers
  the three verbs with bodies shaped as kube-scheduler sends them (`--names` node names, the window
  kube-scheduler offers at 500 nodes), decoding each request and encoding a minimal answer. Its own
  CPU time is measured per pod on kept-alive connections, and per new TLS connection;
- bind writes and watch events: `client_cpu_bench.py`'s figures (the real ClaimWriter and cache over
  plain HTTP, so TLS is not even counted there).

With `--mutual-tls` the server also requires a client certificate of its CA and the client presents
one, as deploy/'s scheduler-config mode and kube-scheduler do (`--extender-client-ca-file`): the
difference of `server_us_per_new_tls_connection` with and without it is what mutual TLS costs.

`floor_ms_per_pod` adds them up with `--connections-per-pod` new connections per pod (kube-scheduler
opened 0.67-0.80 in the side-by-side runs: its extender transport keeps 2 idle connections). Every
figure is the minimum over --repeats runs.

    python bench/cpu_floor_bench.py --json
    python bench/cpu_floor_bench.py --json --mutual-tls

With `--peer go` it compares transports for the verbs port instead (KINDS: today's aiohttp over TLS,
aiohttp beside common/http2 chosen by ALPN, plain HTTP, hypercorn, granian's embedded server), each a
do-nothing server in a child process, called by bench/schedclient: a Go client whose transport is
built as kube-scheduler's makeTransport builds it, which reads answers as HTTPExtender.send does and
sends pods as its scheduling loop does (filter, prioritize, then bind in a goroutine; binds take
BIND_LATENCY_S). It prints per kind the CPU per pod of the server and of the client, the new
connections per pod and the protocol negotiated (medians, kinds interleaved in every round); the
`-fresh` kinds open a connection per call, which prices a connection. Needs `go` and the module
cache of tests/e2e (it builds offline).

    python bench/cpu_floor_bench.py --peer go --pods 1000 --repeats 3 --mutual-tls --json
    python bench/cpu_floor_bench.py --peer go --pods 1000 --repeats 3 --mutual-tls --json \
        --kinds aiohttp-h1,ours-h2,hypercorn-h2,granian-h2   # after pip install hypercorn granian
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import os
import resource
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from aiohttp import web

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import client_cpu_bench  # noqa: E402

from common import http2  # noqa: E402
from common.httpguard import BodyReader, GuardedListener, HttpLimits  # noqa: E402
from common.tls import build_context  # noqa: E402
from extender.eventloop import run as run_loop  # noqa: E402
from webhook import certs  # noqa: E402

HOST = "127.0.0.1"
# Written next to the serving files with --mutual-tls: the child then requires client certificates.
CLIENT_CERT, CLIENT_KEY = "client.crt", "client.key"
PAYLOADS = ROOT / "tests" / "extender" / "payloads"
# A real bind waits for its API writes; while it does, kube-scheduler goes on with the next pods, so
# several binds are in flight at once: that is what makes its 2 idle HTTP/1.1 connections too few.
BIND_LATENCY_S = 0.02


async def _filter(request: web.Request) -> web.Response:
    args = orjson.loads(await request.read())
    answer = {"NodeNames": args["NodeNames"], "FailedNodes": {}, "FailedAndUnresolvableNodes": {},
              "Error": ""}
    return web.Response(body=orjson.dumps(answer), content_type="application/json")


async def _prioritize(request: web.Request) -> web.Response:
    args = orjson.loads(await request.read())
    answer = [{"Host": name, "Score": 0} for name in args["NodeNames"]]
    return web.Response(body=orjson.dumps(answer), content_type="application/json")


async def _bind(request: web.Request) -> web.Response:
    orjson.loads(await request.read())
    return web.Response(body=orjson.dumps({"Error": ""}), content_type="application/json")


async def _null_http1(request: web.Request) -> web.Response:
    body = await _null_answer(request.path, await request.read())
    return web.Response(body=body, content_type="application/json")


async def _cpu(_: web.Request) -> web.Response:
    return web.Response(text=repr(time.process_time()))


async def _null_answer(path: str, body: bytes) -> bytes:
    args = orjson.loads(body)
    if path.endswith("/bind"):
        await asyncio.sleep(BIND_LATENCY_S)
        return orjson.dumps({"Error": ""})
    if path.endswith("/filter"):
        return orjson.dumps({"NodeNames": args["NodeNames"], "FailedNodes": {},
                             "FailedAndUnresolvableNodes": {}, "Error": ""})
    return orjson.dumps([{"Host": name, "Score": 0} for name in args["NodeNames"]])


def _serving_context(cert_dir: str, *, alpn: tuple[str, ...] = ()) -> ssl.SSLContext:
    client_ca = Path(cert_dir) / certs.CA_CERT_FILE
    return build_context(str(Path(cert_dir) / certs.CERT_FILE), str(Path(cert_dir) / certs.KEY_FILE),
                         str(client_ca) if (Path(cert_dir) / CLIENT_CERT).exists() else None, alpn=alpn)


def _null_app() -> web.Application:
    app = web.Application()
    app.router.add_post("/filter", _filter)
    app.router.add_post("/prioritize", _prioritize)
    app.router.add_post("/bind", _bind)
    app.router.add_get("/cpu", _cpu)
    return app


async def _serve_ours(cert_dir: str, kind: str) -> tuple[int, Callable[[], Awaitable[None]]]:
    """As serve listens: aiohttp over TLS (`h1`), with common/http2 beside it (`h2`), or without TLS
    (`plain`)."""
    limits = HttpLimits()
    bodies = BodyReader(limits)

    async def verb(request: http2.Request) -> http2.Answer:
        return http2.Answer(200, "application/json", await _null_answer(request.path, request.body))

    def route(method: str, path: str) -> http2.Verb | http2.Answer:
        return verb if method == "POST" else http2.text_answer(405, "405: Method Not Allowed")

    budget = http2.StreamBudget(limits.max_connections)

    def connection(forget: Callable[[Any], None]) -> http2.H2Protocol:
        return http2.H2Protocol(route, limits, bodies, budget, on_close=forget)

    context = None if kind == "plain" else _serving_context(
        cert_dir, alpn=(http2.ALPN_H2, "http/1.1") if kind == "h2" else ())
    app = web.Application()
    for name in ("filter", "prioritize", "bind"):
        app.router.add_post(f"/{name}", _null_http1)
    listener = GuardedListener(app, limits, http2=connection if kind == "h2" else None)
    port = await listener.start(HOST, 0, ssl_context=context)
    return port, listener.stop


async def _serve_hypercorn(cert_dir: str) -> tuple[int, Callable[[], Awaitable[None]]]:
    from hypercorn.asyncio import serve
    from hypercorn.config import Config

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = await _null_answer(scope["path"], b"".join(chunks))
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body})

    config = Config()
    port = _free_port()
    config.bind = [f"{HOST}:{port}"]
    config.certfile = str(Path(cert_dir) / certs.CERT_FILE)
    config.keyfile = str(Path(cert_dir) / certs.KEY_FILE)
    if (Path(cert_dir) / CLIENT_CERT).exists():
        config.ca_certs = str(Path(cert_dir) / certs.CA_CERT_FILE)
        config.verify_mode = ssl.CERT_REQUIRED
    config.accesslog = None
    config.keep_alive_max_requests = 1 << 30  # its default closes a connection after 1,000 requests
    stop = asyncio.Event()
    task = asyncio.get_running_loop().create_task(serve(app, config, shutdown_trigger=stop.wait))  # type: ignore[arg-type]
    await asyncio.sleep(0.5)

    async def close() -> None:
        stop.set()
        await task

    return port, close


async def _serve_granian(cert_dir: str) -> tuple[int, Callable[[], Awaitable[None]]]:
    from granian.constants import Interfaces, SSLProtocols
    from granian.server.embed import Server

    async def app(scope: Any, protocol: Any) -> None:
        body = await _null_answer(scope.path, await protocol())
        protocol.response_bytes(200, [("content-type", "application/json")], body)

    port = _free_port()
    mutual = (Path(cert_dir) / CLIENT_CERT).exists()
    server = Server(app, address=HOST, port=port, interface=Interfaces.RSGI, log_enabled=False,
                    ssl_cert=Path(cert_dir) / certs.CERT_FILE, ssl_key=Path(cert_dir) / certs.KEY_FILE,
                    ssl_protocol_min=SSLProtocols.tls12,
                    ssl_ca=Path(cert_dir) / certs.CA_CERT_FILE if mutual else None, ssl_client_verify=mutual)
    task = asyncio.get_running_loop().create_task(server.serve())
    await asyncio.sleep(1.0)

    async def close() -> None:
        server.stop()
        await task

    return port, close


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


async def serve_null(cert_dir: str, kind: str = "aiohttp") -> None:
    """The child process: a do-nothing extender of `kind`, until stdin closes; prints its port."""
    if kind == "aiohttp":
        runner = web.AppRunner(_null_app(), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, HOST, 0, ssl_context=_serving_context(cert_dir))
        await site.start()
        port, close = runner.addresses[0][1], runner.cleanup
    elif kind == "hypercorn":
        port, close = await _serve_hypercorn(cert_dir)
    elif kind == "granian":
        port, close = await _serve_granian(cert_dir)
    else:
        port, close = await _serve_ours(cert_dir, kind)
    print(port, flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await close()


def _bodies(names: int) -> tuple[bytes, bytes, bytes]:
    """filter, prioritize and bind bodies as kube-scheduler sends them (nodeCacheCapable)."""
    node_names = [f"node-{index}" for index in range(names)]
    verb_args = orjson.loads((PAYLOADS / "filter_node_cache_capable.json").read_bytes())
    verb_args = {**copy.deepcopy(verb_args), "NodeNames": node_names}
    bind = (PAYLOADS / "bind.json").read_bytes()
    return orjson.dumps(verb_args), orjson.dumps(verb_args), bind


async def _drive(port: int, ca_file: str, *, pods: int, names: int, new_connections: bool,
                 concurrency: int) -> float:
    """Server CPU seconds per pod for `pods` pods' three calls."""
    context = ssl.create_default_context(cafile=ca_file)
    client_cert = Path(ca_file).with_name(CLIENT_CERT)
    if client_cert.exists():
        context.load_cert_chain(client_cert, client_cert.with_name(CLIENT_KEY))
    base = f"https://{HOST}:{port}"
    filter_body, prioritize_body, bind_body = _bodies(names)
    headers = {"Content-Type": "application/json"}
    connector = aiohttp.TCPConnector(ssl=context, limit=concurrency, force_close=new_connections)
    async with aiohttp.ClientSession(connector=connector) as session:
        async def server_cpu() -> float:
            async with session.get(f"{base}/cpu") as response:
                return float(await response.text())

        async def one_pod() -> None:
            for path, body in (("/filter", filter_body), ("/prioritize", prioritize_body),
                               ("/bind", bind_body)):
                async with session.post(base + path, data=body, headers=headers) as response:
                    await response.read()
                    if response.status != 200:
                        raise RuntimeError(f"{path}: HTTP {response.status}")

        remaining = [pods]

        async def worker() -> None:
            while remaining[0] > 0:
                remaining[0] -= 1
                await one_pod()

        for _ in range(20):
            await one_pod()
        before = await server_cpu()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return (await server_cpu() - before) / pods


def server_floor(*, pods: int, names: int, concurrency: int, repeats: int,
                 mutual_tls: bool = False) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as cert_dir:
        ca = certs.generate_ca()
        certs.write_serving_files(Path(cert_dir), ca, certs.generate_serving_cert(ca, ["localhost"], [HOST]))
        if mutual_tls:
            client = certs.generate_client_cert(ca, "kube-scheduler")
            certs.write_pem(Path(cert_dir) / CLIENT_KEY, client.key_pem(), private=True)
            certs.write_pem(Path(cert_dir) / CLIENT_CERT, client.certificate_pem())
        ca_file = str(Path(cert_dir) / certs.CA_CERT_FILE)
        child = subprocess.Popen([sys.executable, __file__, "--serve-null", cert_dir], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)
        try:
            assert child.stdout is not None
            port = int(child.stdout.readline())
            kept, fresh = float("inf"), float("inf")
            for _ in range(repeats):
                kept = min(kept, run_loop(_drive(port, ca_file, pods=pods, names=names,
                                                 new_connections=False, concurrency=concurrency)))
                fresh = min(fresh, run_loop(_drive(port, ca_file, pods=pods // 4, names=names,
                                                   new_connections=True, concurrency=concurrency)))
        finally:
            assert child.stdin is not None
            child.stdin.close()
            child.wait(timeout=30)
    return {"server_us_per_pod_kept_alive": round(kept * 1e6, 1),
            "server_us_per_new_tls_connection": round((fresh - kept) / 3 * 1e6, 1)}


# --peer go: the candidates for the verbs port, each a do-nothing server in a child process.
KINDS: dict[str, tuple[str, dict[str, str], list[str]]] = {  # server, client environment, client flags
    "aiohttp-h1": ("h1", {}, []),            # today: aiohttp over TLS, HTTP/1.1 only
    "aiohttp-h1-fresh": ("h1", {}, ["-fresh"]),  # the same, a new connection for every call
    "ours-h2": ("h2", {}, []),               # aiohttp for HTTP/1.1 plus common/http2 for h2, by ALPN
    "ours-h2-client-h1": ("h2", {"DISABLE_HTTP2": "1"}, []),  # the same server, the client refusing h2
    "plain-h1": ("plain", {}, []),           # no TLS (the second-scheduler sidecar, on loopback)
    "plain-h1-fresh": ("plain", {}, ["-fresh"]),
    "hypercorn-h2": ("hypercorn", {}, []),
    "granian-h2": ("granian", {}, []),
}
OTHER_SERVERS = ("hypercorn-h2", "granian-h2")  # measured, not adopted (docs/operations.md)
GO_CLIENT = Path(__file__).resolve().parent / "schedclient" / "main.go"


def build_go_client(directory: Path) -> Path:
    """bench/schedclient, built in `directory` as a module pinned like tests/e2e/go.mod (offline)."""
    for name in ("go.mod", "go.sum"):
        (directory / name).write_bytes((ROOT / "tests" / "e2e" / name).read_bytes())
    (directory / "main.go").write_bytes(GO_CLIENT.read_bytes())
    env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local", "GOPROXY": "off"}
    subprocess.run(["go", "build", "-o", "schedclient", "."], cwd=directory, env=env, check=True)
    return directory / "schedclient"


def _process_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _median(runs: list[dict[str, Any]], key: str) -> float:
    return round(statistics.median(run[key] for run in runs), 3 if "connections" in key else 1)


def go_peer(kinds: list[str], *, pods: int, names: int, loops: int, pace_ms: float, repeats: int,
            mutual_tls: bool) -> dict[str, Any]:
    """Per kind: server and client CPU per pod, new connections per pod, the protocol negotiated
    (medians over `repeats` rounds, the kinds interleaved within each round)."""
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        client = build_go_client(work)
        cert_dir = work / "certs"
        cert_dir.mkdir()
        ca = certs.generate_ca()
        certs.write_serving_files(cert_dir, ca, certs.generate_serving_cert(ca, ["localhost"], [HOST]))
        if mutual_tls:
            cert = certs.generate_client_cert(ca, "kube-scheduler")
            certs.write_pem(cert_dir / CLIENT_KEY, cert.key_pem(), private=True)
            certs.write_pem(cert_dir / CLIENT_CERT, cert.certificate_pem())
        filter_body, _, bind_body = _bodies(names)
        (work / "filter.json").write_bytes(filter_body)
        (work / "bind.json").write_bytes(bind_body)
        servers: dict[str, tuple[subprocess.Popen[str], int]] = {}
        samples: dict[str, list[dict[str, Any]]] = {kind: [] for kind in kinds}
        try:
            for kind in kinds:
                server_kind = KINDS[kind][0]
                child = subprocess.Popen([sys.executable, __file__, "--serve-null", str(cert_dir),
                                          "--server", server_kind], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, text=True)
                assert child.stdout is not None
                servers[kind] = child, int(child.stdout.readline())

            def run(kind: str, count: int) -> dict[str, Any]:
                child, port = servers[kind]
                scheme = "http" if KINDS[kind][0] == "plain" else "https"
                command = [str(client), "-url", f"{scheme}://{HOST}:{port}", "-pods", str(count),
                           "-concurrency", str(loops), "-pace", f"{pace_ms}ms",
                           "-filter", str(work / "filter.json"), "-bind", str(work / "bind.json"),
                           *KINDS[kind][2]]
                if scheme == "https":
                    command += ["-ca", str(cert_dir / certs.CA_CERT_FILE)]
                    if mutual_tls:
                        command += ["-cert", str(cert_dir / CLIENT_CERT), "-key", str(cert_dir / CLIENT_KEY)]
                env = {name: value for name, value in os.environ.items() if name != "DISABLE_HTTP2"}
                env.update(KINDS[kind][1])
                server_before, client_before = _process_cpu_s(child.pid), _children_cpu_s()
                done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
                server_after, client_after = _process_cpu_s(child.pid), _children_cpu_s()
                if done.returncode != 0:
                    raise RuntimeError(f"{kind}: go client failed: {done.stdout} {done.stderr[-2000:]}")
                report = json.loads(done.stdout)
                return {"server_us_per_pod": (server_after - server_before) / count * 1e6,
                        "client_us_per_pod": (client_after - client_before) / count * 1e6,
                        "new_connections_per_pod": report["new_connections"] / count,
                        "proto": report["proto"]}

            for kind in kinds:
                run(kind, max(pods // 10, 20))  # warm up: imports, first handshakes
            for _ in range(repeats):
                for kind in kinds:
                    samples[kind].append(run(kind, pods))
        finally:
            for child, _ in servers.values():
                assert child.stdin is not None
                child.stdin.close()
                child.wait(timeout=30)
    result: dict[str, Any] = {}
    for kind, runs in samples.items():
        result[kind] = {key: _median(runs, key)
                        for key in ("server_us_per_pod", "client_us_per_pod", "new_connections_per_pod")}
        result[kind]["proto"] = runs[-1]["proto"]
    return {"peer": "go (kube-scheduler's extender transport)", "mutual_tls": mutual_tls, "pods": pods,
            "names": names, "loops": loops, "pace_ms": pace_ms, "bind_latency_ms": BIND_LATENCY_S * 1000,
            "repeats": repeats, "kinds": result}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print only the result object")
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--names", type=int, default=230,
                        help="node names per filter and prioritize (kube-scheduler's window at 500 nodes)")
    parser.add_argument("--connections-per-pod", type=float, default=0.75)
    parser.add_argument("--concurrency", type=int, default=4, help="calls in flight")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--mutual-tls", action="store_true",
                        help="the server requires, and the client presents, a client certificate")
    parser.add_argument("--peer", choices=("aiohttp", "go"), default="aiohttp",
                        help="go: compare the verbs port's transports (--kinds) with a client built as "
                             "kube-scheduler builds its extender client (bench/schedclient, needs go)")
    parser.add_argument("--loops", type=int, default=1,
                        help="with --peer go, scheduling loops sending pods (kube-scheduler has one)")
    parser.add_argument("--pace-ms", type=float, default=10.0,
                        help="with --peer go, a pod starts at most every this many ms per loop")
    parser.add_argument("--kinds", default=",".join(kind for kind in KINDS if kind not in OTHER_SERVERS),
                        help=f"with --peer go, which of {', '.join(KINDS)} (comma-separated; "
                             f"{', '.join(OTHER_SERVERS)} need `pip install hypercorn granian`, not "
                             "dependencies)")
    parser.add_argument("--serve-null", metavar="CERT_DIR", help=argparse.SUPPRESS)
    parser.add_argument("--server", default="aiohttp", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_null:
        run_loop(serve_null(args.serve_null, args.server))
        return 0
    if args.peer == "go":
        kinds = [kind for kind in args.kinds.split(",") if kind]
        unknown = sorted(set(kinds) - set(KINDS))
        if unknown:
            parser.error(f"--kinds: unknown {', '.join(unknown)} (known: {', '.join(KINDS)})")
        compared = go_peer(kinds, pods=args.pods, names=args.names, loops=args.loops, pace_ms=args.pace_ms,
                           repeats=args.repeats, mutual_tls=args.mutual_tls)
        print(json.dumps(compared) if args.json else json.dumps(compared, indent=2))
        return 0
    server = server_floor(pods=args.pods, names=args.names, concurrency=args.concurrency,
                          repeats=args.repeats, mutual_tls=args.mutual_tls)
    writes = client_cpu_bench.bind_cpu(1000, 200, 8, args.repeats)
    watch = client_cpu_bench.watch_cpu(1000, 200, args.repeats)
    parts_us = {
        "verbs_server": server["server_us_per_pod_kept_alive"],
        "new_tls_connections": server["server_us_per_new_tls_connection"] * args.connections_per_pod,
        "bind_writes_client": writes["cpu_us_per_bind"],
        "watch_events": watch["cpu_us_per_watch_event"] * watch["watch_events_per_pod"],
    }
    result = {**server, **writes, **watch, "mutual_tls": args.mutual_tls,
              "connections_per_pod": args.connections_per_pod,
              "names": args.names, "floor_parts_us_per_pod": {k: round(v, 1) for k, v in parts_us.items()},
              "floor_ms_per_pod": round(sum(parts_us.values()) / 1000, 3)}
    print(json.dumps(result) if args.json else json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    from termination import stop_on_sigterm

    stop_on_sigterm()
    sys.exit(main())
