from __future__ import annotations

import asyncio

from ctrl_objects import claim, consumer, pod, resource_slice, rule, taint, toleration

from extender.controllers.rule_status import eviction_condition


def condition_of(env, name: str) -> dict:
    stored = env.server.get_object("DeviceTaintRule", name)
    [condition] = stored["status"]["conditions"]
    assert condition["type"] == "EvictionInProgress"
    return condition


def status_patches(env, name: str) -> int:
    path = f"/apis/resource.k8s.io/v1/devicetaintrules/{name}/status"
    return sum(1 for verb, p in env.client.calls if verb == "patch" and p == path)


async def test_no_execute_rule_reports_progress_then_completion(env) -> None:
    now = env.clock.now()
    a, b = pod("a", namespace="team-a", claims=["ca"]), pod("b", namespace="team-b", claims=["cb"])
    wait = [toleration("example.com/broken", seconds=60)]
    env.server.seed(
        [
            resource_slice("s1", {"gpu-0": [], "gpu-1": []}),
            a,
            b,
            claim("ca", namespace="team-a", devices=["gpu-0"], reserved_for=[consumer(a)], tolerations=wait),
            claim("cb", namespace="team-b", devices=["gpu-1"], reserved_for=[consumer(b)], tolerations=wait),
            rule("broken", selector={"driver": "gpu.example.com"}, added=now),
        ]
    )
    await env.start()
    condition = condition_of(env, "broken")
    assert (condition["status"], condition["reason"], condition["message"]) == (
        "True",
        "PodsPendingEviction",
        "2 pods need to be evicted in 2 different namespaces.",
    )
    assert condition["observedGeneration"] == 1
    await env.advance(59, step=1)
    assert status_patches(env, "broken") == 1  # nothing changed while waiting: no writes
    await env.advance(1)
    assert env.pod_names() == set()
    await env.advance(10, step=1)
    condition = condition_of(env, "broken")
    assert (condition["status"], condition["reason"], condition["message"]) == (
        "False",
        "Completed",
        "2 pods evicted since starting the controller.",
    )
    assert status_patches(env, "broken") == 2


async def test_status_is_updated_at_most_every_ten_seconds(env) -> None:
    now = env.clock.now()
    pods = [pod(f"p{i}", claims=[f"c{i}"]) for i in range(3)]
    env.server.seed(
        [
            resource_slice("s1", {f"gpu-{i}": [] for i in range(3)}),
            *pods,
            *[
                claim(
                    f"c{i}",
                    devices=[f"gpu-{i}"],
                    reserved_for=[consumer(pods[i])],
                    tolerations=[toleration("example.com/broken", seconds=(5, 12, 25)[i])],
                )
                for i in range(3)
            ],
            rule("broken", selector={}, added=now),
        ]
    )
    await env.start()
    assert condition_of(env, "broken")["message"] == "3 pods need to be evicted in 1 namespace."
    writes: list[tuple[float, str]] = []
    for _ in range(40):
        await env.advance(1)
        message = condition_of(env, "broken")["message"]
        if not writes or writes[-1][1] != message:
            writes.append((env.clock.now() - now, message))
    assert [message for _, message in writes] == [
        "3 pods need to be evicted in 1 namespace.",
        "2 pods need to be evicted in 1 namespace. 1 pod evicted since starting the controller.",
        "1 pod needs to be evicted in 1 namespace. 2 pods evicted since starting the controller.",
        "3 pods evicted since starting the controller.",
    ]
    assert [t for t, _ in writes[1:]] == [10, 20, 30]  # evictions at 5, 12 and 25 s; writes 10 s apart


async def test_none_effect_reports_what_no_execute_would_do_once(env) -> None:
    now = env.clock.now()
    victim = pod("victim", claims=["gpu"])
    env.server.seed(
        [
            resource_slice("s1", {"gpu-0": [], "gpu-1": [], "gpu-2": []}),
            resource_slice("s2", {"gpu-0": []}, pool="node-2"),
            victim,
            claim("gpu", reserved_for=[consumer(victim)]),
            rule("dry-run", selector={"pool": "node-1"}, effect="None", added=now),
        ]
    )
    await env.start()
    condition = condition_of(env, "dry-run")
    assert (condition["status"], condition["reason"]) == ("False", "NoEffect")
    assert condition["message"] == (
        "3 published devices selected. 1 allocated device selected. 1 pod would be evicted in 1 namespace "
        "if the effect was NoExecute. This information will not be updated again. "
        "Recreate the DeviceTaintRule to trigger an update."
    )
    assert env.pod_names() == {"default/victim"}
    # More pods later change nothing: the message is a one-time simulation per spec generation.
    other = pod("other", claims=["gpu2"])
    env.server.seed([other, claim("gpu2", devices=["gpu-1"], reserved_for=[consumer(other)])])
    await env.advance(30, step=10)
    assert status_patches(env, "dry-run") == 1
    # A spec change is a new generation: simulated again.
    changed = env.server.get_object("DeviceTaintRule", "dry-run")
    changed["spec"]["deviceSelector"] = {"device": "gpu-0"}
    env.server.put_object(changed)
    await env.settle()
    assert condition_of(env, "dry-run")["message"].startswith(
        "2 published devices selected. 1 allocated device selected. 1 pod would be evicted in 1 namespace "
    )
    assert condition_of(env, "dry-run")["observedGeneration"] == 2
    assert env.pod_names() == {"default/victim", "default/other"}


async def test_other_effects_and_idle_rules(env) -> None:
    now = env.clock.now()
    env.server.seed(
        [
            resource_slice("s1", {"gpu-0": [taint("unrelated", effect="NoSchedule", added=now)]}),
            rule("no-schedule", selector={}, effect="NoSchedule", added=now),
            rule("idle", selector={"device": "gpu-9"}, added=now),
        ]
    )
    await env.start()
    assert condition_of(env, "no-schedule")["reason"] == "OtherEffect"
    assert condition_of(env, "no-schedule")["message"] == "Eviction only happens for the NoExecute effect."
    assert (condition_of(env, "idle")["reason"], condition_of(env, "idle")["message"]) == ("NotStarted", "")


def test_message_wording() -> None:
    no_execute = rule("r", selector={}, added=0)
    none = rule("r", selector={}, effect="None", added=0)
    assert eviction_condition(no_execute, pending_pods=1, pending_namespaces=1, evicted_pods=1)[
        "message"
    ] == ("1 pod needs to be evicted in 1 namespace. 1 pod evicted since starting the controller.")
    assert eviction_condition(
        none, pending_pods=0, pending_namespaces=0, evicted_pods=0, published_devices=1, allocated_devices=0
    )["message"].startswith(
        "1 published device selected. 0 allocated devices selected. 0 pods would be evicted in 0 different "
        "namespaces if"
    )


def three_pods_on_three_devices(env) -> None:
    pods = [pod(f"p{i}", claims=[f"c{i}"]) for i in range(3)]
    env.server.seed([
        resource_slice("s1", {f"gpu-{i}": [] for i in range(3)}),
        *pods,
        *(claim(f"c{i}", devices=[f"gpu-{i}"], reserved_for=[consumer(pods[i])]) for i in range(3)),
    ])


async def test_a_rule_is_counted_in_slices_and_a_count_it_outlived_is_not_written(env, monkeypatch) -> None:
    from extender.controllers import taint_eviction

    monkeypatch.setattr(taint_eviction, "SLICE_S", 0.0)   # a yield after every claim
    now = env.clock.now()
    three_pods_on_three_devices(env)
    await env.start()
    turn = 0
    turns_counted: list[int] = []
    counted = taint_eviction.TaintEvictionController._affected_by

    def affected_by(self, *args):
        turns_counted.append(turn)
        if len(turns_counted) == 2:   # the rule changes while its first count is under way
            changed = env.server.get_object("DeviceTaintRule", "dry-run")
            changed["spec"]["deviceSelector"] = {"device": "gpu-0"}
            env.server.put_object(changed)
        return counted(self, *args)

    async def ticker() -> None:
        nonlocal turn
        while True:
            turn += 1
            await asyncio.sleep(0)

    monkeypatch.setattr(taint_eviction.TaintEvictionController, "_affected_by", affected_by)
    ticking = asyncio.create_task(ticker())
    env.server.seed([rule("dry-run", selector={"pool": "node-1"}, effect="None", added=now)])
    await env.settle()
    ticking.cancel()
    # each claim counted in a turn of its own; then the new selector's count, of every claim again
    assert len(turns_counted) == 3 + 3 and len(set(turns_counted[:3])) == 3, turns_counted
    assert status_patches(env, "dry-run") == 1
    condition = condition_of(env, "dry-run")
    assert condition["observedGeneration"] == 2
    assert condition["message"].startswith("1 published device selected. 1 allocated device selected.")


async def test_a_metadata_update_during_the_count_still_gets_the_report_written(env, monkeypatch) -> None:
    """A label added while the one-time report is counted: counted again and written, not dropped."""
    from extender.controllers import taint_eviction

    monkeypatch.setattr(taint_eviction, "SLICE_S", 0.0)
    now = env.clock.now()
    three_pods_on_three_devices(env)
    await env.start()
    calls = 0
    counted = taint_eviction.TaintEvictionController._affected_by

    def affected_by(self, *args):
        nonlocal calls
        calls += 1
        if calls == 2:
            labelled = env.server.get_object("DeviceTaintRule", "dry-run")
            labelled["metadata"].setdefault("labels", {})["team"] = "gpu"   # no new generation
            env.server.put_object(labelled)
        return counted(self, *args)

    monkeypatch.setattr(taint_eviction.TaintEvictionController, "_affected_by", affected_by)
    env.server.seed([rule("dry-run", selector={"pool": "node-1"}, effect="None", added=now)])
    await env.settle()
    await env.advance(30, step=10)
    assert status_patches(env, "dry-run") == 1
    assert condition_of(env, "dry-run")["message"].startswith("3 published devices selected.")
