"""Device map (GET /debug/ui) on a large cluster: the time to build the map and render one page, and the
page size, for N nodes x D devices with a share of them allocated and some pods pending.

Usage: python bench/devicemap_bench.py [--json] [--nodes 5000] [--devices 8] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from allocator import FeatureGates
from extender.http.devicemap import DEFAULT_PER_PAGE, build_map, render_page, take_view
from extender.http.server import ExtenderServer
from extender.plugin.claimwriter import ClaimWriter
from extender.plugin.scheduling import Scheduler
from extender.state.assume import AssumeCache
from extender.state.cache import ClusterCache

DRIVER = "gpu.example.com"


def objects(nodes: int, devices: int) -> list[dict]:
    out: list[dict] = []
    for n in range(nodes):
        name = f"node-{n}"
        out.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "uid": f"n-{n}"}})
        out.append({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{name}-gpu", "uid": f"s-{n}"},
            "spec": {"driver": DRIVER, "nodeName": name,
                     "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": f"gpu-{d}"} for d in range(devices)]},
        })
        if n % 2 == 0:  # half the nodes have one allocated claim of two devices
            out.append({
                "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                "metadata": {"name": f"c-{n}", "namespace": "default", "uid": f"c-{n}"},
                "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu",
                                                                              "count": 2}}]}},
                "status": {"allocation": {"devices": {"results": [
                    {"request": "gpu", "driver": DRIVER, "pool": name, "device": f"gpu-{d}"}
                    for d in (0, 1)]}},
                    "reservedFor": [{"resource": "pods", "name": f"p-{n}", "uid": f"p-{n}"}]},
            })
    for p in range(nodes // 10):
        out.append({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": f"pending-{p}", "namespace": "default", "uid": f"pending-{p}"},
                    "spec": {"containers": [{"name": "c", "image": "x"}],
                             "resourceClaims": [{"name": "gpu", "resourceClaimName": f"want-{p}"}]}})
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object (the default output too)")
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    cache = ClusterCache.from_objects(objects(args.nodes, args.devices), FeatureGates())
    assume = AssumeCache()
    assume.attach(cache)
    server = ExtenderServer(Scheduler(cache, assume, ClaimWriter(None, cache)))
    build_s, render_s, size = [], [], 0
    for _ in range(args.repeats):
        started = time.perf_counter()
        device_map = build_map(take_view(server.cache, server.scheduler.in_flight()))
        built = time.perf_counter()
        page = render_page(device_map, page=1, per_page=DEFAULT_PER_PAGE, node_filter="")
        render_s.append(time.perf_counter() - built)
        build_s.append(built - started)
        size = len(page.encode())
    print(orjson.dumps({
        "nodes": args.nodes, "devicesPerNode": args.devices, "perPage": DEFAULT_PER_PAGE,
        "buildMedianMs": round(statistics.median(build_s) * 1000, 2),
        "renderMedianMs": round(statistics.median(render_s) * 1000, 2),
        "pageBytes": size, "devices": sum(device_map.totals.values()), "pending": len(device_map.pending),
    }).decode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
