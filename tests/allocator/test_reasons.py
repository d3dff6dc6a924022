"""Failure reasons: per request, which check rejected how many devices, and readable messages."""

from __future__ import annotations

import gc

from allocator_objects import (
    DRIVER,
    allocate,
    allocated_claim,
    claim_obj,
    dev,
    first_available,
    inventory,
    req,
    slice_obj,
)

from allocator import PREEMPTION_MAY_HELP, AllocatedState, Node, Rejection
from allocator.outcome import AllocationOutcome, Reason


def test_each_device_is_counted_once_under_the_first_check_that_rejects_it() -> None:
    devices = [
        dev("other-node", nodeName="node-2"),
        dev("tainted", nodeName="node-1", taints=[{"key": "k", "effect": "NoExecute"}]),
        dev("used", nodeName="node-1"),
        dev("small", nodeName="node-1", attrs={"size": 1}),
        dev("free", nodeName="node-1", attrs={"size": 8}),
    ]
    inv = inventory(
        [
            slice_obj("s", devices, pool="p", node=None, perDeviceNodeSelection=True),
            slice_obj("half", [dev("x")], pool="incomplete", count=2),
        ]
    )
    state = AllocatedState()
    state.add_claim(allocated_claim("holder", (DRIVER, "p", "used")))
    size = f'device.attributes["{DRIVER}"].size'
    selector = [{"cel": {"expression": f"!has({size}) || {size} > 4"}}]
    outcome = allocate(inv, claim_obj("c", req("r", 2, selectors=selector)), state=state)
    (reason,) = outcome.reasons
    assert reason.to_dict() == {
        "claim": "default/c",
        "request": "r",
        "subrequest": None,
        "needed": 2,
        "considered": 6,
        "rejected": {"incomplete pool": 1, "node": 1, "taint": 1, "in use": 1, "request selector": 1},
        "inUseBy": {"default/holder": 1},
        "message": "claim default/c: request r: needs 2 devices, 1 matches (1 in use, 1 tainted, "
        "1 rejected by request selectors, 1 not available on this node, 1 in incomplete pools)",
    }
    assert reason.matching == 1


def test_every_subrequest_gets_a_reason() -> None:
    inv = inventory([slice_obj("s", [dev("a")])])
    outcome = allocate(inv, claim_obj("c", first_available("r", req("two", 2), req("three", 3))))
    assert [(r.request, r.subrequest, r.needed) for r in outcome.reasons] == [
        ("r", "two", 2),
        ("r", "three", 3),
    ]
    assert outcome.reasons[0].message.startswith(
        "claim default/c: request r, subrequest two: needs 2 devices, 1 matches"
    )


def test_claims_that_only_fail_together() -> None:
    inv = inventory([slice_obj("s", [dev("a"), dev("b"), dev("c")])])
    outcome = allocate(inv, claim_obj("x", req("r", 2)), claim_obj("y", req("r", 2)))
    (reason,) = outcome.reasons
    assert reason.needed == 4 and reason.claim == "default/x,default/y"
    assert outcome.summary() == (
        "claims default/x, default/y: requests x/r, y/r need 4 devices together, 3 match "
        "(or the devices that match cannot be combined)"
    )


def test_counters_and_capacity() -> None:
    counters = {"name": "set", "counters": {"memory": {"value": "8Gi"}}}
    uses = [{"counterSet": "set", "counters": {"memory": {"value": "8Gi"}}}]
    inv = inventory(
        [
            slice_obj("counters", [], sharedCounters=[counters], count=2),
            slice_obj(
                "devices",
                [
                    dev("a", consumesCounters=uses),
                    dev("b", consumesCounters=uses),
                    dev("nic", capacity={"bw": {"value": "1G"}}),
                ],
                count=2,
            ),
        ]
    )
    state = AllocatedState()
    state.add_claim(allocated_claim("holder", (DRIVER, "node-1", "a")))
    wants = req("r", capacity={"requests": {"bw": "2G"}})
    (reason,) = allocate(inv, claim_obj("c", wants), state=state).reasons
    assert reason.rejected == {"in use": 1, "counters": 1, "capacity": 1}


def test_node_without_devices() -> None:
    outcome = allocate(inventory([]), claim_obj("c", req("r")), node=Node.named("empty"))
    assert outcome.summary() == "claim default/c: request r: needs 1 device, 0 match"


def test_a_reason_carried_over_to_another_claim_names_only_that_claim() -> None:
    request = Reason("ns/gpu-a", "gpu", None, 1, 10, {"in use": 10}, {"ns/other": 10},
                     "claim ns/gpu-a: request gpu: needs 1 device, 0 match (10 in use)")
    moved = request.for_claims({"ns/gpu-a": "ns/gpu-b"})
    assert moved is not None
    assert moved.claim == "ns/gpu-b"
    assert moved.message == "claim ns/gpu-b: request gpu: needs 1 device, 0 match (10 in use)"
    assert moved.in_use_by == {"ns/other": 10} and request.claim == "ns/gpu-a"
    whole = Reason("ns/gpu-a", "gpu,nic", None, 2, 4, {}, {},
                   "claim ns/gpu-a: requests gpu, nic need 2 devices together")
    assert (moved_whole := whole.for_claims({"ns/gpu-a": "ns/gpu-b"})) is not None
    assert moved_whole.message == "claim ns/gpu-b: requests gpu, nic need 2 devices together"
    # A claim without a namespace (a hand-written snapshot) is named by its name alone.
    bare = Reason("gpu-a", "gpu,nic", None, 2, 4, {}, {},
                  "claim gpu-a: requests gpu, nic need 2 devices together")
    assert (moved_bare := bare.for_claims({"/gpu-a": "/gpu-b"})) is not None
    assert moved_bare.message == "claim gpu-b: requests gpu, nic need 2 devices together"
    # Several claims together name them inside the message as well: not carried over.
    joint = Reason("ns/a,ns/b", "a/gpu,b/gpu", None, 2, 1, {}, {},
                   "claims ns/a, ns/b: requests a/gpu, b/gpu need 2 devices")
    assert joint.for_claims({"ns/a": "ns/c", "ns/b": "ns/d"}) is None
    assert request.for_claims({"ns/unrelated": "ns/x"}) is None


def test_a_failed_outcome_is_carried_over_only_when_every_reason_is() -> None:
    single = Reason("ns/a", "gpu", None, 1, 1, {"in use": 1}, {},
                    "claim ns/a: request gpu: needs 1 device, 0 match")
    joint = Reason("ns/a,ns/b", "a/gpu,b/gpu", None, 2, 1, {}, {},
                   "claims ns/a, ns/b: requests a/gpu, b/gpu need 2 devices")
    moved = AllocationOutcome(False, [], [single], 3, []).for_claims({"ns/a": "ns/z"})
    assert moved is not None and moved.summary() == "claim ns/z: request gpu: needs 1 device, 0 match"
    assert AllocationOutcome(False, [], [single, joint], 3, []).for_claims({"ns/a": "ns/z"}) is None


def test_a_failed_outcome_keeps_what_its_explanation_reads_not_the_search() -> None:
    inv = inventory([slice_obj("s", [dev("a"), dev("b")], pool="p")])
    state = AllocatedState()
    state.add_claim(allocated_claim("holder", (DRIVER, "p", "a")))
    outcome = allocate(inv, claim_obj("c", req("r", 2)), state=state)
    gc.collect()
    assert not [o for o in gc.get_objects() if type(o).__name__ == "_Search"]
    (reason,) = outcome.reasons  # worked out only now, from the state the outcome kept
    assert reason.rejected == {Rejection.IN_USE: 1} and reason.in_use_by == {"default/holder": 1}


def test_rejection_keys_are_the_served_strings() -> None:
    # Served by explain and read by tools: renaming a member must not change these.
    assert sorted(str(key) for key in Rejection) == [
        "binding conditions", "capacity", "class selector", "compatibility groups", "constraint",
        "counters", "groups ignored", "in use", "incomplete pool", "invalid pool", "node",
        "node operations", "request selector", "taint",
    ]
    assert sorted(PREEMPTION_MAY_HELP) == ["capacity", "compatibility groups", "counters", "in use"]
