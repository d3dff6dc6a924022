"""Hypothesis strategies for random but valid allocation worlds (resource.k8s.io/v1 objects as raw
API dicts), shaped so that the interesting cases (contention, constraints, partial pools) are common.

A world is a dict: ``gates`` (every gate our allocator knows), ``node``, ``classes``, ``slices``,
``allocatedClaims`` and ``claims``; that is also the input of the upstream program, so a failing
world can be replayed on both sides as it is. ``features`` names what the world exercises, so a
campaign can count divergences per feature.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "allocator"))

from upstream_cases.builders import (
    ALL_NODES,
    PER_DEVICE,
    Version,
    attribute,
    cel,
    claim,
    device_class,
    first_available,
    label_selector,
    node,
    range_policy,
    request,
    resource_slice,
    sub,
    taint,
    toleration,
    values_policy,
)

from allocator import DEFAULT_GATES, Quantity

Obj = dict[str, Any]
DRIVERS = ("driver-a", "driver-b")
NODE = "node-1"
OTHER_NODE = "node-2"
# Gates a world may switch off; the rest keep their 1.37 defaults.
VARIED_GATES = (
    "DRAAdminAccess",
    "DRAPrioritizedList",
    "DRAPartitionableDevices",
    "DRADeviceTaints",
    "DRAConsumableCapacity",
    "DRADeviceBindingConditions",
    "DRAListTypeAttributes",
)
# Gates off by default (alpha, and the beta DRAFractionalCapacityRange), switched on in about half the
# worlds so their features get tried.
OFF_BY_DEFAULT_GATES = ("DRADerivedAttributes", "DRAOptionalNodeOperations", "DRAFractionalCapacityRange")
SKIPPED_OPERATIONS = (["*"], ["NodeUnprepareResources"], ["NodePrepareResources", "NodeUnprepareResources"])
# Derived attribute expressions ({d}: a driver): ints, strings, a constant, booleans, versions, lists,
# and rarely one that fails at run time on devices without numa, or does not compile (a double).
DERIVED_EXPRESSIONS = [
    'device.attributes["{d}"].?numa.orValue(-1)',
    'device.attributes["{d}"].?model.orValue("none")',
    '"same"',
    'device.attributes["{d}"].?numa.orValue(0) % 2 == 0',
    'device.attributes["{d}"].?version.orValue(semver("0.0.1"))',
    "device.driver",
    # dyn(7): a list literal mixing a dyn and an int does not compile (in cel-go and in ours); this one
    # mixes two dyn values.
    '[device.attributes["{d}"].?numa.orValue(0), dyn(7)]',
    '"numa" in device.attributes["{d}"] ? device.attributes["{d}"].numa : 0',
]
FAILING_DERIVED_EXPRESSIONS = ['device.attributes["{d}"].numa', "1.5", "[]"]
COMPATIBILITY_GATE = "DRADeviceCompatibilityGroups"
# DRADeviceCompatibilityGroups: the groups a device declares for one counter set (none is common).
COMPATIBILITY_GROUPS: tuple[tuple[str, ...], ...] = ((), (), ("mig",), ("vgpu",), ("mig", "vgpu"))


def _fractional_policies(memory: str) -> list[Obj]:
    """Ranges with a fractional bound or step: milli arithmetic with DRAFractionalCapacityRange on,
    whole units (each bound rounded up) with it off."""
    return [
        range_policy(memory, default="500m", minimum="500m", step="250m", maximum="3"),
        range_policy(memory, default="1", minimum="100m", step="1500m", maximum=None),
    ]


def _attributes(draw: st.DrawFn, lists: bool) -> Obj:
    attrs: Obj = {}
    if draw(st.booleans()):
        attrs["numa"] = draw(st.integers(0, 1))
    if draw(st.booleans()):
        attrs["model"] = draw(st.sampled_from(["a", "b"]))
    if draw(st.booleans()):
        attrs["version"] = Version(draw(st.sampled_from(["1.0.0", "1.2.0", "2.0.0"])))
    if draw(st.integers(0, 3)) == 0:
        attrs["flag"] = draw(st.booleans())
    if lists and draw(st.booleans()):
        attrs["numa"] = draw(st.lists(st.integers(0, 2), min_size=1, max_size=2, unique=True))
    if lists and draw(st.integers(0, 3)) == 0:
        attrs["model"] = draw(st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=2, unique=True))
    return {name: attribute(value) for name, value in attrs.items()}


@st.composite
def devices_for_pool(
    draw: st.DrawFn,
    prefix: str,
    gates: dict[str, bool],
    used: set[str],
    counter_sets: list[str],
    partitioned: bool = False,
) -> list[Obj]:
    """Devices of one slice; `partitioned`: all of them draw from the counter sets (GPU partitions)."""
    devs = []
    for index in range(draw(st.sampled_from([0, 1, 2, 2, 3, 3, 4, 4]))):
        dev: Obj = {"name": f"{prefix}{index}"}
        attrs = _attributes(draw, gates["DRAListTypeAttributes"])
        if attrs:
            dev["attributes"] = attrs
        capacity: Obj = {}
        multiple = gates["DRAConsumableCapacity"] and draw(st.integers(0, 3)) == 0
        if draw(st.booleans()) or multiple:
            memory = draw(st.sampled_from(["2", "4", "8"]))
            if multiple and draw(st.booleans()):
                capacity["memory"] = draw(
                    st.sampled_from(
                        [
                            range_policy(memory),
                            range_policy(memory, step=None, maximum=None, minimum="1", default="1"),
                            values_policy(memory, "2", "4"),
                            *_fractional_policies(memory),
                        ]
                    )
                )
                if capacity["memory"] in _fractional_policies(memory):
                    used.add("fractional capacity ranges")
            else:
                capacity["memory"] = {"value": memory}
        if capacity:
            dev["capacity"] = capacity
        if multiple:
            dev["allowMultipleAllocations"] = True
            used.add("consumable capacity")
        if gates["DRADeviceTaints"] and draw(st.integers(0, 7)) == 0:
            dev["taints"] = [
                taint(
                    "k",
                    draw(st.sampled_from(["v1", "v2"])),
                    draw(st.sampled_from(["NoSchedule", "NoExecute", "None"])),
                )
            ]
            used.add("taints")
        if counter_sets and (partitioned or draw(st.booleans())):
            sets = draw(st.lists(st.sampled_from(counter_sets), min_size=1, max_size=2, unique=True))
            dev["consumesCounters"] = [
                {"counterSet": name, "counters": {"mem": {"value": draw(st.sampled_from(["1", "2"]))}}}
                for name in sets
            ]
            for use in dev["consumesCounters"]:
                groups = draw(st.sampled_from(COMPATIBILITY_GROUPS))
                if groups:
                    use["compatibilityGroups"] = list(groups)
                    used.add("compatibility groups")
            used.add("shared counters")
        if gates["DRADeviceBindingConditions"] and draw(st.integers(0, 5)) == 0:
            dev["bindingConditions"] = ["ready"]
            dev["bindingFailureConditions"] = ["failed"]
            if draw(st.booleans()):
                dev["bindsToNode"] = True
            used.add("binding conditions")
        devs.append(dev)
    return devs


@st.composite
def pool_slices(
    draw: st.DrawFn, index: int, gates: dict[str, bool], used: set[str], drivers_by_pool: dict[str, set[str]]
) -> list[Obj]:
    """The slices of one pool: one to three, sometimes fewer published than announced (incomplete),
    with counters in a slice of their own when partitionable devices are on. One pool in four is then
    a partitioned GPU on this node (every device draws from the counters), where devices contend for
    counters and compatibility groups."""
    partitioned = gates["DRAPartitionableDevices"] and draw(st.integers(0, 3)) == 0
    driver = DRIVERS[0] if partitioned else draw(st.sampled_from(DRIVERS))
    prefix = pool = f"pool-{index}"  # slice and device names stay unique when pool names are not
    # Sometimes the name of an earlier pool of the other driver: pools are told apart by driver too.
    other_drivers = sorted(name for name, drivers in drivers_by_pool.items() if driver not in drivers)
    if other_drivers and draw(st.integers(0, 3)) == 2:
        pool = other_drivers[0]
        used.add("pool name shared by two drivers")
    drivers_by_pool.setdefault(pool, set()).add(driver)
    where = NODE if partitioned else draw(
        st.sampled_from([NODE, NODE, NODE, NODE, OTHER_NODE, ALL_NODES, "selector", PER_DEVICE])
    )
    if where == PER_DEVICE and not gates["DRAPartitionableDevices"]:
        where = NODE
    if where == "selector":
        where_obj: str | Obj = label_selector("region", draw(st.sampled_from(["region-1", "region-2"])))
        used.add("node selectors")
    else:
        where_obj = where
    counter_sets: list[str] = []
    slices: list[Obj] = []
    if partitioned or (gates["DRAPartitionableDevices"] and draw(st.integers(0, 2)) == 0):
        counter_sets = ["cs-0", "cs-1"][: draw(st.integers(1, 2))]
        capacity = draw(st.sampled_from(["4", "6"] if partitioned else ["2", "3", "4"]))
        slices.append(
            resource_slice(
                f"{prefix}-counters",
                where_obj,
                pool,
                driver,
                counter_sets={name: {"mem": capacity} for name in counter_sets},
            )
        )
    for part in range(draw(st.integers(1, 2))):
        devs = draw(devices_for_pool(f"{prefix}-{part}-", gates, used, counter_sets, partitioned))
        if where == PER_DEVICE:  # each device says where it is: this node, another one, or everywhere
            for dev in devs:
                placement = draw(st.sampled_from(["nodeName", "nodeName", "other", "allNodes"]))
                if placement == "allNodes":
                    dev["allNodes"] = True
                else:
                    dev["nodeName"] = NODE if placement == "nodeName" else OTHER_NODE
            used.add("per-device node selection")
        skipped = ()
        if draw(st.integers(0, 3)) == 0:  # its devices need a node that declares optional node operations
            skipped = draw(st.sampled_from(SKIPPED_OPERATIONS))
            used.add("skip node operations")
        slices.append(
            resource_slice(f"{prefix}-{part}", where_obj, pool, driver, *devs, skip_node_operations=skipped)
        )
    count = len(slices)
    if draw(st.integers(0, 9)) == 0:
        count += 1  # announced one more slice than published: the pool is incomplete
        used.add("incomplete pools")
    if len(slices) > 1:
        used.add("multi-slice pools")
    for raw in slices:
        raw["spec"]["pool"]["resourceSliceCount"] = count
    return slices


REQUEST_SELECTORS = [
    'device.attributes["{d}"].?numa.orValue(-1) == 0',
    '"model" in device.attributes["{d}"] && device.attributes["{d}"].model == "a"',
    '!("model" in device.attributes["{d}"]) || device.attributes["{d}"].model != "b"',
    '"memory" in device.capacity["{d}"] && device.capacity["{d}"].memory.compareTo(quantity("4")) >= 0',
    'has(device.attributes["{d}"].version) && '
    'device.attributes["{d}"].version.isGreaterThan(semver("1.1.0"))',
    'device.attributes["{d}"].?flag.orValue(false)',
    '"numa" in device.attributes["{d}"] && device.attributes["{d}"].numa == 1',
]
# Counts past the claim limit (AllocationResultsMaxSize, 32 devices per claim): alone, the claim is
# refused before any search (also a count that would overflow an int64 sum); as a firstAvailable
# subrequest, upstream moves on to the next subrequest when none of the earlier ones fit the limit.
OVER_LIMIT_COUNTS = (33, 33, 2**63 - 1)
# A runtime error on devices without numa (a hard error for the whole attempt): drawn rarely.
FAILING_SELECTOR = 'device.attributes["{d}"].numa == 1'


@st.composite
def exact_body(draw: st.DrawFn, gates: dict[str, bool], used: set[str], name: str, subrequest: bool) -> Obj:
    cls = draw(st.sampled_from(["class-a", "class-b", "class-any"]))
    driver = {"class-a": "driver-a", "class-b": "driver-b"}.get(cls, draw(st.sampled_from(DRIVERS)))
    selectors = []
    if draw(st.integers(0, 2)) == 0:
        template = draw(st.sampled_from(REQUEST_SELECTORS)) if draw(st.integers(0, 9)) else FAILING_SELECTOR
        selectors.append(cel(template.format(d=driver)))
        used.add("request selectors")
    mode = draw(st.sampled_from(["ExactCount"] * 5 + ["All"]))
    if mode == "All":
        used.add("all mode")
    count = draw(st.sampled_from([1, 1, 1, 2, 2, 3])) if mode == "ExactCount" else None
    if count is not None and draw(st.integers(0, 19)) == 10:  # 1 in 20: hypothesis favours the bounds
        count = draw(st.sampled_from(OVER_LIMIT_COUNTS))
        used.add("claim device limit")
    tolerations = []
    if draw(st.integers(0, 3)) == 0:
        tolerations.append(toleration("k", draw(st.sampled_from(["NoSchedule", "NoExecute"]))))
    capacity = None
    if gates["DRAConsumableCapacity"] and draw(st.integers(0, 3)) == 0:
        capacity = {"memory": draw(st.sampled_from(["1", "2", "3", "300m", "1.1", "2500m"]))}
        if Quantity.parse(capacity["memory"]).value.denominator != 1:
            used.add("fractional capacity requests")
    if subrequest:
        return sub(name, cls, count, *selectors, mode=mode, tolerations=tolerations, capacity=capacity)
    admin = None
    if gates["DRAAdminAccess"] and draw(st.integers(0, 6)) == 0:
        admin = True
        used.add("admin access")
    return request(
        name, cls, count, *selectors, mode=mode, admin=admin, tolerations=tolerations, capacity=capacity
    )


@st.composite
def claims(draw: st.DrawFn, gates: dict[str, bool], used: set[str]) -> list[Obj]:
    out = []
    for index in range(draw(st.sampled_from([1, 1, 2, 2, 3]))):
        requests = []
        names = [f"req-{i}" for i in range(draw(st.sampled_from([1, 1, 2, 2, 3])))]
        for name in names:
            if gates["DRAPrioritizedList"] and draw(st.integers(0, 3)) == 0:
                subs = [
                    draw(exact_body(gates, used, f"sub-{i}", True)) for i in range(draw(st.integers(1, 3)))
                ]
                requests.append(first_available(name, *subs))
                used.add("firstAvailable")
            else:
                requests.append(draw(exact_body(gates, used, name, False)))
        if len(requests) > 1 and draw(st.integers(0, 9)) == 5 and _past_claim_limit_together(requests):
            used.add("claim device limit")
        constraints = []
        if draw(st.integers(0, 2)) == 0:
            kind = draw(st.sampled_from(["matchAttribute", "matchAttribute", "distinctAttribute"]))
            attr = draw(st.sampled_from(["numa", "model"]))
            driver = draw(st.sampled_from(DRIVERS))
            constraint: Obj = {kind: f"{driver}/{attr}"}
            if len(names) > 1 and draw(st.booleans()):
                constraint["requests"] = draw(st.lists(st.sampled_from(names), min_size=1, unique=True))
            constraints.append(constraint)
            used.add(kind)
            if draw(st.integers(0, 1 if gates["DRADerivedAttributes"] else 9)) == 0:
                derive(draw, requests, constraint)
                used.add("derived attributes")
        raw = claim(f"claim-{index}", *requests, constraints=constraints)
        raw["metadata"]["uid"] = f"uid-claim-{index}"
        out.append(raw)
    return out


def _past_claim_limit_together(requests: list[Obj]) -> bool:
    """Requests that fit the claim limit one by one but not together (31 + 2 devices): the claim is
    refused before the search, at the second request. Needs two exact, ExactCount requests; a count
    that fits alone is only ever set where the sum refuses it, so no search hunts for 31 devices."""
    exact = [r["exactly"] for r in requests[:2] if r.get("exactly", {}).get("allocationMode") == "ExactCount"]
    if len(exact) < 2:
        return False
    exact[0]["count"], exact[1]["count"] = 31, 2
    return True


def derive(draw: st.DrawFn, requests: list[Obj], constraint: Obj) -> None:
    """Give requests under ``constraint`` derived attributes for its attribute, which is either kept
    (the derived value shadows the devices' own) or renamed to a name only derived values have."""
    name = constraint.get("matchAttribute") or constraint["distinctAttribute"]
    if draw(st.booleans()):
        name = "derived/key"
        constraint["matchAttribute" if "matchAttribute" in constraint else "distinctAttribute"] = name
    scope = constraint.get("requests")
    for raw in requests:
        if scope is not None and raw["name"] not in scope:
            continue
        bodies = [raw["exactly"]] if "exactly" in raw else raw["firstAvailable"]
        for body in bodies:
            if draw(st.integers(0, 3)) == 0:
                continue  # this one compares the devices' own attribute
            rare = draw(st.integers(0, 14)) == 0
            template = draw(st.sampled_from(FAILING_DERIVED_EXPRESSIONS if rare else DERIVED_EXPRESSIONS))
            expression = template.format(d=draw(st.sampled_from(DRIVERS)))
            body["derivedAttributes"] = [{"name": name, "expression": expression}]


@st.composite
def allocated_claims(draw: st.DrawFn, slices: list[Obj], gates: dict[str, bool], used: set[str]) -> list[Obj]:
    """Claims that already hold some of the devices: whole, as shares with consumed capacity, or with
    admin access (which holds nothing)."""
    candidates = [
        (raw["spec"]["driver"], raw["spec"]["pool"]["name"], dev)
        for raw in slices
        for dev in raw["spec"].get("devices", [])
    ]
    if not candidates:
        return []
    out = []
    for index in range(draw(st.integers(0, 2))):
        driver, pool, dev = draw(st.sampled_from(candidates))
        result: Obj = {"request": "r", "driver": driver, "pool": pool, "device": dev["name"]}
        if dev.get("allowMultipleAllocations") and draw(st.booleans()):
            result["shareID"] = f"00000000-0000-0000-0000-00000000000{index}"
            result["consumedCapacity"] = {"memory": draw(st.sampled_from(["1", "2", "750m"]))}
        elif draw(st.integers(0, 9)) == 5:
            # A share left from before the device stopped allowing multiple allocations: a deliberate
            # difference (differential.KNOWN_DIFFERENCES "device that still holds shares").
            result["shareID"] = f"00000000-0000-0000-0000-00000000000{index}"
            used.add("left-over shares")
        elif draw(st.integers(0, 4)) == 0:
            result["adminAccess"] = True
        used.add("allocated devices")
        out.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {
                    "name": f"allocated-{index}",
                    "namespace": "other",
                    "uid": f"uid-allocated-{index}",
                },
                "spec": {
                    "devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "class-any"}}]}
                },
                "status": {"allocation": {"devices": {"results": [result]}}},
            }
        )
    return out


@st.composite
def worlds(draw: st.DrawFn) -> Obj:
    gates = dict(DEFAULT_GATES)
    for gate in VARIED_GATES:
        if draw(st.integers(0, 5)) == 0:
            gates[gate] = not gates[gate]
    for gate in OFF_BY_DEFAULT_GATES:
        gates[gate] = draw(st.booleans())
    # Alpha and off by default, but worth comparing as often as its off-state (slices ignored).
    gates[COMPATIBILITY_GATE] = draw(st.booleans())
    used: set[str] = set()
    drivers_by_pool: dict[str, set[str]] = {}
    slices = [
        raw
        for index in range(draw(st.sampled_from([1, 2, 2, 3, 3])))
        for raw in draw(pool_slices(index, gates, used, drivers_by_pool))
    ]
    classes = [
        device_class("class-a", "driver-a"),
        device_class("class-b", "driver-b"),
        {**device_class("class-any"), "spec": {}},
    ]
    declared = draw(st.sampled_from([(), ("DRAOptionalNodeOperations",)]))
    if declared and "skip node operations" in used:
        used.add("node declares optional node operations")
    world = {
        "gates": gates,
        "node": node(NODE, draw(st.sampled_from(["region-1", "region-2"])), *declared),
        "classes": classes,
        "slices": slices,
        "allocatedClaims": draw(allocated_claims(slices, gates, used)),
        "claims": draw(claims(gates, used)),
    }
    if len(world["claims"]) > 1:
        used.add("several claims")
    if "compatibility groups" in used and not gates[COMPATIBILITY_GATE]:
        used.add(f"-{COMPATIBILITY_GATE}")
    world["features"] = sorted(
        used
        | {f"-{gate}" for gate in VARIED_GATES if not gates[gate]}
        | {f"+{gate}" for gate in OFF_BY_DEFAULT_GATES if gates[gate]}
    )
    return world
