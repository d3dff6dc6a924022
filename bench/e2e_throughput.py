"""Scheduling throughput on a real control plane: kube-scheduler's in-tree DynamicResources plugin
against kube-scheduler + DRA Extender, on the same workload, one after the other.

Workload (after upstream scheduler_perf's SchedulingWithResourceClaimTemplate): N nodes with 10
devices each, one-device ResourceClaimTemplates; half the devices are taken by pods created first,
then the other half by the measured pods. Steady state: on the half-full cluster, pods are created
and the oldest bound pods deleted continuously, keeping a window of pending pods.

Each set-up gets a fresh control plane (same binaries, flags and workload) so neither inherits the
other's objects, and runs in its own bench process whose control-plane data is deleted when it ends;
before each one the bench waits (--settle-s) for the machine to be idle. Each run's entry in `runs`
keeps its order, both set-ups' figures, the idle share before it started, and the ratio reached if
dra-extender's own CPU cost nothing (both set-ups saturate the cores, so that bounds what a faster
extender can show here). Needs the binaries of tests/e2e/build_control_plane.py (built if missing).

    python bench/e2e_throughput.py --json                      # 500 nodes, 2,500 + 2,500 pods
    python bench/e2e_throughput.py --nodes 50 --pods 250 --json  # a quick run
    python bench/e2e_throughput.py --repeats 2 --json          # both orders; medians (the machine drifts)

With --shared-podgroups: upstream scheduler_perf's SharedPodGroupResourceClaimTemplate instead
(test/integration/scheduler_perf/dra/workloadresourceclaims, KEP-5729): PodGroups (basic policy) whose
pods all name one ResourceClaimTemplate in an entry equal to the PodGroup's, so each group shares one
generated claim reserved for the PodGroup; one network-attached one-device pool per PodGroup. Both
shapes in one invocation, each on both set-ups, with DRAWorkloadResourceClaims and GenericWorkload on
every component: 1 PodGroup of 1,000 pods on 10 nodes and 100 PodGroups of 50 pods on 50 nodes
(--shape NODES:GROUPS:PODS replaces them, e.g. a quick run: --shape 2:1:20 --shape 2:4:20).

    python bench/e2e_throughput.py --shared-podgroups --json

With --workload ExtendedResource_25Classes: upstream scheduler_perf's extended-resource workload
instead of the claim templates (dra/extendedresource, Explicit_25classes_5000pods_500nodes): 25
DeviceClasses selecting the same devices, each with `extendedResourceName: example.com/gpu-<i>`, and
pods with no claim that ask for `example.com/gpu-<index mod 25>: 1`, in the same phases on both
set-ups. The report then also compares the claims both set-ups made (`claim_shapes`: per claim its
requests, counts, annotation, controlling owner, finalizers and devices): the side-by-side check that
dra-extender builds them as the in-tree plugin does.

    python bench/e2e_throughput.py --workload ExtendedResource_25Classes --nodes 10 --pods 20 --json
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import urllib3

E2E_DIR = Path(__file__).resolve().parents[1] / "tests" / "e2e"
sys.path.insert(0, str(E2E_DIR))

import build_control_plane  # noqa: E402
from e2e_api import Api  # noqa: E402
from e2e_cluster import ControlPlane  # noqa: E402
from e2e_objects import (  # noqa: E402
    RESOURCE,
    claim_spec,
    create_driver,
    create_node,
    create_template,
    pod_body,
)
from termination import stop_child, stop_on_sigterm  # noqa: E402

DEVICES_PER_NODE = 10
NAMESPACE = "bench"
CREATE_WORKERS = 8
CLAIM_TEMPLATE = "SchedulingWithResourceClaimTemplate"
EXTENDED_25 = "ExtendedResource_25Classes"
WORKLOADS = (CLAIM_TEMPLATE, EXTENDED_25)
EXTENDED_CLASSES = 25
EXTENDED_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"

PodBody = Callable[[str, int], dict[str, Any]]


def _template_pod(name: str, index: int) -> dict[str, Any]:
    return pod_body(name, template="one-device")


def _extended_pod(name: str, index: int) -> dict[str, Any]:
    """scheduler_perf's pod-with-extended-resource.yaml: one device of class index mod 25, no claim."""
    amount = {f"example.com/gpu-{index % EXTENDED_CLASSES}": "1"}
    return {
        "metadata": {"name": name},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "pause", "image": "registry.invalid/pause",
                            "resources": {"requests": amount, "limits": amount}}],
        },
    }


def _set_up_workload(api: Api, workload: str, driver_class: str, driver_name: str) -> PodBody:
    if workload == CLAIM_TEMPLATE:
        create_template(api, NAMESPACE, "one-device", claim_spec(driver_class))
        return _template_pod
    for index in range(EXTENDED_CLASSES):
        api.create(f"{RESOURCE}/deviceclasses", {
            "metadata": {"name": f"test-class-{index}"},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver_name}"'}}],
                     "extendedResourceName": f"example.com/gpu-{index}"},
        })
    return _extended_pod


def _claim_shapes(api: Api) -> dict[str, int]:
    """How many of the namespace's claims have each shape (what the comparison between set-ups reads)."""
    shapes: dict[str, int] = {}
    for claim in api.items(f"{RESOURCE}/namespaces/{NAMESPACE}/resourceclaims"):
        meta = claim["metadata"]
        status = claim.get("status") or {}
        owners = [(o["kind"], bool(o.get("controller"))) for o in meta.get("ownerReferences") or []]
        requests = [(r["name"], (r.get("exactly") or {}).get("allocationMode"), (r.get("exactly") or {}).get(
            "count")) for r in claim["spec"]["devices"]["requests"]]
        devices = len(((status.get("allocation") or {}).get("devices") or {}).get("results") or [])
        shape = orjson.dumps({
            "annotation": (meta.get("annotations") or {}).get(EXTENDED_ANNOTATION),
            "owners": owners, "requests": requests, "devices": devices,
            "reservedFor": len(status.get("reservedFor") or []),
            "finalizers": sorted(meta.get("finalizers") or []),
        }).decode()
        shapes[shape] = shapes.get(shape, 0) + 1
    return shapes


@dataclass
class BindWatch:
    """Records when each pod of the namespace is first seen with a node (a watch, not polling)."""

    api: Api
    bound_at: dict[str, float] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _cond: threading.Condition = field(default_factory=threading.Condition)

    def start(self) -> None:
        threading.Thread(target=self._run, daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        version = self.api.get(f"/api/v1/namespaces/{NAMESPACE}/pods?limit=1")["metadata"]["resourceVersion"]
        while not self._stop.is_set():
            url = f"/api/v1/namespaces/{NAMESPACE}/pods?watch=1&resourceVersion={version}&timeoutSeconds=60"
            try:
                version = self._follow(self.api.stream(url), version)
            except urllib3.exceptions.HTTPError:
                # A dropped stream resumes from the last version seen; at shutdown the loop ends.
                time.sleep(0.2)

    def _follow(self, response: urllib3.BaseHTTPResponse, version: str) -> str:
        buffer = b""
        try:
            for chunk in response.stream(65536):
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line:
                        version = self._record(orjson.loads(line), version)
                if self._stop.is_set():
                    break
        finally:
            response.release_conn()
        return version

    def _record(self, event: dict[str, Any], version: str) -> str:
        obj = event["object"]
        if event["type"] not in ("ADDED", "MODIFIED"):
            return str(obj.get("metadata", {}).get("resourceVersion", version))
        if obj.get("spec", {}).get("nodeName"):
            with self._cond:
                self.bound_at.setdefault(obj["metadata"]["name"], time.monotonic())
                self._cond.notify_all()
        return str(obj["metadata"].get("resourceVersion", version))

    def bound(self, names: set[str], wait_s: float) -> set[str]:
        """Those of `names` bound by now, after waiting up to `wait_s` for a new bind."""
        with self._cond:
            self._cond.wait(wait_s)
            return {n for n in names if n in self.bound_at}

    def wait_bound(self, names: set[str], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while not names <= self.bound_at.keys():
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = len(names - self.bound_at.keys())
                    raise TimeoutError(f"{missing} of {len(names)} pods not bound after {timeout_s:.0f}s")
                self._cond.wait(min(left, 1.0))


def _create_pods(api: Api, names: list[str], body: PodBody = _template_pod) -> dict[str, float]:
    created: dict[str, float] = {}

    def create(index: int) -> None:
        api.create(f"/api/v1/namespaces/{NAMESPACE}/pods", body(names[index], index))
        created[names[index]] = time.monotonic()

    with ThreadPoolExecutor(CREATE_WORKERS) as pool:
        list(pool.map(create, range(len(names))))
    return created


def _cpu_seconds(plane: ControlPlane) -> dict[str, float]:
    """CPU time (user + system) each running component has used so far, from /proc (Linux)."""
    ticks = os.sysconf("SC_CLK_TCK")
    used: dict[str, float] = {}
    for name, component in plane.components.items():
        process = component.process
        if process is None or process.poll() is not None:
            continue
        try:
            fields = Path(f"/proc/{process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        used[name] = (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
    return used


def _cpu_ms_per_pod(before: dict[str, float], after: dict[str, float], pods: int) -> dict[str, float]:
    per_pod = {name: (after[name] - before.get(name, 0.0)) * 1000 / pods for name in after}
    return {name: round(ms, 1) for name, ms in sorted(per_pod.items())} | {
        "total": round(sum(per_pod.values()), 1)
    }


def _scheduler_connections(plane: ControlPlane) -> float | None:
    """Connections dra-extender has accepted from kube-scheduler so far (None in-tree): each is a TLS
    handshake on both sides; kube-scheduler's client keeps only 2 idle ones."""
    if "dra-extender" not in plane.components:
        return None
    answer = urllib3.PoolManager().request("GET", f"http://127.0.0.1:{plane.debug_port}/metrics")
    for line in answer.data.decode().splitlines():
        if line.startswith("dra_extender_scheduler_connections_total "):
            return float(line.split()[1])
    return None


def _per_pod(before: float | None, after: float | None, pods: int) -> dict[str, float]:
    if before is None or after is None:
        return {}
    return {"scheduler_connections_per_pod": round((after - before) / pods, 3)}


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] if ordered else 0.0


def _measure(created: dict[str, float], bound_at: dict[str, float]) -> tuple[float, float]:
    start = min(created.values())
    end = max(bound_at[n] for n in created)
    throughput = len(created) / (end - start)
    return throughput, _p99([bound_at[n] - created[n] for n in created])


def _creation_rate(created: dict[str, float]) -> float:
    """Pods per second the bench created them at. In the burst phase a set-up that schedules slower
    than this builds a queue, and its p99 is then mostly the queue's length: about
    pods / pods_per_s - pods / created_per_s, whatever each pod's own scheduling costs."""
    span = max(created.values()) - min(created.values())
    return len(created) / span if span > 0 else float(len(created))


def _steady_state(
    api: Api, watch: BindWatch, bound_names: list[str], count: int, window: int, body: PodBody
) -> tuple[float, float]:
    """Create `count` pods, at most `window` unbound at a time; each bind deletes the oldest bound pod.

    Creates and deletes go through a thread pool, as in the other phases: one client thread issuing
    them one by one tops out near 30 pods/s on this machine, and then the client is what is measured."""
    oldest = deque(bound_names)
    created: dict[str, float] = {}
    pending: set[str] = set()
    calls: set[Future[Any]] = set()
    next_index = 0
    deadline = time.monotonic() + 600

    def create(name: str, index: int) -> None:
        api.create(f"/api/v1/namespaces/{NAMESPACE}/pods", body(name, index))
        created[name] = time.monotonic()

    with ThreadPoolExecutor(CREATE_WORKERS) as pool:
        while next_index < count or pending:
            if time.monotonic() > deadline:
                raise TimeoutError(f"steady state: {len(pending)} pods still pending after 600 s")
            while next_index < count and len(pending) < window:
                name = f"steady-{next_index:05d}"
                pending.add(name)
                calls.add(pool.submit(create, name, next_index))
                next_index += 1
            for name in sorted(watch.bound(pending, wait_s=0.2)):
                pending.discard(name)
                oldest.append(name)
                victim = oldest.popleft()
                calls.add(pool.submit(
                    api.delete, f"/api/v1/namespaces/{NAMESPACE}/pods/{victim}", grace_period_seconds=0
                ))
            finished = {call for call in calls if call.done()}
            for call in finished:
                call.result()  # a failed create or delete ends the run with its error
            calls -= finished
    return _measure(created, watch.bound_at)


SETTLE_IDLE = 0.8  # the share of both cores idle over SETTLE_WINDOW_S before a set-up starts
SETTLE_WINDOW_S = 3.0


def _idle_share(window_s: float) -> float:
    """The share of all CPUs idle (idle + iowait) over the next `window_s` seconds, from /proc/stat."""

    def sample() -> tuple[int, int]:
        values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return values[3] + values[4], sum(values)

    idle0, total0 = sample()
    time.sleep(window_s)
    idle1, total1 = sample()
    return (idle1 - idle0) / max(1, total1 - total0)


def _settle(max_s: float) -> float:
    """Wait until the machine is idle (the previous control plane's processes and writes are gone),
    up to `max_s`; return the idle share measured last, which the report keeps per run."""
    deadline = time.monotonic() + max_s
    idle = _idle_share(SETTLE_WINDOW_S)
    while idle < SETTLE_IDLE and time.monotonic() < deadline:
        idle = _idle_share(SETTLE_WINDOW_S)
    return round(idle, 2)


def run_isolated(mode: str, nodes: int, pods: int, steady: int, work: Path, workload: str,
                 settle_s: float) -> dict[str, Any]:
    """One set-up in a fresh bench process, its control plane's data removed as soon as it is done.

    Nothing of an earlier set-up (client threads and connection pools, the bench's heap, etcd's data
    on disk and in the page cache) is left to speed up or slow down a later one: the earlier in-process
    runs showed a run-position effect that this removes from the comparison."""
    idle_before = _settle(settle_s)
    command = [sys.executable, __file__, "--run-one", mode, "--nodes", str(nodes), "--pods", str(pods),
               "--steady-pods", str(steady), "--workload", workload, "--work", str(work)]
    child = subprocess.Popen(command, stdout=subprocess.PIPE)
    try:
        stdout, _ = child.communicate()
    except BaseException:
        stop_child(child)  # it stops its control plane on the way out
        raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if child.returncode != 0:
        raise RuntimeError(f"{mode} set-up failed (exit {child.returncode}); its log is above")
    return orjson.loads(stdout.splitlines()[-1]) | {"idle_before": idle_before}


def _progress(mode: str, what: str) -> None:
    print(f"[e2e_throughput] {mode}: {what}", file=sys.stderr, flush=True)


def run_setup(mode: str, nodes: int, pods: int, steady: int, work: Path,
              workload: str = CLAIM_TEMPLATE) -> dict[str, Any]:
    plane = ControlPlane(build_control_plane.ensure_built(), work, scheduler_mode=mode, webhooks=False)
    try:
        plane.start([])
        api = plane.api
        assert api is not None
        api.create("/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
        driver = create_driver(api, nodes=nodes, devices=DEVICES_PER_NODE)
        body = _set_up_workload(api, workload, driver.device_class, driver.name)
        watch = BindWatch(api)
        watch.start()
        time.sleep(0.5)

        initial = [f"init-{i:05d}" for i in range(pods)]
        _progress(mode, f"{pods} initial pods")
        _create_pods(api, initial, body)
        watch.wait_bound(set(initial), timeout_s=900)
        claim_shapes = _claim_shapes(api) if workload == EXTENDED_25 else {}

        measured = [f"measured-{i:05d}" for i in range(pods)]
        _progress(mode, f"{pods} measured pods")
        cpu_before, connections_before = _cpu_seconds(plane), _scheduler_connections(plane)
        created = _create_pods(api, measured, body)
        watch.wait_bound(set(measured), timeout_s=900)
        measured_cpu = _cpu_ms_per_pod(cpu_before, _cpu_seconds(plane), pods)
        measured_connections = _per_pod(connections_before, _scheduler_connections(plane), pods)
        pods_per_s, p99 = _measure(created, watch.bound_at)
        created_per_s = _creation_rate(created)

        # Back to half full for the steady state: remove the measured pods.
        for name in measured:
            api.delete(f"/api/v1/namespaces/{NAMESPACE}/pods/{name}", grace_period_seconds=0)
        _progress(mode, f"steady state, {steady} pods")
        cpu_before, connections_before = _cpu_seconds(plane), _scheduler_connections(plane)
        steady_per_s, steady_p99 = _steady_state(api, watch, initial, steady, window=max(10, nodes // 5),
                                                 body=body)
        steady_cpu = _cpu_ms_per_pod(cpu_before, _cpu_seconds(plane), steady)
        steady_connections = _per_pod(connections_before, _scheduler_connections(plane), steady)
        watch.stop()
        return {
            "pods_per_s": pods_per_s,
            "p99_s": p99,
            "created_per_s": created_per_s,
            "cpu_ms_per_pod": measured_cpu,
            "steady_pods_per_s": steady_per_s,
            "steady_p99_s": steady_p99,
            "steady_cpu_ms_per_pod": steady_cpu,
            "claim_shapes": claim_shapes,
            **measured_connections,
            **{f"steady_{key}": value for key, value in steady_connections.items()},
        }
    finally:
        plane.stop()


WORKLOAD_GATES = "--feature-gates=DRAWorkloadResourceClaims=true,GenericWorkload=true"
PODGROUP_SHAPES = ((10, 1, 1000), (50, 100, 5000))  # (nodes, PodGroups, pods), as upstream's workloads
# The PodGroup's claim entry and its pods' entry: equal in every field, so the pods share its claim.
GROUP_CLAIM = {"name": "resource", "resourceClaimTemplateName": "test-claim-template"}


def _workload_plane(mode: str, work: Path) -> ControlPlane:
    return ControlPlane(
        build_control_plane.ensure_built(), work, scheduler_mode=mode, webhooks=False,
        extra_args={
            "kube-apiserver": [WORKLOAD_GATES, "--runtime-config=scheduling.k8s.io/v1beta1=true"],
            "kube-controller-manager": [WORKLOAD_GATES],
            "kube-scheduler": [WORKLOAD_GATES],
            "dra-extender": ["--feature-gates=DRAWorkloadResourceClaims=true"],
        },
    )


def _podgroup_objects(api: Api, nodes: int, groups: int) -> None:
    """Nodes labelled node-with-dra, one network-attached one-device slice per PodGroup, the class,
    the template and the PodGroups (upstream's templates, same names)."""
    driver = "test-driver.cdi.k8s.io"
    for index in range(nodes):
        name = f"dra-node-{index}"
        create_node(api, name)
        api.patch(f"/api/v1/nodes/{name}", {"metadata": {"labels": {"node-with-dra": "true"}}})
    every_dra_node = {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "node-with-dra", "operator": "In", "values": ["true"]}]}]}
    for index in range(groups):
        api.create("/apis/resource.k8s.io/v1/resourceslices", {
            "metadata": {"name": f"resourceslice-podgroup-{index}"},
            "spec": {"pool": {"name": f"resourceslice-{index}", "generation": 1, "resourceSliceCount": 1},
                     "driver": driver, "nodeSelector": every_dra_node, "devices": [{"name": "device"}]},
        })
    api.create("/apis/resource.k8s.io/v1/deviceclasses", {
        "metadata": {"name": "test-class"},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]},
    })
    create_template(api, NAMESPACE, "test-claim-template", {"devices": {"requests": [
        {"name": "req-0", "exactly": {"deviceClassName": "test-class"}}]}})
    for index in range(groups):
        api.create(f"/apis/scheduling.k8s.io/v1beta1/namespaces/{NAMESPACE}/podgroups", {
            "metadata": {"name": f"test-dra-{index}"},
            "spec": {"resourceClaims": [GROUP_CLAIM], "schedulingPolicy": {"basic": {}}},
        })


def _podgroup_pod(name: str, group: int) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10.1",
                            "resources": {"claims": [{"name": "resource"}]}}],
            "resourceClaims": [GROUP_CLAIM],
            "schedulingGroup": {"podGroupName": f"test-dra-{group}"},
        },
    }


def _reserved_for_shapes(api: Api) -> dict[str, int]:
    """How the claims are reserved: "podgroups:1" = reserved for one PodGroup only; counts of claims."""
    shapes: dict[str, int] = {}
    for claim in api.items(f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims"):
        entries = (claim.get("status") or {}).get("reservedFor") or []
        kinds = sorted({entry["resource"] for entry in entries})
        shape = ",".join(f"{kind}:{sum(1 for e in entries if e['resource'] == kind)}" for kind in kinds)
        shapes[shape or "none"] = shapes.get(shape or "none", 0) + 1
    return shapes


def run_podgroup_setup(mode: str, nodes: int, groups: int, pods: int, work: Path) -> dict[str, Any]:
    plane = _workload_plane(mode, work)
    try:
        plane.start([])
        api = plane.api
        assert api is not None
        api.create("/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
        _podgroup_objects(api, nodes, groups)
        watch = BindWatch(api)
        watch.start()
        time.sleep(0.5)
        names = [f"test-dra-{i:05d}" for i in range(pods)]
        created: dict[str, float] = {}

        def create(index: int) -> None:
            api.create(f"/api/v1/namespaces/{NAMESPACE}/pods", _podgroup_pod(names[index], index % groups))
            created[names[index]] = time.monotonic()

        _progress(mode, f"{groups} PodGroup(s), {pods} pods on {nodes} nodes")
        cpu_before = _cpu_seconds(plane)
        with ThreadPoolExecutor(CREATE_WORKERS) as pool:
            list(pool.map(create, range(pods)))
        watch.wait_bound(set(names), timeout_s=900)
        cpu = _cpu_ms_per_pod(cpu_before, _cpu_seconds(plane), pods)
        pods_per_s, p99 = _measure(created, watch.bound_at)
        watch.stop()
        return {"pods_per_s": pods_per_s, "p99_s": p99, "cpu_ms_per_pod": cpu,
                "reserved_for": _reserved_for_shapes(api)}
    finally:
        plane.stop()


def run_shared_podgroups(shapes: list[tuple[int, int, int]], extender_first: bool) -> dict[str, Any]:
    order = ["extender", "in-tree"] if extender_first else ["in-tree", "extender"]
    report: dict[str, Any] = {"workload": "SharedPodGroupResourceClaimTemplate", "order": order, "shapes": []}
    with tempfile.TemporaryDirectory(prefix="e2e-throughput-podgroups-") as tmp:
        for nodes, groups, pods in shapes:
            results = {
                mode: run_podgroup_setup(mode, nodes, groups, pods, Path(tmp) / f"{mode}-{nodes}-{groups}")
                for mode in order
            }
            in_tree, extender = results["in-tree"], results["extender"]
            report["shapes"].append({
                "nodes": nodes, "podgroups": groups, "pods": pods,
                "in_tree_pods_per_s": round(in_tree["pods_per_s"], 1),
                "extender_pods_per_s": round(extender["pods_per_s"], 1),
                "ratio": round(extender["pods_per_s"] / in_tree["pods_per_s"], 3),
                "in_tree_p99_s": round(in_tree["p99_s"], 3),
                "extender_p99_s": round(extender["p99_s"], 3),
                "cpu_ms_per_pod": {"in_tree": in_tree["cpu_ms_per_pod"],
                                   "extender": extender["cpu_ms_per_pod"]},
                # Both set-ups must reserve every claim the same way (each for its one PodGroup).
                "reserved_for": {"in_tree": in_tree["reserved_for"], "extender": extender["reserved_for"]},
                "same_reserved_for": in_tree["reserved_for"] == extender["reserved_for"],
            })
    return report


def _shape(text: str) -> tuple[int, int, int]:
    try:
        nodes, groups, pods = (int(part) for part in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected NODES:PODGROUPS:PODS, e.g. 10:1:1000") from None
    if min(nodes, groups, pods) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: every number must be at least 1")
    return nodes, groups, pods


PER_RUN_KEYS = ("pods_per_s", "p99_s", "created_per_s", "steady_pods_per_s", "steady_p99_s", "idle_before",
                "scheduler_connections_per_pod", "steady_scheduler_connections_per_pod")


def _free_extender_ratio(run: dict[str, dict[str, Any]], key: str) -> float:
    extender = run["extender"][key]
    return round(run["in-tree"][key]["total"] / (extender["total"] - extender.get("dra-extender", 0.0)), 3)


def _disturbed(run: dict[str, dict[str, Any]]) -> bool:
    return any(result.get("idle_before", 1.0) < SETTLE_IDLE for result in run.values())


def _report(runs: list[dict[str, dict[str, Any]]], orders: list[list[str]]) -> dict[str, Any]:
    """The issue's keys (medians over the runs), each run's ratios, and CPU per pod by component."""

    def median(mode: str, key: str, digits: int) -> float:
        return round(statistics.median([run[mode][key] for run in runs]), digits)

    def ratio(key: str) -> float:
        return round(statistics.median([run["extender"][key] / run["in-tree"][key] for run in runs]), 3)

    shapes = {mode: runs[0][mode]["claim_shapes"] for mode in ("in-tree", "extender")}

    def cpu(mode: str, key: str) -> dict[str, float]:
        names = runs[0][mode][key].keys()
        return {name: round(statistics.median([run[mode][key][name] for run in runs]), 1) for name in names}

    def spread(mode: str, key: str) -> float:
        values = [run[mode][key] for run in runs]
        return round((max(values) - min(values)) / statistics.median(values), 3)

    return {
        # Pairs (1-based) whose set-ups started on a busy machine: compare the others.
        "disturbed_runs": [index for index, run in enumerate(runs, 1) if _disturbed(run)],
        "in_tree_pods_per_s": median("in-tree", "pods_per_s", 1),
        "extender_pods_per_s": median("extender", "pods_per_s", 1),
        "ratio": ratio("pods_per_s"),
        "in_tree_p99_s": median("in-tree", "p99_s", 3),
        "extender_p99_s": median("extender", "p99_s", 3),
        # Read the p99s above against these: a set-up slower than its creation rate queues pods.
        "in_tree_created_per_s": median("in-tree", "created_per_s", 1),
        "extender_created_per_s": median("extender", "created_per_s", 1),
        "steady_state": {
            "in_tree_pods_per_s": median("in-tree", "steady_pods_per_s", 1),
            "extender_pods_per_s": median("extender", "steady_pods_per_s", 1),
            "ratio": ratio("steady_pods_per_s"),
            "in_tree_p99_s": median("in-tree", "steady_p99_s", 3),
            "extender_p99_s": median("extender", "steady_p99_s", 3),
        },
        # How far one set-up's own runs lie apart, as a share of their median: the noise a single
        # pair's ratio carries (the same binaries and workload, only the run differs).
        "same_setup_spread": {
            mode: {key: spread(mode, key) for key in ("pods_per_s", "steady_pods_per_s")}
            for mode in ("in-tree", "extender")
        },
        "runs": [
            {
                "order": order,
                # The settle wait gave up before the machine was idle: something else was using the
                # cores, and this pair's figures say more about that than about either set-up.
                "disturbed": _disturbed(run),
                "ratio": round(run["extender"]["pods_per_s"] / run["in-tree"]["pods_per_s"], 3),
                "steady_state_ratio": round(
                    run["extender"]["steady_pods_per_s"] / run["in-tree"]["steady_pods_per_s"], 3
                ),
                # Both set-ups use the 2 cores fully, so a ratio is about in-tree's CPU per pod over
                # ours; this is the ratio dra-extender would reach if its own CPU were free.
                "ratio_if_dra_extender_cost_nothing": _free_extender_ratio(run, "cpu_ms_per_pod"),
                "steady_state_ratio_if_dra_extender_cost_nothing": _free_extender_ratio(
                    run, "steady_cpu_ms_per_pod"),
                **{mode: {key: round(run[mode][key], 3) for key in PER_RUN_KEYS if key in run[mode]}
                   for mode in order},
            }
            for run, order in zip(runs, orders, strict=True)
        ],
        # CPU time each component spent per pod (the bench client itself is not counted).
        "cpu_ms_per_pod": {
            "in_tree": cpu("in-tree", "cpu_ms_per_pod"),
            "extender": cpu("extender", "cpu_ms_per_pod"),
        },
        "steady_state_cpu_ms_per_pod": {
            "in_tree": cpu("in-tree", "steady_cpu_ms_per_pod"),
            "extender": cpu("extender", "steady_cpu_ms_per_pod"),
        },
        # The initial pods' claims of the first run, counted by shape, per set-up (extended workload).
        "claim_shapes": {"same": shapes["in-tree"] == shapes["extender"], **shapes},
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument(
        "--pods", type=int, help="initial pods, and measured pods (default: half the devices)"
    )
    parser.add_argument(
        "--steady-pods", type=int, help="pods created in the steady-state phase (default: --pods)"
    )
    parser.add_argument(
        "--extender-first",
        action="store_true",
        help="run the extender set-up before the in-tree one (to check the order does not matter)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="run both set-ups this many times, alternating which goes first (this machine's speed "
        "drifts by tens of percent over minutes); figures are medians of the runs, ratios the medians "
        "of each run's own ratio",
    )
    parser.add_argument("--settle-s", type=float, default=90.0,
                        help="before each set-up, wait up to this long for the machine to be idle "
                        f"({SETTLE_IDLE * 100:.0f}%% idle over {SETTLE_WINDOW_S:.0f} s; "
                        "default 90, 0 to start at once)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--workload", choices=WORKLOADS, default=CLAIM_TEMPLATE,
                        help=f"the workload of the default run (default {CLAIM_TEMPLATE}; see above)")
    parser.add_argument("--shared-podgroups", action="store_true",
                        help="run upstream's SharedPodGroupResourceClaimTemplate shapes instead (see above)")
    parser.add_argument("--shape", type=_shape, action="append", metavar="NODES:PODGROUPS:PODS",
                        help="with --shared-podgroups: a shape to run instead of upstream's two (repeatable)")
    # A single set-up, as run_isolated runs it in its own process: prints its result as one JSON line.
    parser.add_argument("--run-one", choices=("in-tree", "extender"), help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run_one:
        if args.work is None or args.pods is None or args.steady_pods is None:
            parser.error("--run-one needs --work, --pods and --steady-pods")
        result = run_setup(args.run_one, args.nodes, args.pods, args.steady_pods, args.work, args.workload)
        print(orjson.dumps(result).decode(), flush=True)
        return 0
    if args.shape and not args.shared_podgroups:
        parser.error("--shape goes with --shared-podgroups")
    if args.shared_podgroups and args.workload != CLAIM_TEMPLATE:
        parser.error("--workload and --shared-podgroups choose different runs: pick one")
    if args.shared_podgroups:
        podgroup_report = run_shared_podgroups(args.shape or list(PODGROUP_SHAPES), args.extender_first)
        print(orjson.dumps(podgroup_report).decode() if args.json else podgroup_report)
        return 0
    pods = args.pods or args.nodes * DEVICES_PER_NODE // 2
    if pods * 2 > args.nodes * DEVICES_PER_NODE:
        parser.error(f"--pods {pods}: twice that must fit on {args.nodes * DEVICES_PER_NODE} devices")
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    if args.settle_s < 0:
        parser.error("--settle-s must be 0 or more")
    steady = args.steady_pods or pods
    runs: list[dict[str, dict[str, Any]]] = []
    orders: list[list[str]] = []
    with tempfile.TemporaryDirectory(prefix="e2e-throughput-") as tmp:
        for index in range(args.repeats):
            extender_first = args.extender_first != (index % 2 == 1)
            order = ["extender", "in-tree"] if extender_first else ["in-tree", "extender"]
            orders.append(order)
            results: dict[str, dict[str, Any]] = {}
            for mode in order:
                _progress(mode, f"{args.nodes} nodes, {pods} + {pods} pods (run {index + 1}) ...")
                results[mode] = run_isolated(mode, args.nodes, pods, steady, Path(tmp) / f"{mode}-{index}",
                                             args.workload, args.settle_s)
                _progress(mode, str(results[mode]))
            runs.append(results)
    report = _report(runs, orders)
    report.update(
        nodes=args.nodes, devices_per_node=DEVICES_PER_NODE, pods=pods, repeats=args.repeats, order=orders,
        workload=args.workload,
    )
    if args.json:
        print(orjson.dumps(report).decode())
    else:
        for key, value in report.items():
            print(f"{key}: {value}")
    return 0


if __name__ == "__main__":
    stop_on_sigterm()
    sys.exit(main())
