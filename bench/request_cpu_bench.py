"""dra-extender's own CPU per pod on the request path, alone in its process, as on a real control plane.

The server is the one `dra-extender serve` builds (extender.wiring.App: watches, scheduler, claim
writer, events, explanations, fence) and runs in this process; the fake API server of the tests runs
in one child process, kube-scheduler's side in another, so this process's CPU time is dra-extender's
alone: the verbs, the API writes of bind, the watch events the workload causes, metrics and logging.

The workload follows bench/e2e_throughput.py's (upstream scheduler_perf's
SchedulingWithResourceClaimTemplate): N nodes with 10 devices each, half of them taken by bound pods
before the measurement; then, for each measured pod, the "controller" child creates the pod and its
claim generated from a template (status.resourceClaimStatuses set), and the "scheduler" child sends
filter (every node, or the share kube-scheduler sends at that size), prioritize (when more than one
node passed) and bind (in the background, as kube-scheduler's binding cycle), one pod after the other.
Plain HTTP on loopback: no TLS on either side (the transport's cost is bench/cpu_floor_bench.py's).

    python bench/request_cpu_bench.py --json                  # 100 nodes, 500 pods, 3 repeats
    python bench/request_cpu_bench.py --nodes 500 --pods 2500 --json
    python bench/request_cpu_bench.py --repeats 1 --profile /tmp/request.prof   # cProfile of the server
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "extender"))
sys.path.insert(0, str(ROOT / "tests" / "support"))

import dra_objects as o  # noqa: E402
from answer_digest import serve_options, until_ready  # noqa: E402
from fakeapi import FakeApiServer  # noqa: E402
from scale_bench import window_size  # noqa: E402

from extender.eventloop import run as run_loop  # noqa: E402
from extender.wiring import App  # noqa: E402

DEVICES_PER_NODE = 10
NAMESPACE = "bench"
TEMPLATE = "one-device"
CLASS = "test-class"


def _pod(name: str, claim: str | None) -> dict[str, Any]:
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"app": "bench"}},
           "spec": {"schedulerName": "default-scheduler", "terminationGracePeriodSeconds": 0,
                    "restartPolicy": "Always", "dnsPolicy": "ClusterFirst", "priority": 0,
                    "serviceAccountName": "default", "enableServiceLinks": True,
                    "preemptionPolicy": "PreemptLowerPriority",
                    "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                                     "effect": "NoExecute", "tolerationSeconds": 300}],
                    "resourceClaims": [{"name": "dev", "resourceClaimTemplateName": TEMPLATE}],
                    "containers": [{"name": "c", "image": "registry.invalid/pause",
                                    "resources": {"claims": [{"name": "dev"}]},
                                    "terminationMessagePath": "/dev/termination-log",
                                    "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent"}]},
           "status": {"phase": "Pending", "qosClass": "BestEffort"}}
    if claim is not None:
        pod["status"]["resourceClaimStatuses"] = [{"name": "dev", "resourceClaimName": claim}]
    return pod


def _claim(name: str, pod: dict[str, Any]) -> dict[str, Any]:
    claim = o.claim(name, namespace=NAMESPACE, owner_pod=pod)
    claim["metadata"]["annotations"] = {"resource.kubernetes.io/pod-claim-name": "dev"}
    claim["spec"]["devices"]["requests"] = [{"name": "req-0", "exactly": {
        "deviceClassName": CLASS, "allocationMode": "ExactCount", "count": 1}}]
    return claim


def _cluster(nodes: int) -> list[dict[str, Any]]:
    objs = [o.device_class(CLASS, expression=f'device.driver == "{o.DRIVER}"'),
            {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
             "metadata": {"name": TEMPLATE, "namespace": NAMESPACE},
             "spec": {"spec": {"devices": {"requests": [{"name": "req-0", "exactly": {
                 "deviceClassName": CLASS, "allocationMode": "ExactCount", "count": 1}}]}}}}]
    for index in range(nodes):
        objs += [o.node(f"node-{index}"), o.gpu_slice(f"node-{index}", DEVICES_PER_NODE)]
    # Half the devices taken by bound pods, as after the e2e bench's initial phase.
    for index in range(nodes * DEVICES_PER_NODE // 2):
        node = f"node-{index % nodes}"
        pod = _pod(f"initial-{index}", f"initial-{index}-dev")
        pod["metadata"]["uid"] = f"uid-initial-{index}"
        pod["spec"]["nodeName"] = node
        pod["status"]["phase"] = "Running"
        consumer = {"resource": "pods", "name": pod["metadata"]["name"], "uid": f"uid-initial-{index}"}
        claim = o.allocate(_claim(f"initial-{index}-dev", pod), node, [f"gpu-{index // nodes}"], [consumer])
        claim["spec"]["devices"]["requests"][0]["name"] = "gpu"
        objs += [pod, claim]
    return objs


async def serve_fake(nodes: int) -> None:
    """Child: the fake API server with the half-full cluster, until stdin closes."""
    fake = FakeApiServer(history_size=200_000, bookmark_interval_s=1.0)
    fake.seed(_cluster(nodes))
    print(await fake.start(), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await fake.stop()


async def drive(api: str, extender: str, nodes: int, pods: int) -> None:
    """Child: the resourceclaim controller creating pods and claims, and kube-scheduler scheduling them."""
    names = [f"node-{index}" for index in range(nodes)]
    window = window_size(nodes)
    created: dict[int, asyncio.Future[dict[str, Any]]] = {}
    loop = asyncio.get_running_loop()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64)) as session:
        async def post(url: str, body: dict[str, Any]) -> Any:
            async with session.post(url, data=orjson.dumps(body),
                                    headers={"Content-Type": "application/json"}) as response:
                answer = orjson.loads(await response.read())
                if response.status not in (200, 201):
                    raise RuntimeError(f"{url}: HTTP {response.status}: {answer}")
                return answer

        async def create(index: int) -> None:
            name = f"measured-{index}"
            pod = await post(f"{api}/api/v1/namespaces/{NAMESPACE}/pods", _pod(name, f"{name}-dev"))
            await post(f"{api}/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims",
                       _claim(f"{name}-dev", pod))
            pod.pop("kind", None)
            pod.pop("apiVersion", None)
            created[index].set_result(pod)

        async def creator() -> None:
            for index in range(pods):
                await create(index)

        for index in range(pods):
            created[index] = loop.create_future()
        creating = asyncio.create_task(creator())
        binds: set[asyncio.Task[Any]] = set()
        start = failed = 0
        for index in range(pods):
            pod = await created[index]
            chosen = [names[(start + k) % nodes] for k in range(window)]
            start = (start + window) % nodes
            args = {"Pod": pod, "Nodes": None, "NodeNames": chosen}
            passed = (await post(f"{extender}/filter", args))["NodeNames"] or []
            if not passed:
                failed += 1
                continue
            best = passed[0]
            if len(passed) > 1:
                scores = await post(f"{extender}/prioritize", {**args, "NodeNames": passed})
                best = max(scores, key=lambda entry: entry["Score"])["Host"]
            bind = asyncio.create_task(post(f"{extender}/bind", {
                "PodName": pod["metadata"]["name"], "PodNamespace": NAMESPACE,
                "PodUID": pod["metadata"]["uid"], "Node": best}))
            binds.add(bind)
            bind.add_done_callback(binds.discard)
        await creating
        errors = [answer["Error"] for answer in await asyncio.gather(*binds) if answer["Error"]]
        print(json.dumps({"unschedulable": failed, "bind_errors": len(errors)}), flush=True)


async def measure(nodes: int, pods: int, profile: cProfile.Profile | None) -> dict[str, Any]:
    fake = subprocess.Popen([sys.executable, __file__, "--serve-fake", "--nodes", str(nodes)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert fake.stdout is not None
        api = fake.stdout.readline().strip()
        with tempfile.TemporaryDirectory(prefix="request-cpu-") as directory:
            async with App(serve_options(Path(directory), api)) as app, aiohttp.ClientSession() as session:
                await until_ready(app, session)
                client = await asyncio.create_subprocess_exec(
                    sys.executable, __file__, "--drive", api, app.server.urls["extender"],
                    "--nodes", str(nodes), "--pods", str(pods), stdout=asyncio.subprocess.PIPE)
                wall, usage = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
                if profile is not None:
                    profile.enable()
                out, _ = await client.communicate()
                if profile is not None:
                    profile.disable()
                wall, after = time.perf_counter() - wall, resource.getrusage(resource.RUSAGE_SELF)
                user, system = after.ru_utime - usage.ru_utime, after.ru_stime - usage.ru_stime
                if client.returncode != 0:
                    raise RuntimeError(f"the scheduler child failed ({client.returncode})")
    finally:
        assert fake.stdin is not None
        fake.stdin.close()
        fake.wait(timeout=60)
    return {"cpu_ms_per_pod": (user + system) * 1000 / pods, "sys_ms_per_pod": system * 1000 / pods,
            "wall_s": wall, **json.loads(out)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--pods", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--profile", type=Path,
                        help="write the server's cProfile stats of the first run here")
    parser.add_argument("--json", action="store_true", help="print only the result object")
    parser.add_argument("--serve-fake", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--drive", nargs=2, metavar=("API", "EXTENDER"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_fake:
        run_loop(serve_fake(args.nodes))
        return 0
    if args.drive:
        run_loop(drive(*args.drive, args.nodes, args.pods))
        return 0
    if args.pods > args.nodes * DEVICES_PER_NODE // 2:
        parser.error(f"--pods {args.pods}: at most half the {args.nodes * DEVICES_PER_NODE} devices")
    runs = []
    for index in range(args.repeats):
        profile = cProfile.Profile(time.process_time) if args.profile and index == 0 else None
        runs.append(run_loop(measure(args.nodes, args.pods, profile)))
        if profile is not None:
            profile.dump_stats(args.profile)
    result = {"nodes": args.nodes, "pods": args.pods,
              "cpu_ms_per_pod": round(statistics.median(run["cpu_ms_per_pod"] for run in runs), 3),
              "cpu_ms_per_pod_runs": [round(run["cpu_ms_per_pod"], 3) for run in runs],
              "sys_ms_per_pod": round(statistics.median(run["sys_ms_per_pod"] for run in runs), 3),
              "wall_s": round(statistics.median(run["wall_s"] for run in runs), 2),
              "unschedulable": sum(run["unschedulable"] for run in runs),
              "bind_errors": sum(run["bind_errors"] for run in runs)}
    print(json.dumps(result) if args.json else json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    from termination import stop_on_sigterm

    stop_on_sigterm()
    sys.exit(main())
