from __future__ import annotations

import pytest

from common.rules import SCORING_ANNOTATION
from extender.plugin.scoring import NodeFit, node_scores, policy_for, rank_points


def fit(rank: int = 0, used: int = 0, total: int = 8, need: int = 1) -> NodeFit:
    return NodeFit(rank_points=rank, devices_in_use=used, devices_total=total, devices_for_pod=need)


def test_rank_points_follow_upstream_eight_minus_index() -> None:
    assert rank_points([{"gpu": 0}]) == 8
    assert rank_points([{"gpu": 2, "nic": 0}, {}, {"x": 7}]) == 6 + 8 + 1
    assert rank_points([]) == 0


def test_binpack_prefers_partly_used_nodes_and_spread_the_emptiest() -> None:
    fits = {"empty": fit(used=0), "half": fit(used=4), "almost-full": fit(used=7)}
    binpack = node_scores("binpack", fits)
    spread = node_scores("spread", fits)
    assert binpack["almost-full"] > binpack["half"] > binpack["empty"]
    assert spread["empty"] > spread["half"] > spread["almost-full"]
    assert binpack["almost-full"] == 10 and spread["almost-full"] == 0
    assert node_scores("none", fits) == {"empty": 0, "half": 0, "almost-full": 0}


def test_better_ranked_subrequest_wins_over_placement() -> None:
    # "first" got the preferred subrequest (index 0) on an empty node, "second" only index 1 on a
    # nearly full one: binpack would prefer "second", rank must still win.
    fits = {"first": fit(rank=8, used=0), "second": fit(rank=7, used=7)}
    assert node_scores("binpack", fits)["first"] >= node_scores("binpack", fits)["second"]
    assert node_scores("none", fits) == {"first": 10, "second": 9}
    fits = {"first": fit(rank=8, used=4), "second": fit(rank=6, used=7), "third": fit(rank=8, used=0)}
    scores = node_scores("binpack", fits)
    assert scores["first"] > scores["second"]
    assert scores["first"] >= scores["third"]


def test_scores_stay_in_range() -> None:
    fits = {"a": fit(rank=16, used=20, total=8, need=3), "b": fit(rank=0, total=0)}
    for policy in ("binpack", "spread", "none"):
        assert all(0 <= score <= 10 for score in node_scores(policy, fits).values())


def test_policy_from_annotation_overrides_default() -> None:
    pod = {"metadata": {"annotations": {SCORING_ANNOTATION: "spread"}}}
    assert policy_for(pod, "binpack") == "spread"
    assert policy_for({"metadata": {"annotations": {SCORING_ANNOTATION: "bogus"}}}, "binpack") == "binpack"
    assert policy_for({"metadata": {}}, "none") == "none"


def test_unknown_policy_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown scoring policy 'tight'"):
        node_scores("tight", {"a": fit()})


def test_scoring_annotation_problem_of_odd_pods() -> None:
    from common.rules import scoring_annotation_problem

    for odd in ({"metadata": True}, {"metadata": {"annotations": ["x"]}}, {}):
        assert scoring_annotation_problem(odd) == ""
    numbered = {"metadata": {"annotations": {"dra-extender.io/scoring": 3}}}
    assert "unknown" in scoring_annotation_problem(numbered)
