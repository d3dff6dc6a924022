"""Prioritize scores (0..10) from the prioritized-list rank and a device placement policy.

Rank follows upstream's Score extension: for every `firstAvailable` request, choosing subrequest i
earns `8 - i` points, so a node that can give a better-ranked alternative scores higher. The points
are normalised against the best node, like upstream's NormalizeScore.

Placement is ours (no peer offers it for ResourceClaims): on each node we look at the fraction of
the node's devices that would be in use once this pod's devices are added.
- `binpack` prefers nodes that are already partly used, so whole nodes stay free for big claims;
- `spread` prefers the emptiest nodes, so load and failure domains are spread;
- `none` ignores placement.
Placement counts as a fraction (0..1) of one rank point, so a better-ranked alternative is never
outweighed by placement; rounding to 0..10 may tie such nodes but never reverses them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from operator import attrgetter
from typing import NamedTuple

from common.rules import SCORING_POLICIES, annotated_scoring_policy

MAX_SCORE = 10
# Upstream's FirstAvailableDeviceRequestMaxSize: the first subrequest earns 8 points, the eighth 1.
FIRST_AVAILABLE_MAX = 8
_RANK_POINTS = attrgetter("rank_points")


class NodeFit(NamedTuple):
    """What prioritize knows about one feasible node (a NamedTuple: hashed for every node scored)."""

    rank_points: int  # from rank_points()
    devices_in_use: int  # on this node, before this pod
    devices_total: int  # on this node
    devices_for_pod: int  # the pod's allocation on this node


def rank_points(subrequest_ranks: Iterable[Mapping[str, int]]) -> int:
    """Upstream's prioritized-list points from AllocationOutcome.subrequest_ranks."""
    return sum(FIRST_AVAILABLE_MAX - index for ranks in subrequest_ranks for index in ranks.values())


def policy_for(pod: Mapping, default: str) -> str:
    """The pod's annotation wins over the global default; an unknown value falls back to the default
    (common.rules.scoring_annotation_problem says so to whoever creates the pod: the webhook, `check`)."""
    chosen = annotated_scoring_policy(pod)
    return chosen if isinstance(chosen, str) and chosen in SCORING_POLICIES else default


def _placement(policy: str, fit: NodeFit) -> float | None:
    if policy == "none":
        return None
    if fit.devices_total <= 0:
        return 0.0
    after = min(1.0, (fit.devices_in_use + fit.devices_for_pod) / fit.devices_total)
    return after if policy == "binpack" else 1.0 - after


def node_scores(policy: str, fits: Mapping[str, NodeFit]) -> dict[str, int]:
    """Score every node 0..MAX_SCORE. Raises ValueError for an unknown policy."""
    if policy not in SCORING_POLICIES:
        raise ValueError(f"unknown scoring policy {policy!r}; expected one of {', '.join(SCORING_POLICIES)}")
    best_rank = max(map(_RANK_POINTS, fits.values()), default=0)
    scale = best_rank + (0 if policy == "none" else 1)
    scores: dict[str, int] = {}
    score_of: dict[NodeFit, int] = {}  # nodes of a workload have a handful of distinct fits
    for node, fit in fits.items():
        score = score_of.get(fit)
        if score is None:
            value = fit.rank_points + (_placement(policy, fit) or 0.0)
            score = score_of[fit] = max(0, min(MAX_SCORE, round(MAX_SCORE * value / scale))) if scale else 0
        scores[node] = score
    return scores
