"""Headroom (dra-extender headroom, the device map's panel, the /metrics gauge) on a large cluster: the
time to answer "how many more pods of this shape fit, and where" for N nodes x D devices, with some
devices already allocated and a few allocations in flight.

Shapes: one device; four devices sharing a NUMA node; and, with --partitions, one device on nodes
whose GPUs are also offered as halves drawing on shared counters (those nodes cannot be answered for
their twins: allocator/likeness.py).

Usage: python bench/headroom_bench.py [--nodes 5000] [--devices 8] [--repeats 5] [--partitions]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from allocator import FeatureGates
from extender.plugin.headroom import Headroom, class_shape
from extender.state.assume import AssumeCache
from extender.state.cache import ClusterCache

DRIVER = "gpu.example.com"


def objects(nodes: int, devices: int, *, partitions: bool) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                                  "metadata": {"name": "gpu"}, "spec": {}}]
    for n in range(nodes):
        name = f"node-{n:05d}"
        out.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "uid": f"n-{n}"}})
        pool = {"name": name, "generation": 1, "resourceSliceCount": 2 if partitions else 1}
        listed: list[dict[str, Any]] = []
        for d in range(devices):
            attributes = {"numa": {"int": d * 2 // devices}, "index": {"int": d}}
            if not partitions:
                listed.append({"name": f"gpu-{d}", "attributes": attributes})
                continue
            for part, share in (("", 2), ("-half-0", 1), ("-half-1", 1)):
                listed.append({"name": f"gpu-{d}{part}", "attributes": attributes, "consumesCounters": [
                    {"counterSet": f"gpu-{d}", "counters": {"memory": {"value": f"{40 * share}Gi"}}}]})
        out.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                    "metadata": {"name": f"{name}-devices", "uid": f"s-{n}"},
                    "spec": {"driver": DRIVER, "nodeName": name, "pool": pool, "devices": listed}})
        if partitions:
            out.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                        "metadata": {"name": f"{name}-counters", "uid": f"c-{n}"},
                        "spec": {"driver": DRIVER, "nodeName": name, "pool": pool, "sharedCounters": [
                            {"name": f"gpu-{d}", "counters": {"memory": {"value": "80Gi"}}}
                            for d in range(devices)]}})
        if n % 3 == 0:  # a third of the nodes run a pod with two devices
            out.append({
                "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                "metadata": {"name": f"c-{n}", "namespace": "default", "uid": f"c-{n}"},
                "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu",
                                                                              "count": 2}}]}},
                "status": {"allocation": {"devices": {"results": [
                    {"request": "gpu", "driver": DRIVER, "pool": name, "device": f"gpu-{d}"}
                    for d in (0, 1 + n % (devices - 1))]}},
                    "reservedFor": [{"resource": "pods", "name": f"p-{n}", "uid": f"p-{n}"}]},
            })
    return out


def in_flight(cache: ClusterCache, assume: AssumeCache, count: int) -> None:
    """`count` claims allocated at bind and not written yet, on the last nodes."""
    for index in range(count):
        node = cache.node_names()[-1 - index]
        raw = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
               "metadata": {"name": f"flying-{index}", "namespace": "default", "uid": f"flying-{index}"},
               "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}}}
        cache.apply("ResourceClaim", "ADDED", raw)
        claim = cache.claim("default", f"flying-{index}")
        assert claim is not None
        assume.reserve(claim, {"devices": {"results": [
            {"request": "gpu", "driver": DRIVER, "pool": node, "device": "gpu-7"}]}}, pod_uid=f"f-{index}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--partitions", action="store_true", help="GPUs also offered as halves (counters)")
    args = parser.parse_args()
    started = time.perf_counter()
    cache = ClusterCache.from_objects(objects(args.nodes, args.devices, partitions=args.partitions),
                                      FeatureGates())
    assume = AssumeCache()
    assume.attach(cache)
    in_flight(cache, assume, 10)
    built_s = time.perf_counter() - started
    headroom = Headroom(cache, assume)
    shapes = {"1 device": class_shape("gpu")}
    if not args.partitions:
        shapes["4 devices, same numa"] = class_shape("gpu", 4, match_attributes=[f"{DRIVER}/numa"])
    results: dict[str, Any] = {}
    for label, shape in shapes.items():
        times, report = [], {}
        for _ in range(args.repeats + 1):
            began = time.perf_counter()
            report = headroom.compute(shape)
            times.append(time.perf_counter() - began)
        # The first call of the run also works out every node's view of its pools, as serve does once
        # after its sync (extender/tuning.py); the others are what a scrape or a page costs.
        results[label] = {"first_s": round(times[0], 4), "median_s": round(statistics.median(times[1:]), 4),
                          "max_s": round(max(times[1:]), 4),
                          "pods": report["total"], "nodes_with_room": report["nodesWithRoom"],
                          "stranded": report["strandedByReason"]}
    print(orjson.dumps({"bench": "headroom", "nodes": args.nodes, "devices_per_node": args.devices,
                        "partitions": args.partitions, "cache_build_s": round(built_s, 2),
                        "shapes": results}).decode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
