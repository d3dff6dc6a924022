"""Taint eviction of claims reserved for a PodGroup (gate DRAWorkloadResourceClaims)."""

from __future__ import annotations

from ctrl_objects import claim, pod, resource_slice, taint

GROUP_UID = "0b8e2c1e-4f8e-4d6b-9a51-5b1f3e0c7a11"


def group_consumer(name: str = "train") -> dict:
    return {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": name, "uid": GROUP_UID}


def member(name: str, group: str | None, **kwargs) -> dict:
    body = pod(name, **kwargs)
    if group is not None:
        body["spec"]["schedulingGroup"] = {"podGroupName": group}
    return body


def group_claim(name: str, group: str = "train") -> dict:
    """A claim the resourceclaim controller generated for PodGroup `group`, reserved for it."""
    body = claim(name, reserved_for=[group_consumer(group)])
    body["metadata"]["ownerReferences"] = [{"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
                                            "name": group, "uid": GROUP_UID, "controller": True}]
    return body


def seed(env, *objects: dict, tainted_at: float) -> None:
    env.server.seed([resource_slice("s1", {"gpu-0": [taint("broken", added=tainted_at)]}), *objects])


async def test_podgroup_taint_evicts_every_pod_of_the_group_using_the_claim(env) -> None:
    users = [member(f"w{i}", "train", claims=["shared"]) for i in range(3)]
    templated = member("w3", "train", template_claims={"gpus": "shared"})
    unscheduled = member("w4", "train", claims=["shared"], node=None)
    not_using = member("w5", "train")   # in the group, but without the claim
    other_group = member("o0", "eval", claims=["shared"])
    outside = member("x0", None, claims=["shared"])
    seed(env, *users, templated, unscheduled, not_using, other_group, outside, group_claim("shared"),
         tainted_at=env.clock.now())
    await env.start(workload_claims=True)
    assert env.pod_names() == {f"default/{name}" for name in ("w4", "w5", "o0", "x0")}
    evicted = {name for name, reason, _ in env.events("DeviceTaintManagerEviction")}
    assert evicted == {f"Pod/default/w{i}" for i in range(4)}


async def test_podgroup_taint_added_later_reaches_the_group(env) -> None:
    users = [member(f"w{i}", "train", claims=["shared"]) for i in range(2)]
    env.server.seed([resource_slice("s1", {"gpu-0": []}), *users, group_claim("shared")])
    await env.start(workload_claims=True)
    assert len(env.pod_names()) == 2
    env.server.put_object(resource_slice("s1", {"gpu-0": [taint("broken", added=env.clock.now())]}))
    await env.settle()
    assert env.pod_names() == set()


async def test_podgroup_reservation_is_ignored_with_the_gate_off(env) -> None:
    users = [member(f"w{i}", "train", claims=["shared"]) for i in range(2)]
    seed(env, *users, group_claim("shared"), tainted_at=env.clock.now())
    await env.start()
    await env.advance(600, step=60)
    assert env.deletes() == [] and len(env.pod_names()) == 2
