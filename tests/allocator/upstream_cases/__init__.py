"""Behaviours of upstream's shared allocator test table, ported as data.

Source: kubernetes/kubernetes staging/src/k8s.io/dynamic-resource-allocation/structured/internal/
allocatortesting/allocator_testing.go and lexicographical_testing.go (read at commit 008b3652).
Each module holds the cases of one topic as `CASES`; `all_cases()` gathers them. The cases are our
own data built with `builders`, not a translation of upstream's helpers.

Coverage: upstream has 213 named cases in allocator_testing.go and 4 in lexicographical_testing.go,
217 in all; every one is ported under its upstream name (217 of 217). Upstream's separate
"interrupt" test (deadline/cancel while searching) is ported as test_interrupt_* in the runner.
Four more cases (marked `fixes_upstream_bug`) pin our fixes of known upstream bugs: #140438
(distinctAttribute within one request), #140436 (counters leaked after a taint or constraint
rejection, two cases) and #140326 (list intersection not restored on backtrack). Upstream's table
has no case that depends on those bugs, so no upstream expectation had to change.
"""

from __future__ import annotations

from importlib import import_module

from .builders import Case

UPSTREAM_CASE_COUNT = 217

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
