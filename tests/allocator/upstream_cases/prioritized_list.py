"""firstAvailable (prioritized list) requests: subrequests in order, backtracking, config, All mode."""

from __future__ import annotations

from .builders import (
    CLASS_A,
    CLASS_B,
    DRIVER_A,
    DRIVER_B,
    NODE_1,
    PRIORITIZED,
    Case,
    Version,
    allocation,
    cel,
    claim,
    claim_config,
    device,
    device_class,
    devices,
    features,
    first_available,
    from_claim,
    from_class,
    local,
    match,
    memory_at_least,
    one_device_slice,
    request,
    resource_slice,
    result,
    results,
    sub,
)

CLASSES = [device_class(CLASS_A, DRIVER_A), device_class(CLASS_B, DRIVER_B)]
ON = features(PRIORITIZED)


def _all_then_b() -> dict:
    return claim(
        "claim-0", first_available("req-0", sub("subReq-0", CLASS_A, mode="All"), sub("subReq-1", CLASS_B))
    )


def _memory_slice(name: str, pool: str, *sizes: tuple[str, str], version: list[str] | None = None) -> dict:
    devs = []
    for i, (dev_name, size) in enumerate(sizes):
        attrs = {"driverVersion": Version(version[i])} if version else None
        devs.append(device(dev_name, capacity={"memory": size}, attrs=attrs))
    return resource_slice(name, NODE_1, pool, DRIVER_A, *devs)


def _constraint_case(
    name: str, constrained: str, pool2: list[tuple[str, str]], versions2: list[str], chosen: str
) -> Case:
    return Case(
        name,
        features=ON,
        claims=[
            claim(
                "claim-0",
                request("req-0", CLASS_A, 1, memory_at_least("8Gi")),
                first_available(
                    "req-1",
                    sub("subReq-0", CLASS_A, 1, memory_at_least("2Gi")),
                    sub("subReq-1", CLASS_A, 1, memory_at_least("1Gi")),
                ),
                constraints=[match("driver-a/driverVersion", "req-0", constrained)],
            )
        ],
        classes=CLASSES[:1],
        slices=[
            _memory_slice("slice-1", "pool-1", ("device-1", "8Gi"), version=["1.0.0"]),
            _memory_slice("slice-2", "pool-2", *pool2, version=versions2),
        ],
        expect=[
            allocation(
                local(),
                result("req-0", DRIVER_A, "pool-1", "device-1"),
                result("req-1/subReq-1", DRIVER_A, "pool-2", chosen),
            )
        ],
    )


CASES = [
    Case(
        "all-devices-slice-without-devices-prioritized-list",
        features=ON,
        claims=[_all_then_b()],
        classes=CLASSES,
        slices=[
            resource_slice("slice-1", NODE_1, "pool-1", DRIVER_A),
            one_device_slice("slice-2", NODE_1, "pool-2", DRIVER_B),
        ],
        expect=[allocation(local(), result("req-0/subReq-1", DRIVER_B, "pool-2", "device-1"))],
    ),
    Case(
        "all-devices-no-slices-prioritized-list",
        features=ON,
        claims=[_all_then_b()],
        classes=CLASSES,
        slices=[one_device_slice("slice-2", NODE_1, "pool-2", DRIVER_B)],
        expect=[allocation(local(), result("req-0/subReq-1", DRIVER_B, "pool-2", "device-1"))],
    ),
    Case(
        "all-devices-some-allocated-prioritized-list",
        features=ON,
        claims=[_all_then_b()],
        allocated=[(DRIVER_A, "pool-1", "device-1")],
        classes=CLASSES,
        slices=[
            resource_slice("slice-1", NODE_1, "pool-1", DRIVER_A, device("device-1"), device("device-2")),
            one_device_slice("slice-2", NODE_1, "pool-2", DRIVER_B),
        ],
        expect=[allocation(local(), result("req-0/subReq-1", DRIVER_B, "pool-2", "device-1"))],
    ),
    Case(
        "prioritized-list-first-unavailable",
        features=ON,
        claims=[
            claim("claim-0", first_available("req-0", sub("subReq-0", CLASS_B), sub("subReq-1", CLASS_A)))
        ],
        classes=CLASSES,
        slices=[one_device_slice("slice-1", NODE_1, "pool-1", DRIVER_A)],
        expect=[allocation(local(), result("req-0/subReq-1", DRIVER_A, "pool-1", "device-1"))],
    ),
    Case(
        "prioritized-list-non-available",
        features=ON,
        claims=[
            claim(
                "claim-0", first_available("req-0", sub("subReq-0", CLASS_B, 2), sub("subReq-1", CLASS_A, 2))
            )
        ],
        classes=CLASSES,
        slices=[
            one_device_slice("slice-1", NODE_1, "pool-1", DRIVER_A),
            one_device_slice("slice-2", NODE_1, "pool-2", DRIVER_B),
        ],
    ),
    Case(
        # A claim config naming the subrequest that was not chosen is dropped.
        "prioritized-list-device-config",
        features=ON,
        claims=[
            claim(
                "claim-0",
                first_available("req-0", sub("subReq-0", CLASS_A), sub("subReq-1", CLASS_B, 2)),
                config=[
                    claim_config(DRIVER_A, "foo", "req-0/subReq-0"),
                    claim_config(DRIVER_B, "bar", "req-0/subReq-1"),
                ],
            )
        ],
        classes=CLASSES,
        slices=[
            resource_slice("slice-1", NODE_1, "pool-1", DRIVER_B, device("device-1"), device("device-2"))
        ],
        expect=[
            allocation(
                local(),
                result("req-0/subReq-1", DRIVER_B, "pool-1", "device-1"),
                result("req-0/subReq-1", DRIVER_B, "pool-1", "device-2"),
                config=[from_claim(DRIVER_B, "bar")],
            )
        ],
    ),
    Case(
        "prioritized-list-class-config",
        features=ON,
        claims=[
            claim(
                "claim-0", first_available("req-0", sub("subReq-0", CLASS_A, 2), sub("subReq-1", CLASS_B, 2))
            )
        ],
        classes=[
            device_class(CLASS_A, DRIVER_A, config="foo"),
            device_class(CLASS_B, DRIVER_B, config="bar"),
        ],
        slices=[
            resource_slice("slice-1", NODE_1, "pool-1", DRIVER_B, device("device-1"), device("device-2")),
            resource_slice("slice-2", NODE_1, "pool-2", DRIVER_A, device("device-3")),
        ],
        expect=[
            allocation(
                local(),
                result("req-0/subReq-1", DRIVER_B, "pool-1", "device-1"),
                result("req-0/subReq-1", DRIVER_B, "pool-1", "device-2"),
                config=[from_class(DRIVER_B, "bar")],
            )
        ],
    ),
    Case(
        "prioritized-list-subrequests-with-expressions",
        features=ON,
        claims=[
            claim(
                "claim-0",
                request("req-0", CLASS_A, 1, memory_at_least("1Gi")),
                first_available(
                    "req-1",
                    sub("subReq-0", CLASS_A, 1, memory_at_least("4Gi")),
                    sub("subReq-1", CLASS_A, 2, memory_at_least("2Gi")),
                ),
            )
        ],
        classes=CLASSES[:1],
        slices=[
            _memory_slice("slice-1", "pool-1", ("device-1", "2Gi"), ("device-2", "2Gi"), ("device-3", "1Gi"))
        ],
        expect=[
            allocation(
                local(),
                result("req-0", DRIVER_A, "pool-1", "device-3"),
                result("req-1/subReq-1", DRIVER_A, "pool-1", "device-1"),
                result("req-1/subReq-1", DRIVER_A, "pool-1", "device-2"),
            )
        ],
    ),
    # A constraint naming the parent request applies to whichever subrequest is chosen.
    _constraint_case(
        "prioritized-list-subrequests-with-constraints-ref-parent-request",
        "req-1",
        [("device-2", "2Gi"), ("device-3", "1Gi")],
        ["2.0.0", "1.0.0"],
        "device-3",
    ),
    # A constraint naming only subReq-0 does not restrict subReq-1.
    _constraint_case(
        "prioritized-list-subrequests-with-constraints-ref-sub-request",
        "req-1/subReq-0",
        [("device-2", "2Gi")],
        ["2.0.0"],
        "device-2",
    ),
    Case(
        "prioritized-list-subrequests-with-allocation-mode-all",
        features=ON,
        claims=[
            claim("claim-0", first_available("req-0", sub("subReq-0", CLASS_A, mode="All"), sub("subReq-1")))
        ],
        classes=CLASSES[:1],
        slices=[
            resource_slice("slice-1", NODE_1, "pool-1", DRIVER_A, device("device-1"), device("device-2"))
        ],
        allocated=[(DRIVER_A, "pool-1", "device-1")],
        expect=[allocation(local(), result("req-0/subReq-1", DRIVER_A, "pool-1", "device-2"))],
    ),
    Case(
        "prioritized-list-allocation-mode-all-multiple-requests",
        features=ON,
        claims=[
            claim(
                "claim-0",
                request("req-0"),
                first_available("req-1", sub("subReq-0", CLASS_A, mode="All"), sub("subReq-1")),
            )
        ],
        classes=CLASSES[:1],
        slices=[
            resource_slice("slice-1", NODE_1, "pool-1", DRIVER_A, device("device-1"), device("device-2"))
        ],
        expect=[
            allocation(
                local(),
                result("req-0", DRIVER_A, "pool-1", "device-1"),
                result("req-1/subReq-1", DRIVER_A, "pool-1", "device-2"),
            )
        ],
    ),
    Case(
        "prioritized-list-disabled",
        claims=[claim("claim-0", first_available("req-0", sub("subReq-0")))],
        classes=CLASSES[:1],
        slices=[one_device_slice("slice-1", NODE_1, "pool-1", DRIVER_A)],
        error="claim claim-0, request req-0: has subrequests, but the DRAPrioritizedList feature is disabled",
    ),
    Case(
        "prioritized-list-multi-request",
        features=ON,
        claims=[
            claim(
                "claim-0",
                request("req-1", CLASS_A, 1, memory_at_least("8Gi")),
                first_available(
                    "req-0",
                    sub("subReq-0", CLASS_A, 1, memory_at_least("8Gi")),
                    sub("subReq-1", CLASS_A, 1, memory_at_least("4Gi")),
                ),
            )
        ],
        classes=CLASSES[:1],
        slices=[
            _memory_slice("slice-1", "pool-1", ("device-1", "8Gi")),
            _memory_slice("slice-2", "pool-2", ("device-2", "4Gi")),
        ],
        expect=[
            allocation(
                local(),
                result("req-1", DRIVER_A, "pool-1", "device-1"),
                result("req-0/subReq-1", DRIVER_A, "pool-2", "device-2"),
            )
        ],
    ),
    Case(
        # The first subrequest takes the only 8Gi device, which the later request needs: backtrack.
        "prioritized-list-with-backtracking",
        features=ON,
        claims=[
            claim(
                "claim-0",
                first_available(
                    "req-0",
                    sub("subReq-0", CLASS_A, 1, memory_at_least("8Gi")),
                    sub("subReq-1", CLASS_A, 1, memory_at_least("4Gi")),
                ),
                request("req-1", CLASS_A, 1, memory_at_least("8Gi")),
            )
        ],
        classes=CLASSES[:1],
        slices=[
            _memory_slice("slice-1", "pool-1", ("device-1", "8Gi")),
            _memory_slice("slice-2", "pool-2", ("device-2", "4Gi")),
        ],
        expect=[
            allocation(
                local(),
                result("req-0/subReq-1", DRIVER_A, "pool-2", "device-2"),
                result("req-1", DRIVER_A, "pool-1", "device-1"),
            )
        ],
    ),
    Case(
        # The claim limit is checked per subrequest: a too-large first choice falls through.
        "prioritized-list-too-many-in-first-subrequest",
        features=ON,
        claims=[
            claim(
                "claim-0", first_available("req-0", sub("subReq-0", CLASS_B, 500), sub("subReq-1", CLASS_A))
            )
        ],
        classes=CLASSES,
        slices=[one_device_slice("slice-1", NODE_1, "pool-1", DRIVER_A)],
        expect=[allocation(local(), result("req-0/subReq-1", DRIVER_A, "pool-1", "device-1"))],
    ),
]


def _generation(value: str) -> dict:
    return cel(f'device.attributes["driver-a"].generation == "{value}"')


def _v6_else_v5() -> dict:
    return claim(
        "claim-0",
        first_available(
            "req-0",
            sub("subReq-0", CLASS_A, None, _generation("v6"), mode="All"),
            sub("subReq-1", CLASS_A, None, _generation("v5"), mode="All"),
        ),
    )


def _generations(name: str, where: str, pool: str, *gens: str, start: int = 1) -> dict:
    return resource_slice(
        name,
        where,
        pool,
        DRIVER_A,
        *(device(f"device-{i}", attrs={"generation": g}) for i, g in enumerate(gens, start)),
    )


CASES += [
    Case(
        "prioritized-list-allocation-mode-all",
        features=ON,
        claims=[
            claim("claim-0", first_available("req-0", sub("subReq-0", CLASS_A, mode="All"), sub("subReq-1")))
        ],
        classes=CLASSES[:1],
        slices=[
            resource_slice("slice-1", NODE_1, "pool-1", DRIVER_A, device("device-1"), device("device-2"))
        ],
        allocated=[(DRIVER_A, "pool-1", "device-2")],
        expect=[allocation(local(), result("req-0/subReq-1", DRIVER_A, "pool-1", "device-1"))],
    ),
    Case(
        # All with no matching device does not succeed with zero devices: the next subrequest is used.
        "prioritized-list-allocation-mode-all-with-selectors",
        features=ON,
        claims=[_v6_else_v5()],
        classes=CLASSES[:1],
        slices=[_generations("slice-1", NODE_1, "pool-1", "v5")],
        expect=[allocation(local(), result("req-0/subReq-1", DRIVER_A, "pool-1", "device-1"))],
    ),
    Case(
        "prioritized-list-allocation-mode-all-with-selectors-multiple-pools",
        features=ON,
        claims=[_v6_else_v5()],
        classes=CLASSES[:1],
        slices=[
            _generations("slice-1", NODE_1, "pool-1", "v5"),
            _generations("slice-2", NODE_1, "pool-2", "v5"),
        ],
        expect=[
            allocation(
                local(),
                result("req-0/subReq-1", DRIVER_A, "pool-1", "device-1"),
                result("req-0/subReq-1", DRIVER_A, "pool-2", "device-1"),
            )
        ],
    ),
    Case(
        "prioritized-list-allocation-mode-all-with-selectors-multiple-pools-across-nodes",
        features=ON,
        claims=[_v6_else_v5()],
        classes=CLASSES[:1],
        slices=[
            _generations("slice-1", NODE_1, "pool-1", "v5"),
            _generations("slice-2", "node-2", "pool-2", "v5", "v6"),
        ],
        expect=[allocation(local(), result("req-0/subReq-1", DRIVER_A, "pool-1", "device-1"))],
    ),
    Case(
        # Only devices the class selects count for All.
        "prioritized-list-allocation-mode-all-with-selectors-deviceclass-subset",
        features=ON,
        claims=[_v6_else_v5()],
        classes=[
            device_class(
                CLASS_A,
                DRIVER_A,
                selector=cel('device.driver == "driver-a" && device.attributes["driver-a"].selected'),
            )
        ],
        slices=[
            resource_slice(
                "slice-1",
                NODE_1,
                "pool-1",
                DRIVER_A,
                device("device-1", attrs={"generation": "v6", "selected": False}),
                device("device-2", attrs={"generation": "v5", "selected": False}),
                device("device-3", attrs={"generation": "v5", "selected": True}),
            )
        ],
        expect=[allocation(local(), result("req-0/subReq-1", DRIVER_A, "pool-1", "device-3"))],
    ),
    Case(
        # Two requests of 32 cannot both fit in one claim: both fall back to 16.
        "prioritized-list-max-allocation-limit-request",
        features=ON,
        claims=[
            claim(
                "claim-0",
                first_available("req-0", sub("subReq-0", CLASS_A, 32), sub("subReq-1", CLASS_A, 16)),
                first_available("req-1", sub("subReq-0", CLASS_A, 32), sub("subReq-1", CLASS_A, 16)),
            )
        ],
        classes=CLASSES[:1],
        slices=[resource_slice("slice-1", NODE_1, "pool-1", DRIVER_A, *devices(64))],
        expect=[
            allocation(
                local(),
                *results("req-0/subReq-1", DRIVER_A, "pool-1", 16, 0),
                *results("req-1/subReq-1", DRIVER_A, "pool-1", 16, 16),
            )
        ],
        steps=75,
    ),
    Case(
        # All would match 31 devices, which with req-1's two exceeds the limit of 32.
        "prioritized-list-max-allocation-allocation-mode-all",
        features=ON,
        claims=[
            claim(
                "claim-0",
                first_available("req-0", sub("subReq-0", CLASS_A, mode="All"), sub("subReq-1", CLASS_A, 2)),
                request("req-1", CLASS_B, 2),
            )
        ],
        classes=CLASSES,
        slices=[
            resource_slice("slice-1", NODE_1, "pool-1", DRIVER_A, *devices(31)),
            resource_slice("slice-2", NODE_1, "pool-2", DRIVER_B, *devices(2)),
        ],
        expect=[
            allocation(
                local(),
                *results("req-0/subReq-1", DRIVER_A, "pool-1", 2),
                *results("req-1", DRIVER_B, "pool-2", 2),
            )
        ],
        steps=42,
    ),
]


def _typed(name: str, kind: str) -> dict:
    return device(name, attrs={"type": kind})


CASES += [
    Case(
        # req-1 cannot get three Y devices; req-2's first choice asks for too many; both fall back.
        "check-combinations-with-prioritized-list",
        features=ON,
        claims=[
            claim(
                "claim-0",
                first_available(
                    "req-1",
                    sub("subReq-0", CLASS_A, 3, cel('device.attributes["driver-a"].type == "Y"')),
                    sub("subReq-1", CLASS_A, 2),
                ),
                first_available(
                    "req-2",
                    sub("subReq-0", CLASS_A, 2),
                    sub("subReq-1", CLASS_A, 1, cel('device.attributes["driver-a"].type == "X"')),
                ),
            )
        ],
        classes=CLASSES[:1],
        slices=[
            resource_slice(
                "slice-1",
                NODE_1,
                "pool-1",
                DRIVER_A,
                _typed("device-1", "X"),
                _typed("device-2", "Y"),
                _typed("device-3", "Y"),
            )
        ],
        expect=[
            allocation(
                local(),
                result("req-1/subReq-1", DRIVER_A, "pool-1", "device-2"),
                result("req-1/subReq-1", DRIVER_A, "pool-1", "device-3"),
                result("req-2/subReq-1", DRIVER_A, "pool-1", "device-1"),
            )
        ],
        steps=26,
    ),
    Case(
        # subReq-0 cannot fit beside req-0's device (its count is math.MaxInt): the result-size check
        # gives it up before any device is tried, and subReq-1 takes device-2.
        "prioritized-list-overflowing-first-subrequest-is-pruned",
        features=ON,
        claims=[
            claim(
                "claim-0",
                request("req-0", CLASS_A, 1),
                first_available("req-1", sub("subReq-0", CLASS_A, 2**63 - 1), sub("subReq-1", CLASS_A, 1)),
            )
        ],
        classes=CLASSES,
        slices=[
            resource_slice("slice-1", NODE_1, "pool-1", DRIVER_A, device("device-1"), device("device-2"))
        ],
        expect=[
            allocation(
                local(),
                result("req-0", DRIVER_A, "pool-1", "device-1"),
                result("req-1/subReq-1", DRIVER_A, "pool-1", "device-2"),
            )
        ],
        steps=8,
    ),
]
