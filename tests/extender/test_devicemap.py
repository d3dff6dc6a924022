"""GET /debug/ui, the device map: states of the example cluster's devices, escaping of everything that
comes from the cluster or the URL, pagination by node, and the explain links."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import dra_objects as o
import pytest
from aiohttp.test_utils import TestClient, TestServer

from allocator import FeatureGates
from extender.http.server import ExtenderServer
from extender.kube.objects_io import load_objects
from extender.plugin.claimwriter import ClaimWriter
from extender.plugin.scheduling import Scheduler
from extender.state.assume import AssumeCache
from extender.state.cache import ClusterCache

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "cluster"
HOSTILE = '<img src=x onerror="alert(1)">&'


def taint_rule(name: str, pool: str, device: str, *, value: str = "") -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1alpha3", "kind": "DeviceTaintRule",
        "metadata": {"name": name, "uid": f"uid-{name}"},
        "spec": {"deviceSelector": {"driver": "gpu.example.com", "pool": pool, "device": device},
                 "taint": {"key": "example.com/unhealthy", "value": value, "effect": "NoSchedule"}},
    }


def build_server(objects: list[dict[str, Any]]) -> ExtenderServer:
    cache = ClusterCache.from_objects(objects, FeatureGates())
    assume = AssumeCache()
    assume.attach(cache)
    return ExtenderServer(Scheduler(cache, assume, ClaimWriter(None, cache)))


def example_server() -> ExtenderServer:
    """The example cluster, with node-2/gpu-3 tainted by a rule and node-3/gpu-2 in flight for inference."""
    objects = [*load_objects([EXAMPLES]), taint_rule("broken", "node-2", "gpu-3", value=HOSTILE)]
    server = build_server(objects)
    claim = server.cache.claim("default", "single-gpu")
    allocation = {"devices": {"results": [
        {"request": "gpu", "driver": "gpu.example.com", "pool": "node-3", "device": "gpu-2"}]}}
    inference = server.cache.pod("default", "inference")
    server.scheduler.assume.reserve(claim, allocation, inference["metadata"]["uid"])
    return server


async def fetch(server: ExtenderServer, url: str) -> tuple[int, str, Any]:
    client = TestClient(TestServer(server.debug_app()))
    await client.start_server()
    try:
        response = await client.get(url)
        return response.status, await response.text(), response.headers
    finally:
        await client.close()


def states(page: str) -> dict[str, str]:
    """pool/device -> state, from the rendered page."""
    found = {}
    for pool, body in re.findall(r'<div class="pool" data-pool="[^/"]+/([^"]+)">(.*?)</div>', page, re.S):
        for state, device in re.findall(r'data-state="([^"]+)" data-device="([^"]+)"', body):
            found[f"{pool}/{device}"] = state
    return found


async def test_the_example_cluster_with_each_state() -> None:
    status, page, headers = await fetch(example_server(), "/debug/ui")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert "default-src 'none'" in headers["Content-Security-Policy"]
    found = states(page)
    assert len(found) == 28
    assert found["node-1/gpu-0"] == found["node-1/gpu-1"] == "allocated"
    assert found["node-3/gpu-2"] == "in flight"
    assert found["node-2/gpu-3"] == "tainted"
    # gpu-2 of node-3 in flight takes all of its counters: its halves are not free any more
    assert found["node-3/gpu-2-half-0"] == found["node-3/gpu-2-half-1"] == "counters used up"
    assert found["node-3/gpu-1-half-0"] == "free"
    assert sum(1 for state in found.values() if state == "free") == 22
    assert "22 free, 2 allocated, 1 in flight, 1 tainted, 2 counters used up" in page
    # who holds what: the claim and the pods it is reserved for; the in-flight claim and its pod
    assert 'title="allocated; claim default/training; pods default/training-0"' in page
    assert "claim default/single-gpu (pod default/inference)" in page
    # pending pods with claims, each linked to its explanation; the running pod is not pending
    pending = re.findall(r"<tr><td>([^<]+)</td><td>([^<]*)", page)
    assert ("default/a100-job", "default/a100-80gb") in pending
    assert ("default/worker", "default/worker-gpu-k8f2x") in pending
    assert "default/training-0" not in [pod for pod, _ in pending]
    assert 'href="/debug/explain?pod=default%2Fa100-job&amp;format=text"' in page


async def test_the_explain_link_answers() -> None:
    server = example_server()
    _, page, _ = await fetch(server, "/debug/ui")
    link = re.search(r'class="explain" href="([^"]+a100-job[^"]+)"', page).group(1).replace("&amp;", "&")
    status, text, _ = await fetch(server, link)
    assert status == 200 and text.startswith("pod default/a100-job: fits 1 of 3 node(s)")


async def test_everything_from_the_cluster_and_the_url_is_escaped() -> None:
    objects = [*load_objects([EXAMPLES]), taint_rule("broken", "node-2", "gpu-3", value=HOSTILE)]
    for raw in objects:
        if raw["kind"] == "ResourceSlice" and raw["spec"]["pool"]["name"] == "node-1":
            raw["spec"]["devices"][7]["name"] = '"><script>alert(2)</script>'
    hostile_filter = "/debug/ui?node=%22%3E%3Cscript%3Ealert(3)%3C/script%3E"
    status, page, _ = await fetch(build_server(objects), hostile_filter)
    assert status == 200
    assert "<script" not in page and "<img" not in page and 'onerror="' not in page
    assert 'value="&quot;&gt;&lt;script&gt;alert(3)&lt;/script&gt;"' in page
    _, page, _ = await fetch(build_server(objects), "/debug/ui?node=node-")
    assert "<script" not in page and "<img" not in page and 'onerror="' not in page
    assert "&quot;&gt;&lt;script&gt;alert(2)&lt;/script&gt;" in page
    assert "example.com/unhealthy=&lt;img src=x onerror=&quot;alert(1)&quot;&gt;&amp;:NoSchedule" in page


async def test_pages_by_node() -> None:
    server = example_server()
    _, page, _ = await fetch(server, "/debug/ui?per_page=1&page=2")
    assert re.findall(r'<section class="node" data-node="([^"]+)"', page) == ["node-2"]
    assert "page 2 of 3" in page and ">previous<" in page and ">next<" in page
    assert 'href="/debug/ui?per_page=1&amp;page=3"' in page
    _, page, _ = await fetch(server, "/debug/ui?node=node-3")
    assert re.findall(r'data-node="([^"]+)"', page) == ["node-3"]
    # "²" and "٣" are str.isdigit() but not int(): a 400 as well, not a 500.
    for bad in ("page=0", "page=x", "per_page=100000", "page=%C2%B2", "per_page=%D9%A3"):
        status, text, _ = await fetch(server, f"/debug/ui?{bad}")
        assert status == 400 and "query parameter" in text, bad


async def test_five_thousand_nodes_render_one_page_of_them() -> None:
    objects = o.cluster(5000, 8)
    pods = [o.pod(f"p{i}", [f"c{i}"]) for i in range(300)]
    server = build_server(objects + pods)
    status, page, _ = await fetch(server, "/debug/ui")
    assert status == 200
    assert len(re.findall(r'<section class="node"', page)) == 50
    assert "40000 device(s) in 5000 pool(s)" in page and "page 1 of 100" in page
    assert "Pending pods that use devices (300)" in page and "and 100 more" in page
    assert len(page) < 400_000
    _, last, _ = await fetch(server, "/debug/ui?page=100")
    assert 'data-node="node-999"' in last


def test_shared_pools_group_apart() -> None:
    from extender.http.devicemap import SHARED_POOLS, build_map, take_view

    objects = load_objects([EXAMPLES])
    shared = copy.deepcopy(next(raw for raw in objects if raw["kind"] == "ResourceSlice"))
    shared["metadata"].update(name="network", uid="uid-network")
    shared["spec"].pop("nodeName")
    shared["spec"].update(allNodes=True, pool={"name": "fabric", "generation": 1, "resourceSliceCount": 1})
    server = build_server([*objects, shared])
    device_map = build_map(take_view(server.cache, server.scheduler.in_flight()))
    assert [pool.pool for pool in device_map.groups[SHARED_POOLS]] == ["fabric"]


@pytest.mark.parametrize("older", [True, False])
def test_only_the_newest_generation_of_a_pool_counts(older: bool) -> None:
    from extender.http.devicemap import build_map, take_view

    objects = load_objects([EXAMPLES])
    stale = copy.deepcopy(next(raw for raw in objects if raw["kind"] == "ResourceSlice"))
    stale["metadata"].update(name="stale", uid="uid-stale")
    stale["spec"]["pool"]["generation"] = 0 if older else 2
    stale["spec"]["devices"] = stale["spec"]["devices"][:1]
    server = build_server([*objects, stale])
    device_map = build_map(take_view(server.cache, server.scheduler.in_flight()))
    [pool] = device_map.groups["node-1"]
    assert len(device_map.devices(pool)) == pool.device_count == (8 if older else 1)


async def test_a_claim_reserved_for_a_podgroup_names_the_group() -> None:
    """A workload claim (KEP-5729) is reserved for its PodGroup, not for pods: the map names the group
    instead of showing an allocated device that nobody seems to use."""
    claim = o.allocate(o.claim("train-gpus"), "node-0", ["gpu-0"], [
        {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "train", "uid": "uid-train"},
        {"resource": "pods", "name": "solo", "uid": "uid-solo"},
    ])
    _, page, _ = await fetch(build_server([*o.cluster(1, 2), claim]), "/debug/ui")
    assert states(page)["node-0/gpu-0"] == "allocated"
    assert 'title="allocated; claim default/train-gpus; pods default/solo; podgroups default/train"' in page


async def test_partitions_counters_classes_and_the_time_of_the_picture() -> None:
    _, page, _ = await fetch(example_server(), "/debug/ui")
    # partitions under the counter set they draw on, with what is consumed of it
    sets = dict(re.findall(r'<span class="set" data-set="([^"]+)"><b>[^<]+</b> <small>([^<]*)</small>', page))
    assert sets["gpu-2-counters"] == "memory 80Gi of 80Gi used, multiprocessors 132 of 132 used"
    assert sets["gpu-1-counters"] == "memory 0 of 80Gi used, multiprocessors 0 of 132 used"
    node_3 = page.split('data-node="node-3"', 1)[1].split("</section>", 1)[0]
    assert re.findall(r'data-set="gpu-2-counters">.*?</span></span>', node_3, re.S)
    # per node and DeviceClass, used and free
    classes = dict(re.findall(r'data-node="([^"]+)"><b>[^<]+</b> <span class="classes">([^<]+)</span>', page))
    assert classes["node-1"].startswith("gpu.example.com: 2 used, 6 free")
    assert re.search(r'<p class="asof">as of \d{4}-\d\d-\d\dT[\d:]+[+-]\d\d:\d\d</p>', page)


async def test_pods_asking_for_extended_resources_are_pending_too() -> None:
    objects = load_objects([EXAMPLES])
    meta = {"name": "ext", "namespace": "default", "uid": "u-ext"}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
           "spec": {"containers": [{"name": "c", "image": "x",
                                    "resources": {"requests": {"example.com/gpu": "1"},
                                                  "limits": {"example.com/gpu": "1"}}}]}}
    _, page, _ = await fetch(build_server([*objects, pod]), "/debug/ui")
    row = re.search(r"<tr><td>default/ext</td><td>(.*?)</td>", page)
    assert row is not None and "extended resources example.com/gpu" in row.group(1)


async def test_the_headroom_panel() -> None:
    server = example_server()
    _, page, _ = await fetch(server, "/debug/ui?headroom=gpu.example.com")
    rows = r'<tr data-shape="([^"]+)"><td>[^<]+</td><td class="total">(\d+)</td>'
    [(shape, total)] = re.findall(rows, page)
    assert (shape, total) == ("gpu.example.com", "16")  # 18 without the taint and the allocation in flight
    rooms = dict(re.findall(r'data-node="([^"]+)"><b>[^<]+</b> <span class="room" data-room="(\d+)"', page))
    assert rooms == {"node-1": "6", "node-2": "7", "node-3": "3"}
    assert 'class="dev tainted taint stranded"' in page  # node-2's tainted gpu-3
    status, text, _ = await fetch(server, "/debug/ui?headroom=gpu.example.com:0")
    assert status == 400 and "query parameter headroom" in text
    _, page, _ = await fetch(server, "/debug/ui?headroom=nope")
    assert "DeviceClass nope not found" in page
