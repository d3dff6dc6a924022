"""Prioritize's scores: how well the devices a node would give the pod fit the placement policy.

The in-tree plugin's Score. Node fits are memoised under the filter cache's node keys, so scoring the
same nodes for pod after pod of a workload costs only the nodes whose pools changed.
"""

from __future__ import annotations

from typing import NamedTuple

from allocator import AllocationOutcome, Node
from extender.cache import ClusterCache
from extender.filtercache import FilterCache
from extender.planning import Planner, PodPlan
from extender.scoring import NodeFit, node_scores, policy_for, rank_points
from extender.verdicts import NodeVerdict, allocated_devices

# Memoised node fits: a few entries per node and claim shape.
MAX_FIT_MEMO = 20_000


class MemoisedFit(NamedTuple):
    outcome: AllocationOutcome  # the outcome the fit was worked out for (compared by identity)
    fit: NodeFit


class NodeScorer:
    def __init__(self, cache: ClusterCache, planner: Planner, *, filter_cache: FilterCache | None,
                 default_policy: str) -> None:
        self.cache = cache
        self.planner = planner
        self.filter_cache = filter_cache
        self.default_policy = default_policy
        self._fit_memo: dict[tuple, MemoisedFit] = {}

    def memoised_fits(self) -> int:
        return len(self._fit_memo)

    def scores(self, pod: dict, *, fitting: list[NodeVerdict], plan: PodPlan) -> dict[str, int]:
        """Scores of the nodes the pod fits, under the pod's placement policy."""
        policy = policy_for(pod, self.default_policy)
        placed = policy != "none" and bool(plan.to_allocate)
        memo_spec = None  # the claims spec, while the fit memo may be used (see _placed_fit)
        filter_cache = self.filter_cache
        if placed and filter_cache is not None and plan.signature is not None and (
                plan.cache_epoch == filter_cache.epoch):
            memo_spec = plan.signature.spec
        fits: dict[str, NodeFit] = {}
        node_of = self.cache.node
        for verdict in fitting:
            outcome = verdict.outcome
            node = node_of(verdict.node) if placed and outcome is not None else None
            if outcome is None:
                fits[verdict.node] = NodeFit(0, 0, 0, 0)
            elif node is None:
                fits[verdict.node] = NodeFit(rank_points(outcome.subrequest_ranks), 0, 0,
                                             allocated_devices(outcome))
            else:
                fits[verdict.node] = self._placed_fit(node, outcome, plan=plan, memo_spec=memo_spec)
        return node_scores(policy, fits)

    def _placed_fit(self, node: Node, outcome: AllocationOutcome, *, plan: PodPlan,
                    memo_spec: str | None) -> NodeFit:
        """The node's fit with its placement: how many devices the node sees in the pools `outcome`
        takes devices from (placement looks at those), and how many of them the plan's view has in use.

        Memoised under the filter cache's key for this node and these claims, with the outcome it was
        worked out for: the filter cache hands the same outcome object to every pod of a workload, so
        identity tells that the pools are the same. The node part of the key moves whenever an
        allocation in one of the node's pools appears or goes away (in the cache or in flight):
        prioritize scores ~half the nodes for every pod, and between two pods only the nodes that got
        devices changed. Only while nothing moved since the plan was made (its epoch), so a memo always
        matches its key: `memo_spec` (the plan's claims spec) is None otherwise."""
        memo_key = None
        if memo_spec is not None and self.filter_cache is not None:
            memo_key = (self.filter_cache.node_key(node), memo_spec)
            memo = self._fit_memo.get(memo_key)
            if memo is not None and memo.outcome is outcome:
                return memo.fit
        pools = {
            (result.get("driver"), result.get("pool"))
            for allocation in outcome.allocations
            for result in (allocation.get("devices") or {}).get("results") or []
        }
        self.planner.allocator_for(plan)
        view = plan.view
        assert view is not None
        used = total = 0
        for entry in self.cache.inventory.node_pools(node, self.cache.features).candidates:
            if entry.key[:2] in pools:
                total += 1
                used += view.is_allocated(entry.key)
        fit = NodeFit(rank_points(outcome.subrequest_ranks), used, total, allocated_devices(outcome))
        if memo_key is not None:
            if len(self._fit_memo) >= MAX_FIT_MEMO:
                self._fit_memo.clear()
            self._fit_memo[memo_key] = MemoisedFit(outcome, fit)
        return fit
