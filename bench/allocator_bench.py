"""Allocator speed on in-memory clusters (no API server), the way the scheduler's filter uses it.

Each workload builds an Inventory and AllocatedState once, then a "pass" creates an Allocator (one
per pod, as upstream does in PreFilter) and allocates the pod's claim on every node. Warm numbers:
one pass fills the caches (compiled selectors, CEL results, pool views), then the median of
--passes passes is reported.

    python bench/allocator_bench.py          # table with targets
    python bench/allocator_bench.py --json   # {"one_device": {"total_ms", "per_node_ms", ...}, ...}
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from allocator import (
    AllocatedState,
    Allocator,
    DeviceClass,
    FeatureGates,
    Inventory,
    Node,
    ResourceClaim,
    ResourceSlice,
)

DRIVER = "gpu.example.com"
CLASS_NAME = "gpu"
NODES = 500
DEVICES_PER_NODE = 10
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"


@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    target_ms: float | None
    nodes: list[Node]
    inventory: Inventory
    allocated: AllocatedState
    claims: list[ResourceClaim]


def node(name: str) -> Node:
    return Node.from_api(
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "uid": f"uid-{name}"}}
    )


def device_class() -> DeviceClass:
    return DeviceClass.from_api(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": CLASS_NAME, "uid": "uid-class"},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
        }
    )


def gpu_slice(node_name: str, devices: int, roots: int) -> ResourceSlice:
    per_root = max(1, devices // roots)
    return ResourceSlice.from_api(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node_name}-gpus", "uid": f"uid-{node_name}-gpus", "generation": 1},
            "spec": {
                "driver": DRIVER,
                "nodeName": node_name,
                "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
                "devices": [
                    {
                        "name": f"gpu-{i}",
                        "attributes": {
                            "model": {"string": "A100"},
                            "index": {"int": i},
                            PCIE_ROOT: {"string": f"pci0000:{i // per_root:02x}"},
                        },
                        "capacity": {"memory": {"value": "80Gi"}},
                    }
                    for i in range(devices)
                ],
            },
        }
    )


def claim(name: str, requests: int = 1, count: int = 1, *, match_root: bool = False) -> ResourceClaim:
    devices: dict[str, Any] = {
        "requests": [
            {
                "name": f"gpu-{r}",
                "exactly": {
                    "deviceClassName": CLASS_NAME,
                    "allocationMode": "ExactCount",
                    "count": count,
                    "selectors": [{"cel": {"expression": f'device.attributes["{DRIVER}"].model == "A100"'}}],
                },
            }
            for r in range(requests)
        ]
    }
    if match_root:
        devices["constraints"] = [{"matchAttribute": PCIE_ROOT}]
    return ResourceClaim.from_api(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "bench", "uid": f"uid-{name}"},
            "spec": {"devices": devices},
        }
    )


def holding(node_name: str, devices: range) -> ResourceClaim:
    """A claim that already holds the given devices of a node."""
    results = [{"request": "r", "driver": DRIVER, "pool": node_name, "device": f"gpu-{i}"} for i in devices]
    return ResourceClaim.from_api(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": f"held-{node_name}", "namespace": "bench", "uid": f"uid-held-{node_name}"},
            "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": CLASS_NAME}}]}},
            "status": {"allocation": {"devices": {"results": results}}},
        }
    )


def cluster(nodes: int, devices: int, roots: int = 1) -> tuple[list[Node], Inventory]:
    inventory = Inventory()
    inventory.upsert_class(device_class())
    names = [f"node-{i:03d}" for i in range(nodes)]
    for name in names:
        inventory.upsert_slice(gpu_slice(name, devices, roots))
    return [node(name) for name in names], inventory


def filled(nodes: list[Node], used_per_node: Callable[[int], int]) -> AllocatedState:
    state = AllocatedState()
    for index, n in enumerate(nodes):
        used = used_per_node(index)
        if used:
            state.add_claim(holding(n.name, range(used)))
    return state


def workloads(no_solution_devices: int) -> list[Workload]:
    nodes, inventory = cluster(NODES, DEVICES_PER_NODE, roots=2)
    total = NODES * DEVICES_PER_NODE
    # "full": every node is full except ten nodes with one free device: 4990 of 5000 in use.
    full = filled(nodes, lambda i: DEVICES_PER_NODE - 1 if i % (NODES // 10) == 0 else DEVICES_PER_NODE)
    half = filled(nodes, lambda i: DEVICES_PER_NODE // 2)
    assert total == 5000
    one_node, small = cluster(1, no_solution_devices)
    return [
        Workload(
            "one_device",
            "500 nodes x 10 devices, 1 claim of 1 device",
            25.0,
            nodes,
            inventory,
            AllocatedState(),
            [claim("one")],
        ),
        Workload(
            "match_attribute",
            "5 requests, matchAttribute on the PCIe root (2 roots/node)",
            100.0,
            nodes,
            inventory,
            AllocatedState(),
            [claim("five", requests=5, match_root=True)],
        ),
        Workload(
            "no_solution",
            f"{no_solution_devices + 1} single-device requests + matchAttribute, "
            f"{no_solution_devices} devices",
            50.0,
            one_node,
            small,
            AllocatedState(),
            [claim("too-many", requests=no_solution_devices + 1, match_root=True)],
        ),
        Workload(
            "half_full",
            "2500 of 5000 devices allocated, 1 claim of 1 device",
            None,
            nodes,
            inventory,
            half,
            [claim("one")],
        ),
        Workload(
            "full",
            "4990 of 5000 devices allocated, 1 claim of 1 device",
            None,
            nodes,
            inventory,
            full,
            [claim("one")],
        ),
    ]


def one_pass(workload: Workload, features: FeatureGates) -> tuple[float, int, int]:
    """Seconds for allocating the claims on every node, total steps, and how many nodes fit."""
    start = time.perf_counter()
    allocator = Allocator(workload.inventory, workload.allocated, features)
    steps = fits = 0
    for n in workload.nodes:
        outcome = allocator.allocate(n, workload.claims)
        steps += outcome.steps
        fits += outcome.success
    return time.perf_counter() - start, steps, fits


def measure(workload: Workload, passes: int, features: FeatureGates) -> dict[str, Any]:
    one_pass(workload, features)  # warm-up: fills the caches
    runs = [one_pass(workload, features) for _ in range(passes)]
    seconds = statistics.median(r[0] for r in runs)
    _, steps, fits = runs[0]
    return {
        "total_ms": round(seconds * 1000, 3),
        "per_node_ms": round(seconds * 1000 / len(workload.nodes), 4),
        "allocations_per_s": round(len(workload.nodes) / seconds, 1),
        "steps": steps,
        "_fits": fits,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--passes", type=int, default=7, help="measured passes per workload (median)")
    parser.add_argument("--no-solution-devices", type=int, default=12, metavar="N")
    args = parser.parse_args(argv)

    features = FeatureGates()
    results: dict[str, dict[str, Any]] = {}
    rows = []
    for workload in workloads(args.no_solution_devices):
        measured = measure(workload, args.passes, features)
        fits = measured.pop("_fits")
        results[workload.name] = measured
        rows.append((workload, measured, fits))

    if args.json:
        sys.stdout.write(orjson.dumps(results).decode() + "\n")
        return 0
    print(
        f"{'workload':<16} {'total ms':>10} {'target':>8} {'per node ms':>12} {'alloc/s':>10} {'steps':>8} "
        f"{'fit':>5}  description"
    )
    for workload, m, fits in rows:
        target = f"{workload.target_ms:g}" if workload.target_ms else "-"
        print(
            f"{workload.name:<16} {m['total_ms']:>10.2f} {target:>8} {m['per_node_ms']:>12.4f} "
            f"{m['allocations_per_s']:>10.0f} {m['steps']:>8} {fits:>5}  {workload.description}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
