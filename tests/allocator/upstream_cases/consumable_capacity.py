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


def in_use(device_name: str, amount: str | None) -> dict:
    """A claim that already consumes capacity of a shared device (a share without consumedCapacity
    when `amount` is None)."""
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
                            **({"consumedCapacity": {CAP: amount}} if amount is not None else {}),
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
]


def kind_is(kind: str, *more: str) -> dict:
    return cel(" || ".join(f'device.attributes["{DRIVER_A}"].kind == "{k}"' for k in (kind, *more)))


def string_is(value: str) -> dict:
    return cel(f'device.attributes["{DRIVER_A}"].stringAttribute == "{value}"')


def counter_c(name: str, **kw: object) -> dict:
    """A device consuming counter c: 1 of counter-set-1."""
    return device(name, counters={"counter-set-1": {"c": "1"}}, **kw)  # type: ignore[arg-type]


def c_counter_slice() -> dict:
    return counter_slice("slice-2", NODE_1, "pool-1", DRIVER_A, {"counter-set-1": {"c": "1"}})


NOT_REPRESENTABLE = "cannot be represented"
ABOVE_INT64 = "18446744073709551616"

# New in the v0.37.1 table.
CASES += [
    Case(
        # req-0 first takes the shareable device-1 and its only counter; req-1 needs that counter
        # for device-3, so device-1 is given back (and its counter with it) for device-2.
        "partitionable-consumable-capacity-backtrack-releases-counter",
        features=features(PARTITIONABLE, CAPACITY),
        claims=[
            claim(
                "claim-0",
                request("req-0", CLASS_A, 1, kind_is("shared")),
                request("req-1", CLASS_A, 1, kind_is("counteronly")),
            )
        ],
        classes=[PLAIN_CLASS],
        slices=[
            one_slice(
                counter_c("device-1", attrs={"kind": "shared"}, multiple=True),
                device("device-2", attrs={"kind": "shared"}),
                counter_c("device-3", attrs={"kind": "counteronly"}),
                count=2,
            ),
            c_counter_slice(),
        ],
        expect=[
            allocation(
                local(),
                result("req-0", DRIVER_A, "pool-1", "device-2"),
                result("req-1", DRIVER_A, "pool-1", "device-3"),
            )
        ],
    ),
    Case(
        # claim-1's "all" subrequest adds device-1 to its constraint, then finds it full: the
        # constraint must forget device-1 so that subReq-1 can take device-2 ("fb").
        "consumable-capacity-rejection-rolls-back-constraints",
        features=features(CAPACITY, PRIORITIZED),
        claims=[
            claim("claim-0", request("req-0", CLASS_A, 1, string_is("cap"), capacity={CAP: "2"})),
            claim(
                "claim-1",
                first_available(
                    "req-0",
                    sub("subReq-0", CLASS_A, 1, string_is("cap"), mode="All", capacity={CAP: "2"}),
                    sub("subReq-1", CLASS_A, 1, string_is("fb")),
                ),
                constraints=[match(f"{DRIVER_A}/stringAttribute")],
            ),
        ],
        classes=[PLAIN_CLASS],
        slices=[
            one_slice(
                shared("device-1", capacity={CAP: "2"}, attrs={"stringAttribute": "cap"}),
                device("device-2", attrs={"stringAttribute": "fb"}),
            )
        ],
        expect=[
            allocation(local(), got("req-0", "device-1", {CAP: "2"})),
            allocation(local(), result("req-0/subReq-1", DRIVER_A, "pool-1", "device-2")),
        ],
    ),
    Case(
        # claim-0's share of device-1 holds the counter; claim-1's req-1 shares device-1 too, is
        # moved to device-2 by its constraint with req-2, and req-3 shares device-1 again: undoing
        # req-1's share must not drop claim-0's hold on the counter.
        "partitionable-empty-capacity-multiple-share-backtrack-keeps-counter-ownership",
        features=features(PARTITIONABLE, CAPACITY),
        claims=[
            claim("claim-0", request("req-0", CLASS_A, 1, kind_is("shared"))),
            claim(
                "claim-1",
                request("req-1", CLASS_A, 1, kind_is("shared", "fallback")),
                request("req-2", CLASS_A, 1, kind_is("gate")),
                request("req-3", CLASS_A, 1, kind_is("shared")),
                constraints=[match(f"{DRIVER_A}/stringAttribute", "req-1", "req-2")],
            ),
        ],
        classes=[PLAIN_CLASS],
        slices=[
            one_slice(
                counter_c("device-1", attrs={"kind": "shared", "stringAttribute": "red"}, multiple=True),
                device("device-2", attrs={"kind": "fallback", "stringAttribute": "blue"}),
                device("device-3", attrs={"kind": "gate", "stringAttribute": "blue"}),
                count=2,
            ),
            c_counter_slice(),
        ],
        expect=[
            allocation(local(), got("req-0", "device-1")),
            allocation(
                local(),
                result("req-1", DRIVER_A, "pool-1", "device-2"),
                result("req-2", DRIVER_A, "pool-1", "device-3"),
                got("req-3", "device-1"),
            ),
        ],
    ),
    Case(
        # device-1 is already shared (a share without consumed capacity): another share does not
        # charge its counter again.
        "partitionable-consumable-capacity-shared-device-counter-not-recharged",
        features=features(PARTITIONABLE, CAPACITY),
        claims=[claim("claim-0", request("req-0"))],
        allocated_claims=[in_use("device-1", None)],
        classes=[PLAIN_CLASS],
        slices=[one_slice(counter_c("device-1", multiple=True), count=2), c_counter_slice()],
        expect=[allocation(local(), got("req-0", "device-1"))],
    ),
    Case(
        # device-1's existing share holds the only counter: device-2 (the one the selector wants)
        # cannot get it.
        "allow-multiple-allocations-with-shared-device-counter-cross-cycle",
        features=features(PARTITIONABLE, CAPACITY),
        claims=[
            claim(
                "claim-0",
                request(
                    "req-0",
                    CLASS_A,
                    1,
                    cel(f'device.attributes["{DRIVER_A}"].mode == "b"'),
                    capacity={CAP: "1"},
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
                        counters={"counter-set-1": {CAP: "1"}},
                        capacity_from_counters=True,
                        attrs={"mode": mode},
                        multiple=True,
                    )
                    for name, mode in (("device-1", "a"), ("device-2", "b"))
                ),
                count=2,
            ),
            counter_slice("slice-2", NODE_1, "pool-1", DRIVER_A, {"counter-set-1": {CAP: "1"}}),
        ],
    ),
    Case(
        "consumable-capacity-negative-request-aborts",
        features=ON,
        claims=[claim("claim-0", wants("req-0", "-5"))],
        classes=[MULTI_CLASS],
        slices=[one_slice(shared("device-1", capacity={CAP: "10"}))],
        error="negative",
    ),
    Case(
        "consumable-capacity-range-policy-request-above-int64-rejected",
        features=ON,
        claims=[claim("claim-0", wants("req-0", ABOVE_INT64))],
        classes=[MULTI_CLASS],
        slices=[one_slice(shared("device-1", capacity={CAP: range_policy("4")}))],
        error=NOT_REPRESENTABLE,
    ),
    Case(
        "consumable-capacity-range-policy-rounded-value-overflow-rejected",
        features=ON,
        claims=[claim("claim-0", wants("req-0", "9223372036854775807"))],
        classes=[MULTI_CLASS],
        slices=[one_slice(shared("device-1", capacity={CAP: range_policy("4")}))],
        error=NOT_REPRESENTABLE,
    ),
    Case(
        # device-2 could take the request (no step to round to), but the request device-1 cannot
        # represent aborts the whole allocation.
        "consumable-capacity-range-policy-overflow-aborts-not-skip",
        features=ON,
        claims=[claim("claim-0", wants("req-0", ABOVE_INT64))],
        classes=[MULTI_CLASS],
        slices=[
            one_slice(
                shared("device-1", capacity={CAP: range_policy("4")}),
                shared("device-2", capacity={CAP: "36893488147419103232"}),
            )
        ],
        error=NOT_REPRESENTABLE,
    ),
    Case(
        "consumable-capacity-range-policy-allocation-mode-all-overflow-aborts",
        features=ON,
        claims=[claim("claim-0", wants_all("req-0", ABOVE_INT64))],
        classes=[MULTI_CLASS],
        slices=[one_slice(shared("device-1", capacity={CAP: range_policy("4")}))],
        error=NOT_REPRESENTABLE,
    ),
    Case(
        # Quantities far above int64: the requests and what they consume stay exact.
        "consumable-capacity-requests-are-not-modified",
        features=ON,
        claims=[claim("claim-0", wants("req-0", "2"), wants("req-1", "1000000000000000000000"))],
        classes=[PLAIN_CLASS],
        slices=[
            one_slice(
                shared(
                    "device-1",
                    capacity={
                        CAP: {
                            "value": "1000000000000000000002",
                            "requestPolicy": {
                                "default": "1000000000000000000000",
                                "validRange": {"min": "2"},
                            },
                        }
                    },
                )
            )
        ],
        expect=[
            allocation(
                local(),
                got("req-0", "device-1", {CAP: "2"}),
                got("req-1", "device-1", {CAP: "1000000000000000000000"}),
            )
        ],
    ),
]
