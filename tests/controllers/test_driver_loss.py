from __future__ import annotations

import argparse

import pytest
from ctrl_objects import claim, consumer, device_class, node, pending_claim, pod, resource_slice

from allocator import Allocator, FeatureGates, ResourceClaim
from common.rules import parse_duration
from extender.controllers import ControllerOptions
from extender.flags import add_controller_arguments
from extender.state.cache import ClusterCache

LOST = "dra_extender_driver_lost_devices"


async def seed_and_lose_driver(env, **options):
    victim = pod("victim", claims=["gpu"])
    env.server.seed(
        [
            resource_slice("s1", {"gpu-0": [], "gpu-1": []}),
            resource_slice("other", {"gpu-0": []}, pool="node-2"),
            victim,
            claim("gpu", devices=["gpu-0", "gpu-1"], reserved_for=[consumer(victim)]),
        ]
    )
    controllers = await env.start(names=("driver-loss",), **options)
    assert controllers.driver_lost() == []
    env.server.remove_object("ResourceSlice", "s1")  # the driver on node-1 restarts
    await env.settle()
    return controllers


async def test_slices_returning_within_grace_period_change_nothing(env) -> None:
    controllers = await seed_and_lose_driver(env)
    assert controllers.driver_lost() == [
        {
            "driver": "gpu.example.com",
            "pool": "node-1",
            "devices": ["gpu-0", "gpu-1"],
            "claims": ["default/gpu"],
            "seconds_left": 300.0,
            "expired": False,
        }
    ]
    assert env.metric(LOST) == 2
    await env.advance(120, step=30)
    assert controllers.driver_lost()[0]["seconds_left"] == 180.0
    env.server.seed([resource_slice("s1", {"gpu-0": [], "gpu-1": []})])
    await env.settle()
    assert controllers.driver_lost() == []
    assert env.metric(LOST) == 0
    await env.advance(600, step=60)
    assert env.events() == []
    assert env.deletes() == []


async def test_grace_period_expiry_records_events_without_evicting(env) -> None:
    controllers = await seed_and_lose_driver(env, driver_loss_grace_period=60)
    await env.advance(59)
    assert env.events() == []
    await env.advance(1)
    message = (
        "devices gpu.example.com/node-1/gpu-0, gpu.example.com/node-1/gpu-1 have had no ResourceSlice "
        "for 1m0s: driver lost"
    )
    assert env.events() == [
        ("ResourceClaim/default/gpu", "DeviceDriverLost", message),
        ("Pod/default/victim", "DeviceDriverLost", f"claim gpu: {message}"),
    ]
    [lost] = controllers.driver_lost()
    assert (lost["expired"], lost["seconds_left"]) == (True, 0.0)
    await env.advance(600, step=60)
    assert env.deletes() == []
    assert env.pod_names() == {"default/victim"}


async def test_grace_period_expiry_evicts_when_configured(env) -> None:
    await seed_and_lose_driver(env, driver_loss_grace_period=60, evict_on_driver_loss=True)
    await env.advance(60, step=10)
    assert env.pod_names() == set()
    assert [e[2] for e in env.events("DeviceTaintManagerEviction")] == ["Marking for deletion"]
    assert env.metric("device_taint_eviction_controller_pod_deletions_total") == 1


async def test_deallocated_claim_ends_driver_loss(env) -> None:
    controllers = await seed_and_lose_driver(env, evict_on_driver_loss=True)
    env.server.remove_object("ResourceClaim", "gpu", "default")
    await env.settle()
    assert controllers.driver_lost() == []
    await env.advance(600, step=60)
    assert env.pod_names() == {"default/victim"}
    assert env.events() == []


def test_command_line() -> None:
    parser = argparse.ArgumentParser()
    add_controller_arguments(parser)
    args = parser.parse_args(
        [
            "--controllers=taint-eviction,driver-loss",
            "--driver-loss-grace-period=1m30s",
            "--evict-on-driver-loss",
            "--taint-eviction-workers=3",
            "--leader-elect",
        ]
    )
    assert args.controllers == ("taint-eviction", "driver-loss")
    assert (args.driver_loss_grace_period, args.taint_eviction_workers) == (90.0, 3)
    defaults = parser.parse_args([])
    assert (defaults.controllers, defaults.driver_loss_grace_period, defaults.leader_elect) == (
        (),
        300.0,
        False,
    )
    with pytest.raises(SystemExit):
        parser.parse_args(["--controllers=taint-evictoin"])
    with pytest.raises(SystemExit):
        parser.parse_args(["--driver-loss-grace-period=soon"])
    assert parse_duration("250ms") == 0.25
    with pytest.raises(ValueError, match="--evict-on-driver-loss needs --controllers=driver-loss"):
        ControllerOptions(names=("taint-eviction",), evict_on_driver_loss=True)


def test_lost_devices_stay_allocated_and_are_never_offered() -> None:
    # The guarantee comes from the cache: the claim keeps the device in AllocatedState, and without its
    # slice the device is gone from the Inventory, so a new claim cannot get it.
    cache = ClusterCache(FeatureGates())
    holder = pod("holder", claims=["held"])
    for raw in (
        node("node-1"),
        device_class(),
        resource_slice("s1", {"gpu-0": [], "gpu-1": []}),
        holder,
        claim("held", devices=["gpu-0"], reserved_for=[consumer(holder)]),
    ):
        cache.apply(raw["kind"], "ADDED", raw)

    def allocate() -> list[str]:
        outcome = Allocator(cache.inventory, cache.allocated, cache.features).allocate(
            cache.node("node-1"), [ResourceClaim.from_api(pending_claim("new"))]
        )
        return (
            [r["device"] for a in outcome.allocations for r in a["devices"]["results"]]
            if outcome.success
            else []
        )

    assert allocate() == ["gpu-1"]
    cache.apply("ResourceSlice", "DELETED", cache.raw("ResourceSlice", "s1"))
    assert allocate() == []
    assert cache.allocated.owner_of("gpu.example.com", "node-1", "gpu-0") == "default/held"
