"""The extender's own CPU per bind and per watch event (issue 17), without the API server's share.

- bind: `ClaimWriter.bind` of pods with one claim each (finalizer update, status update with
  allocation and reservedFor, pods/binding, each answer stored in the cache as serve does) against the
  fake API server running in a child process, so this process's CPU time is the client side only
  (plain HTTP on loopback: no TLS, unlike a real cluster);
- watch: the watch lines of a pod's life with one claim (pod and claim created, the claim's finalizer,
  allocation and reservation, the binding, the pod running, being deleted and gone, the claim
  released, deleted and gone; realistic pod bodies with managedFields) decoded and applied to a fresh
  ClusterCache, as the watcher does for each line, in process (no network).

Each figure is the minimum over --repeats runs (CPU time is disturbed by whatever else runs).

    python bench/client_cpu_bench.py --json
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "extender"))
sys.path.insert(0, str(ROOT / "tests" / "support"))

import dra_objects as o  # noqa: E402
from fakeapi import FakeApiServer  # noqa: E402

from allocator import FeatureGates  # noqa: E402
from extender.eventloop import run as run_loop  # noqa: E402
from extender.kube.client import KubeClient  # noqa: E402
from extender.plugin.claimwriter import FINALIZER, ClaimWriter  # noqa: E402
from extender.state.cache import ClusterCache  # noqa: E402

PAYLOAD = ROOT / "tests" / "extender" / "payloads" / "filter_node_cache_capable.json"
MANAGED_FIELDS = [{"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
                   "time": "2026-11-20T10:00:00Z", "fieldsType": "FieldsV1",
                   "fieldsV1": {"f:metadata": {"f:labels": {"f:app": {}}}, "f:spec": {"f:containers": {}}}}]


def make_pod(index: int) -> dict[str, Any]:
    """A pod as kube-apiserver serves it (volumes, tolerations, managedFields), naming claim c-<index>."""
    pod = {"apiVersion": "v1", "kind": "Pod", **copy.deepcopy(orjson.loads(PAYLOAD.read_bytes())["Pod"])}
    pod["metadata"].update(name=f"p-{index}", uid=f"uid-p-{index}", labels={"app": "bench"},
                           managedFields=copy.deepcopy(MANAGED_FIELDS))
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": f"c-{index}"}]
    return pod


def make_claim(index: int, pod: dict[str, Any]) -> dict[str, Any]:
    claim = o.claim(f"c-{index}", owner_pod=pod)
    claim["metadata"]["managedFields"] = copy.deepcopy(MANAGED_FIELDS)
    return claim


def allocation(index: int, nodes: int) -> dict[str, Any]:
    node = f"node-{index % nodes}"
    return {"devices": {"results": [{"request": "gpu", "driver": o.DRIVER, "pool": node,
                                     "device": f"gpu-{(index // nodes) % 8}"}]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}


def life_of_a_pod(fake: FakeApiServer, index: int, nodes: int) -> None:
    """The writes the control plane makes for one pod with one claim, in order."""
    pod, claim = make_pod(index), make_claim(index, make_pod(index))
    name, claim_name = pod["metadata"]["name"], claim["metadata"]["name"]
    fake.seed([pod])
    fake.seed([claim])
    current = fake.get_object("Pod", name, "default")
    fake.put_object({**current, "status": {**pod["status"], "conditions": [{"type": "PodScheduled",
                                                                             "status": "False"}]}})
    stored = fake.get_object("ResourceClaim", claim_name, "default")
    stored["metadata"]["finalizers"] = [FINALIZER]
    stored = fake.put_object(stored)
    stored["status"] = {"allocation": allocation(index, nodes), "reservedFor": [
        {"resource": "pods", "name": name, "uid": pod["metadata"]["uid"]}]}
    stored = fake.put_object(stored)
    current = fake.get_object("Pod", name, "default")
    current["spec"]["nodeName"] = f"node-{index % nodes}"
    current = fake.put_object(current)
    current["status"] = {**current["status"], "phase": "Running", "podIP": "10.0.0.1",
                         "conditions": [{"type": "Ready", "status": "True"}],
                         "containerStatuses": [{"name": "main", "ready": True, "restartCount": 0,
                                                "state": {"running": {"startedAt": "2026-11-20T10:00:00Z"}}}]}
    current = fake.put_object(current)
    current["metadata"]["deletionTimestamp"] = "2026-11-20T10:01:00Z"
    fake.put_object(current)
    fake.remove_object("Pod", name, "default")
    stored = fake.get_object("ResourceClaim", claim_name, "default")
    stored["status"] = {"allocation": stored["status"]["allocation"]}
    stored = fake.put_object(stored)
    stored["metadata"]["deletionTimestamp"] = "2026-11-20T10:01:00Z"
    fake.put_object(stored)
    fake.remove_object("ResourceClaim", claim_name, "default")


def watch_cpu(pods: int, nodes: int, repeats: int) -> dict[str, Any]:
    fake = FakeApiServer(history_size=20 * pods)
    for index in range(pods):
        life_of_a_pod(fake, index, nodes)
    lines = [(resource.kind, line) for _, resource, _, line in fake._history]
    best = float("inf")
    for _ in range(repeats):
        cache = ClusterCache(FeatureGates())
        started = time.process_time()
        for kind, line in lines:
            event = KubeClient._watch_event(line)
            cache.apply(kind, event["type"], event["object"])
        best = min(best, time.process_time() - started)
    return {"watch_events": len(lines), "watch_events_per_pod": round(len(lines) / pods, 1),
            "cpu_us_per_watch_event": round(best / len(lines) * 1e6, 2)}


async def serve_fake(pods: int, nodes: int) -> None:
    """The child process: the fake API server with the cluster and the pending pods, until stdin closes."""
    fake = FakeApiServer()
    objs = [o.device_class()]
    for index in range(nodes):
        objs += [o.node(f"node-{index}"), o.gpu_slice(f"node-{index}", 8)]
    for index in range(pods):
        pod = make_pod(index)
        objs += [pod, make_claim(index, pod)]
    fake.seed(objs)
    print(await fake.start(), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await fake.stop()


async def bind_round(url: str, pods: range, nodes: int, concurrency: int) -> float:
    """CPU seconds of this process for binding `pods` (the cache is listed first, untimed)."""
    async with KubeClient.for_url(url) as kube:
        cache = ClusterCache(FeatureGates())
        cache.replace("Pod", (await kube.list("/api/v1/pods"))["items"])
        cache.replace("ResourceClaim", (await kube.list("/apis/resource.k8s.io/v1/resourceclaims"))["items"])
        writer = ClaimWriter(kube, cache)
        queue = list(pods)

        async def one(index: int) -> None:
            pod, claim = cache.pod("default", f"p-{index}"), cache.claim("default", f"c-{index}")
            assert pod is not None and claim is not None
            await writer.bind(pod, f"node-{index % nodes}", [(claim, allocation(index, nodes))])

        for _ in range(min(20, len(queue))):   # warm up the connections
            await one(queue.pop())

        async def worker() -> None:
            while queue:
                await one(queue.pop())

        started = time.process_time()
        count = len(queue)
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return (time.process_time() - started) / max(count, 1)


def bind_cpu(pods: int, nodes: int, concurrency: int, repeats: int) -> dict[str, Any]:
    best = float("inf")
    for _ in range(repeats):
        child = subprocess.Popen([sys.executable, __file__, "--serve-fake", "--pods", str(pods),
                                  "--nodes", str(nodes)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 text=True)
        try:
            assert child.stdout is not None
            url = child.stdout.readline().strip()
            best = min(best, run_loop(bind_round(url, range(pods), nodes, concurrency)))
        finally:
            assert child.stdin is not None
            child.stdin.close()
            child.wait(timeout=30)
    return {"binds": pods - min(20, pods), "cpu_us_per_bind": round(best * 1e6, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print only the result object")
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=8, help="binds in flight")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--serve-fake", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_fake:
        run_loop(serve_fake(args.pods, args.nodes))
        return 0
    result = {**bind_cpu(args.pods, args.nodes, args.concurrency, args.repeats),
              **watch_cpu(args.pods, args.nodes, args.repeats)}
    print(json.dumps(result) if args.json else json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    from termination import stop_on_sigterm

    stop_on_sigterm()
    sys.exit(main())
