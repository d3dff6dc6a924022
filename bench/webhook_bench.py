"""Admission webhook latency at a steady request rate over HTTPS on loopback.

The webhook runs in its own process (as in a cluster, where the API server is another process) on a
synthetic cluster of 100 nodes x 8 GPUs with 800 running pods. A client sends a fixed rate of reviews
(open loop: requests leave on schedule whether or not earlier ones returned, and latency counts from the
scheduled time, so a stall shows up as latency instead of lowering the rate) over a few kept-alive TLS
connections, the way the API server reuses connections. The mix is what the API server sends when the
webhook configurations' matchConditions are in place:

  35% mutate   resourceclaims/status UPDATE  (allocation appears, tolerations to copy)
  35% validate resourceclaims/status UPDATE  (allocation + reservation for an existing pod)
  15% validate pods CREATE                   (shared and per-pod claims; 1 in 10 denied: claim full)
  12% validate resourceclaims CREATE         (two CEL selectors from a pool of 40 distinct ones)
   3% validate resourceclaimtemplates CREATE

Usage: python bench/webhook_bench.py [--json] [--rate 500] [--duration 10] [--connections 4]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import random
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from allocator import FeatureGates
from webhook import certs
from webhook.lookup import StaticClusterLookup
from webhook.server import WebhookServer

NODES = 100
GPUS_PER_NODE = 8
DRIVER = "gpu.example.com"
TOLERATIONS = [{"key": "maintenance", "operator": "Exists", "effect": "NoExecute"}]


def _uid(kind: str, name: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"{kind}/{name}"))


def _slice(node: int) -> dict:
    devices = [
        {
            "name": f"gpu-{i}",
            "attributes": {"model": {"string": "A100"}, "index": {"int": i}, "numa": {"int": i // 4}},
            "capacity": {"memory": {"value": "80Gi"}},
        }
        for i in range(GPUS_PER_NODE)
    ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"node-{node}-gpu", "uid": _uid("slice", str(node))},
        "spec": {
            "driver": DRIVER,
            "nodeName": f"node-{node}",
            "pool": {"name": f"node-{node}", "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def _claim(name: str, *, tolerations: bool = False, selectors: tuple[str, ...] = ()) -> dict:
    exactly: dict = {"deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 1}
    if tolerations:
        exactly["tolerations"] = TOLERATIONS
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "team", "uid": _uid("claim", name), "resourceVersion": "10"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
    }


def _allocation(node: int, device: int) -> dict:
    return {
        "devices": {
            "results": [
                {"request": "gpu", "driver": DRIVER, "pool": f"node-{node}", "device": f"gpu-{device}"}
            ]
        },
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [f"node-{node}"]}]}
            ]
        },
    }


def _pod(name: str, claim_name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "team", "uid": _uid("pod", name)},
        "spec": {
            "containers": [
                {"name": "main", "image": "trainer:1", "resources": {"claims": [{"name": "gpu"}]}}
            ],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": claim_name}],
        },
    }


def cluster_objects() -> list[dict]:
    objects: list[dict] = [_slice(n) for n in range(NODES)]
    for n in range(NODES):
        for d in range(GPUS_PER_NODE):
            name = f"job-{n}-{d}"
            user = _pod(name, name)
            claim = _claim(name)
            claim["status"] = {
                "allocation": _allocation(n, d),
                "reservedFor": [{"resource": "pods", "name": name, "uid": user["metadata"]["uid"]}],
            }
            objects += [user, claim]
    for shared, consumers in (("shared-open", 10), ("shared-full", 256)):
        claim = _claim(shared)
        claim["status"] = {
            "allocation": _allocation(0, 0),
            "reservedFor": [
                {"resource": "pods", "name": f"{shared}-{i}", "uid": _uid("pod", f"{shared}-{i}")}
                for i in range(consumers)
            ],
        }
        objects.append(claim)
    return objects


def _review(
    resource: str, operation: str, obj: dict, old: dict | None = None, sub_resource: str = ""
) -> dict:
    group = "" if resource == "pods" else "resource.k8s.io"
    kind = {
        "pods": "Pod",
        "resourceclaims": "ResourceClaim",
        "resourceclaimtemplates": "ResourceClaimTemplate",
    }[resource]
    request = {
        "uid": str(uuid.uuid4()),
        "kind": {"group": group, "version": "v1", "kind": kind},
        "resource": {"group": group, "version": "v1", "resource": resource},
        "requestKind": {"group": group, "version": "v1", "kind": kind},
        "requestResource": {"group": group, "version": "v1", "resource": resource},
        "name": obj["metadata"]["name"],
        "namespace": "team",
        "operation": operation,
        "userInfo": {
            "username": "system:kube-scheduler",
            "uid": "u-1",
            "groups": ["system:authenticated"],
            "extra": {},
        },
        "object": obj,
        "oldObject": old,
        "dryRun": False,
        "options": {"kind": f"{operation.title()}Options", "apiVersion": "meta.k8s.io/v1"},
    }
    if sub_resource:
        request["subResource"] = request["requestSubResource"] = sub_resource
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def review_mix(rng: random.Random, count: int) -> list[tuple[str, bytes]]:
    """(path, body) pairs in the benchmark's proportions."""
    selectors = [
        f'device.attributes["{DRIVER}"].model == "A100" && device.attributes["{DRIVER}"].index >= {i % 8}'
        for i in range(20)
    ] + [f'device.capacity["{DRIVER}"].memory.compareTo(quantity("{i + 1}Gi")) >= 0' for i in range(20)]
    mix: list[tuple[str, bytes]] = []
    for i in range(count):
        draw = rng.random()
        node, device = rng.randrange(NODES), rng.randrange(GPUS_PER_NODE)
        if draw < 0.70:
            name = f"new-{i}"
            old = _claim(name, tolerations=True)
            new = {**old, "status": {"allocation": _allocation(node, device)}}
            if draw < 0.35:
                mix.append(
                    ("/webhook/mutate", orjson.dumps(_review("resourceclaims", "UPDATE", new, old, "status")))
                )
                continue
            # Reservation for the pod that runs on that device.
            owner = f"job-{node}-{device}"
            old, new = _claim(owner), _claim(owner)
            old["status"] = {"allocation": _allocation(node, device)}
            new["status"] = {
                "allocation": _allocation(node, device),
                "reservedFor": [{"resource": "pods", "name": owner, "uid": _uid("pod", owner)}],
            }
            mix.append(
                ("/webhook/validate", orjson.dumps(_review("resourceclaims", "UPDATE", new, old, "status")))
            )
        elif draw < 0.85:
            target = (
                "shared-full" if rng.random() < 0.1 else rng.choice(["shared-open", f"job-{node}-{device}"])
            )
            mix.append(("/webhook/validate", orjson.dumps(_review("pods", "CREATE", _pod(f"p-{i}", target)))))
        elif draw < 0.97:
            claim = _claim(f"c-{i}", selectors=tuple(rng.sample(selectors, 2)))
            mix.append(("/webhook/validate", orjson.dumps(_review("resourceclaims", "CREATE", claim))))
        else:
            spec = _claim("t", selectors=(rng.choice(selectors),))["spec"]
            template = {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaimTemplate",
                "metadata": {"name": f"t-{i}", "namespace": "team", "uid": _uid("template", str(i))},
                "spec": {"spec": spec},
            }
            mix.append(
                ("/webhook/validate", orjson.dumps(_review("resourceclaimtemplates", "CREATE", template)))
            )
    return mix


async def serve(directory: str) -> None:
    """Benchmark server process: prints the port, then serves until killed."""
    logging.basicConfig(level=logging.WARNING)
    server = WebhookServer(
        StaticClusterLookup(cluster_objects()),
        cert_file=os.path.join(directory, certs.CERT_FILE),
        key_file=os.path.join(directory, certs.KEY_FILE),
        host="127.0.0.1",
        port=0,
        features=FeatureGates(),
    )
    await server.start()
    gc.freeze()  # the cluster objects live forever: keep them out of the collector's generations
    print(server.port, flush=True)
    await asyncio.Event().wait()


async def _post(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str, body: bytes) -> int:
    """One HTTP/1.1 request on a kept-alive connection; returns the status code.

    Hand-written rather than aiohttp's client: the client shares the machine with the server, and the
    less CPU it burns per request, the more the figures are the server's.
    """
    head = f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
    writer.write(f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body)
    status = int((await reader.readline()).split()[1])
    length = 0
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    await reader.readexactly(length)
    return status


async def drive(port: int, ca_pem: bytes, rate: float, duration: float, connections: int) -> dict:
    mix = review_mix(random.Random(5), int(rate * (duration + 1)) + 1)
    context = ssl.create_default_context(cadata=ca_pem.decode())
    queue: asyncio.Queue[tuple[int, float] | None] = asyncio.Queue()
    latencies: list[float] = []
    errors = 0
    warmup = int(rate)  # the first second is not measured

    async def connection() -> None:
        nonlocal errors
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=context, server_hostname="localhost"
        )
        while (item := await queue.get()) is not None:
            index, scheduled = item
            status = await _post(reader, writer, *mix[index])
            if index >= warmup:
                latencies.append(time.perf_counter() - scheduled)
                errors += status != 200
        writer.close()

    workers = [asyncio.create_task(connection()) for _ in range(connections)]
    await asyncio.sleep(0.2)  # TLS handshakes done before the clock starts
    start = time.perf_counter()
    for index in range(len(mix)):
        scheduled = start + index / rate
        delay = scheduled - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        queue.put_nowait((index, scheduled))
    for _ in workers:
        queue.put_nowait(None)
    await asyncio.gather(*workers)
    elapsed = time.perf_counter() - (start + warmup / rate)
    handler_share = await _handler_share_under(port, context, 0.001)

    latencies.sort()
    measured = len(latencies)
    return {
        "reviews_per_s": round(measured / elapsed, 1),
        "p50_ms": round(statistics.median(latencies) * 1000, 3),
        "p99_ms": round(latencies[min(measured - 1, int(measured * 0.99))] * 1000, 3),
        "max_ms": round(latencies[-1] * 1000, 3),
        "reviews": measured,
        "errors": errors,
        # From the server's own histogram (warm-up included): rule evaluation alone, without HTTP and TLS.
        "handler_share_under_1ms": handler_share,
    }


async def _handler_share_under(port: int, context: ssl.SSLContext, bound: float) -> float:
    """Share of reviews whose in-server handling took at most `bound` seconds, read from /metrics."""
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=context, server_hostname="localhost"
    )
    writer.write(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
    exposition = (await reader.read()).decode()
    writer.close()
    within = total = 0.0
    for line in exposition.splitlines():
        if line.startswith("dra_extender_webhook_review_duration_seconds_bucket"):
            value = float(line.rsplit(" ", 1)[1])
            if f'le="{bound}"' in line:
                within += value
            elif 'le="+Inf"' in line:
                total += value
    return round(within / total, 4) if total else 0.0


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc); -1 where unavailable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return -1.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json", action="store_true", help="print only the JSON summary")
    parser.add_argument("--rate", type=float, default=500.0, help="reviews per second (default 500)")
    parser.add_argument("--duration", type=float, default=10.0, help="measured seconds (default 10)")
    parser.add_argument("--connections", type=int, default=4, help="kept-alive TLS connections (default 4)")
    parser.add_argument("--serve", metavar="DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve(args.serve))
        return 0
    with tempfile.TemporaryDirectory() as directory:
        ca = certs.generate_ca()
        certs.write_serving_files(Path(directory), ca, certs.generate_serving_cert(ca, ["localhost"]))
        server = subprocess.Popen(
            [sys.executable, __file__, "--serve", directory],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        try:
            assert server.stdout is not None
            port = int(server.stdout.readline())
            cpu_before = _cpu_seconds(server.pid)
            summary = asyncio.run(
                drive(port, ca.certificate_pem(), args.rate, args.duration, args.connections)
            )
            if cpu_before >= 0:
                # Includes the unmeasured warm-up second, so it slightly overstates the per-review cost.
                cpu_used = _cpu_seconds(server.pid) - cpu_before
                summary["server_cpu_ms_per_review"] = round(
                    cpu_used * 1000 / (summary["reviews"] + args.rate), 3
                )
        finally:
            server.terminate()
            server.wait(10)
    # Context for the figures: the machine is shared, and p99 follows the load of the other processes.
    summary["load_avg_1m"] = round(os.getloadavg()[0], 2)
    if args.json:
        print(orjson.dumps(summary).decode())
    else:
        print(
            f"{summary['reviews']} reviews at {summary['reviews_per_s']}/s over HTTPS: "
            f"p50 {summary['p50_ms']} ms, p99 {summary['p99_ms']} ms, max {summary['max_ms']} ms, "
            f"{summary['errors']} errors"
        )
    return 0 if summary["errors"] == 0 else 1


if __name__ == "__main__":
    from termination import stop_on_sigterm

    stop_on_sigterm()
    sys.exit(main())
