"""Differential tests: our allocator and CEL engines against upstream's Go code (k8s.io/dynamic-
resource-allocation v0.37.1, built from tests/conformance/upstream once per machine).

- random worlds, random CEL questions and random derived attribute expressions (DRADerivedAttributes)
  at a small fixed size (campaign.py runs the long version);
  a divergence fails the test unless it is a deliberate difference (differential.KNOWN_DIFFERENCES,
  also listed in allocator/__init__.py) or an open CEL difference (KNOWN_CEL_DIFFERENCES);
- every case of our ported upstream table (tests/allocator/upstream_cases), replayed on upstream:
  they must agree (the cases pinning our old fixes of upstream bugs too: 1.37.1 has those fixes);
- the counterexamples earlier campaigns found, kept as fixed worlds (regressions/*.json);
- every case of the CEL tables (tests/cel/cases_*.py): its expectation must be upstream's answer.

Without a Go toolchain the module is skipped with the reason.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "allocator"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "cel"))

from campaign import engines, run_campaign
from case import CelCase
from differential import (
    KNOWN_DIFFERENCES,
    cel_engine,
    cel_ours,
    cel_upstream,
    difference,
    known_cel_difference,
    known_difference,
    run_ours,
    run_upstream,
)
from test_conformance import ALL_CASES as CEL_TABLE
from test_upstream_table import gates_for, with_uids
from upstream_cases import all_cases
from upstream_cases.builders import NODE_1, Case, node
from upstream_runner import BuildUnavailable, Upstream

from allocator import cel

REGRESSIONS = Path(__file__).resolve().parent / "regressions"
CI_WORLDS = 300
CI_CEL_QUESTIONS = 600
CI_DERIVED_QUESTIONS = 150
CI_SEED = 20251124


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    try:
        process = Upstream()
    except BuildUnavailable as missing:
        pytest.skip(str(missing))
    with process:
        yield process


def _describe(new: list[dict[str, Any]]) -> str:
    return "\n\n".join(
        f"[{d['engine']}] {d['difference']}\n" + orjson.dumps(d.get("world") or d.get("question")).decode()
        for d in new[:3]
    )


def test_random_worlds_agree(upstream: Upstream) -> None:
    tally = run_campaign(upstream, CI_WORLDS, 0, CI_SEED)
    assert tally.worlds == CI_WORLDS
    # The generator must keep producing every kind of outcome, or the comparison proves little.
    assert {"allocated", "unschedulable", "error"} <= set(tally.outcomes), tally.outcomes
    assert not tally.new, _describe(tally.new)


def test_random_cel_agrees(upstream: Upstream) -> None:
    tally = run_campaign(upstream, 0, CI_CEL_QUESTIONS, CI_SEED)
    assert tally.cel_questions == CI_CEL_QUESTIONS
    assert {"true", "false", "compile_error", "runtime_error"} <= set(tally.cel_outcomes), tally.cel_outcomes
    assert not tally.new, _describe(tally.new)


def test_random_derived_attribute_expressions_agree(upstream: Upstream) -> None:
    tally = run_campaign(upstream, 0, 0, CI_SEED, n_derived=CI_DERIVED_QUESTIONS)
    assert tally.derived_questions == CI_DERIVED_QUESTIONS
    kinds = {"derived value", "derived compile_error", "derived runtime_error"}
    assert kinds <= set(tally.cel_outcomes), tally.cel_outcomes
    assert not tally.new, _describe(tally.new)


def _world_of(case: Case) -> dict[str, Any]:
    allocated = [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": f"allocated-{i}", "namespace": "other", "uid": f"uid-allocated-{i}"},
            "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "any"}}]}},
            "status": {
                "allocation": {
                    "devices": {"results": [{"request": "r", "driver": d, "pool": p, "device": n}]}
                }
            },
        }
        for i, (d, p, n) in enumerate(case.allocated)
    ]
    return {
        "gates": gates_for(case.features).as_dict(),
        "node": case.node or node(NODE_1),
        "classes": case.classes,
        "slices": case.slices,
        "allocatedClaims": allocated + list(case.allocated_claims),
        "claims": with_uids(case.claims),
        "features": sorted(case.features),
    }


TABLE = [case for case in all_cases() if not case.error_field]


@pytest.mark.parametrize("case", TABLE, ids=[case.name for case in TABLE])
def test_ported_table_case_matches_upstream(upstream: Upstream, case: Case) -> None:
    # Includes the cases that pin our fixes of upstream bugs: 1.37.1 has the same fixes.
    world = _world_of(case)
    theirs = run_upstream(upstream.ask, world)
    ours = run_ours(world)
    problem = difference(ours, theirs)
    if problem is not None:
        assert known_difference(world, ours, theirs) is not None, problem


def _cel_question(case: CelCase) -> dict[str, Any]:
    """A case of the CEL tables as the upstream program's question: a new selector (the API server's
    validation with the gated environment and the cost limit), or a stored one when the case
    compiles without a cost limit."""
    device = case.device
    question_device = {"driver": device["driver"], "attributes": device.get("attributes") or {},
                       "capacity": device.get("capacity") or {}}
    if "allow_multiple_allocations" in device:
        question_device["allowMultipleAllocations"] = device["allow_multiple_allocations"]
    options = case.options
    return {"expression": case.expression, "device": question_device,
            "consumableCapacity": options.consumable_capacity,
            "listTypeAttributes": options.list_type_attributes,
            "newExpressions": options.cost_limit is not None}


# Not questions for upstream's CEL: the API server refuses an expression over 10 KiB by its length
# before compiling it, and the upstream program has no other cost limit than the default.
CEL_TABLE_FOR_UPSTREAM = [
    case for case in CEL_TABLE
    if len(case.expression.encode()) <= cel.MAX_EXPRESSION_BYTES
    and case.options.cost_limit in (None, cel.DEFAULT_COST_LIMIT)
]


@pytest.mark.parametrize("case", CEL_TABLE_FOR_UPSTREAM, ids=[case.name for case in CEL_TABLE_FOR_UPSTREAM])
def test_cel_table_case_is_upstreams_answer(upstream: Upstream, case: CelCase) -> None:
    # The tables' expectations run on both engines in tests/cel; here they are checked against upstream.
    theirs, answer = cel_upstream(upstream.ask, _cel_question(case))
    expected = case.expect if isinstance(case.expect, str) else str(case.expect).lower()
    assert theirs == expected, (theirs, answer.get("error", ""))


def _regressions() -> list[Path]:
    return sorted(REGRESSIONS.glob("*.json"))


@pytest.mark.parametrize("path", _regressions(), ids=lambda p: p.stem)
@pytest.mark.parametrize("engine", engines())
def test_regression(upstream: Upstream, path: Path, engine: str) -> None:
    """A world (allocation) or a question (CEL, has an "expression") that once diverged."""
    case = orjson.loads(path.read_bytes())
    if "expression" in case:
        theirs, answer = cel_upstream(upstream.ask, case)
        ours = cel_ours(engine, case)
        assert ours == theirs or known_cel_difference(engine, case, ours, answer), (ours, theirs, answer)
        return
    theirs_verdict = run_upstream(upstream.ask, case)
    with cel_engine(engine):
        ours_verdict = run_ours(case)
    problem = difference(ours_verdict, theirs_verdict)
    if problem is not None:
        assert known_difference(case, ours_verdict, theirs_verdict) is not None, problem


def test_known_differences_are_listed_in_the_package_docs() -> None:
    import allocator

    doc = " ".join((allocator.__doc__ or "").split())
    for name in KNOWN_DIFFERENCES:
        if name == "search deadline":
            continue  # speed, not semantics
        assert name in doc, f"{name!r} is not in allocator/__init__.py's list of differences"
