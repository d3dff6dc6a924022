"""Behaviours of upstream's shared allocator test table, ported as data.

Source: kubernetes/kubernetes staging/src/k8s.io/dynamic-resource-allocation/structured/internal/
allocatortesting/allocator_testing.go and lexicographical_testing.go (read at commit 008b3652).
Each module holds the cases of one topic as `CASES`; `all_cases()` gathers them. The cases are our
own data built with `builders`, not a translation of upstream's helpers.

Coverage (named upstream cases vs ported cases) is kept in UPSTREAM_CASE_COUNT / ported count; see
test_upstream_table.py, which also checks that every case name is unique.
"""

from __future__ import annotations

from importlib import import_module

from .builders import Case

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
)


def all_cases() -> list[Case]:
    cases: list[Case] = []
    for module_name in MODULES:
        cases.extend(import_module(f"{__name__}.{module_name}").CASES)
    return cases
