"""Differential campaign: random worlds and CEL questions on upstream (Go) and on ours (both CEL
engines); prints JSON with what ran (worlds per feature), the divergences by feature, and the time
taken.

    .venv/bin/python tests/conformance/campaign.py --worlds 20000 --cel 20000 --derived 2000 --seed 1
    .venv/bin/python tests/conformance/campaign.py --worlds 200 --examples 3   # show three divergences

A divergence upstream's known bugs explain (differential.KNOWN_DIFFERENCES) or one of the open CEL
differences (KNOWN_CEL_DIFFERENCES) is counted under its name, not as new. The tests run the same
code at a small fixed size (test_differential.py).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from hypothesis import HealthCheck, Phase, given, seed, settings

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conformance_cel import derived_questions, questions
from conformance_worlds import worlds
from differential import (
    cel_engine,
    cel_ours,
    cel_upstream,
    difference,
    known_cel_difference,
    known_difference,
    run_ours,
    run_upstream,
)
from upstream_runner import BuildUnavailable, Upstream

from allocator import cel


def engines() -> list[str]:
    return ["cel-expr", "celpy"] if cel.cel_expr_available() else ["celpy"]


@dataclass
class Tally:
    worlds: int = 0
    cel_questions: int = 0
    derived_questions: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    worlds_by_feature: Counter[str] = field(default_factory=Counter)  # what the worlds exercised
    cel_outcomes: Counter[str] = field(default_factory=Counter)
    divergences_by_feature: Counter[str] = field(default_factory=Counter)
    known: Counter[str] = field(default_factory=Counter)
    new: list[dict[str, Any]] = field(default_factory=list)  # unexplained divergences, with their input

    def report(self, seconds: float, examples: int) -> dict[str, Any]:
        return {
            "worlds": self.worlds,
            "cel_expressions": self.cel_questions,
            "derived_attribute_expressions": self.derived_questions,
            "engines": engines(),
            "upstream_outcomes": dict(self.outcomes),
            "worlds_by_feature": dict(sorted(self.worlds_by_feature.items())),
            "upstream_cel_outcomes": dict(self.cel_outcomes),
            "new_divergences": len(self.new),
            "new_divergences_by_feature": dict(self.divergences_by_feature),
            "known_differences": dict(self.known),
            "examples": self.new[:examples],
            "seconds": round(seconds, 1),
        }


def check_world(ask: Any, world: dict[str, Any], tally: Tally) -> None:
    theirs = run_upstream(ask, world)
    tally.worlds += 1
    tally.outcomes[theirs.kind] += 1
    tally.worlds_by_feature.update(world["features"] or ["core"])
    for engine in engines():
        with cel_engine(engine):
            ours = run_ours(world)
        problem = difference(ours, theirs)
        if problem is None:
            continue
        known = known_difference(world, ours, theirs)
        if known is not None:
            tally.known[known] += 1
            continue
        tally.divergences_by_feature.update(world["features"] or ["core"])
        tally.new.append({"engine": engine, "difference": problem, "world": world})


def check_question(ask: Any, question: dict[str, Any], tally: Tally) -> None:
    theirs, answer = cel_upstream(ask, question)
    if question.get("derived"):
        tally.derived_questions += 1
        tally.cel_outcomes["derived " + theirs.partition(":")[0]] += 1
    else:
        tally.cel_questions += 1
        tally.cel_outcomes[theirs] += 1
    for engine in engines():
        ours = cel_ours(engine, question)
        if ours == theirs:
            continue
        known = known_cel_difference(engine, question, ours, answer)
        if known is not None:
            tally.known[f"cel: {known}"] += 1
            continue
        tally.divergences_by_feature["derived attributes" if question.get("derived") else "cel"] += 1
        tally.new.append(
            {
                "engine": engine,
                "difference": f"ours {ours}, upstream {theirs}: {answer.get('error', '')[:300]}",
                "question": question,
            }
        )


def _for_each(strategy: Any, count: int, seed_value: int, check: Any) -> None:
    """Call ``check`` on ``count`` values drawn by hypothesis (no shrinking, no database, no deadline)."""
    settings_ = settings(
        max_examples=count,
        phases=[Phase.generate],
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    seed(seed_value)(settings_(given(strategy)(check)))()


def run_campaign(
    upstream: Upstream,
    n_worlds: int,
    n_cel: int,
    seed_value: int,
    after_each: Callable[[Tally], None] | None = None,
    n_derived: int = 0,
) -> Tally:
    tally = Tally()

    def world(value: dict[str, Any]) -> None:
        check_world(upstream.ask, value, tally)
        if after_each is not None:
            after_each(tally)

    def question(value: dict[str, Any]) -> None:
        check_question(upstream.ask, value, tally)
        if after_each is not None:
            after_each(tally)

    if n_worlds:
        _for_each(worlds(), n_worlds, seed_value, world)
    if n_cel:
        _for_each(questions(), n_cel, seed_value, question)
    if n_derived:
        _for_each(derived_questions(), n_derived, seed_value, question)
    return tally


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--worlds", type=int, default=1000, help="random allocation worlds (default 1000)")
    parser.add_argument("--cel", type=int, default=1000, help="random CEL questions (default 1000)")
    parser.add_argument(
        "--derived", type=int, default=0, help="random derived attribute expressions (default 0)"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--examples", type=int, default=5, help="unexplained divergences to include")
    parser.add_argument(
        "--progress",
        type=Path,
        help="rewrite this file with the report so far every 200 worlds or questions (for long campaigns)",
    )
    args = parser.parse_args()
    try:
        upstream = Upstream()
    except BuildUnavailable as missing:
        print(orjson.dumps({"skipped": str(missing)}).decode())
        return 0
    started = time.monotonic()

    def progress(tally: Tally) -> None:
        if args.progress is not None and (tally.worlds + tally.cel_questions) % 200 == 0:
            partial = args.progress.with_suffix(".tmp")
            partial.write_bytes(orjson.dumps(tally.report(time.monotonic() - started, args.examples)))
            partial.replace(args.progress)

    with upstream:
        tally = run_campaign(upstream, args.worlds, args.cel, args.seed, progress, args.derived)
    report = tally.report(time.monotonic() - started, args.examples)
    print(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
