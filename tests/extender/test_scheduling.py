from __future__ import annotations

import asyncio
from typing import Any

import dra_objects as o
import pytest
from loop_turns import loop_turns
from lost_binding import bound_in_cache

from allocator import FeatureGates, ResourceClaim
from common.rules import RESERVED_FOR_MAX
from extender.plugin.claimwriter import ClaimWriter
from extender.plugin.scheduling import BindFailed, Scheduler
from extender.state.assume import AssumeCache
from extender.state.cache import ClusterCache

NODES = ["node-0", "node-1", "node-2"]


def make(objs: list[dict[str, Any]], **options: Any) -> Scheduler:
    cache = ClusterCache.from_objects(objs, FeatureGates())
    assume = AssumeCache()
    assume.attach(cache)
    return Scheduler(cache, assume, ClaimWriter(None, cache), **options)


def pod_of(scheduler: Scheduler, name: str) -> dict:
    pod = scheduler.cache.pod("default", name)
    assert pod is not None
    return pod


async def test_pod_without_claims_passes_every_node_unchanged() -> None:
    scheduler = make(o.cluster(1, 1))
    plain = {"metadata": {"name": "plain", "namespace": "default", "uid": "u"}, "spec": {"containers": []}}
    result = await scheduler.filter(plain, ["node-0", "unknown"])
    assert (result.passed, result.failed, result.unresolvable, result.error) == (
        ["node-0", "unknown"],
        {},
        {},
        "",
    )


async def test_fit_and_one_line_reason_per_node() -> None:
    objs = [
        o.device_class(),
        o.node("node-0"),
        o.gpu_slice("node-0", 2),
        o.node("node-1"),
        o.gpu_slice("node-1", 4),
        o.claim("c", count=3),
        o.pod("p", ["c"]),
    ]
    scheduler = make(objs)
    result = await scheduler.filter(pod_of(scheduler, "p"), ["node-0", "node-1", "ghost"])
    assert result.passed == ["node-1"]
    # No devices in use on node-0: preemption cannot help, so the node is unresolvable.
    assert result.unresolvable == {
        "node-0": "claim default/c: request gpu: needs 3 devices, 2 match",
        "ghost": "node not known to dra-extender",
    }
    assert result.failed == {} and result.error == ""


async def test_devices_in_use_are_resolvable_failures() -> None:
    used = o.allocate(o.claim("used"), "node-0", ["gpu-0"], [{"resource": "pods", "name": "x", "uid": "x"}])
    objs = [*o.cluster(1, 2), used, o.claim("c", count=2), o.pod("p", ["c"])]
    scheduler = make(objs)
    result = await scheduler.filter(pod_of(scheduler, "p"), ["node-0"])
    assert list(result.failed) == ["node-0"]
    assert "needs 2 devices, 1 match" in result.failed["node-0"]
    assert "in use" in result.failed["node-0"]


async def test_template_claim_not_created_yet_is_unresolvable_everywhere() -> None:
    objs = [*o.cluster(2, 1), o.pod("p", [], templates={"gpu": "one-gpu"})]
    scheduler = make(objs)
    result = await scheduler.filter(pod_of(scheduler, "p"), ["node-0", "node-1"])
    assert result.unresolvable == dict.fromkeys(
        ["node-0", "node-1"], 'pod "default/p": ResourceClaim not created yet'
    )


async def test_missing_device_class_waits_as_unschedulable() -> None:
    claim = o.claim("c", requests=[{"name": "gpu", "exactly": {"deviceClassName": "nope.example.com"}}])
    scheduler = make([*o.cluster(1, 1), claim, o.pod("p", ["c"])])
    result = await scheduler.filter(pod_of(scheduler, "p"), ["node-0"])
    assert result.failed == {"node-0": "request gpu: device class nope.example.com does not exist"}


async def test_allocated_claim_only_fits_its_node() -> None:
    shared = o.allocate(o.claim("shared"), "node-1", ["gpu-0"])
    scheduler = make([*o.cluster(3, 1), shared, o.pod("p", ["shared"])])
    result = await scheduler.filter(pod_of(scheduler, "p"), NODES)
    assert result.passed == ["node-1"]
    assert result.unresolvable == dict.fromkeys(
        ["node-0", "node-2"], "resourceclaim not available on the node"
    )


async def test_claim_reserved_by_the_maximum_number_of_consumers() -> None:
    consumers = [{"resource": "pods", "name": f"p{i}", "uid": f"u{i}"} for i in range(RESERVED_FOR_MAX)]
    shared = o.allocate(o.claim("shared"), "node-0", ["gpu-0"], consumers)
    scheduler = make([*o.cluster(1, 1), shared, o.pod("p", ["shared"])])
    result = await scheduler.filter(pod_of(scheduler, "p"), ["node-0"])
    assert result.unresolvable == {"node-0": "resourceclaim in use"}


async def test_claim_in_flight_for_another_pod_and_in_flight_devices_count() -> None:
    objs = [
        *o.cluster(1, 2),
        o.claim("shared"),
        o.pod("p", ["shared"]),
        o.claim("two", count=2),
        o.pod("q", ["two"]),
    ]
    scheduler = make(objs)
    shared = scheduler.cache.claim("default", "shared")
    allocation = {
        "devices": {"results": [{"request": "gpu", "driver": o.DRIVER, "pool": "node-0", "device": "gpu-1"}]}
    }
    scheduler.assume.reserve(shared, allocation, "some-other-pod")
    result = await scheduler.filter(pod_of(scheduler, "p"), ["node-0"])
    assert result.unresolvable == {
        "node-0": "resource claim default/shared is in the process of being allocated"
    }
    # The in-flight device is taken for everyone else too.
    result = await scheduler.filter(pod_of(scheduler, "q"), ["node-0"])
    assert "needs 2 devices, 1 match" in result.failed["node-0"]


async def test_invalid_claim_is_an_error() -> None:
    broken = o.claim("c")
    broken["spec"]["devices"]["requests"] = [{"name": "gpu"}]  # neither exactly nor firstAvailable
    scheduler = make([*o.cluster(1, 1), broken, o.pod("p", ["c"])])
    result = await scheduler.filter(pod_of(scheduler, "p"), ["node-0"])
    assert result.passed == [] and "invalid claim" in result.error and "default/c" in result.error


async def test_prioritize_binpack_spread_and_annotation() -> None:
    used = o.allocate(o.claim("used"), "node-1", ["gpu-0", "gpu-1"])
    objs = [
        *o.cluster(2, 4),
        used,
        o.claim("c"),
        o.pod("p", ["c"]),
        o.pod("s", ["c2"], annotations={"dra-extender.io/scoring": "spread"}),
        o.claim("c2"),
    ]
    scheduler = make(objs, scoring="binpack")
    binpack = await scheduler.prioritize(pod_of(scheduler, "p"), ["node-0", "node-1"])
    assert binpack["node-1"] > binpack["node-0"]
    spread = await scheduler.prioritize(pod_of(scheduler, "s"), ["node-0", "node-1"])
    assert spread["node-0"] > spread["node-1"]
    assert all(0 <= score <= 10 for score in [*binpack.values(), *spread.values()])


async def test_prioritize_prefers_the_better_ranked_subrequest() -> None:
    requests = [
        {
            "name": "gpu",
            "firstAvailable": [
                {"name": "four", "deviceClassName": o.CLASS, "count": 4},
                {"name": "one", "deviceClassName": o.CLASS, "count": 1},
            ],
        }
    ]
    objs = [
        o.device_class(),
        o.node("node-0"),
        o.gpu_slice("node-0", 4),
        o.node("node-1"),
        o.gpu_slice("node-1", 1),
        o.claim("c", requests=requests),
        o.pod("p", ["c"]),
    ]
    scheduler = make(objs, scoring="spread")
    scores = await scheduler.prioritize(pod_of(scheduler, "p"), ["node-0", "node-1"])
    assert scores["node-0"] > scores["node-1"]


async def test_filter_holds_devices_until_bind_or_timeout() -> None:
    now = [0.0]
    objs = [*o.cluster(2, 1), o.claim("a"), o.pod("pa", ["a"]), o.claim("b"), o.pod("pb", ["b"])]
    scheduler = make(objs, hold_devices=True, hold_ttl_s=5.0)
    scheduler.assume._clock = lambda: now[0]
    first = await scheduler.filter(pod_of(scheduler, "pa"), ["node-0", "node-1"])
    assert len(first.passed) == 1
    held = first.passed[0]
    assert "holds devices for this pod" in next(iter(first.failed.values()))
    second = await scheduler.filter(pod_of(scheduler, "pb"), ["node-0", "node-1"])
    assert second.passed == [n for n in ["node-0", "node-1"] if n != held]
    # The second pod holds the other node now: nothing is left for a third look.
    assert len(scheduler.assume) == 2
    now[0] = 6.0  # both holds expire
    assert len(scheduler.assume) == 0


def _holding(pod_name: str, claim_name: str, node: str,
             also_reserved_for: tuple[str, ...] = ()) -> list[dict]:
    """A running pod and its claim allocated on `node` (gpu-0), reserved for it and `also_reserved_for`."""
    holder = o.pod(pod_name, [claim_name])
    users = [holder, *(o.pod(name, []) for name in also_reserved_for)]
    used = o.allocate(o.claim(claim_name), node, ["gpu-0"],
                      [{"resource": "pods", "name": u["metadata"]["name"], "uid": u["metadata"]["uid"]}
                       for u in users])
    return [*users, used]


def _victims(*pods_uids: str) -> dict:
    return {"Pods": [{"UID": uid} for uid in pods_uids], "NumPDBViolations": 0}


async def test_preempt_keeps_only_candidates_where_evicting_the_victims_frees_the_devices() -> None:
    objs = [*o.cluster(5, 1), o.node("node-9"), o.claim("c"), o.pod("p", ["c"]),
            *_holding("x", "used-1", "node-1"), *_holding("y", "used-2", "node-2"), o.pod("bystander", []),
            *_holding("z", "used-3", "node-3", also_reserved_for=("sharer",)),
            *_holding("w", "used-4", "node-4")]
    scheduler = make(objs)
    uid = {name: scheduler.cache.pod("default", name)["metadata"]["uid"]
           for name in ("x", "y", "z", "bystander")}
    victims = {
        "node-0": _victims(),                      # fits as it is
        "node-1": _victims(uid["x"]),              # x holds the only device
        "node-2": _victims(uid["bystander"]),      # the victim holds nothing there
        "node-3": _victims(uid["z"]),              # the claim is shared with a pod that stays
        "node-4": _victims("not-a-pod"),           # not even a pod
        "node-9": _victims(uid["y"]),              # no devices at all: unresolvable
    }
    kept = await scheduler.preempt(pod_of(scheduler, "p"), victims)
    assert kept == {"node-0": victims["node-0"], "node-1": victims["node-1"]}


async def test_preempt_counts_the_devices_victims_keep_while_allocations_are_in_flight() -> None:
    """Evicting x frees one of node-1's two devices; the pod needs both. An allocation in flight
    elsewhere (node-0) must not hide the devices the cache counts on node-1."""
    holder, used = _holding("x", "used-1", "node-1")
    keeper, kept_claim = _holding("w", "used-2", "node-1")
    kept_claim["status"]["allocation"]["devices"]["results"][0]["device"] = "gpu-1"
    objs = [*o.cluster(2, 2), o.claim("c", count=2), o.pod("p", ["c"]), holder, used, keeper, kept_claim,
            o.claim("elsewhere")]
    scheduler = make(objs)
    elsewhere = scheduler.cache.claim("default", "elsewhere")
    assert elsewhere is not None
    scheduler.assume.reserve(elsewhere, {"devices": {"results": [
        {"request": "gpu", "driver": o.DRIVER, "pool": "node-0", "device": "gpu-0"}]}}, "another-pod")
    x_uid = scheduler.cache.pod("default", "x")["metadata"]["uid"]
    kept = await scheduler.preempt(pod_of(scheduler, "p"), {"node-1": _victims(x_uid)})
    assert kept == {}


@pytest.mark.parametrize("verb", ["filter", "prioritize", "preempt"])
async def test_node_checks_yield_every_few_milliseconds_of_work(verb: str) -> None:
    ticks = [0.0]

    # Wall-clock stalls are measured by bench/extender_bench.py (longest_loop_stall_ms); on a shared
    # machine they are too noisy to assert on, so this checks the yielding with a stepped clock.
    def clock() -> float:  # every reading advances 1 ms: the checks must yield about every 5 nodes
        ticks[0] += 0.001
        return ticks[0]

    scheduler = make([*o.cluster(60, 1), o.claim("c"), o.pod("p", ["c"])], clock=clock)
    nodes = [f"node-{i}" for i in range(60)]
    pod = pod_of(scheduler, "p")
    async with loop_turns() as turns:
        if verb == "filter":
            await scheduler.filter(pod, nodes)
        elif verb == "prioritize":
            await scheduler.prioritize(pod, nodes)
        else:
            victims = {"Pods": [{"UID": "x"}], "NumPDBViolations": 0}
            await scheduler.preempt(pod, {node: victims for node in nodes})
    assert turns.count >= 60 // 6


@pytest.mark.parametrize("gates", ["DRAPrioritizedList=false"])
async def test_first_available_needs_its_feature_gate(gates: str) -> None:
    requests = [{"name": "gpu", "firstAvailable": [{"name": "one", "deviceClassName": o.CLASS}]}]
    cache = ClusterCache.from_objects(
        [*o.cluster(1, 1), o.claim("c", requests=requests), o.pod("p", ["c"])], FeatureGates.parse(gates)
    )
    scheduler = Scheduler(cache, AssumeCache(), None)
    result = await scheduler.filter(pod_of(scheduler, "p"), ["node-0"])
    assert "DRAPrioritizedList feature is disabled" in result.unresolvable["node-0"]


def test_claim_objects_are_the_allocator_model() -> None:
    scheduler = make([*o.cluster(1, 1), o.claim("c"), o.pod("p", ["c"])])
    plan = scheduler.planner.plan(pod_of(scheduler, "p"))
    assert isinstance(plan.to_allocate[0], ResourceClaim) and plan.blocked is None


def devices_of(scheduler: Scheduler) -> list[tuple[str, str, str]]:
    """Every allocated device over all claims in the cache (duplicates kept)."""
    found = []
    for raw in scheduler.cache.objects():
        allocation = (raw.get("status") or {}).get("allocation") if raw["kind"] == "ResourceClaim" else None
        for result in ((allocation or {}).get("devices") or {}).get("results") or []:
            found.append((result["driver"], result["pool"], result["device"]))
    return found


async def test_bind_writes_allocation_reservation_and_binding() -> None:
    scheduler = make([*o.cluster(2, 2), o.claim("c", count=2), o.pod("p", ["c"])])
    pod = pod_of(scheduler, "p")
    await scheduler.bind("default", "p", uid=pod["metadata"]["uid"], node_name="node-1")
    claim = scheduler.cache.claim("default", "c")
    assert claim.allocation is not None and {r["pool"] for r in claim.allocation["devices"]["results"]} == {
        "node-1"
    }
    assert claim.reserved_uids == (pod["metadata"]["uid"],)
    assert "resource.kubernetes.io/delete-protection" in claim.raw["metadata"]["finalizers"]
    assert pod_of(scheduler, "p")["spec"]["nodeName"] == "node-1"
    assert len(scheduler.assume) == 0 and scheduler.bind_conflict_rate == 0.0


async def test_concurrent_binds_never_share_the_last_device() -> None:
    objs = o.cluster(1, 3)
    for index in range(8):
        objs += [o.claim(f"c{index}"), o.pod(f"p{index}", [f"c{index}"])]
    scheduler = make(objs)
    pods = [pod_of(scheduler, f"p{index}") for index in range(8)]
    for pod in pods:  # every pod sees the free devices before anyone binds
        assert (await scheduler.filter(pod, ["node-0"])).passed == ["node-0"]

    async def bind(pod: dict) -> bool:
        try:
            await scheduler.bind("default", pod["metadata"]["name"], uid=pod["metadata"]["uid"],
                                 node_name="node-0")
        except BindFailed as failed:
            assert "no longer fits node node-0" in str(failed)
            return False
        return True

    outcomes = await asyncio.gather(*(bind(pod) for pod in pods))
    assert sum(outcomes) == 3
    devices = devices_of(scheduler)
    assert len(devices) == 3 and len(set(devices)) == 3
    assert scheduler.bind_conflicts == 5 and len(scheduler.assume) == 0


async def test_failed_bind_leaves_nothing_in_flight() -> None:
    scheduler = make([*o.cluster(1, 2), o.claim("c"), o.pod("p", ["c"]), o.claim("d"), o.pod("q", ["d"])])
    pod = pod_of(scheduler, "p")
    with pytest.raises(BindFailed, match="has UID"):
        await scheduler.bind("default", "p", uid="not-the-uid", node_name="node-0")
    with pytest.raises(BindFailed, match="not known to dra-extender"):
        await scheduler.bind("default", "nobody", uid="u", node_name="node-0")
    bound_in_cache(scheduler.cache, "default", "p", "elsewhere")  # bound meanwhile: the Binding is refused
    with pytest.raises(BindFailed):
        await scheduler.bind("default", "p", uid=pod["metadata"]["uid"], node_name="node-0")
    assert len(scheduler.assume) == 0
    claim = scheduler.cache.claim("default", "c")
    assert claim.allocation is None and not claim.reserved_uids
    # The device is still free for the next pod.
    await scheduler.bind("default", "q", uid=pod_of(scheduler, "q")["metadata"]["uid"], node_name="node-0")


async def test_shared_allocated_claim_only_gets_the_reservation() -> None:
    shared = o.allocate(
        o.claim("shared"), "node-0", ["gpu-0"], [{"resource": "pods", "name": "x", "uid": "x"}]
    )
    scheduler = make([*o.cluster(1, 1), shared, o.pod("p", ["shared"])])
    pod = pod_of(scheduler, "p")
    await scheduler.bind("default", "p", uid=pod["metadata"]["uid"], node_name="node-0")
    claim = scheduler.cache.claim("default", "shared")
    assert claim.reserved_uids == ("x", pod["metadata"]["uid"])
    assert devices_of(scheduler) == [(o.DRIVER, "node-0", "gpu-0")]


async def test_hold_is_used_at_bind_and_other_node_is_rechecked() -> None:
    objs = [*o.cluster(2, 1), o.claim("a"), o.pod("pa", ["a"]), o.claim("b"), o.pod("pb", ["b"])]
    scheduler = make(objs, hold_devices=True)
    pa, pb = pod_of(scheduler, "pa"), pod_of(scheduler, "pb")
    held_a = (await scheduler.filter(pa, ["node-0", "node-1"])).passed[0]
    held_b = (await scheduler.filter(pb, ["node-0", "node-1"])).passed[0]
    assert held_a != held_b
    await scheduler.bind("default", "pa", uid=pa["metadata"]["uid"], node_name=held_a)
    # pb asks for pa's node anyway: its own hold is released and the node no longer fits.
    with pytest.raises(BindFailed, match="no longer fits"):
        await scheduler.bind("default", "pb", uid=pb["metadata"]["uid"], node_name=held_a)
    assert len(scheduler.assume) == 0
    await scheduler.bind("default", "pb", uid=pb["metadata"]["uid"], node_name=held_b)
    assert sorted(devices_of(scheduler)) == [(o.DRIVER, "node-0", "gpu-0"), (o.DRIVER, "node-1", "gpu-0")]


async def test_pod_without_claims_is_just_bound() -> None:
    plain = o.pod("plain", [])
    scheduler = make([*o.cluster(1, 1), plain])
    await scheduler.bind("default", "plain", uid=plain["metadata"]["uid"], node_name="node-0")
    assert pod_of(scheduler, "plain")["spec"]["nodeName"] == "node-0"
    assert devices_of(scheduler) == []


async def test_cel_runtime_error_is_an_error_not_a_node_verdict() -> None:
    broken_class = o.device_class(expression='device.attributes["gpu.example.com"].nosuch == 1')
    scheduler = make(
        [broken_class, o.node("node-0"), o.gpu_slice("node-0", 1), o.claim("c"), o.pod("p", ["c"])]
    )
    result = await scheduler.filter(pod_of(scheduler, "p"), ["node-0"])
    assert result.passed == [] and result.failed == {} and result.unresolvable == {}
    assert "CEL runtime error" in result.error and "nosuch" in result.error


async def test_devices_of_a_claim_our_model_rejects_are_never_given_out_again() -> None:
    # The API server accepted this claim and its allocation; only our object model rejects it.
    odd = o.allocate(o.claim("odd"), "node-0", ["gpu-0"], [{"resource": "pods", "name": "x", "uid": "x"}])
    odd["spec"]["devices"]["requests"][0]["exactly"]["count"] = "1"
    scheduler = make([*o.cluster(1, 1), odd, o.claim("c"), o.pod("p", ["c"]), o.pod("q", ["odd"])])
    result = await scheduler.filter(pod_of(scheduler, "p"), ["node-0"])
    assert result.passed == []
    assert result.failed["node-0"] == "claim default/c: request gpu: needs 1 device, 0 match (1 in use)"
    with pytest.raises(BindFailed, match="no longer fits"):
        await scheduler.bind("default", "p", uid=pod_of(scheduler, "p")["metadata"]["uid"],
                             node_name="node-0")
    rejected = await scheduler.filter(pod_of(scheduler, "q"), ["node-0"])
    assert rejected.passed == [] and "invalid claim" in rejected.error and "count" in rejected.error


async def test_filter_waits_briefly_for_a_template_claim_the_controller_is_creating() -> None:
    # kube-scheduler tries the pod before the resourceclaim controller has created its claim; the
    # in-tree plugin's PreEnqueue would wait, so filter waits too instead of costing the pod a backoff.
    pending = o.pod("p", [], templates={"gpu": "one-gpu"})
    scheduler = make([*o.cluster(2, 1), pending], claim_wait_s=5.0)

    async def controller() -> None:
        await asyncio.sleep(0.05)
        generated = o.claim("p-gpu-x", owner_pod=pending)
        scheduler.cache.apply("ResourceClaim", "ADDED", generated)
        updated = {**pending, "metadata": {**pending["metadata"], "resourceVersion": "2"},
                   "status": {**pending["status"], "resourceClaimStatuses": [
                       {"name": "gpu", "resourceClaimName": "p-gpu-x"}]}}
        scheduler.cache.apply("Pod", "MODIFIED", updated)

    created = asyncio.create_task(controller())
    result = await scheduler.filter(pending, ["node-0", "node-1"])  # kube-scheduler's stale copy
    await created
    assert result.passed == ["node-0", "node-1"] and not result.unresolvable and not result.error


async def test_prioritize_scores_kube_schedulers_stale_copy_as_filter_found_it() -> None:
    """The request's copy of a template pod predates the claim names the controller wrote (filter
    waited for them in the cache); prioritize scores the placement of the claims all the same."""
    pending = o.pod("p", [], templates={"gpu": "one-gpu"})
    generated = o.claim("p-gpu-x", owner_pod=pending)
    current = {**pending, "metadata": {**pending["metadata"], "resourceVersion": "2"},
               "status": {**pending["status"], "resourceClaimStatuses": [
                   {"name": "gpu", "resourceClaimName": "p-gpu-x"}]}}
    busy = o.claim("busy")
    o.allocate(busy, "node-1", ["gpu-0"])
    scheduler = make([*o.cluster(2, 2), generated, current, busy])
    nodes = ["node-0", "node-1"]
    assert (await scheduler.filter(pending, nodes)).passed == nodes
    stale = await scheduler.prioritize(pending, nodes)
    assert stale == await scheduler.prioritize(current, nodes)
    assert stale["node-1"] > stale["node-0"]  # binpack: the node already half used


async def test_bind_waits_for_the_claim_names_kube_scheduler_saw_before_our_watch() -> None:
    """Filter saw kube-scheduler's copy of the pod, which already named its generated claim; ours did
    not when bind came. Bind waits for our copy as filter would, rather than refusing the pod."""
    pending = o.pod("p", [], templates={"gpu": "one-gpu"})
    generated = o.claim("p-gpu-x", owner_pod=pending)
    current = {**pending, "metadata": {**pending["metadata"], "resourceVersion": "2"},
               "status": {**pending["status"], "resourceClaimStatuses": [
                   {"name": "gpu", "resourceClaimName": "p-gpu-x"}]}}
    scheduler = make([*o.cluster(1, 1), pending, generated], claim_wait_s=5.0)
    assert (await scheduler.filter(current, ["node-0"])).passed == ["node-0"]

    async def watch_catches_up() -> None:
        await asyncio.sleep(0.05)
        scheduler.cache.apply("Pod", "MODIFIED", current)

    caught_up = asyncio.create_task(watch_catches_up())
    await scheduler.bind("default", "p", uid=pending["metadata"]["uid"], node_name="node-0")
    await caught_up
    claim = scheduler.cache.claim("default", "p-gpu-x")
    assert claim is not None and claim.allocation is not None

    # A claim that never appears: refused once the wait is over.
    lonely = o.pod("q", [], templates={"gpu": "one-gpu"})
    scheduler = make([*o.cluster(1, 1), lonely], claim_wait_s=0.05)
    started = asyncio.get_running_loop().time()
    with pytest.raises(BindFailed, match="ResourceClaim not created yet"):
        await scheduler.bind("default", "q", uid=lonely["metadata"]["uid"], node_name="node-0")
    assert asyncio.get_running_loop().time() - started >= 0.04


async def test_a_claim_that_never_appears_is_not_created_yet_after_the_wait() -> None:
    pending = o.pod("p", [], templates={"gpu": "one-gpu"})
    scheduler = make([*o.cluster(1, 1), pending], claim_wait_s=0.05)
    started = asyncio.get_running_loop().time()
    result = await scheduler.filter(pending, ["node-0"])
    assert asyncio.get_running_loop().time() - started >= 0.04
    assert result.unresolvable == {"node-0": 'pod "default/p": ResourceClaim not created yet'}


async def test_a_claim_being_deleted_is_answered_at_once() -> None:
    claim = o.claim("c")
    claim["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    claim["metadata"]["finalizers"] = ["resource.kubernetes.io/delete-protection"]
    scheduler = make([*o.cluster(1, 1), claim, o.pod("p", ["c"])], claim_wait_s=5.0)
    result = await asyncio.wait_for(scheduler.filter(pod_of(scheduler, "p"), ["node-0"]), timeout=1.0)
    assert result.unresolvable == {"node-0": 'resourceclaim "c" is being deleted'}


async def test_the_claim_wait_stays_within_the_filter_budget() -> None:
    pending = o.pod("p", [], templates={"gpu": "one-gpu"})
    scheduler = make([*o.cluster(1, 1), pending], claim_wait_s=5.0, filter_deadline_s=0.2)
    result = await asyncio.wait_for(scheduler.filter(pending, ["node-0"]), timeout=1.0)
    assert result.unresolvable == {"node-0": 'pod "default/p": ResourceClaim not created yet'}


async def test_prioritize_after_filter_scores_from_its_verdicts(monkeypatch: pytest.MonkeyPatch) -> None:
    """kube-scheduler sends prioritize the nodes filter passed: they are scored from that filter's
    verdicts without checking them again, as a fresh check of every node would score them; a node the
    filter was not asked about is checked."""
    used = o.allocate(o.claim("used"), "node-1", ["gpu-0", "gpu-1"])
    objs = [*o.cluster(3, 4), used, o.claim("c"), o.pod("p", ["c"])]
    fresh = await make(objs, scoring="binpack").prioritize(pod_of(make(objs), "p"), NODES)
    scheduler = make(objs, scoring="binpack")
    pod = pod_of(scheduler, "p")
    assert (await scheduler.filter(pod, ["node-0", "node-1"], brief=True)).passed == ["node-0", "node-1"]
    checked: list[list[str]] = []
    check_all = scheduler.checker.check_all

    async def counting(plan: Any, node_names: Any, **options: Any) -> Any:
        checked.append(list(node_names))
        return await check_all(plan, node_names, **options)

    monkeypatch.setattr(scheduler.checker, "check_all", counting)
    assert await scheduler.prioritize(pod, ["node-1", "node-0"]) == {
        "node-1": fresh["node-1"], "node-0": fresh["node-0"]}
    assert checked == [], "the filter's verdicts answered every node"
    assert await scheduler.prioritize(pod, NODES) == fresh
    assert checked == [NODES], "node-2 was not in the filter: checked, the others reused"
    assert fresh["node-1"] > fresh["node-0"]
