"""API encodings and initial-sync strategies against the real kube-apiserver, on both sides' CPU.

Starts etcd and the v1.37.1 kube-apiserver of tests/e2e (built by build_control_plane.py) with
`CBORServingAndStorage` on (alpha and off by default in 1.37.1, so a cluster serves CBOR only when its
operator turned the gate on), fills it with the scale bench's shapes (per node one ResourceSlice of
`--devices` devices and 4 pods, each with a ResourceClaim), then measures:

- ``list``: one GET of each collection as JSON and as CBOR: bytes on the wire, wall time of the
  request, our decode CPU (orjson; cbor2's C decoder plus turning the byte strings kube-apiserver
  writes for every Go string and field name into str, which our code needs), kube-apiserver's CPU
  (``/proc/PID/stat``). Median of ``--repeats``.
- ``watch_initial``: the same objects as a watch stream's initial events (``sendInitialEvents=true``,
  ``resourceVersionMatch=NotOlderThan``, the WatchList protocol), as JSON and as CBOR: kube-apiserver
  encodes each event on its own, as for every watch event.
- ``write``: ``--writes`` ResourceClaim creates, with a JSON and with a CBOR body: kube-apiserver's CPU
  and ours (encoding), per write.
- ``sync``: in a fresh child process each, the real `ClusterWatcher` + `ClusterCache` syncing every
  kind as serve does, three ways: one list per kind (what serve does), pages of ``--page-size`` (limit
  and continue), and WatchList; time to ready, the child's peak RSS (VmHWM) and RSS once synced.

The machine is shared: CPU and wall times are noisy (compare the rows of one run, not runs); memory is
not. Needs the control-plane binaries (built if missing) and, for the CBOR rows, the cbor2 package
(``pip install cbor2``; without it they are skipped and the output says so).

    python bench/api_encoding_bench.py --nodes 200 --json          # a quick run
    python bench/api_encoding_bench.py --nodes 5000 --json         # the scale bench's size
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import io
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
import urllib3

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
sys.path.insert(0, str(ROOT / "tests" / "extender"))

import build_control_plane  # noqa: E402
import dra_objects as o  # noqa: E402
from e2e_cluster import ControlPlane  # noqa: E402

try:
    import cbor2
except ImportError:   # the CBOR rows are skipped
    cbor2 = None
# What cbor2 makes of a map inside a tagged item (every object in a watch event is tagged).
FROZEN_DICT: Any = getattr(cbor2, "frozendict", dict)

JSON = "application/json"
CBOR = "application/cbor"
RESOURCE = "/apis/resource.k8s.io/v1"
COLLECTIONS = {"Pod": "/api/v1/pods", "ResourceSlice": f"{RESOURCE}/resourceslices",
               "ResourceClaim": f"{RESOURCE}/resourceclaims"}
PODS_PER_NODE = 4
CREATE_WORKERS = 8
INITIAL_EVENTS_END = "k8s.io/initial-events-end"
SELF_DESCRIBED = b"\xd9\xd9\xf7"   # tag 55799, which starts every object kube-apiserver encodes


# ---- CBOR as kube-apiserver writes it ---------------------------------------------------------

def cbor_to_json_types(value: Any) -> Any:
    """kube-apiserver encodes Go strings and struct field names as CBOR byte strings (cheap for Go:
    no UTF-8 check on the way out); the values our code reads are str. cbor2 gives bytes: convert."""
    kind = value.__class__
    if kind is dict or kind is FROZEN_DICT:
        return {key.decode() if key.__class__ is bytes else key: cbor_to_json_types(item)
                for key, item in value.items()}
    if kind is list or kind is tuple:
        return [cbor_to_json_types(item) for item in value]
    if kind is bytes:
        return value.decode()
    return value


def without_self_description(data: bytes | memoryview) -> bytes | memoryview:
    """The item after kube-apiserver's self-described CBOR tag (55799). cbor2 decodes a tagged item as
    immutable containers (frozendict, tuple), which our cache cannot take."""
    return data[len(SELF_DESCRIBED):] if data[:len(SELF_DESCRIBED)] == SELF_DESCRIBED else data


def decode_cbor(data: bytes) -> Any:
    return cbor_to_json_types(cbor2.loads(without_self_description(data)))


def cbor_items(data: bytes) -> Iterator[Any]:
    """The data items of a CBOR sequence (a watch stream: one event map after another)."""
    stream = io.BytesIO(data)
    decoder = cbor2.CBORDecoder(stream)
    while stream.tell() < len(data):
        yield decoder.decode()


# ---- the control plane ------------------------------------------------------------------------

class Apiserver:
    """etcd + kube-apiserver only, with CBOR served; requests as the admin user."""

    def __init__(self, work: Path) -> None:
        self.plane = ControlPlane(build_control_plane.ensure_built(), work, webhooks=False, extra_args={
            "kube-apiserver": ["--feature-gates=CBORServingAndStorage=true"]})
        self.plane._write_pki()
        self.plane._start_etcd()
        self.plane._start_apiserver()
        self.http = urllib3.PoolManager(
            maxsize=CREATE_WORKERS, cert_reqs="CERT_REQUIRED", ca_certs=str(self.plane.ca_file),
            cert_file=str(self.plane.admin.cert_file), key_file=str(self.plane.admin.key_file),
            timeout=urllib3.Timeout(connect=5, read=600), retries=False)

    @property
    def server(self) -> str:
        return self.plane.server

    def cpu_s(self) -> float:
        process = self.plane.components["kube-apiserver"].process
        assert process is not None
        fields = Path(f"/proc/{process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def request(self, method: str, path: str, *, accept: str = JSON, body: bytes | None = None,
                content_type: str = JSON, **query: str) -> bytes:
        response = self.http.request(method, self.server + path, fields=query or None, body=body,
                                     headers={"Accept": accept, "Content-Type": content_type})
        if response.status >= 300:
            raise RuntimeError(f"{method} {path}: {response.status}: {response.data[:300]!r}")
        return response.data

    def stop(self) -> None:
        self.http.clear()
        self.plane.stop()


def fill(api: Apiserver, nodes: int, devices: int) -> dict[str, int]:
    """The scale bench's cluster: per node a slice, and 4 pods each with its own claim."""
    def strip(raw: dict[str, Any]) -> bytes:
        meta = {key: value for key, value in raw["metadata"].items() if key not in ("uid", "resourceVersion")}
        return orjson.dumps({**raw, "metadata": meta})

    api.request("POST", f"{RESOURCE}/deviceclasses", body=strip(o.device_class()))

    def create_node(index: int) -> None:
        name = f"node-{index}"
        api.request("POST", f"{RESOURCE}/resourceslices", body=strip(o.gpu_slice(name, devices)))
        for slot in range(PODS_PER_NODE):
            pod_name = f"{name}-pod-{slot}"
            api.request("POST", "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims",
                        body=strip(o.claim(pod_name)))
            api.request("POST", "/api/v1/namespaces/default/pods", body=strip(o.pod(pod_name, [pod_name])))

    with ThreadPoolExecutor(CREATE_WORKERS) as pool:
        list(pool.map(create_node, range(nodes)))
    return {"ResourceSlice": nodes, "Pod": nodes * PODS_PER_NODE, "ResourceClaim": nodes * PODS_PER_NODE}


# ---- measurements -----------------------------------------------------------------------------

def measured(api: Apiserver, fetch: Callable[[], bytes], decode: Callable[[bytes], int],
             repeats: int) -> dict[str, float]:
    """Median over `repeats` of: bytes, wall ms of the request, our decode CPU ms, kube-apiserver CPU ms."""
    rows: list[tuple[int, float, float, float]] = []
    for _ in range(repeats):
        gc.collect()
        cpu_before, started = api.cpu_s(), time.perf_counter()
        data = fetch()
        wall = time.perf_counter() - started
        apiserver_cpu = api.cpu_s() - cpu_before
        decode_started = time.process_time()
        decode(data)
        rows.append((len(data), wall * 1000, (time.process_time() - decode_started) * 1000,
                     apiserver_cpu * 1000))
        del data
    return {"bytes": rows[0][0],
            "request_wall_ms": round(statistics.median(row[1] for row in rows), 1),
            "client_decode_cpu_ms": round(statistics.median(row[2] for row in rows), 1),
            "apiserver_cpu_ms": round(statistics.median(row[3] for row in rows), 1)}


def list_decoder(encoding: str) -> Callable[[bytes], int]:
    def decode(data: bytes) -> int:
        listing = orjson.loads(data) if encoding == JSON else decode_cbor(data)
        return len(listing["items"])
    return decode


def watch_decoder(encoding: str) -> Callable[[bytes], int]:
    def decode(data: bytes) -> int:
        if encoding == JSON:
            events = [orjson.loads(line) for line in data.splitlines() if line]
        else:
            events = [cbor_to_json_types(event) for event in cbor_items(data)]
        return sum(1 for event in events if event["type"] == "ADDED")
    return decode


def initial_events(api: Apiserver, path: str, encoding: str) -> bytes:
    """A WatchList stream read up to its initial-events-end bookmark (the connection is then dropped)."""
    response = api.http.request(
        "GET", api.server + path, preload_content=False, headers={"Accept": encoding},
        fields={"watch": "true", "sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan",
                "allowWatchBookmarks": "true", "timeoutSeconds": "600"})
    if response.status >= 300:
        raise RuntimeError(f"watch {path}: {response.status}: {response.read()[:300]!r}")
    data = bytearray()
    try:
        for chunk in response.stream(1 << 16):
            data += chunk
            # Only the bookmark that ends the initial events comes before the live ones (none here).
            if b"BOOKMARK" in data and complete(bytes(data), encoding):
                return bytes(data)
    finally:
        response.release_conn()
    raise RuntimeError(f"watch {path} ended before its initial events did")


def complete(data: bytes, encoding: str) -> bool:
    """Whether `data` ends at the end of an event."""
    if encoding == JSON:
        return data.endswith(b"\n")
    try:
        for _ in cbor_items(data):
            pass
    except cbor2.CBORDecodeEOF:
        return False
    return True


def write_rows(api: Apiserver, encoding: str, writes: int, tag: str) -> dict[str, float]:
    """`writes` ResourceClaim creates, bodies in `encoding`: per-write CPU of both sides."""
    bodies = []
    encode_started = time.process_time()
    for index in range(writes):
        raw = o.claim(f"write-{tag}-{index}")
        raw["metadata"] = {"name": raw["metadata"]["name"], "namespace": "default"}
        bodies.append(orjson.dumps(raw) if encoding == JSON else cbor2.dumps(raw))
    encode_ms = (time.process_time() - encode_started) * 1000
    cpu_before, started = api.cpu_s(), time.perf_counter()
    with ThreadPoolExecutor(CREATE_WORKERS) as pool:
        list(pool.map(lambda body: api.request(
            "POST", f"{RESOURCE}/namespaces/default/resourceclaims", body=body, content_type=encoding,
            accept=encoding), bodies))
    wall = time.perf_counter() - started
    apiserver_ms = (api.cpu_s() - cpu_before) * 1000
    return {"writes": writes, "wall_ms_per_write": round(wall * 1000 / writes, 2),
            "apiserver_cpu_ms_per_write": round(apiserver_ms / writes, 3),
            "client_encode_cpu_ms_per_write": round(encode_ms / writes, 4)}


def encodings() -> list[str]:
    return [JSON, CBOR] if cbor2 is not None else [JSON]


def measure_encodings(api: Apiserver, args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"list": {}, "watch_initial": {}, "write": {}}
    for kind, path in COLLECTIONS.items():
        for encoding in encodings():
            name = encoding.split("/")[1]
            out["list"].setdefault(kind, {})[name] = measured(
                api, lambda path=path, encoding=encoding: api.request("GET", path, accept=encoding),
                list_decoder(encoding), args.repeats)
            out["watch_initial"].setdefault(kind, {})[name] = measured(
                api, lambda path=path, encoding=encoding: initial_events(api, path, encoding),
                watch_decoder(encoding), args.repeats)
    for encoding in encodings():
        name = encoding.split("/")[1]
        out["write"][name] = write_rows(api, encoding, args.writes, name)
    return out


# ---- sync strategies, each in a fresh child process -------------------------------------------

def sync_child(kubeconfig: str, strategy: str, page_size: int) -> None:
    """Child: sync a ClusterCache with `strategy`; print time to ready, VmHWM and RSS as JSON."""
    import ctypes

    from allocator import FeatureGates
    from extender.kube.client import KubeClient
    from extender.kube.informer import ClusterWatcher, ListStrategy
    from extender.state.cache import ClusterCache

    async def main() -> dict[str, Any]:
        client = await KubeClient.connect(kubeconfig=kubeconfig)
        cache = ClusterCache(FeatureGates())
        watcher = ClusterWatcher(client, cache, list_strategy=ListStrategy(strategy, page_size))
        started = time.perf_counter()
        await watcher.start()
        if not await watcher.wait_ready(600):
            raise RuntimeError("not synced")
        ready_s = time.perf_counter() - started
        gc.collect()
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
        await watcher.stop()
        await client.close()
        return {"ready_s": round(ready_s, 2),
                "peak_rss_mb": round(int(status["VmHWM"].split()[0]) / 1024, 1),
                "rss_mb_synced": round(int(status["VmRSS"].split()[0]) / 1024, 1),
                "objects": cache.stats()["objects"]}

    print(orjson.dumps(asyncio.run(main())).decode())


def measure_sync(api: Apiserver, args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for strategy in ("list", "paged", "watchlist"):
        rows = []
        for _ in range(args.repeats):
            child = subprocess.run(
                [sys.executable, __file__, "--sync-child", strategy, "--kubeconfig",
                 str(api.plane.admin.kubeconfig), "--page-size", str(args.page_size)],
                capture_output=True, text=True, check=False, env={**os.environ, "PYTHONPATH": str(ROOT)})
            if child.returncode != 0:
                raise RuntimeError(f"sync child {strategy} failed: {child.stderr[-2000:]}")
            rows.append(orjson.loads(child.stdout.strip().splitlines()[-1]))
        out[strategy] = {
            "ready_s": statistics.median(row["ready_s"] for row in rows),
            "peak_rss_mb": statistics.median(row["peak_rss_mb"] for row in rows),
            "rss_mb_synced": statistics.median(row["rss_mb_synced"] for row in rows),
            "objects": rows[0]["objects"],
        }
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--writes", type=int, default=500)
    parser.add_argument("--page-size", type=int, default=500)
    parser.add_argument("--skip-sync", action="store_true", help="only the encoding rows")
    parser.add_argument("--json", action="store_true", help="print JSON only")
    parser.add_argument("--sync-child", help=argparse.SUPPRESS)
    parser.add_argument("--kubeconfig", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.sync_child:
        sync_child(args.kubeconfig, args.sync_child, args.page_size)
        return 0
    if args.nodes < 1 or args.repeats < 1 or args.writes < 1 or args.page_size < 1:
        parser.error("--nodes, --repeats, --writes and --page-size must be positive")
    with tempfile.TemporaryDirectory(prefix="api-encoding-") as tmp:
        api = Apiserver(Path(tmp))
        try:
            started = time.perf_counter()
            counts = fill(api, args.nodes, args.devices)
            result: dict[str, Any] = {
                "nodes": args.nodes, "devices_per_node": args.devices, "objects": counts,
                "fill_s": round(time.perf_counter() - started, 1),
                "cbor": "measured" if cbor2 is not None else "skipped: cbor2 is not installed",
                "cpus": os.cpu_count(), "load_average_1m": round(os.getloadavg()[0], 1),
            }
            result.update(measure_encodings(api, args))
            if not args.skip_sync:
                result["sync"] = measure_sync(api, args)
        finally:
            api.stop()
    print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
    if not args.json:
        print("timings are from a shared machine: compare rows of one run", file=sys.stderr)
    return 0


if __name__ == "__main__":
    from termination import stop_on_sigterm

    stop_on_sigterm()
    sys.exit(main())
