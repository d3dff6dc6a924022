"""Behaviours of upstream's shared allocator test table, ported as data.

Source: kubernetes/kubernetes staging/src/k8s.io/dynamic-resource-allocation/structured/internal/
allocatortesting/allocator_testing.go and lexicographical_testing.go (read at commit 008b3652).
Each module holds the cases of one topic as `CASES`; `all_cases()` gathers them. The cases are our
own data built with `builders`, not a translation of upstream's helpers.

Coverage: upstream had 213 named cases in allocator_testing.go and 4 in lexicographical_testing.go
at 008b3652, 217 in all; every one is ported under its upstream name (217 of 217). The v0.37.1 table
(Kubernetes 1.37.1) has 275 in allocator_testing.go and the same 4 lexicographical ones, 279 in all;
UPSTREAM_CASE_COUNT says how many are ported (release_1_37 and the topic modules hold the new ones),
and the changed expectations of older cases follow 1.37.1. tests/conformance replays every ported
case on the real v0.37.1 allocator.
"""

from __future__ import annotations

from importlib import import_module

from .builders import Case

UPSTREAM_CASE_COUNT = 242

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
)


def all_cases() -> list[Case]:
    cases: list[Case] = []
    for module_name in MODULES:
        cases.extend(import_module(f"{__name__}.{module_name}").CASES)
    return cases
