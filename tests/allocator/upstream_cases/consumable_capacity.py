"""Consumable capacity: allowMultipleAllocations, capacity requests, request policies, shareID."""

from __future__ import annotations

from .builders import (
    BINDING,
    CAPACITY,
    CLASS_A,
    DRIVER_A,
    NODE_1,
    PARTITIONABLE,
    PRIORITIZED,
    Case,
    all_devices,
    allocation,
    cel,
    claim,
    class_allowing_multiple,
    counter_slice,
    device,
    device_class,
    features,
    first_available,
    local,
    match,
    memory_at_least,
    range_policy,
    request,
    resource_slice,
    result,
    sub,
    values_policy,
)

CAP = "capacity-0"
ON = features(CAPACITY)
MULTI_CLASS = class_allowing_multiple(CLASS_A, DRIVER_A, True)
SINGLE_CLASS = class_allowing_multiple(CLASS_A, DRIVER_A, False)
PLAIN_CLASS = device_class(CLASS_A, DRIVER_A)


def wants(name: str = "req-0", amount: str | None = None, **kw: object) -> dict:
    return request(name, CLASS_A, 1, capacity=None if amount is None else {CAP: amount}, **kw)


def wants_all(name: str = "req-0", amount: str = "1") -> dict:
    return all_devices(name, CLASS_A, capacity={CAP: amount})


def shared(name: str, *, capacity: dict | None = None, **kw: object) -> dict:
    return device(name, capacity=capacity, multiple=True, **kw)


def one_slice(*devs: dict, name: str = "slice-1", count: int = 1) -> dict:
    return resource_slice(name, NODE_1, "pool-1", DRIVER_A, *devs, count=count)


def got(request_name: str, device_name: str, consumed: dict[str, str] | None = None) -> dict:
    return result(request_name, DRIVER_A, "pool-1", device_name, shared=True, consumed=consumed)


def in_use(device_name: str, amount: str) -> dict:
    """A claim that already consumes capacity of a shared device."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": f"shared-{device_name}",
            "namespace": "other",
            "uid": f"uid-shared-{device_name}",
        },
        "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": CLASS_A}}]}},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": "r",
                            "driver": DRIVER_A,
                            "pool": "pool-1",
                            "device": device_name,
                            "shareID": "11111111-1111-1111-1111-111111111111",
                            "consumedCapacity": {CAP: amount},
                        }
                    ]
                }
            }
        },
    }


def two(claim_request: dict) -> list[dict]:
    return [claim("claim-0", claim_request), claim("claim-1", claim_request)]


CASES = [
    Case(
        "consumable-capacity-disabled-feature",
        features=features(BINDING),
        claims=[claim("claim-0", wants(amount="1"))],
        classes=[PLAIN_CLASS],
        slices=[one_slice(device("device-1"))],
        error="claim claim-0, request req-0: has capacity requests, but the DRAConsumableCapacity feature is "
        "disabled",
    ),
    Case(
        "consumable-capacity-disabled-feature-with-prioritized-list",
        features=features(PRIORITIZED, BINDING),
        claims=[
            claim(
                "claim-0",
                first_available(
                    "req-0", sub("subReq-0", capacity={CAP: "1"}), sub("subReq-1", capacity={CAP: "1"})
                ),
            )
        ],
        classes=[PLAIN_CLASS],
        slices=[one_slice(device("device-1"))],
        error="claim claim-0, subrequest subReq-0: has capacity requests, but the DRAConsumableCapacity "
        "feature is disabled",
    ),
    Case(
        # The requested capacity is not defined on the device.
        "consumable-capacity-multi-allocatable-device-with-missing-capacity-request",
        features=ON,
        claims=[claim("claim-0", wants(amount="1"))],
        classes=[PLAIN_CLASS],
        slices=[one_slice(shared("device-1", capacity={"capacity-1": "1"}))],
    ),
    Case(
        "consumable-capacity-multi-allocatable-device-allocation-mode-all-with-missing-capacity-request",
        features=ON,
        claims=[claim("claim-0", wants_all())],
        classes=[MULTI_CLASS],
        slices=[one_slice(shared("device-1", capacity={"capacity-1": "1"}))],
    ),
    Case(
        # Both claims share the device; nothing is consumed because it defines no capacity.
        "consumable-capacity-multi-allocatable-device-without-capacity-without-capacity-request",
        features=ON,
        claims=two(wants()),
        classes=[MULTI_CLASS],
        slices=[one_slice(shared("device-1"))],
        expect=[allocation(local(), got("req-0", "device-1"))] * 2,
    ),
    Case(
        # Without a request or policy each allocation consumes the whole capacity.
        "consumable-capacity-multi-allocatable-device-without-policy-without-capacity-request",
        features=ON,
        claims=two(wants()),
        classes=[MULTI_CLASS],
        slices=[one_slice(shared("device-1", capacity={CAP: "1"}), shared("device-2", capacity={CAP: "1"}))],
        expect=[
            allocation(local(), got("req-0", "device-1", {CAP: "1"})),
            allocation(local(), got("req-0", "device-2", {CAP: "1"})),
        ],
    ),
    Case(
        "consumable-capacity-multi-allocatable-device-without-policy-without-capacity-request-block",
        features=ON,
        claims=two(wants()),
        classes=[MULTI_CLASS],
        slices=[one_slice(shared("device-1", capacity={CAP: "2"}))],
    ),
    Case(
        "consumable-capacity-multi-allocatable-device-without-policy-with-capacity-request",
        features=ON,
        claims=two(wants(amount="1")),
        classes=[MULTI_CLASS],
        slices=[one_slice(shared("device-1", capacity={CAP: "2"}))],
        expect=[allocation(local(), got("req-0", "device-1", {CAP: "1"}))] * 2,
    ),
    Case(
        # The policy's default (2) applies when nothing is requested.
        "consumable-capacity-multi-allocatable-device-with-policy-without-capacity-request",
        features=ON,
        claims=two(wants()),
        classes=[MULTI_CLASS],
        slices=[one_slice(shared("device-1", capacity={CAP: range_policy("4")}))],
        expect=[allocation(local(), got("req-0", "device-1", {CAP: "2"}))] * 2,
    ),
    Case(
        "consumable-capacity-multi-allocatable-device-with-zero-request-policy",
        features=ON,
        claims=two(wants()),
        classes=[MULTI_CLASS],
        slices=[one_slice(shared("device-1", capacity={CAP: values_policy("1", "0")}))],
        expect=[allocation(local(), got("req-0", "device-1", {CAP: "0"}))] * 2,
    ),
    Case(
        "consumable-capacity-multi-allocatable-device-violates-zero-request-policy",
        features=ON,
        claims=[claim("claim-0", wants(amount="1"))],
        classes=[MULTI_CLASS],
        slices=[one_slice(shared("device-1", capacity={CAP: values_policy("1", "0")}))],
    ),
    Case(
        # 1 is rounded up to the range minimum 2.
        "consumable-capacity-multi-allocatable-device-with-range-policy-with-capacity-request",
        features=ON,
        claims=two(wants(amount="1")),
        classes=[MULTI_CLASS],
        slices=[one_slice(shared("device-1", capacity={CAP: range_policy("4")}))],
        expect=[allocation(local(), got("req-0", "device-1", {CAP: "2"}))] * 2,
    ),
    Case(
        # 3 is rounded up to min + k*step = 4.
        "consumable-capacity-multi-allocatable-device-with-range-policy-step",
        features=ON,
        claims=[claim("claim-0", wants(amount="3"))],
        classes=[MULTI_CLASS],
        slices=[one_slice(shared("device-1", capacity={CAP: range_policy("4")}))],
        expect=[allocation(local(), got("req-0", "device-1", {CAP: "4"}))],
    ),
    Case(
        "consumable-capacity-multi-allocatable-device-with-valid-values-policy",
        features=ON,
        claims=[claim("claim-0", wants(amount="2"))],
        classes=[MULTI_CLASS],
        slices=[one_slice(shared("device-1", capacity={CAP: values_policy("4", "1", "2")}))],
        expect=[allocation(local(), got("req-0", "device-1", {CAP: "2"}))],
    ),
    Case(
        # 2 is rounded up to the next valid value, 3.
        "consumable-capacity-multi-allocatable-device-with-valid-values-policy-round-up",
        features=ON,
        claims=[claim("claim-0", wants(amount="2"))],
        classes=[MULTI_CLASS],
        slices=[one_slice(shared("device-1", capacity={CAP: values_policy("3", "1", "3")}))],
        expect=[allocation(local(), got("req-0", "device-1", {CAP: "3"}))],
    ),
    Case(
        "consumable-capacity-multi-allocatable-device-with-exceeded-consumable-capacity-request",
        features=ON,
        claims=[claim("claim-0", wants(amount="1")), claim("claim-1", wants(amount="2"))],
        classes=[MULTI_CLASS],
        slices=[one_slice(shared("device-1", capacity={CAP: range_policy("2")}))],
    ),
    Case(
        # 6 fits the capacity of 10 but exceeds the policy maximum of 4.
        "consumable-capacity-multi-allocatable-device-with-request-over-max-sharing-policy",
        features=ON,
        claims=[claim("claim-0", wants(amount="6"))],
        classes=[MULTI_CLASS],
        slices=[one_slice(shared("device-1", capacity={CAP: range_policy("10")}))],
    ),
    Case(
        "consumable-capacity-multi-allocatable-device-with-allocated-capacity-use-remaining",
        features=ON,
        claims=[claim("claim-0", wants(amount="2"))],
        allocated_claims=[in_use("device-1", "2")],
        classes=[MULTI_CLASS],
        slices=[one_slice(shared("device-1", capacity={CAP: range_policy("4")}))],
        expect=[allocation(local(), got("req-0", "device-1", {CAP: "2"}))],
    ),
    Case(
        "consumable-capacity-multi-allocatable-device-with-allocated-capacity-next-device",
        features=ON,
        claims=[claim("claim-0", wants(amount="2"))],
        allocated_claims=[in_use("device-1", "2")],
        classes=[MULTI_CLASS],
        slices=[
            one_slice(
                shared("device-1", capacity={CAP: range_policy("2")}),
                shared("device-2", capacity={CAP: range_policy("2")}),
            )
        ],
        expect=[allocation(local(), got("req-0", "device-2", {CAP: "2"}))],
    ),
    Case(
        # device-2 fills up after req-0 and device-1 has the other attribute value: backtrack.
        "consumable-capacity-with-multi-allocatable-device-backtrack",
        features=ON,
        claims=[
            claim(
                "claim-0",
                wants("req-0", "2"),
                wants("req-1", "2"),
                constraints=[match("driver-a/stringAttribute")],
            ),
            claim("claim-1", wants("req-0", "2")),
        ],
        classes=[PLAIN_CLASS],
        slices=[
            one_slice(
                shared(
                    "device-2",
                    attrs={"stringAttribute": "stringAttributeValue1"},
                    capacity={CAP: range_policy("2")},
                ),
                shared(
                    "device-1",
                    attrs={"stringAttribute": "stringAttributeValue2"},
                    capacity={CAP: range_policy("4")},
                ),
            )
        ],
        expect=[
            allocation(local(), got("req-0", "device-1", {CAP: "2"}), got("req-1", "device-1", {CAP: "2"})),
            allocation(local(), got("req-0", "device-2", {CAP: "2"})),
        ],
    ),
    Case(
        # Upstream lists two subrequests named subReq-1; names are unique in valid claims, so the
        # never-reached third one is called subReq-2 here.
        "consumable-capacity-multi-allocatable-device-with-subrequest",
        features=features(CAPACITY, PRIORITIZED),
        claims=[
            claim(
                "claim-0",
                first_available(
                    "req-0",
                    sub("subReq-0", capacity={CAP: "4"}),
                    sub("subReq-1", capacity={CAP: "2"}),
                    sub("subReq-2"),
                ),
            )
        ],
        classes=[MULTI_CLASS],
        slices=[one_slice(shared("device-1", capacity={CAP: range_policy("2")}))],
        expect=[allocation(local(), got("req-0/subReq-1", "device-1", {CAP: "2"}))],
    ),
    Case(
        "consumable-capacity-multi-allocatable-device-with-no-available-consumable-capacity",
        features=ON,
        claims=[claim("claim-0", wants(amount="2"))],
        allocated_claims=[in_use("device-1", "2")],
        classes=[MULTI_CLASS],
        slices=[one_slice(shared("device-1", capacity={CAP: range_policy("2")}))],
    ),
    Case(
        "consumable-capacity-multi-allocatable-device-allocation-mode-all-filter-out-no-capacity",
        features=ON,
        claims=[claim("claim-0", wants_all(amount="2"))],
        classes=[MULTI_CLASS],
        slices=[one_slice(shared("device-1", capacity={CAP: "2"}), shared("device-2"))],
        expect=[allocation(local(), got("req-0", "device-1", {CAP: "2"}))],
    ),
    Case(
        "consumable-capacity-multi-allocatable-device-allocation-mode-all-filter-out-insufficient-capacity",
        features=ON,
        claims=[claim("claim-0", wants_all(amount="2"))],
        classes=[MULTI_CLASS],
        slices=[one_slice(shared("device-1", capacity={CAP: "2"}), shared("device-2", capacity={CAP: "1"}))],
        expect=[allocation(local(), got("req-0", "device-1", {CAP: "2"}))],
    ),
    Case(
        "consumable-capacity-multi-allocatable-device-allocation-mode-all-allocating-sufficient",
        features=ON,
        claims=[claim("claim-0", wants("req-0", "1"), wants_all("req-1", "1"))],
        classes=[PLAIN_CLASS],
        slices=[one_slice(shared("device-1", capacity={CAP: "2"}), shared("device-2", capacity={CAP: "1"}))],
        expect=[
            allocation(
                local(),
                got("req-0", "device-1", {CAP: "1"}),
                got("req-1", "device-1", {CAP: "1"}),
                got("req-1", "device-2", {CAP: "1"}),
            )
        ],
    ),
    Case(
        "consumable-capacity-multi-allocatable-device-allocation-mode-all-in-use-sufficient",
        features=ON,
        claims=[claim("claim-0", wants_all("req-0", "1"))],
        allocated_claims=[in_use("device-1", "1")],
        classes=[PLAIN_CLASS],
        slices=[one_slice(shared("device-1", capacity={CAP: "2"}), shared("device-2", capacity={CAP: "1"}))],
        expect=[
            allocation(local(), got("req-0", "device-1", {CAP: "1"}), got("req-0", "device-2", {CAP: "1"}))
        ],
    ),
    Case(
        # req-0 uses up device-1, which All must also take.
        "consumable-capacity-multi-allocatable-device-allocation-mode-all-allocating-insufficient",
        features=ON,
        claims=[claim("claim-0", wants("req-0", "1"), wants_all("req-1", "1"))],
        classes=[PLAIN_CLASS],
        slices=[one_slice(shared("device-1", capacity={CAP: "1"}), shared("device-2", capacity={CAP: "1"}))],
    ),
    Case(
        # A device already full from earlier allocations still matches, so "all" cannot be satisfied
        # (1.37.1; earlier releases left it out and allocated device-2 alone).
        "consumable-capacity-multi-allocatable-device-allocation-mode-all-in-use-insufficient",
        features=ON,
        claims=[claim("claim-0", wants_all("req-0", "1"))],
        allocated_claims=[in_use("device-1", "1")],
        classes=[PLAIN_CLASS],
        slices=[one_slice(shared("device-1", capacity={CAP: "1"}), shared("device-2", capacity={CAP: "1"}))],
    ),
    Case(
        # A dedicated device is allocated exclusively: no shareID, no consumed capacity.
        "consumable-capacity-dedicated-device-with-consumable-capacity-request",
        features=ON,
        claims=[claim("claim-0", wants(amount="1"))],
        classes=[SINGLE_CLASS],
        slices=[one_slice(device("device-1", capacity={CAP: "1"}))],
        expect=[allocation(local(), result("req-0", DRIVER_A, "pool-1", "device-1"))],
    ),
    Case(
        "consumable-capacity-dedicated-device-with-multiple-consumable-capacity-request",
        features=ON,
        claims=two(wants(amount="1")),
        classes=[SINGLE_CLASS],
        slices=[one_slice(device("device-1", capacity={CAP: range_policy("2")}))],
    ),
    Case(
        "allow-multiple-allocations-exclude-multi-allocatable-device-by-class-selector",
        features=ON,
        claims=[claim("claim-0", wants(amount="1"))],
        classes=[SINGLE_CLASS],
        slices=[one_slice(shared("device-1", capacity={CAP: "1"}))],
    ),
    Case(
        "allow-multiple-allocations-not-allocate-multi-allocatable-device-which-already-dedicated",
        features=ON,
        claims=[claim("claim-0", wants(amount="1"))],
        allocated=[(DRIVER_A, "pool-1", "device-1")],
        classes=[MULTI_CLASS],
        slices=[one_slice(shared("device-1", capacity={CAP: range_policy("2")}))],
    ),
    Case(
        "allow-multiple-allocations-not-allocate-dedicated-device-which-change-from-multi-allocatable",
        features=ON,
        claims=[claim("claim-0", wants(amount="1"))],
        allocated_claims=[in_use("device-1", "1")],
        classes=[MULTI_CLASS],
        slices=[one_slice(device("device-1", capacity={CAP: range_policy("2")}))],
    ),
    Case(
        "allow-multiple-allocations-with-partitionable-device",
        features=features(PRIORITIZED, PARTITIONABLE, CAPACITY),
        claims=[
            claim(
                "claim-0",
                request("req-0"),
                first_available(
                    "req-1",
                    sub("subReq-0", CLASS_A, 1, memory_at_least("6Gi")),
                    sub("subReq-1", CLASS_A, 1, memory_at_least("4Gi")),
                ),
            )
        ],
        classes=[MULTI_CLASS],
        slices=[
            one_slice(
                *(
                    device(
                        name,
                        counters={"counter-set-1": {"memory": amount}},
                        capacity_from_counters=True,
                        multiple=True,
                    )
                    for name, amount in (("device-1", "4Gi"), ("device-2", "6Gi"), ("device-3", "4Gi"))
                ),
                count=2,
            ),
            counter_slice("slice-2", NODE_1, "pool-1", DRIVER_A, {"counter-set-1": {"memory": "8Gi"}}),
        ],
        expect=[
            allocation(
                local(),
                got("req-0", "device-1", {"memory": "4Gi"}),
                got("req-1/subReq-1", "device-3", {"memory": "4Gi"}),
            )
        ],
    ),
    Case(
        # Counter sets (capacity-0: 4, capacity-1: 8) allow {device-1, device-3} or {device-2};
        # capacity-1 is consumed per the range policy's default (2).
        "consumable-capacity-with-partitionable-device-multiple-capacity-pools",
        features=features(PRIORITIZED, PARTITIONABLE, CAPACITY),
        claims=[
            claim(
                "claim-0",
                wants("req-0", "1"),
                wants("req-2", "2"),
                first_available(
                    "req-1",
                    sub(
                        "subReq-0",
                        CLASS_A,
                        1,
                        cel(f'device.capacity["{DRIVER_A}"]["{CAP}"].compareTo(quantity("4")) >= 0'),
                        capacity={CAP: "1"},
                    ),
                    sub(
                        "subReq-1",
                        CLASS_A,
                        1,
                        cel(f'device.capacity["{DRIVER_A}"]["{CAP}"].compareTo(quantity("2")) >= 0'),
                        capacity={CAP: "1"},
                    ),
                ),
            )
        ],
        classes=[PLAIN_CLASS],
        slices=[
            one_slice(
                *(
                    device(
                        name,
                        counters={"counter-set-1": {CAP: amount}, "counter-set-2": {"capacity-1": "4"}},
                        capacity={CAP: amount, "capacity-1": range_policy("4")},
                        multiple=True,
                    )
                    for name, amount in (("device-1", "2"), ("device-2", "4"), ("device-3", "2"))
                ),
                count=2,
            ),
            counter_slice(
                "slice-2",
                NODE_1,
                "pool-1",
                DRIVER_A,
                {"counter-set-1": {CAP: "4"}, "counter-set-2": {"capacity-1": "8"}},
            ),
        ],
        expect=[
            allocation(
                local(),
                got("req-0", "device-1", {CAP: "1", "capacity-1": "2"}),
                got("req-2", "device-3", {CAP: "2", "capacity-1": "2"}),
                got("req-1/subReq-1", "device-1", {CAP: "1", "capacity-1": "2"}),
            )
        ],
    ),
    Case(
        # device-1's share, allocated in an earlier cycle, holds the pool's only counter; device-2
        # (mode "b") consumes the same counter, so it cannot be shared out now.
        "allow-multiple-allocations-with-shared-device-counter-cross-cycle",
        features=features(PARTITIONABLE, CAPACITY),
        claims=[
            claim(
                "claim-0",
                request(
                    "req-0", CLASS_A, 1, cel('device.attributes["driver-a"].mode == "b"'), capacity={CAP: "1"}
                ),
            )
        ],
        allocated_claims=[in_use("device-1", "1")],
        classes=[MULTI_CLASS],
        slices=[
            one_slice(
                *(
                    device(
                        name,
                        attrs={"mode": mode},
                        counters={"counter-set-1": {CAP: "1"}},
                        capacity_from_counters=True,
                        multiple=True,
                    )
                    for name, mode in (("device-1", "a"), ("device-2", "b"))
                ),
                count=2,
            ),
            counter_slice("slice-2", NODE_1, "pool-1", DRIVER_A, {"counter-set-1": {CAP: "1"}}),
        ],
    ),
]
