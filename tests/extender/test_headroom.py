"""Headroom against brute force on small worlds: the real allocator's count of pods that fit (placed one
after another, each the allocator's first solution) equals an independent brute force of the same
placement order, never exceeds the true maximum, and the stranded devices and their reasons match. Then
the shapes (class, template, pod), allocations in flight, cordoned nodes, nodeSelector, and the reuse
of one node's answer for its twins."""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from test_server import EXAMPLES

from allocator import FeatureGates
from extender.cli import main
from extender.kube.objects_io import load_objects
from extender.plugin.headroom import Headroom, ShapeError, class_shape, pod_shape, template_shape
from extender.state.assume import AssumeCache
from extender.state.cache import ClusterCache

DRIVER = "gpu.example.com"
CAPACITY = 4


@dataclass
class Dev:
    model: str
    numa: int
    tainted: bool
    consumes: int | None  # of the node's one counter set, CAPACITY in all


@dataclass
class World:
    devices: list[Dev]
    used: set[int]
    class_model: str | None  # the DeviceClass selects this model (None: every device)
    count: int
    match_numa: bool


def random_world(rng: random.Random) -> World:
    partitions = rng.random() < 0.5
    devices = [Dev(rng.choice("ab"), rng.randint(0, 1), rng.random() < 0.15,
                   rng.randint(1, 3) if partitions else None) for _ in range(rng.randint(1, 6))]
    used: set[int] = set()
    budget = CAPACITY
    for index, device in enumerate(devices):
        if rng.random() < 0.2 and (device.consumes or 0) <= budget:
            used.add(index)
            budget -= device.consumes or 0
    return World(devices, used, rng.choice([None, "a"]), rng.randint(1, 3), rng.random() < 0.4)


def objects(world: World, node: str = "n") -> list[dict[str, Any]]:
    counters = any(device.consumes is not None for device in world.devices)
    pool = {"name": node, "generation": 1, "resourceSliceCount": 2 if counters else 1}
    devices = []
    for index, device in enumerate(world.devices):
        raw: dict[str, Any] = {"name": f"d{index}", "attributes": {
            "model": {"string": device.model}, "numa": {"int": device.numa}}}
        if device.tainted:
            raw["taints"] = [{"key": "example.com/bad", "effect": "NoSchedule"}]
        if device.consumes is not None:
            uses = {"mem": {"value": str(device.consumes)}}
            raw["consumesCounters"] = [{"counterSet": "cs", "counters": uses}]
        devices.append(raw)
    selectors = ([{"cel": {"expression": f'device.attributes["{DRIVER}"].model == "{world.class_model}"'}}]
                 if world.class_model else [])
    out: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "uid": f"uid-{node}"}},
        {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu"},
         "spec": {"selectors": selectors}},
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
         "metadata": {"name": f"{node}-b-devices", "uid": f"s1-{node}"},
         "spec": {"driver": DRIVER, "nodeName": node, "pool": pool, "devices": devices}},
    ]
    if counters:
        shared = [{"name": "cs", "counters": {"mem": {"value": f"{CAPACITY}"}}}]
        out.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                    "metadata": {"name": f"{node}-a-counters", "uid": f"s0-{node}"},
                    "spec": {"driver": DRIVER, "nodeName": node, "pool": pool, "sharedCounters": shared}})
    if world.used:
        out.append({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": f"used-{node}", "namespace": "default", "uid": f"used-{node}"},
            "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu"}}]}},
            "status": {"allocation": {"devices": {"results": [
                {"request": "r", "driver": DRIVER, "pool": node, "device": f"d{index}"}
                for index in sorted(world.used)]}}},
        })
    return out


def _valid(world: World, combo: tuple[int, ...], used: set[int], left: int) -> bool:
    devices = world.devices
    if any(i in used or devices[i].tainted or (world.class_model and devices[i].model != world.class_model)
           for i in combo):
        return False
    if world.match_numa and len({devices[i].numa for i in combo}) > 1:
        return False
    return sum(devices[i].consumes or 0 for i in combo) <= left


def brute_force(world: World) -> tuple[int, dict[str, str], int]:
    """(copies placed one after another, each the first valid device set in device order; the stranded
    devices and why; the most copies any choice could place)."""
    used = set(world.used)
    left = CAPACITY - sum(world.devices[i].consumes or 0 for i in used)
    copies = 0
    while True:
        combo = next((c for c in itertools.combinations(range(len(world.devices)), world.count)
                      if _valid(world, c, used, left)), None)
        if combo is None:
            break
        used |= set(combo)
        left -= sum(world.devices[i].consumes or 0 for i in combo)
        copies += 1
    stranded, usable = {}, []
    for index, device in enumerate(world.devices):
        if index in used or (world.class_model and device.model != world.class_model):
            continue
        if device.tainted:
            stranded[f"d{index}"] = "taint"
        elif device.consumes is not None and device.consumes > left:
            stranded[f"d{index}"] = "counters"
        else:
            usable.append(f"d{index}")
    for name in usable:
        stranded[name] = "constraint" if world.match_numa and len(usable) >= world.count else "too few"

    def most(taken: set[int], budget: int) -> int:
        best = 0
        for combo in itertools.combinations(range(len(world.devices)), world.count):
            if _valid(world, combo, taken, budget):
                spent = sum(world.devices[i].consumes or 0 for i in combo)
                best = max(best, 1 + most(taken | set(combo), budget - spent))
        return best

    return copies, stranded, most(set(world.used), CAPACITY - sum(
        world.devices[i].consumes or 0 for i in world.used))


def headroom_of(objs: list[dict[str, Any]], shape: Any, **kwargs: Any) -> dict[str, Any]:
    cache = ClusterCache.from_objects(objs, FeatureGates())
    assume = AssumeCache()
    assume.attach(cache)
    return Headroom(cache, assume).compute(shape, **kwargs)


@pytest.mark.parametrize("seed", range(300))
def test_the_allocators_count_is_the_brute_forces(seed: int) -> None:
    world = random_world(random.Random(seed))
    shape = class_shape("gpu", world.count, match_attributes=[f"{DRIVER}/numa"] if world.match_numa else [])
    report = headroom_of(objects(world), shape)
    [node] = report["nodes"]
    copies, stranded, best = brute_force(world)
    assert node["count"] == copies == report["total"], world
    assert copies <= best
    assert {s["device"].rsplit("/", 1)[1]: s["reason"] for s in node["stranded"]} == stranded, world


def test_a_greedy_placement_can_leave_less_than_the_most() -> None:
    """A whole GPU placed first leaves its partitions stranded: what scheduling would do, said so."""
    devices = [Dev("a", 0, False, 4), Dev("a", 0, False, 2), Dev("a", 0, False, 2)]
    world = World(devices, set(), None, 1, False)
    copies, stranded, best = brute_force(world)
    report = headroom_of(objects(world), class_shape("gpu"))
    assert report["total"] == copies == 1 and best == 2
    assert {s["reason"] for s in report["nodes"][0]["stranded"]} == {"counters"} == set(stranded.values())


def _example(extra: list[dict[str, Any]] | None = None) -> tuple[ClusterCache, AssumeCache]:
    cache = ClusterCache.from_objects([*load_objects([EXAMPLES]), *(extra or [])], FeatureGates())
    assume = AssumeCache()
    assume.attach(cache)
    return cache, assume


def test_twins_with_shared_counters_get_the_answer_their_own_search_would() -> None:
    world = World([Dev("a", i % 2, i == 4, 1 + i % 2) for i in range(5)], {0}, None, 1, False)
    objs = [obj for node in ("n1", "n2", "n3") for obj in objects(world, node)
            if obj["kind"] != "DeviceClass" or node == "n1"]
    together = headroom_of(objs, class_shape("gpu"))
    apart = [headroom_of(objs, class_shape("gpu"), nodes=[n])["nodes"][0] for n in ("n1", "n2", "n3")]
    assert together["nodes"] == apart
    copies, stranded, _ = brute_force(world)
    assert [entry["count"] for entry in apart] == [copies] * 3
    assert {s["device"].rsplit("/", 1)[1]: s["reason"] for s in apart[2]["stranded"]} == stranded


def test_twins_get_the_answer_their_own_search_would() -> None:
    world = World([Dev("a", i % 2, i == 3, None) for i in range(6)], {1}, None, 2, True)
    objs = [obj for node in ("n1", "n2", "n3") for obj in objects(world, node)
            if obj["kind"] != "DeviceClass" or node == "n1"]
    cache = ClusterCache.from_objects(objs, FeatureGates())
    node = cache.node("n2")
    assert node is not None and cache.inventory.node_likeness(node, cache.features)[1] is not None
    shape = class_shape("gpu", 2, match_attributes=[f"{DRIVER}/numa"])
    together = headroom_of(objs, shape)
    apart = [headroom_of(objs, shape, nodes=[n])["nodes"][0] for n in ("n1", "n2", "n3")]
    assert together["nodes"] == apart
    # d0+d2 fit; d3 is tainted; d4 (numa 0) and d5 (numa 1) are free but not on one numa node.
    assert apart[1] == {"node": "n2", "count": 1, "stranded": [
        {"device": f"{DRIVER}/n2/d3", "reason": "taint"},
        {"device": f"{DRIVER}/n2/d4", "reason": "constraint"},
        {"device": f"{DRIVER}/n2/d5", "reason": "constraint"}]}


def test_allocations_in_flight_take_devices() -> None:
    cache, assume = _example()
    before = Headroom(cache, assume).compute(class_shape("gpu.example.com"), nodes=["node-2"])
    claim = cache.claim("default", "single-gpu")
    assert claim is not None and claim.allocation is None
    allocation = {"devices": {"results": [{"request": "gpu", "driver": "gpu.example.com", "pool": "node-2",
                                           "device": "gpu-0"}]}}
    assume.reserve(claim, allocation, pod_uid="p")
    after = Headroom(cache, assume).compute(class_shape("gpu.example.com"), nodes=["node-2"])
    assert after["total"] == before["total"] - 1


def test_shapes_from_a_template_and_a_pod() -> None:
    cache, assume = _example()
    [template] = [raw for raw in cache.valid_objects("ResourceClaimTemplate")]
    headroom = Headroom(cache, assume)
    from_template = headroom.compute(template_shape(template))
    [pod] = [raw for raw in cache.valid_objects("Pod") if (raw["spec"].get("resourceClaims") or [{}])[0].get(
        "resourceClaimTemplateName")]
    from_pod = headroom.compute(pod_shape(
        pod, lambda ns, name: cache.raw("ResourceClaimTemplate", f"{ns}/{name}")))
    assert from_pod["total"] == from_template["total"] > 0
    named = {"metadata": {"name": "x", "namespace": "default"},
             "spec": {"resourceClaims": [{"name": "g", "resourceClaimName": "shared"}]}}
    with pytest.raises(ShapeError, match="every pod would share"):
        pod_shape(named, lambda ns, name: None)
    with pytest.raises(ShapeError, match="not found"):
        headroom.compute(class_shape("no-such-class"))


def test_cordoned_nodes_and_node_selectors_take_no_pods() -> None:
    cache, assume = _example()
    node = dict(cache.raw("Node", "node-2") or {})
    cache.apply("Node", "MODIFIED", {**node, "spec": {"unschedulable": True},
                                     "metadata": {**node["metadata"], "resourceVersion": "999"}})
    report = Headroom(cache, assume).compute(class_shape("gpu.example.com"))
    assert report["skipped"] == {"node-2": "cordoned (spec.unschedulable)"}
    assert [entry["node"] for entry in report["nodes"]] == ["node-1", "node-3"]


def test_the_headroom_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    snapshot = ["--snapshot", str(EXAMPLES)]
    assert main(["headroom", "--class", "gpu.example.com", *snapshot]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("18 more pod(s) of shape 1 x gpu.example.com fit on 3 of 3 node(s) as of ")
    assert [line.split()[:3] for line in lines[1:]] == [["NODE", "PODS", "STRANDED"], ["node-2", "8", "-"],
                                                        ["node-1", "6", "-"], ["node-3", "4", "8"]]
    assert main(["headroom", "--template", "one-gpu", *snapshot, "-o", "jsonpath={.total}"]) == 0
    from_template = capsys.readouterr().out
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "new"},
           "spec": {"nodeSelector": {"kubernetes.io/hostname": "node-2"},
                    "resourceClaims": [{"name": "g", "resourceClaimTemplateName": "one-gpu"}],
                    "containers": [{"name": "c", "image": "x"}]}}
    (tmp_path / "pod.yaml").write_text(yaml.safe_dump(pod))
    assert main(["headroom", "-f", str(tmp_path / "pod.yaml"), *snapshot, "-o", "json"]) == 0
    report = orjson.loads(capsys.readouterr().out)
    assert report["total"] < int(from_template) and set(report["skipped"]) == {"node-1", "node-3"}
    assert main(["headroom", "--class", "gpu.example.com", "--count", "99", *snapshot]) == 1
    capsys.readouterr()
    for bad, message in ((["--class", "nope"], "DeviceClass nope not found"),
                         (["--class", "gpu.example.com", "--template", "one-gpu"], "exactly one of"),
                         (["--template", "one-gpu", "--count", "2"], "go with --class"),
                         (["--template", "absent"], "default/absent not found")):
        assert main(["headroom", *bad, *snapshot]) == 2
        assert message in capsys.readouterr().err
