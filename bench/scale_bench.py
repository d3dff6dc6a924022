"""Scale benchmark: a large cluster served through a real list+watch, measured as an operator sees it.

The cluster (default 5,000 nodes x 8 devices, 4 pods per node of which half hold an allocated
one-device claim and half are pending with an unallocated one) lives in the in-process fake API
server of the tests, run in a child process so that its copies of the objects do not count. A real
`dra-extender serve` process lists and watches it; this process measures that server from outside:

- ``ready_s``: from starting the server until ``/readyz`` answers 200 (list of every kind, cache
  built); ``ready_cpu_ms`` the server's CPU time until then (its start-up included);
- ``settle_s``: from ready until the server is idle (under 3% of a core in two 1-second windows in a
  row: the node views warmed in the background are built), which the figures below wait for;
- ``rss_mb_after_sync`` / ``rss_mb_after_cycles`` / ``peak_rss_mb``: the server's resident memory
  (``/proc/PID/status``) once settled, after the scheduling cycles, and its high-water mark;
- ``cold_full_filter_ms`` / ``warm_full_filter_ms``: a filter over every node for a claim shape the
  server has not seen yet, then the same filter again (median of ``--warm-repeats``);
- ``cold_window_filter_ms`` / ``warm_window_filter_ms``: the same over kube-scheduler's window, the
  number of feasible nodes it looks for before calling extenders (``percentageOfNodesToScore``'s
  adaptive default for the cluster's size: 50% minus 1% per 125 nodes, at least 5% and 100 nodes);
- ``cycle_ms_per_pod``: ``--cycles`` scheduling cycles as kube-scheduler drives them (filter a
  rotating window, prioritize the feasible nodes, bind the best one);
- ``*_cpu_ms``: the same figures as the server's CPU time (user + system, ``/proc/PID/stat``), which
  other processes on a busy machine disturb less than wall time;
- ``longest_stall_ms``: the slowest ``/healthz`` answer while a third claim shape is filtered cold over
  every node and then used for scheduling cycles (a probe every 2 ms): how long the server's event
  loop let other requests wait, plus one round trip;
- ``relist_s`` / ``relist_longest_stall_ms``: the fake API server ends every watch and forgets its
  history (a compaction), so the server lists every kind again, while filters over the window keep
  coming: how long until every kind was listed again, and the slowest ``/healthz`` answer meanwhile;
- ``bytes_per_object``: the deep size of one cached object of each kind, measured in this process by
  syncing a ClusterCache through the same ClusterWatcher from the same fake API server.

    python bench/scale_bench.py --json --nodes 5000
    python bench/scale_bench.py --json --curve 500,5000,20000   # one object per size, and the growth
    python bench/scale_bench.py --nodes 20000 --controllers taint-eviction,driver-loss   # with them

Where the memory and the time go, in this process (the same watcher, cache and scheduler as serve):

    python bench/scale_bench.py --nodes 5000 --profile-memory   # tracemalloc, top lines after sync
    python bench/scale_bench.py --nodes 5000 --profile-cpu      # cProfile of sync, a cold filter, cycles
    python bench/scale_bench.py --nodes 20000 --profile-relist  # the event loop's steps in a re-list, CPU ms
    python bench/scale_bench.py --nodes 20000 --profile-controllers  # the same for the controllers' seed
                                                                     # and a whole-driver DeviceTaintRule
"""

from __future__ import annotations

import argparse
import asyncio
import compileall
import contextlib
import dataclasses
import gc
import importlib.util
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import yaml

ROOT = Path(__file__).resolve().parents[1]
# After PYTHONPATH, so that `PYTHONPATH=<checkout>` profiles (and sizes) that checkout's code here too,
# as it does for the served process.
sys.path.append(str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "extender"))
sys.path.insert(0, str(ROOT / "tests" / "support"))

import dra_objects as o  # noqa: E402

PODS_PER_NODE = 4   # 5,000 nodes -> 20,000 pods, 10,000 of them holding an allocated claim


def window_size(nodes: int) -> int:
    """How many feasible nodes kube-scheduler looks for before it calls extenders (adaptive default)."""
    percentage = max(5, 50 - nodes // 125)
    return min(nodes, max(100, nodes * percentage // 100))


def build_cluster(nodes: int, devices: int, probes: int, cycles: int) -> list[dict[str, Any]]:
    """Nodes with one slice each; per node, half the pods run holding a claim, half are pending."""
    objs: list[dict[str, Any]] = [o.device_class()]
    pending = 0
    for index in range(nodes):
        name = f"node-{index}"
        objs += [o.node(name), o.gpu_slice(name, devices)]
        for slot in range(PODS_PER_NODE):
            pod_name = f"{name}-pod-{slot}"
            pod = o.pod(pod_name, [pod_name])
            claim = o.claim(pod_name)
            if slot < PODS_PER_NODE // 2:
                o.allocate(claim, name, [f"gpu-{slot}"], reserved_for=[
                    {"resource": "pods", "name": pod_name, "uid": pod["metadata"]["uid"]}])
                pod["spec"]["nodeName"] = name
                pod["status"] = {"phase": "Running", "qosClass": "BestEffort"}
            else:
                pending += 1
            objs += [pod, claim]
    # Probe pods: each claim shape the server has not seen yet, for cold filters.
    for index in range(probes):
        name = f"probe-{index}"
        objs += [o.claim(name, count=1 + index % 3), o.pod(name, [name])]
    for index in range(cycles):
        name = f"cycle-{index}"
        objs += [o.claim(name), o.pod(name, [name])]
    return objs


# ---- the fake API server, in a child process --------------------------------------------------

def serve_fake_api(nodes: int, devices: int, probes: int, cycles: int) -> None:
    """Child process: seed the fake API server, print its URL, serve until stdin closes."""
    from fakeapi import FakeApiServer

    async def main() -> None:
        fake = FakeApiServer(bookmark_interval_s=5.0)
        fake.seed(build_cluster(nodes, devices, probes, cycles))
        url = await fake.start()
        print(url, flush=True)
        loop = asyncio.get_running_loop()
        # One command a line ("relist"), until stdin closes.
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            if line.strip() == "relist":
                fake.force_relist()
        await fake.stop()

    asyncio.run(main())


@dataclasses.dataclass
class FakeApi:
    url: str
    child: subprocess.Popen[str]

    def relist(self) -> None:
        """Have every watcher of the fake API server list its kind again (see FakeApiServer.force_relist)."""
        assert self.child.stdin is not None
        self.child.stdin.write("relist\n")
        self.child.stdin.flush()


@contextlib.contextmanager
def fake_api_process(args: argparse.Namespace, nodes: int) -> Iterator[FakeApi]:
    child = subprocess.Popen(
        [sys.executable, __file__, "--fake-api-child", "--nodes", str(nodes), "--devices", str(args.devices),
         "--probes", str(args.probes), "--cycles", str(args.cycles + args.stall_cycles)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert child.stdout is not None
        url = child.stdout.readline().strip()
        if not url.startswith("http"):
            raise RuntimeError(f"the fake API server did not start (printed {url!r})")
        yield FakeApi(url, child)
    finally:
        if child.stdin is not None:
            child.stdin.close()
        try:
            child.wait(30)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


# ---- the server under test --------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def write_kubeconfig(directory: Path, url: str) -> Path:
    path = directory / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": url}}],
        "users": [{"name": "bench", "user": {"token": "bench"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "bench"}}],
    }))
    return path


def memory_mb(pid: int) -> dict[str, float]:
    """Resident and high-water memory of `pid`, in MiB, from /proc (Linux)."""
    values: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0]) / 1024
    return values


def cpu_ms(pid: int) -> float:
    """CPU time (user + system) `pid` has used so far, in ms, from /proc (Linux)."""
    # The command name (field 2) may hold spaces: the fields after it start after its ')'.
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


async def wait_idle(pid: int, *, every_s: float = 1.0, busy_share: float = 0.03, quiet_windows: int = 2,
                    limit_s: float = 180.0) -> float:
    """Wait until `pid` has used less than `busy_share` of a core in each of `quiet_windows` windows of
    `every_s` in a row; returns how long it took. (On a loaded machine a busy process still gets a
    share of a core well above that, so a pause for want of CPU does not pass for idle.)"""
    started = time.perf_counter()
    before, quiet = cpu_ms(pid), 0
    while time.perf_counter() - started < limit_s and quiet < quiet_windows:
        await asyncio.sleep(every_s)
        now = cpu_ms(pid)
        quiet = quiet + 1 if now - before < busy_share * every_s * 1000 else 0
        before = now
    return time.perf_counter() - started


class StallProbe:
    """Asks `url` (/healthz) every PROBE_EVERY_S while running; `longest_ms` is the slowest answer."""

    PROBE_EVERY_S = 0.002

    def __init__(self, session: aiohttp.ClientSession, url: str) -> None:
        self.session = session
        self.url = url
        self.longest_ms = 0.0
        self.probes = 0
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            started = time.perf_counter()
            async with self.session.get(self.url) as response:
                await response.read()
            self.longest_ms = max(self.longest_ms, (time.perf_counter() - started) * 1000)
            self.probes += 1
            await asyncio.sleep(self.PROBE_EVERY_S)

    async def __aenter__(self) -> StallProbe:
        self._task = asyncio.create_task(self._run())
        await asyncio.sleep(0)
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


SERVER_PACKAGES = ("allocator", "common", "extender", "webhook")


def byte_compile_server() -> None:
    """The server's own modules compiled ahead, as the image's `pip install` compiles them. This tree is
    installed editable, and with PYTHONDONTWRITEBYTECODE set (the image sets it too) no start ever
    writes them: every start would then compile the source again, about 0.45 s of CPU on the 2 GHz
    bench machine that `ready_s` and `ready_cpu_ms` would count and a deployed server does not pay.
    The tree compiled is the one the server imports (PYTHONPATH's, as here), into its __pycache__
    directories (git ignores them); a tree that cannot be written just keeps compiling at start."""
    for package in SERVER_PACKAGES:
        spec = importlib.util.find_spec(package)
        for location in (spec.submodule_search_locations or []) if spec is not None else []:
            compileall.compile_dir(location, quiet=2)


def serve_command() -> list[str]:
    script = Path(sys.executable).with_name("dra-extender")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from extender.cli import main; sys.exit(main())"]


async def wait_ready(session: aiohttp.ClientSession, url: str, server: subprocess.Popen[bytes],
                     timeout_s: float) -> float:
    started = time.perf_counter()
    while time.perf_counter() - started < timeout_s:
        if server.poll() is not None:
            raise RuntimeError(f"dra-extender serve exited with {server.returncode} before it was ready")
        with contextlib.suppress(aiohttp.ClientError):
            async with session.get(url) as response:
                if response.status == 200:
                    return time.perf_counter() - started
        await asyncio.sleep(0.05)
    raise RuntimeError(f"dra-extender serve was not ready after {timeout_s} s")


class Extender:
    """kube-scheduler's side of the conversation: nodeCacheCapable filter, prioritize, bind."""

    def __init__(self, session: aiohttp.ClientSession, base: str, pods: dict[str, dict[str, Any]]) -> None:
        self.session = session
        self.base = base
        self.pods = pods

    async def call(self, verb: str, body: dict[str, Any]) -> tuple[Any, float]:
        started = time.perf_counter()
        async with self.session.post(f"{self.base}/scheduler/{verb}", data=orjson.dumps(body),
                                     headers={"Content-Type": "application/json"}) as response:
            text = await response.read()
        elapsed = (time.perf_counter() - started) * 1000
        if response.status != 200:
            raise RuntimeError(f"{verb} answered {response.status}: {text[:300]!r}")
        return orjson.loads(text), elapsed

    async def filter(self, pod: str, nodes: list[str]) -> tuple[list[str], float]:
        answer, elapsed = await self.call("filter", {"Pod": self.pods[pod], "NodeNames": nodes})
        if answer.get("Error"):
            raise RuntimeError(f"filter for {pod}: {answer['Error']}")
        return answer.get("NodeNames") or [], elapsed

    async def cycle(self, pod: str, window: list[str]) -> bool:
        feasible, _ = await self.filter(pod, window)
        if not feasible:
            return False
        scores, _ = await self.call("prioritize", {"Pod": self.pods[pod], "NodeNames": feasible})
        best = max(scores, key=lambda entry: entry["Score"])["Host"] if scores else feasible[0]
        meta = self.pods[pod]["metadata"]
        answer, _ = await self.call("bind", {"PodName": meta["name"], "PodNamespace": meta["namespace"],
                                             "PodUID": meta["uid"], "Node": best})
        return not answer.get("Error")


async def measure_server(args: argparse.Namespace, nodes: int, fake: FakeApi) -> dict[str, Any]:
    url = fake.url
    cluster = build_cluster(nodes, args.devices, args.probes, args.cycles + args.stall_cycles)
    pods = {obj["metadata"]["name"]: obj for obj in cluster
            if obj["kind"] == "Pod" and obj["metadata"]["name"].startswith(("probe-", "cycle-"))}
    names = [f"node-{index}" for index in range(nodes)]
    window = window_size(nodes)
    extender_port, debug_port = free_port(), free_port()
    byte_compile_server()
    with tempfile.TemporaryDirectory() as tmp:
        command = [*serve_command(), "serve", "--kubeconfig", str(write_kubeconfig(Path(tmp), url)),
                   "--extender-port", str(extender_port), "--debug-port", str(debug_port),
                   "--log-level", "warning"]
        if args.controllers:
            command += ["--controllers", args.controllers]
        server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as session:
                ready_s = await wait_ready(session, f"http://127.0.0.1:{debug_port}/readyz", server,
                                           args.ready_timeout)
                ready_cpu = cpu_ms(server.pid)
                # Let the post-sync work settle (GC tuning, the banner, the node views warmed in the
                # background): on a busy machine that takes longer than any fixed pause.
                settle_s = await wait_idle(server.pid)
                after_sync = memory_mb(server.pid)
                ext = Extender(session, f"http://127.0.0.1:{extender_port}", pods)
                cpu_before = cpu_ms(server.pid)
                cold_full = (await ext.filter("probe-0", names))[1]
                cold_full_cpu = cpu_ms(server.pid) - cpu_before
                cpu_before = cpu_ms(server.pid)
                warm_full = statistics.median(
                    [(await ext.filter("probe-0", names))[1] for _ in range(args.warm_repeats)])
                warm_full_cpu = (cpu_ms(server.pid) - cpu_before) / max(1, args.warm_repeats)
                cold_window = (await ext.filter("probe-1", names[:window]))[1]
                warm_window = statistics.median(
                    [(await ext.filter("probe-1", names[:window]))[1] for _ in range(args.warm_repeats)])
                cycled = args.cycles
                cpu_before = cpu_ms(server.pid)
                started = time.perf_counter()
                bound = 0
                for index in range(cycled):
                    start = (index * window) % nodes
                    rotated = (names[start:] + names[:start])[:window]
                    bound += await ext.cycle(f"cycle-{index}", rotated)
                cycle_ms = (time.perf_counter() - started) * 1000 / max(1, cycled)
                cycle_cpu = (cpu_ms(server.pid) - cpu_before) / max(1, cycled)
                after_cycles = memory_mb(server.pid)
                # Last, so that the probes disturb none of the figures above.
                async with StallProbe(session, f"http://127.0.0.1:{debug_port}/healthz") as probe:
                    stall_filter = (await ext.filter("probe-2", names))[1]
                    for index in range(cycled, cycled + args.stall_cycles):
                        await ext.cycle(f"cycle-{index}", names[:window])
                relist = await measure_relist(session, f"http://127.0.0.1:{debug_port}", ext, fake,
                                              names[:window])
        finally:
            server.terminate()
            try:
                _, stderr = server.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                _, stderr = server.communicate()
    if server.returncode not in (0, -15):
        raise RuntimeError(f"dra-extender serve exited with {server.returncode}: {stderr[-2000:]!r}")
    return {
        "ready_s": round(ready_s, 2),
        "ready_cpu_ms": round(ready_cpu),
        "settle_s": round(settle_s, 2),
        "rss_mb_after_sync": round(after_sync["VmRSS"], 1),
        "rss_mb_after_cycles": round(after_cycles["VmRSS"], 1),
        "peak_rss_mb": round(after_cycles["VmHWM"], 1),
        "cold_full_filter_ms": round(cold_full, 1),
        "cold_full_filter_cpu_ms": round(cold_full_cpu, 1),
        "warm_full_filter_ms": round(warm_full, 2),
        "warm_full_filter_cpu_ms": round(warm_full_cpu, 2),
        "window_nodes": window,
        "cold_window_filter_ms": round(cold_window, 1),
        "warm_window_filter_ms": round(warm_window, 2),
        "cycles": cycled,
        "cycles_bound": bound,
        "cycle_ms_per_pod": round(cycle_ms, 2),
        "cycle_cpu_ms_per_pod": round(cycle_cpu, 2),
        "longest_stall_ms": round(probe.longest_ms, 1),
        "stall_probes": probe.probes,
        "stall_phase_cold_full_filter_ms": round(stall_filter, 1),
        **relist,
    }


async def relists_done(session: aiohttp.ClientSession, debug: str) -> dict[str, int]:
    """Lists done so far per watched kind, from /debug/state's watch section only (the whole state,
    with every pool, held the server's event loop for 120-160 ms at 20,000 nodes: the bench's own
    polling was the longest stall it measured)."""
    async with session.get(f"{debug}/debug/state?section=watch") as response:
        state = orjson.loads(await response.read())
    return {kind: health["lists"] for kind, health in state["watch"]["kinds"].items()}


async def measure_relist(session: aiohttp.ClientSession, debug: str, ext: Extender, fake: FakeApi,
                         window: list[str]) -> dict[str, Any]:
    """Every kind listed again (the watches expired) while filters over the window keep coming: the
    slowest /healthz answer meanwhile, and how long until every kind was listed again."""
    before = await relists_done(session, debug)
    probes = [name for name in ext.pods if name.startswith("probe-")]
    filters = 0
    async with StallProbe(session, f"{debug}/healthz") as probe:
        started = time.perf_counter()
        fake.relist()
        while time.perf_counter() - started < 300:
            await ext.filter(probes[filters % len(probes)], window)
            filters += 1
            if filters % 10 == 0:
                done = await relists_done(session, debug)
                if all(done[kind] > count for kind, count in before.items()):
                    break
        relist_s = time.perf_counter() - started
    return {"relist_s": round(relist_s, 2), "relist_longest_stall_ms": round(probe.longest_ms, 1),
            "relist_stall_probes": probe.probes, "relist_filters": filters}


# ---- bytes per cached object ------------------------------------------------------------------

def deep_size(obj: Any, seen: set[int]) -> int:
    """Bytes of `obj` and everything it refers to that `seen` has not counted yet (shared parts once)."""
    size = 0
    stack = [obj]
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        size += sys.getsizeof(item)
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple | set | frozenset):
            stack.extend(item)
    return size


async def synced_cluster(url: str) -> tuple[Any, Any, Any]:
    """A ClusterCache synced through the real watcher, as serve builds it: (client, watcher, cache)."""
    from allocator import FeatureGates
    from extender.kube.client import KubeClient
    from extender.kube.informer import ClusterWatcher
    from extender.state.cache import ClusterCache

    client = KubeClient.for_url(url)
    cache = ClusterCache(FeatureGates())
    watcher = ClusterWatcher(client, cache)
    await watcher.start()
    if not await watcher.wait_ready(600):
        raise RuntimeError("the in-process cache did not sync")
    return client, watcher, cache


async def bytes_per_object(url: str) -> dict[str, int]:
    """Sync a ClusterCache in this process through the real watcher; deep size of a stored object per kind."""
    client, watcher, cache = await synced_cluster(url)
    try:
        by_kind: dict[str, list[dict[str, Any]]] = {}
        for raw in cache.objects():
            by_kind.setdefault(raw["kind"], []).append(raw)
        # One `seen` for all: what objects share (keys the JSON parser interned, common values) counts
        # once, as it does in memory.
        seen: set[int] = set()
        return {kind: round(sum(deep_size(raw, seen) for raw in raws) / len(raws))
                for kind, raws in sorted(by_kind.items())}
    finally:
        await watcher.stop()
        await client.close()


def top_stats(stats: list[Any], limit: int) -> list[dict[str, Any]]:
    return [{"where": f"{Path(stat.traceback[0].filename).name}:{stat.traceback[0].lineno}",
             "mb": round(stat.size / 2**20, 2), "blocks": stat.count} for stat in stats[:limit]]


async def profile_memory(args: argparse.Namespace, url: str) -> dict[str, Any]:
    """What the synced cache holds, by the source line that allocated it (tracemalloc)."""
    import tracemalloc

    gc.collect()
    tracemalloc.start(1)
    client, watcher, _ = await synced_cluster(url)
    try:
        gc.collect()
        snapshot = tracemalloc.take_snapshot().filter_traces(
            [tracemalloc.Filter(False, tracemalloc.__file__)])
        total = sum(stat.size for stat in snapshot.statistics("filename"))
        return {"traced_mb_after_sync": round(total / 2**20, 1),
                "by_file": top_stats(snapshot.statistics("filename"), args.profile_top),
                "by_line": top_stats(snapshot.statistics("lineno"), args.profile_top)}
    finally:
        tracemalloc.stop()
        await watcher.stop()
        await client.close()


async def profile_cpu(args: argparse.Namespace, url: str, nodes: int) -> dict[str, Any]:
    """cProfile of the sync, then (once the node views are warmed, as serve does) of one cold filter
    over every node (printed to stderr); then, unprofiled, `--warm-repeats` warm filters over every
    node (the first, and the median in wall and CPU time)."""
    import cProfile
    import io
    import pstats

    from common.heap import collector_paused
    from extender.tuning import tune_gc_after_sync, warm_node_views
    from extender.wiring import Cluster, build_scheduler

    def report(profile: cProfile.Profile, title: str) -> None:
        out = io.StringIO()
        pstats.Stats(profile, stream=out).sort_stats("cumulative").print_stats(args.profile_top)
        print(f"==== {title}\n{out.getvalue()}", file=sys.stderr)

    profile = cProfile.Profile()
    started = time.perf_counter()
    profile.enable()
    # As serve syncs: the collector off until the cache is synced and tuned (extender/tuning.py);
    # collecting meanwhile would show up as time spent in whatever allocated at that moment.
    with collector_paused():
        client, watcher, cache = await synced_cluster(url)
        tune_gc_after_sync()
    profile.disable()
    sync_s = time.perf_counter() - started
    report(profile, f"sync ({sync_s:.2f} s)")
    scheduler = build_scheduler(Cluster(cache, client, watcher))
    started = time.perf_counter()
    # As serve does once synced (the views and the filter cache's node memos), frozen when the pause ends.
    with collector_paused():
        await warm_node_views(cache, scheduler.filter_cache)
    warm_views_s = time.perf_counter() - started
    try:
        pod = cache.pod("default", "probe-0")
        names = cache.node_names()
        profile = cProfile.Profile()
        started = time.perf_counter()
        profile.enable()
        result = await scheduler.filter(pod, names)
        profile.disable()
        cold_ms = (time.perf_counter() - started) * 1000
        report(profile, f"cold full filter ({cold_ms:.0f} ms)")
        warm: list[tuple[float, float]] = []
        for _ in range(max(1, args.warm_repeats)):
            started, cpu_started = time.perf_counter(), time.process_time()
            await scheduler.filter(pod, names, brief=True)
            warm.append(((time.perf_counter() - started) * 1000, (time.process_time() - cpu_started) * 1000))
        cycles = await profile_cycles(args, cache, scheduler, report)
        return {"nodes": nodes, "sync_s": round(sync_s, 2), "warm_node_views_s": round(warm_views_s, 2),
                "cold_full_filter_ms": round(cold_ms, 1),
                "first_warm_full_filter_ms": round(warm[0][0], 2),
                "warm_full_filter_ms": round(statistics.median(ms for ms, _ in warm), 2),
                "warm_full_filter_cpu_ms": round(statistics.median(cpu for _, cpu in warm), 2),
                "feasible": len(result.passed), **cycles}
    finally:
        await watcher.stop()
        await client.close()


async def profile_cycles(args: argparse.Namespace, cache: Any, scheduler: Any,
                         report: Callable[[Any, str], None]) -> dict[str, Any]:
    """cProfile of `--cycles` scheduling cycles as measure_server drives them (filter a rotating
    window, prioritize the feasible nodes, bind the best one), here through the scheduler itself."""
    import cProfile

    names = [f"node-{index}" for index in range(len(cache.node_names()))]
    window = window_size(len(names))
    profile = cProfile.Profile()
    started, cpu_started = time.perf_counter(), time.process_time()
    bound = 0
    profile.enable()
    for index in range(args.cycles):
        pod = cache.pod("default", f"cycle-{index}")
        start = (index * window) % len(names)
        result = await scheduler.filter(pod, (names[start:] + names[:start])[:window], brief=True)
        if not result.passed:
            continue
        scores = await scheduler.prioritize(pod, result.passed)
        best = max(result.passed, key=lambda name: scores.get(name, 0))
        meta = pod["metadata"]
        await scheduler.bind(meta["namespace"], meta["name"], uid=meta["uid"], node_name=best)
        bound += 1
    profile.disable()
    cycle_ms = (time.perf_counter() - started) * 1000 / max(1, args.cycles)
    cycle_cpu_ms = (time.process_time() - cpu_started) * 1000 / max(1, args.cycles)
    report(profile, f"{args.cycles} cycles ({cycle_ms:.2f} ms, {cycle_cpu_ms:.2f} ms CPU per pod)")
    return {"cycles": args.cycles, "cycles_bound": bound, "cycle_ms_per_pod": round(cycle_ms, 2),
            "cycle_cpu_ms_per_pod": round(cycle_cpu_ms, 2)}


@dataclasses.dataclass
class LoopTiming:
    """The event loop's work while `timed_loop()` is active, in this thread's CPU ms: every turn (the
    steps run between two polls, which a request arriving waits for), every step with its task's
    name, and every garbage collection."""

    turns: list[float] = dataclasses.field(default_factory=list)
    steps: list[tuple[float, str]] = dataclasses.field(default_factory=list)
    collections: list[float] = dataclasses.field(default_factory=list)

    def summary(self, top: int) -> dict[str, Any]:
        return {"longest_turns_cpu_ms": [round(ms, 1) for ms in sorted(self.turns, reverse=True)[:top]],
                "longest_steps_cpu_ms": [[round(ms, 1), name]
                                         for ms, name in sorted(self.steps, reverse=True)[:top]],
                "longest_collection_cpu_ms": round(max(self.collections, default=0.0), 1)}


@contextlib.contextmanager
def timed_loop() -> Iterator[LoopTiming]:
    import asyncio.events

    timing = LoopTiming()
    run = asyncio.events.Handle._run
    run_once = asyncio.base_events.BaseEventLoop._run_once
    collecting = [0.0]

    def timed_run_once(loop: Any) -> None:
        started = time.thread_time()
        run_once(loop)
        timing.turns.append((time.thread_time() - started) * 1000)

    def timed_run(handle: Any) -> None:
        started = time.thread_time()
        run(handle)
        owner = getattr(handle._callback, "__self__", None)
        name = owner.get_name() if isinstance(owner, asyncio.Task) else repr(handle._callback)[:60]
        timing.steps.append(((time.thread_time() - started) * 1000, name))

    def on_gc(phase: str, _info: dict[str, Any]) -> None:
        if phase == "start":
            collecting[0] = time.thread_time()
        else:
            timing.collections.append((time.thread_time() - collecting[0]) * 1000)

    asyncio.events.Handle._run = timed_run   # type: ignore[method-assign]
    asyncio.base_events.BaseEventLoop._run_once = timed_run_once   # type: ignore[method-assign]
    gc.callbacks.append(on_gc)
    try:
        yield timing
    finally:
        asyncio.events.Handle._run = run   # type: ignore[method-assign]
        asyncio.base_events.BaseEventLoop._run_once = run_once   # type: ignore[method-assign]
        gc.callbacks.remove(on_gc)


async def profile_relist(args: argparse.Namespace, fake: FakeApi, nodes: int) -> dict[str, Any]:
    """Sync here as serve does, then have every kind listed again: the event loop's longest turns,
    steps and collections meanwhile (`LoopTiming`). Unlike relist_longest_stall_ms they do not grow
    when other processes take the cores."""
    from extender.tuning import tune_gc_after_sync

    client, watcher, _ = await synced_cluster(fake.url)
    tune_gc_after_sync()
    lists = {kind: health["lists"] for kind, health in watcher.health()["kinds"].items()}
    try:
        with timed_loop() as timing:
            started = time.perf_counter()
            fake.relist()
            while any(health["lists"] <= lists[kind] for kind, health in watcher.health()["kinds"].items()):
                await asyncio.sleep(0.05)
            relist_s = time.perf_counter() - started
    finally:
        await watcher.stop()
        await client.close()
    return {"nodes": nodes, "relist_s": round(relist_s, 2), **timing.summary(args.profile_top)}


async def profile_controllers(args: argparse.Namespace, url: str, nodes: int) -> dict[str, Any]:
    """Sync here as serve does, then start the controllers (`--controllers`, default all) as a replica
    does when it starts or wins their Lease: how long until they act (their seed), its CPU, and the
    event loop's longest turns, steps and collections meanwhile. With taint-eviction, then a
    DeviceTaintRule over the whole driver (effect None, so nothing is evicted) is created: how long
    until its status is written, and the same loop figures over that time."""
    from prometheus_client import CollectorRegistry

    from extender.controllers import CONTROLLER_NAMES, TAINT_EVICTION, ControllerOptions, start_controllers
    from extender.tuning import tune_gc_after_sync

    client, watcher, cache = await synced_cluster(url)
    tune_gc_after_sync()
    names = tuple(args.controllers.split(",")) if args.controllers else CONTROLLER_NAMES
    result: dict[str, Any] = {"nodes": nodes, "controllers": list(names)}
    try:
        with timed_loop() as timing:
            started, cpu_started = time.perf_counter(), time.process_time()
            controllers = await asyncio.create_task(start_controllers(
                cache, client, ControllerOptions(names=names), registry=CollectorRegistry()),
                name="start_controllers")
            result.update(seed_s=round(time.perf_counter() - started, 2),
                          seed_cpu_s=round(time.process_time() - cpu_started, 2))
        result.update(timing.summary(args.profile_top))
        if TAINT_EVICTION in names:
            result["whole_driver_rule"] = await time_whole_driver_rule(client, args.profile_top)
        await controllers.stop()
    finally:
        await watcher.stop()
        await client.close()
    return result


async def time_whole_driver_rule(client: Any, top: int) -> dict[str, Any]:
    path = "/apis/resource.k8s.io/v1/devicetaintrules"
    rule = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule",
            "metadata": {"name": "whole-driver"},
            "spec": {"deviceSelector": {"driver": o.DRIVER},
                     "taint": {"key": "example.com/maintenance", "effect": "None"}}}
    with timed_loop() as timing:
        started = time.perf_counter()
        await client.create(path, rule)
        while not ((await client.get(f"{path}/whole-driver")).get("status") or {}).get("conditions"):
            if time.perf_counter() - started > 300:
                raise RuntimeError("the rule's status was not written within 300 s")
            await asyncio.sleep(0.01)
        reported_s = time.perf_counter() - started
    return {"status_written_s": round(reported_s, 2), **timing.summary(top)}


async def run_size(args: argparse.Namespace, nodes: int) -> dict[str, Any]:
    with fake_api_process(args, nodes) as fake:
        url = fake.url
        if args.profile_memory:
            return {"nodes": nodes, **await profile_memory(args, url)}
        if args.profile_cpu:
            return await profile_cpu(args, url, nodes)
        if args.profile_relist:
            return await profile_relist(args, fake, nodes)
        if args.profile_controllers:
            return await profile_controllers(args, url, nodes)
        result: dict[str, Any] = {"nodes": nodes, "devices_per_node": args.devices,
                                  "pods": nodes * PODS_PER_NODE + args.probes + args.cycles,
                                  "allocated_claims": nodes * PODS_PER_NODE // 2}
        result.update(await measure_server(args, nodes, fake))
        if not args.skip_object_sizes:
            gc.collect()
            result["bytes_per_object"] = await bytes_per_object(url)
    return result


def growth(results: list[dict[str, Any]]) -> dict[str, Any]:
    """For each figure: how much it grew per 1,000 nodes between the smallest and the largest size, and
    its ratio to the node-count ratio (1.0 = linear, below = better than linear)."""
    first, last = results[0], results[-1]
    node_ratio = last["nodes"] / first["nodes"]
    out: dict[str, Any] = {}
    for key in ("ready_s", "rss_mb_after_sync", "cold_full_filter_ms", "warm_full_filter_ms",
                "cold_window_filter_ms", "warm_window_filter_ms", "cycle_ms_per_pod"):
        if first[key] > 0:
            out[key] = {"ratio": round(last[key] / first[key], 2),
                        "vs_linear": round(last[key] / first[key] / node_ratio, 3)}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--curve", help="comma-separated node counts, measured one after the other")
    parser.add_argument("--devices", type=int, default=8, help="devices per node (default 8)")
    parser.add_argument("--cycles", type=int, default=1000, help="scheduling cycles (default 1,000)")
    parser.add_argument("--stall-cycles", type=int, default=20,
                        help="scheduling cycles after the stall phase's cold filter (default 20)")
    parser.add_argument("--probes", type=int, default=3, help=argparse.SUPPRESS)
    parser.add_argument("--warm-repeats", type=int, default=10)
    parser.add_argument("--ready-timeout", type=float, default=600.0)
    parser.add_argument("--skip-object-sizes", action="store_true",
                        help="do not sync a second cache in this process to size objects")
    parser.add_argument("--controllers", default="",
                        help="serve's --controllers (default: none), to measure their memory too")
    parser.add_argument("--json", action="store_true", help="print JSON only")
    parser.add_argument("--profile-memory", action="store_true",
                        help="instead of the figures: sync here under tracemalloc, print the top lines")
    parser.add_argument("--profile-cpu", action="store_true",
                        help="instead of the figures: cProfile the sync and a cold full filter here")
    parser.add_argument("--profile-relist", action="store_true",
                        help="instead of the figures: sync here, re-list every kind, print the event "
                             "loop's longest steps in CPU time")
    parser.add_argument("--profile-controllers", action="store_true",
                        help="instead of the figures: sync here, start the controllers (--controllers, "
                             "default all), print their seed's time and the event loop's longest steps")
    parser.add_argument("--profile-top", type=int, default=30, help="lines per profile (default 30)")
    parser.add_argument("--fake-api-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.fake_api_child:
        serve_fake_api(args.nodes, args.devices, args.probes, args.cycles)
        return 0
    if not sys.platform.startswith("linux"):
        parser.error("memory is read from /proc: Linux only")
    sizes = [int(size) for size in args.curve.split(",")] if args.curve else [args.nodes]
    if any(size < 1 for size in sizes) or min(args.cycles, args.stall_cycles) < 0 or (
            args.devices < PODS_PER_NODE):
        parser.error(f"node counts must be positive and --devices at least {PODS_PER_NODE}")
    results = [asyncio.run(run_size(args, size)) for size in sizes]
    output: Any = results[0] if len(results) == 1 else {"sizes": results, "growth": growth(results)}
    print(orjson.dumps(output, option=orjson.OPT_INDENT_2).decode())
    if not args.json:
        print(f"measured on {os.cpu_count()} cores; the docstring says what each figure means",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    from termination import stop_on_sigterm

    stop_on_sigterm()
    sys.exit(main())
