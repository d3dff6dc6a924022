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
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from aiohttp import web

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import client_cpu_bench  # noqa: E402

from common.tls import build_context  # noqa: E402
from extender.eventloop import run as run_loop  # noqa: E402
from webhook import certs  # noqa: E402

HOST = "127.0.0.1"
# Written next to the serving files with --mutual-tls: the child then requires client certificates.
CLIENT_CERT, CLIENT_KEY = "client.crt", "client.key"
PAYLOADS = ROOT / "tests" / "extender" / "payloads"


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


async def _cpu(_: web.Request) -> web.Response:
    return web.Response(text=repr(time.process_time()))


async def serve_null(cert_dir: str) -> None:
    """The child process: the do-nothing HTTPS extender, until stdin closes; prints its port."""
    app = web.Application()
    app.router.add_post("/filter", _filter)
    app.router.add_post("/prioritize", _prioritize)
    app.router.add_post("/bind", _bind)
    app.router.add_get("/cpu", _cpu)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    client_ca = Path(cert_dir) / certs.CA_CERT_FILE
    context = build_context(str(Path(cert_dir) / certs.CERT_FILE), str(Path(cert_dir) / certs.KEY_FILE),
                            str(client_ca) if (Path(cert_dir) / CLIENT_CERT).exists() else None)
    site = web.TCPSite(runner, HOST, 0, ssl_context=context)
    await site.start()
    print(runner.addresses[0][1], flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await runner.cleanup()


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
    parser.add_argument("--serve-null", metavar="CERT_DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_null:
        run_loop(serve_null(args.serve_null))
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
    sys.exit(main())
