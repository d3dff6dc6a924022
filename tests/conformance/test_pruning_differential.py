"""Pruning against the exhaustive search on the differential campaign's random worlds (no Go needed).

``Allocator(prune=False)`` walks upstream's search step for step, so on every world the pruned search
must give the same verdict: the same devices, or unschedulable, or an error of the same class. This
is how a pruning bound that hides an error upstream's search reaches (a selector failing on a device
it looks at before it gives up) shows up without the upstream program.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from campaign import _for_each
from conformance_worlds import worlds
from differential import difference, run_ours

WORLDS = 300
SEED = 20251124


def test_pruned_search_agrees_with_the_exhaustive_search() -> None:
    divergent: list[str] = []
    checked = 0

    def check(world: dict[str, Any]) -> None:
        nonlocal checked
        pruned = run_ours(world, deadline_s=2.0)
        exhaustive = run_ours(world, deadline_s=2.0, prune=False)
        if "timeout" in (pruned.kind, exhaustive.kind):
            return  # the exhaustive search may run out where pruning finishes
        checked += 1
        problem = difference(pruned, exhaustive)
        if problem is not None:
            divergent.append(problem)

    _for_each(worlds(), WORLDS, SEED, check)
    assert checked > WORLDS * 0.9, checked
    assert not divergent, "\n".join(divergent[:3])
