"""--filter-holds-devices: filter picks the best node at once and keeps its devices in flight until bind.

Also how a PodGroup's shared claim is allocated, whatever the flag: held for the group, so the group's
other pods share that allocation and go to the same node(s) instead of each working out its own
(kube-scheduler's gang cycles filter all pods of a group before the first bind).
"""

from __future__ import annotations

import logging
from typing import NamedTuple

from allocator import ResourceClaim
from common.claimrefs import pod_key, pod_uid
from extender.plugin.nodecheck import NodeChecker
from extender.plugin.placement import NodeScorer
from extender.plugin.planning import Planner, PodPlan, SchedulingError
from extender.plugin.verdicts import FilterResult, NodeVerdict, Reason, Words, answer
from extender.state.assume import AssumeCache

log = logging.getLogger(__name__)


class HeldClaim(NamedTuple):
    claim: ResourceClaim
    allocation: dict  # the in-flight entry's own object (released only while it is still the entry's)


class Hold(NamedTuple):
    node: str
    claims: list[HeldClaim]


class FilterHolds:
    def __init__(self, assume: AssumeCache, *, planner: Planner, checker: NodeChecker, scorer: NodeScorer,
                 ttl_s: float) -> None:
        self.assume = assume
        self.planner = planner
        self.checker = checker
        self.scorer = scorer
        self.ttl_s = ttl_s
        self._holds: dict[str, Hold] = {}  # by pod UID

    def hold_best(self, pod: dict, *, plan: PodPlan, verdicts: dict[str, NodeVerdict], words: Words,
                  pod_holds: bool) -> FilterResult:
        """Pick the best node now and keep its devices in flight until bind: the pod's own claims when
        `pod_holds`, the plan's PodGroup's shared claims always (for the group)."""
        fitting = [v for v in verdicts.values() if v.fits]
        if not fitting:
            return answer(verdicts, words=words)
        scores = self.scorer.scores(pod, fitting=fitting, plan=plan)
        best = fitting[0]  # the first of the best-scored nodes, in kube-scheduler's order
        for verdict in fitting[1:]:
            if scores.get(verdict.node, 0) > scores.get(best.node, 0):
                best = verdict
        # The verdicts may predate a yield during which other pods took devices: allocate the chosen
        # node again from the current state, with no await before the devices are reserved.
        try:
            current = self.planner.on(self.planner.plan(pod), best.node)
            best = self.checker.check(current, best.node, use_cache=False)
        except SchedulingError as error:
            return FilterResult([], {}, {}, str(error))
        if not best.fits:
            return answer({**verdicts, best.node: best}, words=words)
        chosen = zip(current.to_allocate, best.outcome.allocations if best.outcome else [], strict=True)
        uid = pod_uid(pod)
        held: list[HeldClaim] = []
        for claim, allocation in chosen:
            group_owner = current.group_owner(claim)
            if group_owner is not None:
                self.assume.reserve(claim, allocation, group_owner, ttl_s=self.ttl_s)
            elif pod_holds:
                self.assume.reserve(claim, allocation, uid, ttl_s=self.ttl_s)
                held.append(HeldClaim(claim, allocation))
        self.holding()  # forget holds that expired (pods deleted or never bound)
        if held:
            self._holds[uid] = Hold(best.node, held)
        log.debug("holding %d claim(s) of pod %s on node %s", len(held), pod_key(pod), best.node)
        holder = f"PodGroup {current.group.key}" if not pod_holds and current.group else "this pod"
        elsewhere = f"dra-extender holds devices for {holder} on node {best.node}"
        # Only the chosen node passes: the others that fit are resolvable failures saying where the
        # devices are held.
        answered = {
            name: best if name == best.node else verdict if not verdict.fits else NodeVerdict(
                name, fits=False, message=elsewhere, reason=Reason.HELD_ELSEWHERE)
            for name, verdict in verdicts.items()
        }
        return answer(answered, words=words)

    def release(self, uid: str) -> None:
        """Free the pod's held devices (a new filter for it, a bind elsewhere, the pod deleted)."""
        hold = self._holds.pop(uid, None)
        if hold is not None:
            for held in hold.claims:
                self.assume.release(held.claim.uid, allocation=held.allocation)

    def node_of(self, uid: str) -> str | None:
        hold = self._holds.get(uid)
        return hold.node if hold is not None else None

    def handed_to_bind(self, uid: str) -> None:
        """The bind's own in-flight entries replaced the hold's: from now on they are the bind's."""
        self._holds.pop(uid, None)

    def extend_group_holds(self, plan: PodPlan) -> None:
        """A PodGroup's held allocation stays while pods of the group keep finding it (gang cycles
        filter every pod of a group before binding any)."""
        for share in plan.pending:
            self.assume.extend(share.claim.uid, self.ttl_s)

    def is_empty(self) -> bool:
        return not self._holds

    def _alive(self, hold: Hold) -> bool:
        for held in hold.claims:
            entry = self.assume.pending(held.claim.uid)
            if entry is not None and entry.allocation is held.allocation:
                return True
        return False

    def holding(self) -> set[str]:
        """UIDs of pods with devices held by filter; drops expired holds."""
        for uid in [uid for uid, hold in self._holds.items() if not self._alive(hold)]:
            del self._holds[uid]
        return set(self._holds)
