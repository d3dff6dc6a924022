"""Behaviours of upstream's shared allocator test table, ported as data.

Source: kubernetes/kubernetes staging/src/k8s.io/dynamic-resource-allocation/structured/internal/
allocatortesting/allocator_testing.go and lexicographical_testing.go (read at commit 008b3652).
Each module holds the cases of one topic as `CASES`; `all_cases()` gathers them. The cases are our
own data built with `builders`, not a translation of upstream's helpers.

Coverage: upstream had 213 named cases in allocator_testing.go and 4 in lexicographical_testing.go
at 008b3652, 217 in all; every one is ported under its upstream name (217 of 217). The v0.37.1 table
(Kubernetes 1.37.1) has 275 in allocator_testing.go and the same 4 lexicographical ones, 279 in all,
62 of them new; all 279 are ported. release_1_37 holds 16 of the new ones (claim limit per request,
claim configs, fractional capacity ranges, distinctAttribute), compatibility_groups the 13
DRADeviceCompatibilityGroups ones, partitionable and consumable_capacity 19 more on counters and
capacity arithmetic, derived_attributes the 5 derived-attributes* and optional_node_operations the 2
optional-node-operations* cases, list_attributes and prioritized_list the other 7 (list-attribute
backtracking and counts, KEP-6072 numaNode lists, an overflowing subrequest); the changed expectations
of older cases follow 1.37.1. tests/conformance replays every ported case on the real v0.37.1
allocator.
"""

from __future__ import annotations

from importlib import import_module

from .builders import Case

UPSTREAM_CASE_COUNT = 279

MODULES = (
    "basic",
    "admin_access",
    "constraints",
    "limits",
    "prioritized_list",
    "partitionable",
    "taints",
    "binding_conditions",
    "consumable_capacity",
    "list_attributes",
    "pools",
    "lexicographic",
    "release_1_37",
    "compatibility_groups",
    "derived_attributes",
    "optional_node_operations",
)


def all_cases() -> list[Case]:
    cases: list[Case] = []
    for module_name in MODULES:
        cases.extend(import_module(f"{__name__}.{module_name}").CASES)
    return cases
