"""Does the pod fit a node? Verdicts for one plan on many nodes, with the caches that make them cheap.

The in-tree plugin's Filter per node. Every node check goes through `NodeChecker`: filter, prioritize,
preempt and explain through `check_all` (yielding to other requests), bind and the filter hold through
`check` (synchronous, so the caller can reserve the outcome before anything else runs). Outcomes come
from a NodeEvaluation (extender.plugin.evaluation: the filter cache around the allocator's search, or
the search alone); prioritize reuses the verdicts of the same pod's filter.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

from cachetools import LRUCache, TTLCache

from allocator import (
    AllocationError,
    AllocationOutcome,
    AllocationTimeout,
    InvalidObjectError,
    Node,
    NodeAllocationError,
    allocation_skips_node_operations,
    node_matches_selector,
    takes_skipped_node_operations,
)
from common.objects import metadata_of
from extender.plugin.evaluation import SEARCH, NodeEvaluation
from extender.plugin.nodeallocatable import (
    ClaimUse,
    NodeAllocatableError,
    NodeFit,
    PodDemand,
    fit,
    node_usage,
)
from extender.plugin.planning import Planner, PodPlan, SchedulingError
from extender.plugin.verdicts import (
    NOT_AVAILABLE,
    UNKNOWN_NODE,
    NodeVerdict,
    Reason,
    cached_verdict,
    outcome_verdict,
    timed_out,
)
from extender.state.cache import ClusterCache

# How long one check of many nodes may run on the event loop before it lets other requests in.
YIELD_AFTER_S = 0.005
# Nodes looked up in the filter cache in one go (well under YIELD_AFTER_S of work), before searching
# the misses one by one: MIN_AHEAD at first, twice as many after each batch with hits done without a
# yield, up to HIT_BATCH; after a yield about as many as were done between the last two yields; after a
# batch without hits MIN_AHEAD again (see check_all).
HIT_BATCH = 512
MIN_AHEAD = 32
# How long, and for how many pods, prioritize may reuse the verdicts of the same pod's filter.
# kube-scheduler calls prioritize right after filter, so a few pods suffice (each entry holds a
# verdict per node).
RESULT_TTL_S = 30.0
RESULT_PODS = 64
NODE_OPERATIONS_MESSAGE = (f"{NOT_AVAILABLE}: its devices skip node operations, and the node does not "
                           "declare DRAOptionalNodeOperations in status.declaredFeatures")


class NodeChecker:
    def __init__(self, cache: ClusterCache, planner: Planner, *, evaluation: NodeEvaluation = SEARCH,
                 node_deadline_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.cache = cache
        self.planner = planner
        self.evaluation = evaluation
        self.node_deadline_s = node_deadline_s
        self.clock = clock
        self.node_usage = node_usage(cache)
        self._filtered: TTLCache[str, dict[str, NodeVerdict]] = TTLCache(maxsize=RESULT_PODS,
                                                                         ttl=RESULT_TTL_S)
        # DRANodeAllocatableResources: each pod's requests per footprint, by pod UID and resourceVersion.
        self._demands: LRUCache[tuple[str, str], PodDemand] = LRUCache(maxsize=RESULT_PODS)

    def remember(self, pod_uid: str, verdicts: dict[str, NodeVerdict]) -> None:
        """Keep a filter's verdicts for the same pod's prioritize (`check_all(reuse_for=...)`)."""
        if pod_uid:
            self._filtered[pod_uid] = verdicts

    def fitting_from_filter(self, plan: PodPlan, pod_uid: str,
                            node_names: Sequence[str]) -> list[NodeVerdict] | None:
        """The fitting verdicts, in `node_names` order, of the same pod's filter when it answered every
        one of these nodes (prioritize right after filter, the usual case); None otherwise. What
        `check_all(reuse_for=pod_uid)` would give for them, without building a verdict per node again."""
        remembered = self._filtered.get(pod_uid) if pod_uid else None
        if not remembered:
            return None
        try:
            verdicts = [remembered[name] for name in node_names]
        except KeyError:
            return None
        self.evaluation.prepare(plan)  # as check_all does: the scorer's fit memo follows the plan's view
        return [verdict for verdict in verdicts if verdict.fits]

    def _node(self, name: str, node_objects: Mapping[str, dict] | None) -> Node | None:
        if node_objects is not None and name in node_objects:
            try:
                return Node.from_api(node_objects[name])
            except InvalidObjectError:
                return None
        return self.cache.node(name)

    def check(
        self,
        plan: PodPlan,
        node_name: str,
        *,
        use_cache: bool,
        node_objects: Mapping[str, dict] | None = None,
        time_left_s: float | None = None,
        evicting: frozenset[str] = frozenset(),
    ) -> NodeVerdict:
        """Does the pod fit this node? Raises SchedulingError for real errors.

        `use_cache`: ask the checker's evaluation (filter, prioritize, preempt: the filter cache when it
        is on); bind, the filter hold and explain search afresh. `time_left_s` shortens the search below
        `node_deadline_s` (what is left of a multi-node check's budget). `evicting`: UIDs of pods whose
        node allocatable requests count as gone (preempt's victims)."""
        if plan.blocked is not None:
            return plan.blocked.on(node_name)
        node = self._node(node_name, node_objects)
        if node is None:
            # The answer's key names the node: a request full of made-up names gets a compact answer.
            return NodeVerdict(node_name, fits=False, message=UNKNOWN_NODE, unresolvable=True,
                               reason=Reason.UNKNOWN_NODE)
        if plan.extended is not None:
            on_node = self.planner.for_node(plan, node)
            if isinstance(on_node, str):
                return NodeVerdict(node_name, fits=False, message=on_node, unresolvable=True,
                                   reason=Reason.EXTENDED_RESOURCE)
            plan = on_node
        allocations = [claim.allocation or {} for claim in plan.allocated] if plan.allocated else []
        if plan.pending:
            allocations += [share.allocation for share in plan.pending]
        for index, allocation in enumerate(allocations):
            selector = allocation.get("nodeSelector")
            if selector and not node_matches_selector(node, selector):
                return NodeVerdict(node_name, fits=False, message=NOT_AVAILABLE, unresolvable=True,
                                   reason=Reason.CLAIM_ON_OTHER_NODE)
            # Checked whatever the gates, as upstream's Filter does: the kubelet would skip operations.
            if allocation_skips_node_operations(allocation) and not takes_skipped_node_operations(node):
                pending = index - len(plan.allocated)
                # Upstream names a PodGroup's claim whose allocation is still in flight.
                words = (f"resource claim {plan.pending[pending].claim.key} allocation requires "
                         "DRAOptionalNodeOperations feature on the node") if pending >= 0 else None
                return NodeVerdict(node_name, fits=False, message=NODE_OPERATIONS_MESSAGE, unresolvable=True,
                                   reason=Reason.NODE_OPERATIONS, words=words)
        if not plan.to_allocate:
            return self._node_allocatable(plan, node, NodeVerdict(node_name, fits=True), evicting)
        evaluation = self.evaluation if use_cache else SEARCH
        evaluation.prepare(plan)
        handle, known = evaluation.known(plan, node)
        if known is not None:
            assert plan.signature is not None
            cached, computed_for, beyond_eviction = known
            return self._node_allocatable(plan, node, cached_verdict(
                node_name, cached, computed_for, plan.signature.claims, beyond_eviction), evicting)
        allocator = self.planner.allocator_for(plan)
        allocator.deadline_s = self.node_deadline_s if time_left_s is None else min(
            self.node_deadline_s, time_left_s)
        try:
            outcome = evaluation.evaluate(plan, node, handle,
                                          lambda: allocator.allocate(node, plan.to_allocate))
        except AllocationTimeout:
            # Never remembered (the evaluation stores no outcome): the next filter searches it again.
            return timed_out(node_name)
        except NodeAllocationError as error:
            failed = error.outcome if isinstance(error.outcome, AllocationOutcome) else None
            return NodeVerdict(node_name, fits=False, message=str(error), unresolvable=True,
                               reason=Reason.NODE_ERROR, outcome=failed)
        except AllocationError as error:
            raise SchedulingError(str(error)) from None
        return self._node_allocatable(plan, node, outcome_verdict(node_name, outcome), evicting)

    def _footprints(self) -> bool:
        """May a pod's devices add to its requests (DRANodeAllocatableResources, and devices declaring
        nodeAllocatableResources)?"""
        return self.node_usage is not None and self.cache.inventory.has_node_allocatable_devices

    def node_fit(self, plan: PodPlan, node: Node, verdict: NodeVerdict, *,
                 evicting: frozenset[str] = frozenset()) -> NodeFit | None:
        """With DRANodeAllocatableResources: the node allocatable footprint of the devices the pod's
        claims have or get on `node` (`verdict`: the node's fitting device verdict), and whether the node
        holds it; None without the gate or without such devices. Raises SchedulingError for bad data."""
        usage = self.node_usage
        if usage is None or not self.cache.inventory.has_node_allocatable_devices:
            return None
        extended = plan.extended_variant.claim if plan.extended_variant is not None else None
        uses = [ClaimUse(claim, claim.allocation or {}) for claim in plan.allocated]
        uses += [ClaimUse(share.claim, share.allocation) for share in plan.pending]
        allocations = verdict.outcome.allocations if verdict.outcome is not None else []
        uses += [ClaimUse(claim, allocation) for claim, allocation
                 in zip(plan.to_allocate, allocations, strict=True) if claim is not extended]
        names: dict[str, set[str]] = {}
        for entry in plan.claims:
            names.setdefault(entry.claim.uid, set()).add(entry.pod_claim_name)
        meta = metadata_of(plan.pod)
        key = (str(meta.get("uid") or ""), str(meta.get("resourceVersion") or ""))
        demand = self._demands.get(key)
        if demand is None or demand.pod is not plan.pod:
            demand = self._demands[key] = PodDemand(plan.pod)
        try:
            return fit(demand, uses, names, self.cache.inventory, node, usage, evicting=evicting)
        except NodeAllocatableError as error:
            raise SchedulingError(str(error)) from None

    def _node_allocatable(self, plan: PodPlan, node: Node, verdict: NodeVerdict,
                          evicting: frozenset[str]) -> NodeVerdict:
        if not verdict.fits or not self._footprints():
            return verdict
        found = self.node_fit(plan, node, verdict, evicting=evicting)
        if found is None or found.problem is None:
            return verdict
        return NodeVerdict(node.name, fits=False, message=found.problem, unresolvable=found.unresolvable,
                           reason=Reason.NODE_ALLOCATABLE, words=found.words)

    async def check_all(
        self,
        plan: PodPlan,
        node_names: Iterable[str],
        *,
        use_cache: bool,
        node_objects: Mapping[str, dict] | None = None,
        deadline: float | None = None,
        reuse_for: str | None = None,
    ) -> dict[str, NodeVerdict]:
        """Verdicts for `node_names`, letting other requests run every YIELD_AFTER_S of work.

        Every multi-node check (filter, prioritize, preempt, explain) goes through here, so none of
        them holds the event loop for long. One node's allocation is never interrupted, so a single
        hard search can still hold the loop for up to `node_deadline_s`. After a yield the plan's view
        may be stale (a fits verdict then costs a failed bind, never a double allocation: bind
        re-checks); the filter cache notices the changes and stops storing outcomes computed from
        that view.

        `deadline` (on `clock`) bounds the whole check: each node's search gets at most what is left,
        and nodes reached after it are timed out without being searched. Nodes the filter cache has an
        outcome for are answered from it whatever the deadline: that costs no search. `reuse_for`: the
        pod UID whose remembered filter verdicts answer the nodes they cover (prioritize)."""
        names = list(node_names)
        if use_cache:
            self.evaluation.prepare(plan)
        reused = (self._filtered.get(reuse_for) or {}) if reuse_for else {}
        started = self.clock()
        missing = [name for name in names if name not in reused] if reused else names
        # The verdicts kept from earlier filters first, all at once (no step per node in Python, well
        # under YIELD_AFTER_S even for MAX_NODES); the batches below only for the nodes left.
        verdicts, missing = self._remembered_verdicts(plan, missing, node_objects) if use_cache else (
            {}, missing)
        remembered = len(verdicts)
        position, ahead, stretch = 0, MIN_AHEAD, 0
        while position < len(missing):
            batch = missing[position:position + ahead]
            hits = self._cached_verdicts(plan, batch, node_objects) if use_cache else {}
            if len(hits) == len(batch):  # the usual warm batch: nothing to search
                verdicts.update(hits)
                position += len(batch)
                stretch += len(batch)
                batch = []
            for name in batch:
                position += 1
                stretch += 1
                hit = hits.get(name)
                if hit is not None:
                    verdicts[name] = hit
                    continue
                time_left = None if deadline is None else deadline - self.clock()
                if time_left is not None and time_left <= 0:
                    verdicts[name] = timed_out(name)
                    continue
                verdicts[name] = self.check(plan, name, node_objects=node_objects, use_cache=use_cache,
                                            time_left_s=time_left)
                if self.clock() - started > YIELD_AFTER_S:
                    break
            if self.clock() - started > YIELD_AFTER_S:
                started = await self._yield(plan)
                # The nodes not reached yet are looked up again after a yield (what changed during
                # it). Look ahead about as far as the last stretch got, or only MIN_AHEAD after a batch
                # without a single hit: a cold check, all searches, then does not look up hundreds of
                # nodes at every yield only to look them up again (it looked up each node 2.8 times).
                ahead, stretch = max(MIN_AHEAD, min(HIT_BATCH, stretch)) if hits else MIN_AHEAD, 0
            else:
                ahead = min(HIT_BATCH, 2 * ahead) if hits else MIN_AHEAD
        if not reused:
            if remembered and len(verdicts) > remembered:  # back in the order of `names`
                verdicts = dict(zip(names, map(verdicts.__getitem__, names), strict=True))
            return verdicts
        return {name: reused.get(name) or verdicts[name] for name in names}

    async def _yield(self, plan: PodPlan) -> float:
        """Let other requests run; returns the clock when this check resumes."""
        await asyncio.sleep(0)
        self.evaluation.refresh(plan)
        return self.clock()

    def _plain(self, plan: PodPlan, node_objects: Mapping[str, dict] | None) -> bool:
        """The usual plan: claims to allocate and nothing else to check per node (no allocated claim,
        no node allocatable footprint), so a node's verdict is its cached outcome's."""
        return not (plan.signature is None or plan.blocked is not None or plan.allocated
                    or plan.pending or node_objects is not None or self._footprints())

    def _remembered_verdicts(
        self, plan: PodPlan, names: list[str], node_objects: Mapping[str, dict] | None
    ) -> tuple[dict[str, NodeVerdict], list[str]]:
        """(the verdicts earlier filters of the plan's claims spec made and that still hold, the names
        without one)."""
        if plan.extended is not None or not self._plain(plan, node_objects):
            return {}, names
        verdicts, rest, _ = self.evaluation.known_verdicts(plan, names)
        return verdicts, rest

    def _cached_verdicts(self, plan: PodPlan, names: list[str],
                         node_objects: Mapping[str, dict] | None) -> dict[str, NodeVerdict]:
        """The verdicts the filter cache already has for `names`, in their order (what `check` would
        answer for them, without its per-node overhead: most of a filter's nodes are hits). Only for
        a `_plain` plan; with anything else every node goes through `check`.

        The verdicts made here are kept (VerdictMemo) while their outcomes stay, so the next filter of
        the claims spec answers those nodes without a step per node in Python."""
        signature = plan.signature
        if signature is None or not self._plain(plan, node_objects):
            return {}
        node_of = self.cache.node
        if plan.extended is not None:  # device-plugin nodes have a plan (and cache entries) of their own
            nodes = [node for node in map(node_of, names) if node is not None]
            names = [node.name for node in nodes if self.planner.for_node(plan, node) is plan]
        verdicts, rest, memo = self.evaluation.known_verdicts(plan, names)
        if not rest:
            return verdicts
        remembered = len(verdicts)
        fitting, failing, claims = memo.fitting, memo.failing, signature.claims
        for name, outcome, computed_for, beyond_eviction in self.evaluation.known_for(plan, rest, node_of):
            if outcome.success:
                verdict = fitting[name] = NodeVerdict(name, fits=True, outcome=outcome)
            else:
                verdict = failing[name] = cached_verdict(name, outcome, computed_for, claims, beyond_eviction)
            verdicts[name] = verdict
        if remembered and len(verdicts) > remembered:  # back in the order of `names`
            ordered = list(filter(verdicts.__contains__, names))
            verdicts = dict(zip(ordered, map(verdicts.__getitem__, ordered), strict=True))
        return verdicts
