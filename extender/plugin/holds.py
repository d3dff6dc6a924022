"""--filter-holds-devices: filter picks the best node at once and keeps its devices in flight until bind.

Also how the pods of a PodGroup are filtered, whatever the flag: kube-scheduler's PodGroup cycles
filter and reserve every pod of the group before the first bind, and the in-tree plugin's Reserve makes
an earlier pod's allocations count for the later ones. The extender sees no Reserve, so a pod's filter
holds what it allocates on its best node:
- the PodGroup's shared claim (workload claims) for the group, until the group's claim is written;
- its other claims for the group's cycle (podgroups.gang_owner): a later pod of the group that uses the
  same claim shares that allocation (checked per node by its node selector, as upstream), devices held
  by the group count as taken for its other pods, and a pod outside the group finds the claim "in the
  process of being allocated". Such an allocation stays held while a pod of the group that filtered
  with it neither binds, nor is filtered again, nor is deleted, and the hold has not timed out; the
  first bind writes it, as upstream's first PreBind does.
Deliberate differences from upstream (docs/operations.md): only the chosen node passes, where upstream
offers every fitting node to the scores; and as an extender gets no Unreserve, a failed cycle's holds
last until one of the above, not until the cycle ends.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

from allocator import ResourceClaim
from common.claimrefs import group_name_of, pod_key, pod_uid
from common.objects import metadata_of
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
    node: str | None  # None: the pod only shares what other pods of its PodGroup hold
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
        # The pods whose holds name an in-flight allocation (by claim UID and allocation object): pods of
        # a PodGroup share one, released with the last of them.
        self._sharers: dict[tuple[str, int], set[str]] = {}

    def hold_best(self, pod: dict, *, plan: PodPlan, verdicts: dict[str, NodeVerdict], words: Words,
                  pod_holds: bool) -> FilterResult:
        """Pick the best node now and keep its devices in flight until bind: the pod's own claims when
        `pod_holds`, the plan's PodGroup's shared claims always (for the group), and for a pod of a
        PodGroup its other claims (for the group's scheduling cycle)."""
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
            hold_owner = current.hold_owner(claim)
            if group_owner is not None:
                self.assume.reserve(claim, allocation, group_owner, ttl_s=self.ttl_s)
            elif hold_owner is not None or pod_holds:
                self.assume.reserve(claim, allocation, hold_owner or uid, ttl_s=self.ttl_s)
                held.append(HeldClaim(claim, allocation))
        held += self._cycle_shares(current)
        self.holding()  # forget holds that expired (pods deleted or never bound)
        if held:
            self._add(uid, Hold(best.node, held))
        log.debug("holding %d claim(s) of pod %s on node %s", len(held), pod_key(pod), best.node)
        group_name = group_name_of(pod)
        holder = (f"PodGroup {metadata_of(pod).get('namespace')}/{group_name}"
                  if not pod_holds and group_name is not None else "this pod")
        elsewhere = f"dra-extender holds devices for {holder} on node {best.node}"
        # Only the chosen node passes: the others that fit are resolvable failures saying where the
        # devices are held.
        answered = {
            name: best if name == best.node else verdict if not verdict.fits else NodeVerdict(
                name, fits=False, message=elsewhere, reason=Reason.HELD_ELSEWHERE)
            for name, verdict in verdicts.items()
        }
        return answer(answered, words=words)

    def share(self, uid: str, plan: PodPlan) -> None:
        """The pod passed filter with allocations other pods of its PodGroup's cycle hold: they stay held
        while it uses them too (upstream counts a pending allocation's sharers)."""
        shares = self._cycle_shares(plan)
        if shares:
            self._add(uid, Hold(None, shares))

    def _cycle_shares(self, plan: PodPlan) -> list[HeldClaim]:
        shares = []
        for share in plan.pending:
            entry = self.assume.pending(share.claim.uid)
            if plan.gang is not None and entry is not None and entry.pod_uid == plan.gang:
                self.assume.extend(share.claim.uid, self.ttl_s)
                shares.append(HeldClaim(share.claim, entry.allocation))
        return shares

    def _add(self, uid: str, hold: Hold) -> None:
        self.release(uid)
        self._holds[uid] = hold
        for held in hold.claims:
            self._sharers.setdefault((held.claim.uid, id(held.allocation)), set()).add(uid)

    def release(self, uid: str) -> None:
        """Free the pod's held devices (a new filter for it, a bind elsewhere, the pod deleted), unless
        other pods of its PodGroup still share them."""
        hold = self._holds.pop(uid, None)
        if hold is None:
            return
        for held in hold.claims:
            key = (held.claim.uid, id(held.allocation))
            sharers = self._sharers.get(key)
            if sharers is not None:
                sharers.discard(uid)
                if sharers:
                    continue
                del self._sharers[key]
            self.assume.release(held.claim.uid, allocation=held.allocation)

    def shared_by_others(self, claim_uid: str, allocation: dict, uid: str) -> bool:
        """Do pods other than `uid` hold or share this in-flight allocation?"""
        return bool(self._sharers.get((claim_uid, id(allocation)), set()) - {uid})

    def node_of(self, uid: str) -> str | None:
        hold = self._holds.get(uid)
        return hold.node if hold is not None else None

    def handed_to_bind(self, uid: str) -> None:
        """The bind's own in-flight entries replaced the hold's (bind reserves new allocation objects):
        from now on they are the bind's. Whatever of the hold the bind did not take is freed, unless
        other pods of the PodGroup share it."""
        self.release(uid)

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
            self.release(uid)
        return set(self._holds)
