"""Prioritize's scores: how well the devices a node would give the pod fit the placement policy.

The in-tree plugin's Score. Node fits are memoised by node name where the node evaluation keeps them
(the filter cache's snapshot of the claims spec), so scoring the same nodes for pod after pod of a
workload costs only the nodes whose pools changed.
"""

from __future__ import annotations

from allocator import AllocationOutcome, Node
from extender.plugin.evaluation import SEARCH, FitMemo, MemoisedFit, NodeEvaluation
from extender.plugin.planning import Planner, PodPlan
from extender.plugin.scoring import NodeFit, node_scores, policy_for, rank_points
from extender.plugin.verdicts import NodeVerdict
from extender.state.cache import ClusterCache


class NodeScorer:
    def __init__(self, cache: ClusterCache, planner: Planner, *, evaluation: NodeEvaluation = SEARCH,
                 default_policy: str) -> None:
        self.cache = cache
        self.planner = planner
        self.evaluation = evaluation
        self.default_policy = default_policy
        self._memoised = 0  # fits worked out and memoised (a test's proof that the memo is used)

    def memoised_fits(self) -> int:
        return self._memoised

    def scores(self, pod: dict, *, fitting: list[NodeVerdict], plan: PodPlan) -> dict[str, int]:
        """Scores of the nodes the pod fits, under the pod's placement policy."""
        policy = policy_for(pod, self.default_policy)
        placed = policy != "none" and bool(plan.to_allocate)
        # The fit memo of the plan's claims, while it may be used (see _placed_fit).
        memo = self.evaluation.fits_memo(plan) if placed else None
        fits: dict[str, NodeFit] = {}
        node_of = self.cache.node
        for verdict in fitting:
            outcome = verdict.outcome
            if outcome is None:
                fits[verdict.node] = NodeFit(0, 0, 0, 0)
                continue
            if memo is not None:
                memoised = memo.get(verdict.node)
                if memoised is not None and memoised.outcome is outcome:
                    fits[verdict.node] = memoised.fit
                    continue
            node = node_of(verdict.node) if placed else None
            if node is None:
                fits[verdict.node] = NodeFit(rank_points(outcome.subrequest_ranks), 0, 0,
                                             outcome.result_count())
            else:
                fits[verdict.node] = self._placed_fit(node, outcome, plan=plan, memo=memo)
        return node_scores(policy, fits)

    def _placed_fit(self, node: Node, outcome: AllocationOutcome, *, plan: PodPlan,
                    memo: FitMemo | None) -> NodeFit:
        """The node's fit with its placement: how many devices the node sees in the pools `outcome`
        takes devices from (placement looks at those), and how many of them the plan's view has in use.

        Memoised by node name in the filter cache's snapshot for these claims (FilterCache.fits_memo),
        with the outcome it was worked out for: the filter cache hands the same outcome object to every
        pod of a workload, so identity tells that the pools are the same. The snapshot drops a node's
        fit whenever an allocation in one of the node's pools appears or goes away (in the cache or in
        flight), the Node changes or the inventory does: prioritize scores ~half the nodes for every
        pod, and between two pods only the nodes that got devices changed. Only while nothing moved
        since the plan was made (its epoch), so a memoised fit always matches the plan's view: `memo`
        is None otherwise."""
        pools = outcome.result_pools()
        self.planner.allocator_for(plan)
        view = plan.view
        assert view is not None
        used = total = 0
        for entry in self.cache.inventory.node_pools(node, self.cache.features).candidates:
            if entry.key[:2] in pools:
                total += 1
                used += view.is_allocated(entry.key)
        fit = NodeFit(rank_points(outcome.subrequest_ranks), used, total, outcome.result_count())
        if memo is not None:
            memo[node.name] = MemoisedFit(outcome, fit)
            self._memoised += 1
        return fit
