"""Failure reasons: per request, which check rejected how many devices, and readable messages."""

from __future__ import annotations

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

from allocator import AllocatedState, Node


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
        "message": "claim c: request r: needs 2 devices, 1 matches (1 in use, 1 tainted, "
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
        "claim c: request r, subrequest two: needs 2 devices, 1 matches"
    )


def test_claims_that_only_fail_together() -> None:
    inv = inventory([slice_obj("s", [dev("a"), dev("b"), dev("c")])])
    outcome = allocate(inv, claim_obj("x", req("r", 2)), claim_obj("y", req("r", 2)))
    (reason,) = outcome.reasons
    assert reason.needed == 4 and reason.claim == "x,y"
    assert outcome.summary() == (
        "claims x, y: requests x/r, y/r need 4 devices together, 3 match "
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
    assert outcome.summary() == "claim c: request r: needs 1 device, 0 match"
