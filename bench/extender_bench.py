"""Extender benchmark against the in-process fake API server (500 nodes x 10 devices, nodeCacheCapable).

Measures, over real HTTP on loopback with kube-scheduler-shaped payloads:
- filter latency for a one-device claim over all 500 nodes (target p99 < 15 ms warm);
- the same for 5 requests tied by matchAttribute (target p99 < 60 ms);
- bind throughput for 2,500 pods (allocation + reservation + Binding written to the API server;
  target >= 200 binds/s);
- scheduling cycles as in the e2e benchmark: on the half-full cluster, pods one after the other
  filter a rotating window of 46% of the nodes (kube-scheduler's percentageOfNodesToScore for 500
  nodes), prioritize the feasible ones and bind the best in the background, until the cluster is
  nearly full; reported as wall time and this process's CPU time per pod (the fake API server runs
  in the same process, so its share is included);
- the bind conflict rate when pods race for the last devices: like kube-scheduler, the scheduling
  cycles (filter, prioritize, pick the best node) run one pod after the other while binds run in the
  background after --bind-delay-ms, so a pod may be sent to devices an earlier pod's bind is about to
  take (add --filter-holds-devices to measure the mode that prevents this).

    python bench/extender_bench.py --json
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "extender"))

import dra_objects as o  # noqa: E402

from allocator import FeatureGates  # noqa: E402
from extender.http.server import ExtenderServer  # noqa: E402
from extender.kube.client import KubeClient  # noqa: E402
from extender.kube.informer import ClusterWatcher  # noqa: E402
from extender.plugin.claimwriter import ClaimWriter  # noqa: E402
from extender.plugin.filtercache import FilterCache  # noqa: E402
from extender.plugin.scheduling import Scheduler  # noqa: E402
from extender.state.assume import AssumeCache  # noqa: E402
from extender.state.cache import ClusterCache  # noqa: E402
from extender.tuning import tune_gc_after_sync  # noqa: E402


def _fake_api_class() -> Any:
    # Only tests/support goes on sys.path: tests/ itself would shadow the allocator package.
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    from fakeapi import FakeApiServer

    return FakeApiServer


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def build_objects(
    nodes: int, devices: int, bind_pods: int, cycle_pods: int, race_pods: int
) -> list[dict[str, Any]]:
    objs = [o.device_class(expression=f'device.driver == "{o.DRIVER}"')]
    for index in range(nodes):
        objs += [o.node(f"node-{index}"), o.gpu_slice(f"node-{index}", devices)]
    five = [{"name": f"r{k}", "exactly": {"deviceClassName": o.CLASS}} for k in range(5)]
    objs += [
        o.claim("one-device"),
        o.pod("filter-one", ["one-device"]),
        o.claim("five-numa", requests=five, constraints=[{"matchAttribute": f"{o.DRIVER}/numa"}]),
        o.pod("filter-five", ["five-numa"]),
    ]
    for index in range(bind_pods):
        objs += [o.claim(f"bind-{index}"), o.pod(f"bind-{index}", [f"bind-{index}"])]
    for index in range(cycle_pods):
        objs += [o.claim(f"cycle-{index}"), o.pod(f"cycle-{index}", [f"cycle-{index}"])]
    for index in range(race_pods):
        objs += [o.claim(f"race-{index}"), o.pod(f"race-{index}", [f"race-{index}"])]
    return objs


class Bench:
    def __init__(
        self, url: str, cache: ClusterCache, scheduler: Scheduler, session: aiohttp.ClientSession
    ) -> None:
        self.url, self.cache, self.scheduler, self.session = url, cache, scheduler, session
        self.names = cache.node_names()

    async def call(self, verb: str, body: bytes) -> Any:
        async with self.session.post(
            f"{self.url}/{verb}", data=body, headers={"Content-Type": "application/json"}
        ) as response:
            if response.status != 200:
                raise RuntimeError(f"{verb}: HTTP {response.status}: {await response.text()}")
            return orjson.loads(await response.read())

    def args(self, pod_name: str, nodes: list[str] | None = None) -> bytes:
        pod = self.cache.pod("default", pod_name)
        return orjson.dumps(
            {"Pod": pod, "Nodes": None, "NodeNames": nodes if nodes is not None else self.names}
        )

    async def filter_latency(self, pod_name: str, iterations: int, warmup: int) -> tuple[list[float], float]:
        body = self.args(pod_name)
        longest_stall = 0.0
        running = True

        async def ticker() -> None:
            nonlocal longest_stall
            last = time.perf_counter()
            while running:
                await asyncio.sleep(0.001)
                now = time.perf_counter()
                longest_stall = max(longest_stall, now - last - 0.001)
                last = now

        for _ in range(warmup):
            result = await self.call("filter", body)
        expected = 1 if self.scheduler.hold_devices else len(self.names)
        if result["Error"] or len(result["NodeNames"]) != expected:
            raise RuntimeError(f"filter for {pod_name} did not pass every node: {str(result)[:300]}")
        task = asyncio.create_task(ticker())
        samples = []
        for _ in range(iterations):
            started = time.perf_counter()
            await self.call("filter", body)
            samples.append((time.perf_counter() - started) * 1000)
        running = False
        await task
        return samples, longest_stall * 1000

    async def bind_throughput(self, pods: int, devices: int, concurrency: int) -> tuple[float, int]:
        per_node = max(1, devices // 2)
        queue: asyncio.Queue[int] = asyncio.Queue()
        for index in range(pods):
            queue.put_nowait(index)
        failures = 0

        async def worker() -> None:
            nonlocal failures
            while not queue.empty():
                index = queue.get_nowait()
                pod = self.cache.pod("default", f"bind-{index}")
                node = self.names[(index // per_node) % len(self.names)]
                body = orjson.dumps(
                    {
                        "PodName": f"bind-{index}",
                        "PodNamespace": "default",
                        "PodUID": pod["metadata"]["uid"],
                        "Node": node,
                    }
                )
                if (await self.call("bind", body))["Error"]:
                    failures += 1

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return pods / (time.perf_counter() - started), failures

    async def bind_in_background(self, name: str, node: str, delay_s: float) -> bool:
        """Bind after `delay_s`, as kube-scheduler's binding cycle does; True if the bind failed."""
        await asyncio.sleep(delay_s)
        pod = self.cache.pod("default", name)
        body = orjson.dumps(
            {"PodName": name, "PodNamespace": "default", "PodUID": pod["metadata"]["uid"], "Node": node}
        )
        return bool((await self.call("bind", body))["Error"])

    async def best_node(self, name: str, nodes: list[str]) -> str | None:
        """One scheduling cycle: filter `nodes`, prioritize the feasible ones, pick the best."""
        feasible = (await self.call("filter", self.args(name, nodes)))["NodeNames"]
        if not feasible:
            return None
        scores = await self.call("prioritize", self.args(name, feasible)) if len(feasible) > 1 else []
        return max(scores, key=lambda entry: entry["Score"])["Host"] if scores else feasible[0]

    async def cycles(self, pods: int, bind_delay_s: float) -> tuple[float, float, int]:
        """Wall and CPU ms per pod of scheduling `pods` pods (0 for none), and how many found no node."""
        if pods == 0:
            return 0.0, 0.0, 0
        window = max(1, len(self.names) * max(5, 50 - len(self.names) // 125) // 100)
        start = unschedulable = 0
        binds: set[asyncio.Task[bool]] = set()
        wall, cpu = time.perf_counter(), time.process_time()
        for index in range(pods):
            nodes = [self.names[(start + k) % len(self.names)] for k in range(window)]
            start = (start + window) % len(self.names)
            best = await self.best_node(f"cycle-{index}", nodes)
            if best is None:
                unschedulable += 1
                continue
            task = asyncio.create_task(self.bind_in_background(f"cycle-{index}", best, bind_delay_s))
            binds.add(task)
            task.add_done_callback(binds.discard)
        await asyncio.gather(*binds)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        return wall * 1000 / pods, cpu * 1000 / pods, unschedulable

    async def race(self, pods: int, bind_delay_s: float) -> tuple[float, int, int]:
        """Scheduling cycles one after the other, binds in the background; returns the conflict rate."""
        attempts = conflicts = 0
        binds: set[asyncio.Task[None]] = set()
        pending = [f"race-{index}" for index in range(pods)]
        unschedulable = 0

        async def bind(name: str, node: str) -> None:
            nonlocal attempts, conflicts
            attempts += 1
            if await self.bind_in_background(name, node, bind_delay_s):
                conflicts += 1
                pending.append(name)  # kube-scheduler retries the pod

        while pending or binds:
            if not pending:
                await asyncio.wait(binds, return_when=asyncio.FIRST_COMPLETED)
                continue
            name = pending.pop(0)
            best = await self.best_node(name, self.names)
            if best is None:
                unschedulable += 1
                continue
            task = asyncio.create_task(bind(name, best))
            binds.add(task)
            task.add_done_callback(binds.discard)
            await asyncio.sleep(0)
        return (conflicts / attempts if attempts else 0.0), attempts, unschedulable


class GcPauses:
    """Longest garbage-collector pause, to tell GC stalls from the extender's own work."""

    def __init__(self) -> None:
        self.longest = 0.0
        self._started = 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.longest = max(self.longest, time.perf_counter() - self._started)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    gc_pauses = GcPauses()
    fake = _fake_api_class()(bookmark_interval_s=5.0)
    await fake.start()
    total = args.nodes * args.devices
    cycle_pods = args.cycle_pods if args.cycle_pods is not None else max(
        0, total // 2 - args.race_pods
    )
    fake.seed(build_objects(args.nodes, args.devices, args.bind_pods, cycle_pods, args.race_pods))
    client = KubeClient.for_url(fake.url)
    cache = ClusterCache(FeatureGates())
    watcher = ClusterWatcher(client, cache)
    await watcher.start()
    if not await watcher.wait_ready(120):
        raise RuntimeError("the cache did not sync from the fake API server")
    tune_gc_after_sync()  # as `dra-extender serve` does once the cache is synced
    assume = AssumeCache()
    assume.attach(cache)
    scheduler = Scheduler(
        cache,
        assume,
        ClaimWriter(client, cache),
        scoring="binpack",
        hold_devices=args.filter_holds_devices,
        filter_cache=None if args.no_filter_cache else FilterCache(cache, assume),
    )
    server = ExtenderServer(scheduler, watch_health=watcher.health)
    await server.start("127.0.0.1", 0, 0)
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64)) as session:
            bench = Bench(server.urls["extender"], cache, scheduler, session)
            one, stall_one = await bench.filter_latency("filter-one", args.iterations, args.warmup)
            five, stall_five = await bench.filter_latency("filter-five", args.iterations, args.warmup)
            if args.filter_holds_devices:
                scheduler.holds.release(cache.pod("default", "filter-one")["metadata"]["uid"])
                scheduler.holds.release(cache.pod("default", "filter-five")["metadata"]["uid"])
            binds_per_s, bind_failures = await bench.bind_throughput(
                args.bind_pods, args.devices, args.concurrency
            )
            cycle_ms, cycle_cpu_ms, cycle_unschedulable = await bench.cycles(
                cycle_pods, args.bind_delay_ms / 1000
            )
            # Fill the cluster until only `race_free` devices remain, then let the race pods compete.
            fill = max(0, total - args.bind_pods - (cycle_pods - cycle_unschedulable) - args.race_pods)
            await fill_cluster(fake, cache, fill, args.devices)
            conflict_rate, attempts, unschedulable = await bench.race(
                args.race_pods, args.bind_delay_ms / 1000
            )
    finally:
        await server.stop()
        await watcher.stop()
        await client.close()
        await fake.stop()
    return {
        "filter_one_device_p50_ms": round(statistics.median(one), 3),
        "filter_one_device_p99_ms": round(percentile(one, 0.99), 3),
        "filter_match_attribute_p50_ms": round(statistics.median(five), 3),
        "filter_match_attribute_p99_ms": round(percentile(five, 0.99), 3),
        "binds_per_s": round(binds_per_s, 1),
        "bind_conflict_rate": round(conflict_rate, 4),
        "cycle_wall_ms_per_pod": round(cycle_ms, 3),
        "cycle_cpu_ms_per_pod": round(cycle_cpu_ms, 3),
        "_details": {
            "cycle_pods": cycle_pods,
            "cycle_unschedulable": cycle_unschedulable,
            "longest_loop_stall_ms": round(max(stall_one, stall_five), 3),
            "longest_gc_pause_ms": round(gc_pauses.longest * 1000, 3),
            "bind_failures": bind_failures,
            "race_bind_attempts": attempts,
            "race_unschedulable": unschedulable,
            "filter_holds_devices": args.filter_holds_devices,
            "filter_cache": scheduler.describe_state()["filterCache"],
        },
    }


async def fill_cluster(fake: Any, cache: ClusterCache, devices: int, per_node: int) -> None:
    """Allocate `devices` more devices straight in the API server (other schedulers' pods), node by node."""
    used: dict[str, set[str]] = {}
    for claim in fake.objects("ResourceClaim"):
        for result in (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get(
            "results"
        ) or []:
            used.setdefault(result["pool"], set()).add(result["device"])
    fillers = []
    for node in cache.node_names():
        if devices <= 0:
            break
        free = [f"gpu-{i}" for i in range(per_node) if f"gpu-{i}" not in used.get(node, set())]
        take = free[:devices]
        if take:
            fillers.append(o.allocate(o.claim(f"filler-{node}"), node, take))
            devices -= len(take)
    fake.seed(fillers)
    for _ in range(3000):  # until the watch delivered every filler
        if all(
            (claim := cache.claim("default", f["metadata"]["name"])) is not None and claim.allocation
            for f in fillers
        ):
            return
        await asyncio.sleep(0.01)
    raise RuntimeError("the watch did not deliver the filler claims")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json", action="store_true", help="print only the result object")
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--devices", type=int, default=10, help="devices per node")
    parser.add_argument("--iterations", type=int, default=200, help="timed filter calls per scenario")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--bind-pods", type=int, default=2500)
    parser.add_argument("--concurrency", type=int, default=32, help="binds in flight")
    parser.add_argument(
        "--cycle-pods",
        type=int,
        help="pods in the scheduling-cycle scenario (default: half the devices minus --race-pods)",
    )
    parser.add_argument("--race-pods", type=int, default=100, help="pods racing for as many free devices")
    parser.add_argument(
        "--no-filter-cache", action="store_true", help="recompute every node on every filter (the cold path)"
    )
    parser.add_argument(
        "--bind-delay-ms",
        type=float,
        default=10.0,
        help="time from a pod's scheduling cycle to its bind call (kube-scheduler's Permit and PreBind "
        "of other plugins); default 10",
    )
    parser.add_argument(
        "--filter-holds-devices",
        action="store_true",
        help="measure the mode where filter holds the chosen node's devices until bind",
    )
    args = parser.parse_args()
    result = asyncio.run(run(args))
    details = result.pop("_details")
    if args.json:
        print(orjson.dumps(result).decode())
    else:
        print(orjson.dumps({**result, **details}, option=orjson.OPT_INDENT_2).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
