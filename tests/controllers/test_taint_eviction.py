from __future__ import annotations

import asyncio

from ctrl_objects import DRIVER, claim, consumer, pod, resource_slice, rule, taint, toleration

from extender.controllers.taint_eviction import selected_pools

DELETIONS = "device_taint_eviction_controller_pod_deletions_total"


async def test_pod_on_untolerated_slice_taint_is_evicted(env) -> None:
    now = env.clock.now()
    victim = pod("victim", claims=["gpu"])
    env.server.seed(
        [
            resource_slice("s1", {"gpu-0": [taint("broken", added=now)], "gpu-1": []}),
            victim,
            claim("gpu", reserved_for=[consumer(victim)]),
        ]
    )
    await env.start()
    assert env.pod_names() == set()
    assert env.events() == [("Pod/default/victim", "DeviceTaintManagerEviction", "Marking for deletion")]
    patch = [path for verb, path in env.client.calls if verb == "patch"]
    assert patch == ["/api/v1/namespaces/default/pods/victim/status"]
    assert env.metric(DELETIONS) == 1
    assert env.metric("device_taint_eviction_controller_pod_deletion_duration_seconds_count") == 1


async def test_condition_is_set_before_delete_and_delete_is_uid_guarded(env) -> None:
    now = env.clock.now()
    victim = pod("victim", claims=["gpu"])
    victim["metadata"]["finalizers"] = ["example.com/keep"]  # keeps the deleted pod visible
    env.server.seed(
        [
            resource_slice("s1", {"gpu-0": [taint("broken", added=now)]}),
            victim,
            claim("gpu", reserved_for=[consumer(victim)]),
        ]
    )
    await env.start()
    stored = env.server.get_object("Pod", "victim", "default")
    assert stored["metadata"].get("deletionTimestamp")
    [condition] = [c for c in stored["status"]["conditions"] if c["type"] == "DisruptionTarget"]
    assert condition["status"] == "True"
    assert condition["reason"] == "DeletionByDeviceTaintManager"
    assert condition["message"] == "Device Taint manager: deleting due to NoExecute taint"


async def test_unscheduled_unreserved_tolerating_and_unowned_pods_stay(env) -> None:
    now = env.clock.now()
    unscheduled = pod("unscheduled", claims=["a"], node=None)
    unreserved = pod("unreserved", claims=["b"])
    tolerating = pod("tolerating", claims=["c"])
    unowned = pod("unowned", template_claims={"gpu": "d"})
    other_owner = pod("other-owner")
    env.server.seed(
        [
            resource_slice("s1", {"gpu-0": [taint("broken", added=now)]}),
            unscheduled,
            unreserved,
            tolerating,
            unowned,
            other_owner,
            claim("a", reserved_for=[consumer(unscheduled)]),
            claim("b", reserved_for=[]),
            claim("c", reserved_for=[consumer(tolerating)], tolerations=[toleration("broken")]),
            claim("d", reserved_for=[consumer(unowned)], owner=other_owner),
        ]
    )
    await env.start()
    await env.advance(3600, step=600)
    assert env.deletes() == []
    assert len(env.pod_names()) == 5


async def test_toleration_seconds_delay_eviction(env) -> None:
    now = env.clock.now()
    victim = pod("victim", claims=["gpu"])
    env.server.seed(
        [
            resource_slice("s1", {"gpu-0": [taint("broken", added=now - 10)]}),
            victim,
            claim("gpu", reserved_for=[consumer(victim)], tolerations=[toleration("broken", seconds=60)]),
        ]
    )
    await env.start()
    await env.advance(49)
    assert env.pod_names() == {"default/victim"}
    await env.advance(1)
    assert env.pod_names() == set()
    # Evicted within the second it was due: the latency histogram saw a small value.
    assert (
        env.registry.get_sample_value(
            "device_taint_eviction_controller_pod_deletion_duration_seconds_bucket", {"le": "0.005"}
        )
        == 1
    )


async def test_shared_claim_skips_stale_consumers_and_evicts_all_live_ones(env) -> None:
    now = env.clock.now()
    deleted = pod("deleted", claims=["shared"])
    replaced_old = pod("replaced", claims=["shared"])
    replaced_new = pod("replaced", claims=["shared"])  # same name, new UID, not reserved
    live1, live2 = pod("live-1", claims=["shared"]), pod("live-2", claims=["shared"])
    env.server.seed(
        [
            resource_slice("s1", {"gpu-0": []}),
            replaced_new,
            live1,
            live2,
            claim(
                "shared",
                reserved_for=[consumer(deleted), consumer(replaced_old), consumer(live1), consumer(live2)],
            ),
        ]
    )
    await env.start()
    assert env.deletes() == []
    # The taint arrives after start: the claim's consumers are walked from reservedFor.
    env.server.put_object(resource_slice("s1", {"gpu-0": [taint("broken", added=now)]}))
    await env.settle()
    assert env.pod_names() == {"default/replaced"}
    assert sorted(env.deletes()) == [
        "/api/v1/namespaces/default/pods/live-1",
        "/api/v1/namespaces/default/pods/live-2",
    ]
    stored = env.server.get_object("Pod", "replaced", "default")
    assert stored["metadata"]["uid"] == replaced_new["metadata"]["uid"]
    assert "conditions" not in stored["status"]


async def test_replaced_pod_with_same_name_is_never_touched(env) -> None:
    now = env.clock.now()
    old = pod("web", claims=["gpu"])
    env.server.seed(
        [
            resource_slice("s1", {"gpu-0": [taint("broken", added=now)]}),
            old,
            claim("gpu", reserved_for=[consumer(old)], tolerations=[toleration("broken", seconds=30)]),
        ]
    )
    await env.start()
    # Between the decision and the deadline the pod is replaced behind the controller's back.
    env.server.remove_object("Pod", "web", "default")
    new = pod("web", claims=["gpu"])
    env.server.seed([new])
    await env.advance(40, step=10)
    assert env.server.get_object("Pod", "web", "default")["metadata"]["uid"] == new["metadata"]["uid"]
    assert env.deletes() == []


async def test_taint_removed_before_deadline_cancels_with_event(env) -> None:
    now = env.clock.now()
    victim = pod("victim", claims=["gpu"])
    env.server.seed(
        [
            resource_slice("s1", {"gpu-0": [taint("broken", added=now)]}),
            victim,
            claim("gpu", reserved_for=[consumer(victim)], tolerations=[toleration("broken", seconds=60)]),
        ]
    )
    controllers = await env.start()
    assert controllers.state()["pending_evictions"][0]["pod"] == "default/victim"
    await env.advance(30, step=10)
    env.server.put_object(resource_slice("s1", {"gpu-0": []}))
    await env.settle()
    await env.advance(120, step=30)
    assert env.pod_names() == {"default/victim"}
    assert env.events() == [("Pod/default/victim", "DeviceTaintManagerEviction", "Cancelling deletion")]
    assert controllers.state()["pending_evictions"] == []
    assert controllers.term.queue.depth() == 0


async def test_deleted_pod_cancels_silently(env) -> None:
    now = env.clock.now()
    victim = pod("victim", claims=["gpu"])
    env.server.seed(
        [
            resource_slice("s1", {"gpu-0": [taint("broken", added=now)]}),
            victim,
            claim("gpu", reserved_for=[consumer(victim)], tolerations=[toleration("broken", seconds=60)]),
        ]
    )
    controllers = await env.start()
    env.server.remove_object("Pod", "victim", "default")
    await env.advance(120, step=30)
    assert env.events() == []
    assert controllers.term.queue.depth() == 0


async def test_failing_deletes_are_retried_until_they_succeed(env) -> None:
    now = env.clock.now()
    victim = pod("victim", claims=["gpu"])
    env.server.fail_next("delete", "pods", count=12, status=503, message="etcd is sad")
    env.server.seed(
        [
            resource_slice("s1", {"gpu-0": [taint("broken", added=now)]}),
            victim,
            claim("gpu", reserved_for=[consumer(victim)]),
        ]
    )
    await env.start()
    assert env.pod_names() == {"default/victim"}
    await env.advance(600, step=5)
    assert env.pod_names() == set()
    assert len(env.deletes()) == 13
    assert env.metric("dra_extender_taint_eviction_retries_total") == 12
    assert env.metric(DELETIONS) == 1
    # Announced once although the delete was attempted 13 times.
    assert len(env.events("DeviceTaintManagerEviction")) == 1


async def test_last_slice_gone_drops_slice_taints_but_rules_still_apply(env) -> None:
    now = env.clock.now()
    a, b = pod("a", claims=["ca"]), pod("b", claims=["cb"])
    env.server.seed(
        [
            resource_slice("s1", {"gpu-0": [taint("broken", added=now)], "gpu-1": []}),
            a,
            b,
            claim(
                "ca",
                devices=["gpu-0"],
                reserved_for=[consumer(a)],
                tolerations=[toleration("broken", seconds=60)],
            ),
            claim("cb", devices=["gpu-1"], reserved_for=[consumer(b)]),
        ]
    )
    await env.start()
    env.server.remove_object("ResourceSlice", "s1")
    await env.settle()
    assert env.events() == [("Pod/default/a", "DeviceTaintManagerEviction", "Cancelling deletion")]
    # A rule for the vanished pool's device still evicts the pod holding it.
    env.server.seed([rule("gpu-1-broken", selector={"device": "gpu-1"}, added=now)])
    await env.settle()
    assert env.pod_names() == {"default/a"}


async def test_rule_selectors(env) -> None:
    now = env.clock.now()
    pods = [pod(f"p{i}", claims=[f"c{i}"]) for i in range(3)]
    env.server.seed(
        [
            resource_slice("s1", {"gpu-0": [], "gpu-1": []}),
            resource_slice("s2", {"gpu-0": []}, pool="node-2"),
            *pods,
            claim("c0", devices=["gpu-0"], reserved_for=[consumer(pods[0])]),
            claim("c1", devices=["gpu-1"], reserved_for=[consumer(pods[1])]),
            claim("c2", devices=["gpu-0"], pool="node-2", reserved_for=[consumer(pods[2])]),
            rule("no-selector", selector=None, added=now),
            rule("other-driver", selector={"driver": "nic.example.com"}, added=now),
        ]
    )
    await env.start()
    assert env.deletes() == []
    env.server.seed([rule("node-2-gpu-0", selector={"pool": "node-2", "device": "gpu-0"}, added=now)])
    await env.settle()
    assert env.pod_names() == {"default/p0", "default/p1"}
    env.server.seed([rule("everything", selector={}, added=now)])
    await env.settle()
    assert env.pod_names() == set()


async def test_thousand_pods_on_one_device_bounded_concurrency_and_memory(env) -> None:
    now = env.clock.now()
    pods = [pod(f"p{i:04d}", namespace=f"ns{i % 4}", claims=[f"shared-{i % 4}"]) for i in range(1000)]
    claims = [
        claim(f"shared-{n}", namespace=f"ns{n}", reserved_for=[consumer(p) for p in pods[n::4]])
        for n in range(4)
    ]
    env.server.seed([resource_slice("s1", {"gpu-0": []}), *pods, *claims])
    controllers = await env.start(workers=10)
    samples: list[tuple[int, int]] = []

    def sample(request) -> None:
        term = controllers.term
        samples.append((term.queue.memory_entries(), len(asyncio.all_tasks())))

    env.server.intercept(sample)
    env.server.put_object(resource_slice("s1", {"gpu-0": [taint("broken", added=now)]}))
    await env.settle()
    assert env.pod_names() == set()
    assert len(env.deletes()) == 1000
    assert 1 < env.client.peak["delete"] <= 10
    assert env.client.peak["get"] <= 10 and env.client.peak["patch"] <= 10
    assert max(entries for entries, _ in samples) <= 3 * 1000
    assert max(tasks for _, tasks in samples) < 100  # a fixed set of workers, not a task per pod
    assert env.metric(DELETIONS) == 1000
    assert controllers.term.queue.memory_entries() == 0
    assert controllers.state()["pending_evictions"] == []


async def test_with_the_real_cluster_cache(cluster_cache_env) -> None:
    env = cluster_cache_env
    now = env.clock.now()
    stale = pod("stale", claims=["shared"])
    live = pod("live", claims=["shared"])
    rule_victim = pod("rule-victim", claims=["other"])
    env.server.seed(
        [
            resource_slice("s1", {"gpu-0": [], "gpu-1": []}),
            live,
            rule_victim,
            claim("shared", devices=["gpu-0"], reserved_for=[consumer(stale), consumer(live)]),
            claim("other", devices=["gpu-1"], reserved_for=[consumer(rule_victim)]),
        ]
    )
    await env.start(names=("taint-eviction", "driver-loss"))
    env.server.put_object(resource_slice("s1", {"gpu-0": [taint("broken", added=now)], "gpu-1": []}))
    await env.settle()
    assert env.pod_names() == {"default/rule-victim"}
    env.server.seed([rule("gpu-1", selector={"device": "gpu-1"}, added=now)])
    await env.settle()
    assert env.pod_names() == set()


async def test_terminating_pod_is_counted_once_and_never_cancelled(env) -> None:
    now = env.clock.now()
    victim = pod("victim", claims=["gpu"])
    victim["metadata"]["finalizers"] = ["example.com/graceful"]  # stays, terminating, after the DELETE
    env.server.seed(
        [
            resource_slice("s1", {"gpu-0": [taint("broken", added=now)]}),
            victim,
            claim("gpu", reserved_for=[consumer(victim)]),
        ]
    )
    await env.start()
    stored = env.server.get_object("ResourceClaim", "gpu", "default")
    stored["status"]["reservedFor"].append({"resource": "pods", "name": "gone", "uid": "0000"})
    env.server.put_object(stored)  # the claim changes while the pod terminates
    await env.advance(60, step=10)
    assert env.events() == [("Pod/default/victim", "DeviceTaintManagerEviction", "Marking for deletion")]
    assert env.metric(DELETIONS) == 1
    assert len(env.deletes()) == 1


async def test_pod_that_no_longer_holds_the_claim_is_not_evicted(env) -> None:
    now = env.clock.now()
    victim = pod("victim", claims=["gpu"])
    env.server.seed(
        [
            resource_slice("s1", {"gpu-0": [taint("broken", added=now)]}),
            victim,
            claim("gpu", reserved_for=[consumer(victim)], tolerations=[toleration("broken", seconds=60)]),
        ]
    )
    await env.start()
    stored = env.server.get_object("ResourceClaim", "gpu", "default")
    stored["status"]["reservedFor"] = []
    env.server.put_object(stored)
    await env.advance(120, step=30)
    assert env.pod_names() == {"default/victim"}
    assert env.events() == [("Pod/default/victim", "DeviceTaintManagerEviction", "Cancelling deletion")]


async def test_a_rule_moved_to_other_devices_lets_go_of_the_pods_it_left(env) -> None:
    """A rule's change recomputes only the claims in pools it selected before or selects now."""
    now = env.clock.now()
    pods = [pod(f"p{i}", claims=[f"c{i}"]) for i in range(2)]
    patient = [toleration("example.com/broken", seconds=60)]
    env.server.seed([
        resource_slice("s1", {"gpu-0": []}),
        resource_slice("s2", {"gpu-0": []}, pool="node-2"),
        *pods,
        claim("c0", reserved_for=[consumer(pods[0])], tolerations=patient),
        claim("c1", pool="node-2", reserved_for=[consumer(pods[1])], tolerations=patient),
        rule("maintenance", selector={"driver": DRIVER, "pool": "node-1"}, added=now),
    ])
    controllers = await env.start()
    assert [entry["pod"] for entry in controllers.state()["pending_evictions"]] == ["default/p0"]
    env.server.put_object(rule("maintenance", selector={"driver": DRIVER, "pool": "node-2"}, added=now))
    await env.settle()
    assert [entry["pod"] for entry in controllers.state()["pending_evictions"]] == ["default/p1"]
    await env.advance(120)
    assert env.pod_names() == {"default/p0"}


def test_the_pools_a_rule_can_select() -> None:
    known = [(DRIVER, "node-1"), (DRIVER, "node-2"), ("nic.example.com", "node-1")]
    pools = {name: selected_pools(rule(name, selector=selector), lambda: known)
             for name, selector in {"none": None, "empty": {}, "device": {"device": "gpu-0"},
                                    "driver": {"driver": DRIVER}, "pool": {"pool": "node-1"},
                                    "both": {"driver": "nic.example.com", "pool": "node-9"},
                                    "not a name": {"driver": ["gpu.example.com"], "pool": "node-1"},
                                    "empty names": {"driver": "", "pool": ""}}.items()}
    assert pools == {"none": (), "empty": None, "device": None,
                     "driver": [(DRIVER, "node-1"), (DRIVER, "node-2")],
                     "pool": [(DRIVER, "node-1"), ("nic.example.com", "node-1")],
                     "both": (("nic.example.com", "node-9"),), "not a name": (), "empty names": None}
