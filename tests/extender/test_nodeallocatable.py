"""Node allocatable resources backed by DRA (gate DRANodeAllocatableResources): devices' cpu/memory/hugepages
footprint added to the pod's requests at filter, written to the pod at bind, and the sharing rule."""

from __future__ import annotations

import copy
from typing import Any

import aiohttp
import dra_objects as o
import orjson
import pytest
from fakeapi import ApiRequest

from allocator import FeatureGates, InvalidObjectError, Inventory, Node, ResourceClaim, ResourceSlice
from extender.http.explain import explain_pod, render_text
from extender.http.server import ExtenderServer
from extender.kube.client import KubeClient
from extender.plugin.claimwriter import ClaimWriter
from extender.plugin.filtercache import FilterCache
from extender.plugin.nodeallocatable import (
    ClaimUse,
    NodeAllocatableError,
    NodeUsage,
    PodDemand,
    as_fit_units,
    claim_statuses,
    container_requests,
    node_usage,
    pod_level_shortfall,
    pod_requests,
)
from extender.plugin.planning import SchedulingError
from extender.plugin.scheduling import BindFailed, Scheduler
from extender.plugin.verdicts import Reason, Words
from extender.state.assume import AssumeCache
from extender.state.cache import ClusterCache
from extender.state.podtransform import slim_pod

ON = FeatureGates({"DRANodeAllocatableResources": True})
CPU_DRIVER = "cpu.example.com"
MEM_DRIVER = "mem.example.com"
NODES = ["node-0", "node-1"]


def node(name: str, cpu: str = "8", memory: str = "16Gi") -> dict[str, Any]:
    raw = o.node(name)
    raw["status"] = {"capacity": {"cpu": cpu, "memory": memory, "pods": "110"},
                     "allocatable": {"cpu": cpu, "memory": memory, "pods": "110"}}
    return raw


def driver_slice(node_name: str, driver: str, devices: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": f"{node_name}-{driver}", "uid": f"{node_name}-{driver}", "resourceVersion": "1"},
        "spec": {"driver": driver, "nodeName": node_name,
                 "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1}, "devices": devices},
    }


def cpu_devices(count: int, cores: str = "2") -> list[dict[str, Any]]:
    """CPU groups: each device is `cores` node CPUs."""
    mapping = {"cpu": {"mapping": {"deviceMultiplier": cores}}}
    return [{"name": f"cpus-{i}", "nodeAllocatableResources": mapping} for i in range(count)]


def gpu_devices(count: int) -> list[dict[str, Any]]:
    """GPUs pinning host memory: 1Gi per pod plus 512Mi per container using them."""
    return [{"name": f"gpu-{i}", "nodeAllocatableResources": {
        "memory": {"overhead": {"perPod": "1Gi", "perContainer": "512Mi"}}}} for i in range(count)]


def memory_device() -> dict[str, Any]:
    """Node memory as a consumable device: what a claim consumes is node memory."""
    return {"name": "mem-0", "allowMultipleAllocations": True,
            "capacity": {"memory": {"value": "12Gi", "requestPolicy": {"default": "1Gi",
                                                                      "validRange": {"min": "1Gi"}}}},
            "nodeAllocatableResources": {"memory": {"mapping": {"capacityKey": "memory",
                                                                "capacityMultiplier": "1"}}}}


def world(*, cpus: int = 4, extra: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    objs: list[dict[str, Any]] = [
        o.device_class("cpus", f'device.driver == "{CPU_DRIVER}"'),
        o.device_class("gpus", f'device.driver == "{o.DRIVER}"'),
        o.device_class("memory", f'device.driver == "{MEM_DRIVER}"'),
    ]
    for name in NODES:
        objs += [node(name), driver_slice(name, CPU_DRIVER, cpu_devices(cpus)),
                 driver_slice(name, o.DRIVER, gpu_devices(2)),
                 driver_slice(name, MEM_DRIVER, [memory_device()])]
    return objs + (extra or [])


def claim(name: str, device_class: str, count: int = 1, memory: str | None = None) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": device_class, "count": count}
    if memory is not None:
        exactly = {"deviceClassName": device_class, "capacity": {"requests": {"memory": memory}}}
    return o.claim(name, requests=[{"name": "req", "exactly": exactly}])


def pod(name: str, claims: list[str], *, cpu: str | None = "1", memory: str | None = "1Gi",
        node_name: str | None = None, containers: int = 1) -> dict[str, Any]:
    raw = o.pod(name, claims)
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    main = raw["spec"]["containers"][0]
    main["resources"]["requests"] = requests
    for index in range(1, containers):
        raw["spec"]["containers"].append({**copy.deepcopy(main), "name": f"side-{index}"})
    if node_name is not None:
        raw["spec"]["nodeName"] = node_name
        raw["status"]["phase"] = "Running"
    return raw


def make(objs: list[dict[str, Any]], features: FeatureGates = ON,
         client: KubeClient | None = None) -> Scheduler:
    """A scheduler over `objs`; its binds write through `client` (a fake API server), else to the cache."""
    cache = ClusterCache.from_objects(copy.deepcopy(objs) if client is not None else objs, features)
    assume = AssumeCache()
    assume.attach(cache)
    return Scheduler(cache, assume, ClaimWriter(client, cache))


def current(scheduler: Scheduler, name: str) -> dict[str, Any]:
    found = scheduler.cache.pod("default", name)
    assert found is not None
    return found


# ---- the gate ---------------------------------------------------------------------------------------

def test_gate_is_known_and_off_by_default() -> None:
    assert FeatureGates().enabled("DRANodeAllocatableResources") is False
    assert FeatureGates.parse("DRANodeAllocatableResources=true").enabled("DRANodeAllocatableResources")


async def test_gate_off_changes_nothing() -> None:
    """Without the gate a node too small for the devices' CPUs still passes, and bind writes no status."""
    scheduler = make(world(extra=[claim("c", "cpus", count=4), pod("p", ["c"], cpu="4")]), FeatureGates())
    assert scheduler.checker.node_usage is None
    result = await scheduler.filter(current(scheduler, "p"), NODES)
    assert sorted(result.passed) == NODES
    await scheduler.bind("default", "p", uid="", node_name="node-0")
    assert "nodeAllocatableResourceClaimStatuses" not in current(scheduler, "p")["status"]


# ---- the device model ---------------------------------------------------------------------------------

def slice_with(device: dict[str, Any]) -> dict[str, Any]:
    return driver_slice("node-0", CPU_DRIVER, [{"name": "d", **device}])


def test_model_parses_mapping_and_overhead() -> None:
    parsed = ResourceSlice.from_api(slice_with({
        "capacity": {"cores": {"value": "8"}},
        "nodeAllocatableResources": {"cpu": {"mapping": {"capacityKey": "cores", "capacityMultiplier": "2"}},
                                     "memory": {"overhead": {"perPod": "1Gi"}}}}))
    entries = parsed.devices[0].node_allocatable
    assert entries["cpu"].mapped and entries["cpu"].capacity_key == "cores"
    assert str(entries["cpu"].capacity_multiplier) == "2"
    assert not entries["memory"].mapped and str(entries["memory"].per_pod) == "1Gi"
    plain = ResourceSlice.from_api(slice_with({}))
    assert dict(plain.devices[0].node_allocatable) == {}


@pytest.mark.parametrize(("entries", "problem"), [
    ({"cpu": {"mapping": {"capacityKey": "cores", "capacityMultiplier": "1"}}},
     "nodeAllocatableResources[cpu].mapping.capacityKey: Not found: 'cores'"),
    ({"cpu": {}}, "nodeAllocatableResources[cpu]: at least one of mapping or overhead must be set"),
    ({"example.com/gpu": {"overhead": {"perPod": "1"}}}, "must be a node allocatable resource name"),
    ({"ephemeral-storage": {"overhead": {"perPod": "1"}}}, "must be a node allocatable resource name"),
    ({"memory": {"overhead": {"perPod": "-1Gi"}}}, "overhead.perPod: -1Gi: must be non-negative"),
    ({"memory": {"overhead": {}}}, "overhead: at least one of perPod or perContainer must be set"),
    ({"cpu": {"mapping": {"deviceMultiplier": "0"}}}, "mapping.deviceMultiplier: 0: must be positive"),
    ({"cpu": {"mapping": {"capacityMultiplier": "2"}}},
     "capacityKey is required when capacityMultiplier is set"),
    ({"cpu": {"mapping": {"deviceMultiplier": "two"}}}, "invalid quantity"),
])
def test_model_refuses_what_the_api_server_refuses(entries: dict[str, Any], problem: str) -> None:
    with pytest.raises(InvalidObjectError) as error:
        ResourceSlice.from_api(slice_with({"nodeAllocatableResources": entries}))
    assert problem in str(error.value)
    assert "spec.devices[0].nodeAllocatableResources" in str(error.value)


# ---- what a pod requests ------------------------------------------------------------------------------

def test_container_requests_follow_sidecar_rules() -> None:
    raw = pod("p", [], cpu="2", memory="1Gi")
    raw["spec"]["initContainers"] = [
        {"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}},
        {"name": "setup", "resources": {"requests": {"cpu": "500m", "memory": "4Gi"}}},
    ]
    totals = container_requests(raw)
    # containers 2 + sidecar 1 = 3 cpu; setup runs beside the sidecar: max(1Gi, 4Gi) memory
    assert as_fit_units(totals) == {"cpu": 3000, "memory": 4 * 2**30}


def test_pod_requests_add_statuses_overhead_and_pod_level() -> None:
    raw = pod("p", [], cpu="1", memory="1Gi")
    raw["spec"]["overhead"] = {"cpu": "100m"}
    statuses = [{"resourceClaimName": "c", "containers": ["a", "b"],
                 "mapping": [{"name": "cpu", "quantity": "4"}],
                 "overhead": [{"name": "memory", "perPod": "1Gi", "perContainer": "512Mi"}]}]
    assert as_fit_units(pod_requests(raw, statuses)) == {"cpu": 5100, "memory": 3 * 2**30}
    raw["spec"]["resources"] = {"requests": {"cpu": "6"}}
    # the pod level stands for containers and claims
    assert as_fit_units(pod_requests(raw, statuses))["cpu"] == 6100
    assert pod_level_shortfall(raw, statuses) is None
    raw["spec"]["resources"] = {"requests": {"cpu": "3"}}
    assert pod_level_shortfall(raw, statuses) == (
        "pod level request for cpu is insufficient to cover the aggregated container and node-allocatable "
        "DRA requests")


def test_node_usage_counts_bound_unfinished_pods_with_their_statuses() -> None:
    usage = NodeUsage()
    bound = pod("a", [], node_name="node-0", cpu="1", memory="1Gi")
    bound["status"]["nodeAllocatableResourceClaimStatuses"] = [
        {"resourceClaimName": "c", "containers": ["main"], "mapping": [{"name": "cpu", "quantity": "2"}]}]
    usage.update("default/a", bound)
    usage.update("default/b", pod("b", [], cpu="5"))  # pending: not on a node
    done = pod("d", [], node_name="node-0", cpu="3")
    done["status"]["phase"] = "Succeeded"
    usage.update("default/d", done)
    assert usage.requested("node-0") == {"cpu": 3000, "memory": 2**30}
    usage.remove("default/a")
    assert usage.requested("node-0") == {}


def test_node_usage_assumed_pod_counts_until_the_watch_shows_it() -> None:
    now = [0.0]
    usage = NodeUsage(clock=lambda: now[0])
    usage.assume("uid-a", "node-0", {"cpu": 2000})
    assert usage.requested("node-0") == {"cpu": 2000}
    bound = pod("a", [], node_name="node-0", cpu="2", memory=None)
    bound["metadata"]["uid"] = "uid-a"
    usage.update("default/a", bound)
    assert usage.requested("node-0") == {"cpu": 2000}  # once, not twice
    usage.assume("uid-a", "node-0", {"cpu": 2000})  # a watch quicker than the bind's answer
    assert usage.requested("node-0") == {"cpu": 2000}
    usage.assume("uid-x", "node-0", {"cpu": 1000})
    now[0] = 1000.0
    assert usage.requested("node-0") == {"cpu": 2000}  # a lost event costs no more than the TTL


# ---- the footprint --------------------------------------------------------------------------------------

def inventory_of(objs: list[dict[str, Any]]) -> Inventory:
    inventory = Inventory()
    for raw in objs:
        if raw["kind"] == "ResourceSlice":
            inventory.upsert_slice(ResourceSlice.from_api(raw))
    return inventory


def use(name: str, driver: str, devices: list[str], consumed: dict[str, str] | None = None) -> ClaimUse:
    results = [{"request": "req", "driver": driver, "pool": "node-0", "device": device,
                **({"consumedCapacity": consumed} if consumed is not None else {})} for device in devices]
    return ClaimUse(ResourceClaim.from_api(o.claim(name)), {"devices": {"results": results}})


def test_statuses_mapping_overhead_and_containers() -> None:
    inventory = inventory_of(world())
    raw = pod("p", ["cpus", "gpus", "plain"], containers=2)
    raw["spec"]["containers"][1]["resources"]["claims"] = [{"name": "c1"}]  # only the gpus claim
    uses = [use("cpus", CPU_DRIVER, ["cpus-0", "cpus-1"]), use("gpus", o.DRIVER, ["gpu-0", "gpu-1"]),
            use("plain", "other.example.com", ["x"])]  # not found, not node allocatable: passed over
    names = {u.claim.uid: {f"c{i}"} for i, u in enumerate(uses)}
    statuses = claim_statuses(raw, uses, names, inventory, Node.from_api(node("node-0")))
    assert statuses == [
        {"resourceClaimName": "cpus", "containers": ["main"], "mapping": [{"name": "cpu", "quantity": "4"}]},
        {"resourceClaimName": "gpus", "containers": ["main", "side-1"],
         "overhead": [{"name": "memory", "perPod": "2Gi", "perContainer": "1Gi"}]},
    ]
    # two containers of 1Gi; two devices' overheads summed, two containers use them: 2Gi + 2 x 1Gi
    assert as_fit_units(pod_requests(raw, statuses))["memory"] == 2 * 2**30 + 2 * 2**30 + 2 * 2**30


def test_capacity_mapping_uses_consumed_capacity_times_multiplier() -> None:
    device = memory_device()
    device["nodeAllocatableResources"]["memory"]["mapping"]["capacityMultiplier"] = "2"
    inventory = inventory_of([driver_slice("node-0", MEM_DRIVER, [device])])
    claim_use = use("mem", MEM_DRIVER, ["mem-0"], consumed={"memory": "3Gi"})
    statuses = claim_statuses(pod("p", ["mem"]), [claim_use], {}, inventory, Node.from_api(node("node-0")))
    assert statuses == [{"resourceClaimName": "mem", "mapping": [{"name": "memory", "quantity": "6Gi"}]}]
    other_key = use("mem", MEM_DRIVER, ["mem-0"], consumed={"other": "3Gi"})
    assert claim_statuses(pod("p", ["mem"]), [other_key], {}, inventory, Node.from_api(node("node-0"))) == []


def test_bad_data_gets_upstreams_errors() -> None:
    inventory = inventory_of([driver_slice("node-0", MEM_DRIVER, [memory_device()])])
    target = Node.from_api(node("node-0"))
    with pytest.raises(NodeAllocatableError) as error:
        claim_statuses(pod("p", ["mem"]), [use("mem", MEM_DRIVER, ["mem-0"])], {}, inventory, target)
    assert str(error.value) == (
        "claim default/mem, device mem-0: ConsumedCapacity is nil, but Capacity key 'memory' is set in "
        "NodeAllocatableResources for resource memory")
    gone = use("mem", MEM_DRIVER, ["mem-0", "mem-9"], consumed={"memory": "1Gi"})
    with pytest.raises(NodeAllocatableError) as error:
        claim_statuses(pod("p", ["mem"]), [gone], {}, inventory, target)
    assert str(error.value) == ("claim default/mem, device mem-9, driver mem.example.com: device mem-9 not "
                                "found in pool node-0 for driver mem.example.com")


# ---- filter and bind ------------------------------------------------------------------------------------

async def test_filter_adds_the_devices_cpus_to_the_pods_requests() -> None:
    """4 CPUs of devices + 1 of the container: 5 of node-0's 8, of which a bound pod already takes 4."""
    busy = pod("busy", [], node_name="node-0", cpu="4")
    scheduler = make(world(extra=[claim("c", "cpus", count=2), pod("p", ["c"]), busy]))
    result = await scheduler.filter(current(scheduler, "p"), NODES)
    assert result.passed == ["node-1"] and not result.unresolvable
    assert result.failed["node-0"] == (
        "Insufficient cpu: the pod requests 5 (4 of it for its claims' devices), the node has 4 of 8 "
        "allocatable free")
    plan = scheduler.planner.plan(current(scheduler, "p"))
    verdict = scheduler.checker.check(plan, "node-0", use_cache=False)
    assert verdict.reason == Reason.NODE_ALLOCATABLE


async def test_filter_more_than_the_node_has_is_unresolvable() -> None:
    scheduler = make(world(cpus=6, extra=[claim("c", "cpus", count=4), pod("p", ["c"], cpu="2")]))
    result = await scheduler.filter(current(scheduler, "p"), NODES)
    assert result.passed == [] and sorted(result.unresolvable) == NODES
    assert result.unresolvable["node-1"].startswith("Insufficient cpu: the pod requests 10 (8 of it")


async def test_bind_writes_the_status_and_the_node_counts_it() -> None:
    scheduler = make(world(extra=[claim("c", "cpus", count=2), claim("g", "gpus"), pod("p", ["c", "g"]),
                                  claim("c2", "cpus", count=2), pod("q", ["c2"], cpu="3")]))
    await scheduler.bind("default", "p", uid="", node_name="node-0")
    bound = current(scheduler, "p")
    assert bound["spec"]["nodeName"] == "node-0"
    assert bound["status"]["nodeAllocatableResourceClaimStatuses"] == [
        {"resourceClaimName": "c", "containers": ["main"], "mapping": [{"name": "cpu", "quantity": "4"}]},
        {"resourceClaimName": "g", "containers": ["main"],
         "overhead": [{"name": "memory", "perPod": "1Gi", "perContainer": "512Mi"}]},
    ]
    usage = scheduler.checker.node_usage
    assert usage is not None and usage.requested("node-0") == {"cpu": 5000, "memory": 2**30 + 2**30 + 2**29}
    # q needs 3 + 4 CPUs: 3 are left on node-0
    result = await scheduler.filter(current(scheduler, "q"), NODES)
    assert result.passed == ["node-1"] and "the node has 3 of 8 allocatable free" in result.failed["node-0"]
    with pytest.raises(BindFailed, match="no longer fits node node-0: Insufficient cpu"):
        await scheduler.bind("default", "q", uid="", node_name="node-0")


async def test_filter_with_consumable_memory_device() -> None:
    scheduler = make(world(extra=[claim("m", "memory", memory="12Gi"), pod("p", ["m"], memory="4Gi")]))
    result = await scheduler.filter(current(scheduler, "p"), ["node-0"])
    assert result.passed == ["node-0"]  # 16Gi of 16Gi
    scheduler = make(world(extra=[claim("m", "memory", memory="12Gi"), pod("p", ["m"], memory="5Gi")]))
    result = await scheduler.filter(current(scheduler, "p"), ["node-0"])
    assert result.unresolvable["node-0"] == ("Insufficient memory: the pod requests 17Gi (12Gi of it for its "
                                             "claims' devices), the node has 16Gi of 16Gi allocatable free")
    scheduler = make(world(extra=[claim("m", "memory", memory="8Gi"), pod("p", ["m"], memory="4Gi")]))
    await scheduler.bind("default", "p", uid="", node_name="node-0")
    assert current(scheduler, "p")["status"]["nodeAllocatableResourceClaimStatuses"] == [
        {"resourceClaimName": "m", "containers": ["main"],
         "mapping": [{"name": "memory", "quantity": "8Gi"}]}]


async def test_filter_reports_bad_data_as_an_error() -> None:
    device = memory_device()
    del device["allowMultipleAllocations"]  # no consumedCapacity in its allocations
    objs = [o.device_class("memory", f'device.driver == "{MEM_DRIVER}"'), node("node-0"),
            driver_slice("node-0", MEM_DRIVER, [device]), claim("m", "memory"), pod("p", ["m"])]
    scheduler = make(objs)
    result = await scheduler.filter(current(scheduler, "p"), ["node-0"])
    assert result.error == ("claim default/m, device mem-0: ConsumedCapacity is nil, but Capacity key "
                            "'memory' is set in NodeAllocatableResources for resource memory")
    with pytest.raises(SchedulingError):
        scheduler.checker.check(scheduler.planner.plan(current(scheduler, "p")), "node-0", use_cache=False)


# ---- sharing --------------------------------------------------------------------------------------------

def allocated(name: str, driver: str, devices: list[str],
              reserved_for: list[dict[str, Any]]) -> dict[str, Any]:
    raw = o.allocate(o.claim(name), "node-0", devices, reserved_for)
    for result in raw["status"]["allocation"]["devices"]["results"]:
        result["driver"] = driver
    return raw


def test_claim_with_mapped_device_is_not_shared() -> None:
    owner = pod("a", ["c"], node_name="node-0")
    reserved = [{"resource": "pods", "name": "a", "uid": owner["metadata"]["uid"]}]
    scheduler = make(world(extra=[allocated("c", CPU_DRIVER, ["cpus-0"], reserved), owner, pod("b", ["c"])]))
    blocked = scheduler.planner.plan(current(scheduler, "b")).blocked
    assert blocked is not None and blocked.unresolvable and blocked.reason == Reason.CLAIM_IN_USE
    assert blocked.message == ("node allocatable resource claim c has a mapped device and cannot be shared "
                               "across pods")
    assert scheduler.planner.plan(current(scheduler, "a")).blocked is None  # its own pod may use it
    off = make(world(extra=[allocated("c", CPU_DRIVER, ["cpus-0"], reserved), owner, pod("b", ["c"])]),
               FeatureGates())
    assert off.planner.plan(current(off, "b")).blocked is None


def test_overhead_only_claim_is_shared() -> None:
    owner = pod("a", ["g"], node_name="node-0")
    reserved = [{"resource": "pods", "name": "a", "uid": owner["metadata"]["uid"]}]
    scheduler = make(world(extra=[allocated("g", o.DRIVER, ["gpu-0"], reserved), owner, pod("b", ["g"])]))
    assert scheduler.planner.plan(current(scheduler, "b")).blocked is None


# ---- wire formats ---------------------------------------------------------------------------------------

def test_slim_pod_keeps_the_status_field() -> None:
    raw = pod("p", ["c"], node_name="node-0")
    statuses = [{"resourceClaimName": "c", "containers": ["main"]}]
    raw["status"]["nodeAllocatableResourceClaimStatuses"] = statuses
    raw["status"]["containerStatuses"] = [{"name": "main", "image": "x", "imageID": "y"}]
    slim = slim_pod(raw)
    assert slim["status"]["nodeAllocatableResourceClaimStatuses"] == [
        {"resourceClaimName": "c", "containers": ["main"]}]
    assert "containerStatuses" not in slim["status"]


def test_pod_as_the_api_server_sends_it_is_counted() -> None:
    """A bound pod's JSON from a v1.37 API server with the gate on (the shape the watch delivers)."""
    text = b"""{"apiVersion":"v1","kind":"Pod","metadata":{"name":"cpu-job","namespace":"default",
      "uid":"0b9c3a3e-5a43-4d3e-9d55-0c1f1f7c3a11","resourceVersion":"4711",
      "creationTimestamp":"2026-11-25T01:00:00Z"},
      "spec":{"containers":[{"name":"main","image":"registry.example.com/app:1",
        "resources":{"limits":{"memory":"2Gi"},"requests":{"cpu":"500m","memory":"2Gi"},
                     "claims":[{"name":"cpus"}]},"terminationMessagePath":"/dev/termination-log",
        "terminationMessagePolicy":"File","imagePullPolicy":"IfNotPresent"}],
        "restartPolicy":"Always","schedulerName":"default-scheduler","nodeName":"node-0",
        "resourceClaims":[{"name":"cpus","resourceClaimName":"cpu-job-cpus"}],"priority":0},
      "status":{"phase":"Running","qosClass":"Burstable",
        "nodeAllocatableResourceClaimStatuses":[{"resourceClaimName":"cpu-job-cpus","containers":["main"],
          "mapping":[{"name":"cpu","quantity":"4"}],
          "overhead":[{"name":"memory","perPod":"256Mi","perContainer":"128Mi"}]}]}}"""
    cache = ClusterCache(ON)
    cache.apply("Pod", "ADDED", orjson.loads(text))
    usage = node_usage(cache)
    assert usage is not None
    memory = 2 * 2**30 + 256 * 2**20 + 128 * 2**20
    assert usage.requested("node-0") == {"cpu": 4500, "memory": memory}


async def test_status_patch_is_a_merge_patch_of_pods_status(fake_api: Any) -> None:
    """The bind's write as the API server receives it, then the Binding."""
    objs = world(extra=[claim("c", "cpus", count=2), pod("p", ["c"])])
    fake_api.seed(objs)
    seen: list[ApiRequest] = []
    fake_api.intercept(lambda request: seen.append(request))
    client = KubeClient.for_url(fake_api.url)
    try:
        await make(objs, client=client).bind("default", "p", uid="", node_name="node-1")
    finally:
        await client.close()
    patches = [r for r in seen if r.verb == "patch" and r.resource.plural == "pods"]
    written = [{"resourceClaimName": "c", "containers": ["main"],
                "mapping": [{"name": "cpu", "quantity": "4"}]}]
    assert [(r.subresource, r.name, r.body) for r in patches] == [
        ("status", "p", {"status": {"nodeAllocatableResourceClaimStatuses": written}})]
    order = [(r.verb, r.resource.plural, r.subresource) for r in seen if r.verb != "get"]
    assert order.index(("patch", "pods", "status")) < order.index(("create", "pods", "binding"))
    stored = fake_api.get_object("Pod", "p", "default")
    assert stored["spec"]["nodeName"] == "node-1"
    assert stored["status"]["nodeAllocatableResourceClaimStatuses"][0]["mapping"] == [
        {"name": "cpu", "quantity": "4"}]


async def test_failed_binding_clears_the_status(fake_api: Any) -> None:
    objs = world(extra=[claim("c", "cpus", count=2), pod("p", ["c"])])
    fake_api.seed(objs)
    fake_api.fail_next("create", "pods", subresource="binding", status=422, message="nope")
    client = KubeClient.for_url(fake_api.url)
    try:
        with pytest.raises(BindFailed):
            await make(objs, client=client).bind("default", "p", uid="", node_name="node-1")
    finally:
        await client.close()
    stored = fake_api.get_object("Pod", "p", "default")
    assert not stored["status"].get("nodeAllocatableResourceClaimStatuses")
    assert not stored["spec"].get("nodeName")


async def test_footprint_beyond_int64_is_an_error() -> None:
    """kube-scheduler's sums are int64 millicores: a footprint beyond that is refused, not wrapped."""
    objs = [o.device_class("cpus", f'device.driver == "{CPU_DRIVER}"'), node("node-0"),
            driver_slice("node-0", CPU_DRIVER, cpu_devices(1, cores="1E")), claim("c", "cpus"),
            pod("p", ["c"])]
    scheduler = make(objs)
    result = await scheduler.filter(current(scheduler, "p"), ["node-0"])
    assert result.error.startswith("cpu requested with the claims' node allocatable resources is ")
    assert result.error.endswith("more than 9223372036854775807 millicores")


async def test_preempt_keeps_a_node_whose_victims_free_the_cpus() -> None:
    victim = pod("victim", [], node_name="node-0", cpu="6")
    scheduler = make(world(extra=[claim("c", "cpus", count=2), pod("p", ["c"]), victim]))
    victims = {"node-0": {"Pods": [{"UID": victim["metadata"]["uid"]}]}, "node-1": {"Pods": []}}
    assert set(await scheduler.preempt(current(scheduler, "p"), victims)) == set(NODES)
    assert await scheduler.preempt(current(scheduler, "p"), {"node-0": {"Pods": []}}) == {}


async def test_explain_shows_the_footprint_and_the_shortfall() -> None:
    scheduler = make(world(extra=[claim("c", "cpus", count=2), claim("g", "gpus"), pod("p", ["c", "g"]),
                                  pod("busy", [], node_name="node-0", cpu="4")]))
    report = await explain_pod(scheduler, "default", "p")
    assert report["nodes"][1]["nodeAllocatable"][0] == {
        "resourceClaimName": "c", "containers": ["main"], "mapping": [{"name": "cpu", "quantity": "4"}]}
    text = render_text(report)
    assert "node-0: does not fit (unschedulable): Insufficient cpu: the pod requests 5 (4 of it" in text
    assert "  node allocatable resources of claim c: cpu 4 (containers: main)\n" in text
    assert ("  node allocatable resources of claim g: memory overhead 1Gi per pod + 512Mi per container "
            "(containers: main)\n") in text


def test_pod_level_limits_must_cover_the_claims() -> None:
    raw = pod("p", [], cpu="1", memory="1Gi")
    raw["spec"]["containers"][0]["resources"]["limits"] = {"memory": "1Gi", "hugepages-2Mi": "4Mi"}
    statuses = [{"resourceClaimName": "c", "containers": ["main"],
                 "mapping": [{"name": "hugepages-2Mi", "quantity": "2Mi"}],
                 "overhead": [{"name": "memory", "perPod": "1Gi", "perContainer": "512Mi"}]}]
    raw["spec"]["resources"] = {"limits": {"memory": "3Gi", "hugepages-2Mi": "6Mi"}}
    assert pod_level_shortfall(raw, statuses) is None  # 1Gi + 1.5Gi; 4Mi + 2Mi
    raw["spec"]["resources"] = {"limits": {"memory": "2Gi", "hugepages-2Mi": "6Mi"}}
    assert pod_level_shortfall(raw, statuses) == (
        "pod level limit for memory is insufficient to cover the limit and DRA overhead for container main")
    raw["spec"]["resources"] = {"limits": {"memory": "3Gi", "hugepages-2Mi": "5Mi"}}
    assert pod_level_shortfall(raw, statuses) == (
        "pod level limit for hugepages-2Mi is insufficient to cover the aggregated container and "
        "node-allocatable DRA limits")


async def test_pod_level_shortfall_is_unresolvable_on_every_node() -> None:
    raw = pod("p", ["c"], cpu="1")
    raw["spec"]["resources"] = {"requests": {"cpu": "2"}}
    scheduler = make(world(extra=[claim("c", "cpus", count=2), raw]))
    result = await scheduler.filter(current(scheduler, "p"), NODES)
    assert result.unresolvable == dict.fromkeys(NODES, (
        "pod level request for cpu is insufficient to cover the aggregated container and node-allocatable "
        "DRA requests"))


async def test_hugepages_mapping_is_checked_against_the_node() -> None:
    devices = [{"name": "hp-0", "nodeAllocatableResources": {
        "hugepages-2Mi": {"mapping": {"deviceMultiplier": "512Mi"}}}}]
    small = node("node-0")
    small["status"]["allocatable"]["hugepages-2Mi"] = "256Mi"
    objs = [o.device_class("hp", f'device.driver == "{CPU_DRIVER}"'), small,
            driver_slice("node-0", CPU_DRIVER, devices), claim("c", "hp"), pod("p", ["c"])]
    scheduler = make(objs)
    result = await scheduler.filter(current(scheduler, "p"), ["node-0"])
    assert result.unresolvable["node-0"] == ("Insufficient hugepages-2Mi: the pod requests 512Mi (512Mi of "
                                             "it for its claims' devices), the node has 256Mi of 256Mi "
                                             "allocatable free")


@pytest.mark.parametrize(("reasons", "said"), [
    (Words.DETAILED, "Insufficient cpu: the pod requests 5 (4 of it for its claims' devices), the node has 4 "
                     "of 4 allocatable free"),
    (Words.UPSTREAM, "Insufficient cpu"),  # the in-tree plugin's status reason
])
async def test_filter_over_http_with_full_node_objects(reasons: Words, said: str) -> None:
    """kube-scheduler's ExtenderArgs without nodeCacheCapable: full Node objects, whose
    status.allocatable is what the footprint is checked against (here smaller than the cached node's)."""
    scheduler = make(world(extra=[claim("c", "cpus", count=2), pod("p", ["c"])]))
    scheduler.reasons = reasons
    server = ExtenderServer(scheduler)
    await server.start("127.0.0.1", 0, 0)
    try:
        nodes = [node("node-0", cpu="4"), node("node-1")]
        for item in nodes:
            item["status"]["conditions"] = [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]
        node_list = {"metadata": {"resourceVersion": "7"}, "items": nodes}
        args = {"Pod": current(scheduler, "p"), "Nodes": node_list, "NodeNames": None}
        async with (
            aiohttp.ClientSession() as session,
            session.post(server.urls["extender"] + "/filter", data=orjson.dumps(args),
                         headers={"Content-Type": "application/json"}) as response,
        ):
            assert response.status == 200
            body = orjson.loads(await response.read())
    finally:
        await server.stop()
    assert [item["metadata"]["name"] for item in body["Nodes"]["items"]] == ["node-1"]
    # Unresolvable both ways: the node's 4 cpus are too few for 5 whatever is evicted.
    assert body["FailedAndUnresolvableNodes"] == {"node-0": said}
    assert body["Error"] == ""


def test_inventory_knows_whether_any_device_declares_node_allocatable_resources() -> None:
    inventory = Inventory()
    plain = driver_slice("node-0", o.DRIVER, [{"name": "gpu-0"}])
    mapped = driver_slice("node-0", CPU_DRIVER, cpu_devices(1))
    inventory.upsert_slice(ResourceSlice.from_api(plain))
    assert not inventory.has_node_allocatable_devices
    inventory.upsert_slice(ResourceSlice.from_api(mapped))
    assert inventory.has_node_allocatable_devices
    mapped["spec"]["devices"] = [{"name": "cpus-0"}]  # an update dropping the field
    inventory.upsert_slice(ResourceSlice.from_api(mapped))
    assert not inventory.has_node_allocatable_devices
    inventory.upsert_slice(ResourceSlice.from_api(driver_slice("node-0", CPU_DRIVER, cpu_devices(1))))
    inventory.remove_slice(mapped["metadata"]["name"])
    assert not inventory.has_node_allocatable_devices


async def test_gate_on_without_such_devices_filters_from_the_cache_as_before() -> None:
    """Devices without nodeAllocatableResources: the gate costs nothing, the filter cache answers."""
    objs = [*o.cluster(3, 2), o.claim("c"), o.pod("p", ["c"])]
    cache = ClusterCache.from_objects(objs, ON)
    assume = AssumeCache()
    assume.attach(cache)
    scheduler = Scheduler(cache, assume, ClaimWriter(None, cache), filter_cache=FilterCache(cache, assume))
    names = ["node-0", "node-1", "node-2"]
    await scheduler.filter(current(scheduler, "p"), names)
    plan = scheduler.planner.plan(current(scheduler, "p"))
    scheduler.checker.evaluation.prepare(plan)
    assert set(scheduler.checker._cached_verdicts(plan, names, None)) == set(names)
    assert scheduler.checker.node_fit(plan, Node.from_api(o.node("node-0")),
                                      scheduler.checker.check(plan, "node-0", use_cache=True)) is None


def test_pod_demand_is_worked_out_once_per_footprint() -> None:
    demand = PodDemand(pod("p", ["c"], cpu="1"))
    footprint = [{"resourceClaimName": "c", "containers": ["main"],
                  "mapping": [{"name": "cpu", "quantity": "4"}]}]
    first = demand.of(footprint)
    assert first.requests["cpu"] == 5000 and first.claims_part == {"cpu": 4000} and first.shortfall is None
    assert demand.of(copy.deepcopy(footprint)) is first


async def test_failed_status_write_undoes_the_claims(fake_api: Any) -> None:
    objs = world(extra=[claim("c", "cpus", count=2), pod("p", ["c"])])
    fake_api.seed(objs)
    fake_api.fail_next("patch", "pods", subresource="status", status=422, message="no such field")
    client = KubeClient.for_url(fake_api.url)
    try:
        with pytest.raises(BindFailed, match="writing the pod's nodeAllocatableResourceClaimStatuses: 422"):
            await make(objs, client=client).bind("default", "p", uid="", node_name="node-1")
    finally:
        await client.close()
    stored_claim = fake_api.get_object("ResourceClaim", "c", "default")
    assert not (stored_claim.get("status") or {}).get("allocation")
    assert not fake_api.get_object("Pod", "p", "default")["spec"].get("nodeName")


def with_binding_conditions(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The CPU groups report an "attached" binding condition (failure condition "failed")."""
    for obj in objs:
        if obj["kind"] == "ResourceSlice" and obj["spec"]["driver"] == CPU_DRIVER:
            for device in obj["spec"]["devices"]:
                device["bindingConditions"] = ["attached"]
                device["bindingFailureConditions"] = ["failed"]
    return objs


async def test_freeing_claims_whose_binding_failed_clears_the_status() -> None:
    """As upstream's Unreserve after a failed PreBind: once the claims the statuses describe are freed, the
    pod no longer carries them."""
    scheduler = make(with_binding_conditions(world(extra=[claim("c", "cpus", count=2), pod("p", ["c"])])))
    scheduler.bind_wait_s = 0.01
    with pytest.raises(BindFailed, match="waiting for device binding conditions"):
        await scheduler.bind("default", "p", uid="", node_name="node-0")
    assert current(scheduler, "p")["status"]["nodeAllocatableResourceClaimStatuses"] == [
        {"resourceClaimName": "c", "containers": ["main"], "mapping": [{"name": "cpu", "quantity": "4"}]}]
    failed = copy.deepcopy(scheduler.cache.raw("ResourceClaim", "default/c"))
    assert failed is not None
    failed["status"]["devices"] = [
        {"driver": CPU_DRIVER, "pool": "node-0", "device": result["device"],
         "conditions": [{"type": "failed", "status": "True", "reason": "Testing", "message": "",
                         "lastTransitionTime": "2030-01-01T00:00:01Z"}]}
        for result in failed["status"]["allocation"]["devices"]["results"]]
    failed["metadata"]["resourceVersion"] = str(int(failed["metadata"]["resourceVersion"]) + 1)
    scheduler.cache.apply("ResourceClaim", "MODIFIED", failed)
    result = await scheduler.filter(current(scheduler, "p"), NODES)  # kube-scheduler's retry
    assert "the claim was deallocated" in result.error
    assert current(scheduler, "p")["status"]["nodeAllocatableResourceClaimStatuses"] == []


async def test_a_bind_whose_devices_add_nothing_clears_statuses_left_on_the_pod() -> None:
    """Statuses of claims freed earlier (their clearing lost) never go with the pod to its node."""
    plain = "plain.example.com"
    extra = [o.device_class("plain", f'device.driver == "{plain}"'),
             driver_slice("node-0", plain, [{"name": "d"}]), claim("d", "plain")]
    stale = pod("p", ["d"])
    stale["status"]["nodeAllocatableResourceClaimStatuses"] = [
        {"resourceClaimName": "c", "containers": ["main"], "mapping": [{"name": "cpu", "quantity": "4"}]}]
    scheduler = make(world(extra=[*extra, stale]))
    await scheduler.bind("default", "p", uid="", node_name="node-0")
    bound = current(scheduler, "p")
    assert bound["spec"]["nodeName"] == "node-0"
    assert bound["status"]["nodeAllocatableResourceClaimStatuses"] == []
    usage = scheduler.checker.node_usage
    assert usage is not None and usage.requested("node-0") == {"cpu": 1000, "memory": 2**30}
