"""A digest of every answer dra-extender gives over a fixed, seeded workload: the proof that a change
meant to make it faster left what it says byte for byte the same.

The server is the one `dra-extender serve` builds (extender.wiring.App: watches, scheduler, claim
writer, events, explanations, fence), reading the in-process fake API server of the tests through a
kubeconfig, and called over plain HTTP on loopback with the bodies kube-scheduler sends
(nodeCacheCapable: the Pod as its informer holds it, NodeNames; preempt with NodeNameToMetaVictims).
Each pod, one after the other, goes through what kube-scheduler does with it: filter, prioritize the
nodes that passed, bind to the best (ties to the first in NodeNames order); a pod no node passes gets
a preempt call naming bound pods as victims. After every bind, and after the churn that deletes bound
pods as the workload runs, the bench waits until the server's watches have seen every change, so each
answer depends on the workload alone.

The workload (from --seed): nodes with 0, 2, 4 or 8 devices of two models (no slices at all on some),
a DeviceClass with a CEL selector and one per model, and pods of several shapes: a claim from a
ResourceClaimTemplate (the generated claim created as the resourceclaim controller does), a claim of
two devices, two requests tied by matchAttribute, a claim whose request selects one model with CEL,
claims shared by two pods, a claim too big for any node, a template whose claim does not exist yet,
extended resources backed by DRA, no claims at all.

    python bench/answer_digest.py            # prints {"digest": ..., "answers": ..., counts ...}
    python bench/answer_digest.py --pods 40 --nodes 8 --hashes   # also each answer's own sha256
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "extender"))
sys.path.insert(0, str(ROOT / "tests" / "support"))

import dra_objects as o  # noqa: E402
from fakeapi import FakeApiServer  # noqa: E402

from extender.eventloop import run as run_loop  # noqa: E402
from extender.options import NetworkOptions, ServeOptions, SourceOptions  # noqa: E402
from extender.wiring import App  # noqa: E402

NAMESPACE = "default"
H100_CLASS = "h100.gpu.example.com"
EXTENDED_CLASS = "extended.gpu.example.com"
EXTENDED_RESOURCE = "example.com/gpu"
TEMPLATE = "one-gpu"
POD_CLAIM_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
MODELS = ("A100", "H100")
# (shape, weight): how often each kind of pod comes.
SHAPES = (("template", 40), ("two", 12), ("numa", 8), ("h100", 10), ("shared", 10), ("too-big", 4),
          ("not-created", 2), ("extended", 8), ("plain", 6))
SETTLE_TIMEOUT_S = 30.0
VERBS = ("filter", "prioritize", "bind", "preempt")


def _device_class(name: str, expression: str, extended: str | None = None) -> dict[str, Any]:
    raw = o.device_class(name, expression)
    raw["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    if extended is not None:
        raw["spec"]["extendedResourceName"] = extended
    return raw


def _cluster(rng: random.Random, nodes: int) -> list[dict[str, Any]]:
    objs = [
        _device_class(o.CLASS, f'device.driver == "{o.DRIVER}"'),
        _device_class(H100_CLASS, f'device.driver == "{o.DRIVER}" && '
                                  f'device.attributes["{o.DRIVER}"].model == "H100"'),
        _device_class(EXTENDED_CLASS, f'device.driver == "{o.DRIVER}"', extended=EXTENDED_RESOURCE),
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
         "metadata": {"name": TEMPLATE, "namespace": NAMESPACE},
         "spec": {"spec": {"devices": {"requests": [
             {"name": "gpu", "exactly": {"deviceClassName": o.CLASS}}]}}}},
    ]
    for index in range(nodes):
        name = f"node-{index}"
        node = o.node(name, labels={"zone": f"zone-{index % 3}"})
        node["status"] = {"allocatable": {"cpu": "32", "memory": "128Gi", "pods": "110"}}
        objs.append(node)
        devices = rng.choice((0, 2, 4, 8, 8))
        if devices:
            models = [rng.choice(MODELS) for _ in range(2)]
            objs.append(o.gpu_slice(name, devices, models=models))
    return objs


def _container(requests: dict[str, str] | None = None) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {"cpu": "100m", **(requests or {})}}
    if requests:
        resources["limits"] = dict(requests)
    return {"name": "main", "image": "registry.example.com/app:1", "resources": resources,
            "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
            "imagePullPolicy": "IfNotPresent"}


def _pod(name: str, refs: list[dict[str, Any]], *, requests: dict[str, str] | None = None) -> dict[str, Any]:
    """A pending pod with the fields the API server defaults (as kube-scheduler's informer holds it)."""
    pod = o.pod(name, [])
    container = _container(requests)
    if refs:
        container["resources"]["claims"] = [{"name": ref["name"]} for ref in refs]
    pod["spec"].update(containers=[container], resourceClaims=refs, dnsPolicy="ClusterFirst",
                       terminationGracePeriodSeconds=30, serviceAccountName="default",
                       priority=0, enableServiceLinks=True, preemptionPolicy="PreemptLowerPriority",
                       tolerations=[{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                                     "effect": "NoExecute", "tolerationSeconds": 300}])
    pod["metadata"]["labels"] = {"app": "digest"}
    pod["metadata"]["creationTimestamp"] = "2026-11-20T10:00:00Z"
    return pod


def _named(claim: str) -> list[dict[str, Any]]:
    return [{"name": "gpu", "resourceClaimName": claim}]


def _workload(rng: random.Random, pods: int) -> tuple[list[dict[str, Any]], list[str]]:
    """The claims and pods to create, and the pods' names in the order they are scheduled."""
    objs: list[dict[str, Any]] = []
    order: list[str] = []
    names, weights = zip(*SHAPES, strict=True)
    index = 0
    while len(order) < pods:
        shape = rng.choices(names, weights)[0]
        name = f"{shape}-{index}"
        index += 1
        if shape in ("template", "not-created"):
            pod = _pod(name, [{"name": "gpu", "resourceClaimTemplateName": TEMPLATE}])
            if shape == "template":
                generated = f"{name}-gpu-{rng.randrange(16**5):05x}"
                claim = o.claim(generated, owner_pod=pod)
                claim["metadata"]["annotations"] = {POD_CLAIM_ANNOTATION: "gpu"}
                pod["status"]["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": generated}]
                objs.append(claim)
            objs.append(pod)
        elif shape == "two":
            objs += [o.claim(f"{name}-c", count=2), _pod(name, _named(f"{name}-c"))]
        elif shape == "numa":
            requests = [{"name": f"r{k}", "exactly": {"deviceClassName": o.CLASS}} for k in range(2)]
            objs += [o.claim(f"{name}-c", requests=requests,
                             constraints=[{"matchAttribute": f"{o.DRIVER}/numa"}]),
                     _pod(name, _named(f"{name}-c"))]
        elif shape == "h100":
            requests = [{"name": "gpu", "exactly": {"deviceClassName": H100_CLASS, "selectors": [
                {"cel": {"expression": f'device.attributes["{o.DRIVER}"].index < 6'}}]}}]
            objs += [o.claim(f"{name}-c", requests=requests),
                     _pod(name, _named(f"{name}-c"))]
        elif shape == "shared":
            objs.append(o.claim(f"{name}-c"))
            for member in ("a", "b"):
                objs.append(_pod(f"{name}-{member}", _named(f"{name}-c")))
                order.append(f"{name}-{member}")
            continue
        elif shape == "too-big":
            objs += [o.claim(f"{name}-c", count=16), _pod(name, _named(f"{name}-c"))]
        elif shape == "extended":
            objs.append(_pod(name, [], requests={EXTENDED_RESOURCE: str(rng.choice((1, 2)))}))
        else:
            objs.append(_pod(name, []))
        order.append(name)
    return objs, order[:pods]


def _kubeconfig(directory: Path, url: str) -> str:
    path = directory / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": url}}],
        "users": [{"name": "bench", "user": {"token": "bench"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "bench"}}],
    }))
    return str(path)


class Run:
    def __init__(self, fake: FakeApiServer, app: App, session: aiohttp.ClientSession, hashes: bool) -> None:
        self.fake, self.app, self.session = fake, app, session
        self.base = app.server.urls["extender"]
        self.digest = hashlib.sha256()
        self.counts: Counter[str] = Counter()
        self.hashes: list[str] | None = [] if hashes else None

    async def call(self, verb: str, body: dict[str, Any]) -> Any:
        async with self.session.post(f"{self.base}/{verb}", data=orjson.dumps(body),
                                     headers={"Content-Type": "application/json"}) as response:
            answer = await response.read()
            if response.status != 200:
                raise RuntimeError(f"{verb}: HTTP {response.status}: {answer[:300]!r}")
        own = hashlib.sha256(answer).digest()
        self.digest.update(verb.encode() + b"\0" + own)
        self.counts[verb] += 1
        if self.hashes is not None:
            self.hashes.append(f"{verb} {own.hex()}")
        return orjson.loads(answer)

    def informer_pod(self, name: str) -> dict[str, Any]:
        """The pod as kube-scheduler's informer holds it (list items carry no kind or apiVersion)."""
        pod = self.fake.get_object("Pod", name, NAMESPACE)
        assert pod is not None
        pod.pop("kind", None)
        pod.pop("apiVersion", None)
        return pod

    async def settle(self) -> None:
        """Until every watch has delivered the fake API server's latest change of its kind."""
        latest: dict[str, int] = {}
        for version, resource, _, _ in reversed(self.fake._history):
            latest.setdefault(resource.kind, version)
        watcher = self.app.cluster.watcher
        assert watcher is not None
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while True:
            kinds = watcher.health()["kinds"]
            if all(int(kinds[kind]["resourceVersion"] or 0) >= version
                   for kind, version in latest.items() if kind in kinds and kind != "Event"):
                return
            if time.monotonic() > deadline:
                raise RuntimeError("the watches did not catch up with the fake API server")
            await asyncio.sleep(0.002)

    async def schedule(self, name: str, node_names: list[str], bound: list[str]) -> None:
        pod = self.informer_pod(name)
        args = {"Pod": pod, "Nodes": None, "NodeNames": node_names}
        passed = (await self.call("filter", args))["NodeNames"] or []
        if not passed:
            self.counts["unschedulable"] += 1
            if bound:
                victims = {}
                for victim in bound[-3:]:
                    raw = self.fake.get_object("Pod", victim, NAMESPACE)
                    assert raw is not None
                    node = raw["spec"]["nodeName"]
                    victims.setdefault(node, {"Pods": [], "NumPDBViolations": 0})["Pods"].append(
                        {"UID": raw["metadata"]["uid"]})
                await self.call("preempt", {"Pod": pod, "NodeNameToVictims": None,
                                            "NodeNameToMetaVictims": victims})
            return
        best = passed[0]
        if len(passed) > 1:  # kube-scheduler scores only when there is a choice
            scores = await self.call("prioritize", {"Pod": pod, "Nodes": None, "NodeNames": passed})
            best = max(scores, key=lambda entry: entry["Score"])["Host"]
        answer = await self.call("bind", {"PodName": name, "PodNamespace": NAMESPACE,
                                          "PodUID": pod["metadata"]["uid"], "Node": best})
        if answer["Error"]:
            self.counts["bind_errors"] += 1
        else:
            bound.append(name)
        await self.settle()

    def delete_bound(self, name: str) -> None:
        """The pod goes (deleted); its claims are released as the resourceclaim controller would."""
        pod = self.fake.get_object("Pod", name, NAMESPACE)
        assert pod is not None
        self.fake.remove_object("Pod", name, NAMESPACE)
        statuses = {entry["name"]: entry["resourceClaimName"]
                    for entry in (pod.get("status") or {}).get("resourceClaimStatuses") or []}
        status = pod.get("status") or {}
        extended = (status.get("extendedResourceClaimStatus") or {}).get("resourceClaimName")
        for ref in pod["spec"].get("resourceClaims") or []:
            claim_name = ref.get("resourceClaimName") or statuses.get(ref["name"])
            claim = self.fake.get_object("ResourceClaim", claim_name, NAMESPACE) if claim_name else None
            if claim is None:
                continue
            if ref.get("resourceClaimTemplateName"):
                self.fake.remove_object("ResourceClaim", claim_name, NAMESPACE)
                continue
            status = claim.get("status") or {}
            status["reservedFor"] = [entry for entry in status.get("reservedFor") or []
                                     if entry.get("uid") != pod["metadata"]["uid"]]
            if not status["reservedFor"]:
                status = {}
                claim["metadata"]["finalizers"] = []
            claim["status"] = status
            self.fake.put_object(claim)
        if extended:
            self.fake.remove_object("ResourceClaim", extended, NAMESPACE)


async def _until_ready(app: App, session: aiohttp.ClientSession) -> None:
    """Until /readyz says the server answers the verbs (cache synced, fence done)."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while True:
        async with session.get(app.server.urls["debug"] + "/readyz") as response:
            if response.status == 200:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"dra-extender did not become ready: {await response.text()}")
        await asyncio.sleep(0.01)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    # The fake API server names generated objects with `random`: seeded, they come out the same.
    saved = random.getstate()
    random.seed(args.seed)
    try:
        return await _run(args)
    finally:
        random.setstate(saved)


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    fake = FakeApiServer(history_size=100_000, bookmark_interval_s=0.5)
    cluster = _cluster(rng, args.nodes)
    workload, order = _workload(rng, args.pods)
    fake.seed(cluster + workload)
    url = await fake.start()
    node_names = [f"node-{index}" for index in range(args.nodes)]
    with tempfile.TemporaryDirectory(prefix="answer-digest-") as directory:
        options = ServeOptions(source=SourceOptions(kubeconfig=_kubeconfig(Path(directory), url)),
                               network=NetworkOptions(extender_port=0, debug_port=0))
        try:
            async with App(options) as app, aiohttp.ClientSession() as session:
                await _until_ready(app, session)
                digest_run = Run(fake, app, session, args.hashes)
                bound: list[str] = []
                cpu = time.process_time()
                for position, name in enumerate(order):
                    await digest_run.schedule(name, node_names, bound)
                    if position % args.churn_every == args.churn_every - 1 and len(bound) > 4:
                        digest_run.delete_bound(bound.pop(0))
                        await digest_run.settle()
                cpu = time.process_time() - cpu
        finally:
            await fake.stop()
    result: dict[str, Any] = {
        "digest": digest_run.digest.hexdigest(),
        "answers": sum(digest_run.counts[verb] for verb in VERBS),
        **{key: digest_run.counts[key]
           for key in ("filter", "prioritize", "bind", "preempt", "unschedulable", "bind_errors")},
        "pods": len(order), "nodes": args.nodes, "seed": args.seed, "still_bound": len(bound),
        "cpu_ms_per_pod": round(cpu * 1000 / max(len(order), 1), 3),
    }
    if digest_run.hashes is not None:
        result["hashes"] = digest_run.hashes
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=300)
    parser.add_argument("--nodes", type=int, default=40)
    parser.add_argument("--seed", type=int, default=31)
    parser.add_argument("--churn-every", type=int, default=7,
                        help="after every this many pods, delete the oldest bound pod and release its claims")
    parser.add_argument("--hashes", action="store_true", help="also list each answer's own sha256")
    args = parser.parse_args(argv)
    if args.pods < 1 or args.nodes < 1 or args.churn_every < 1:
        parser.error("--pods, --nodes and --churn-every must be positive")
    print(json.dumps(run_loop(run(args))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
