"""Filter, prioritize, bind and preempt for pods with ResourceClaims: the four verbs of the extender.

This module plays the in-tree DynamicResources plugin's part for kube-scheduler on top of the cluster
cache, the assume cache of allocations in flight and the claim writer. The parts live next door: the
pod's claims (PreEnqueue, PreFilter) in planning.py, node checks (Filter) in nodecheck.py, scores
(Score) in placement.py, the filter-holds mode in holds.py and the answer's words in verdicts.py; here
are the verbs and bind's bookkeeping (Reserve + PreBind).

Two pods must never get the same device. All decisions read the cache's allocated state overlaid with
the in-flight allocations, and bind re-runs the allocation for the chosen node and reserves the
result in the assume cache in one synchronous step (no await in between), so concurrent binds on the
event loop cannot both take the last device.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from operator import attrgetter
from typing import Any, NamedTuple, Protocol

from cachetools import LRUCache
from prometheus_client import CollectorRegistry

from allocator import AllocationError, AllocationTimeout, Allocator, NodeAllocationError, ResourceClaim
from common.claimrefs import WORKLOAD_CLAIMS, group_name_of, known_claim_names, pod_key, pod_uid
from common.objects import metadata_of
from common.rules import DEFAULT_SCORING_POLICY
from extender.plugin.authority import Authority
from extender.plugin.bindchecks import DEFAULT_SCHEDULER, BindChecks, Refusal
from extender.plugin.bindingconditions import (
    DEFAULT_BIND_WAIT_S,
    DEFAULT_BINDING_TIMEOUT_S,
    EVENT_FAILED,
    EVENT_PENDING,
    SETTLED_BADLY,
    BindingPolicy,
    ClaimBinding,
    State,
    release_blocker,
)
from extender.plugin.claimwriter import BindError, ClaimRef, KeepClaims
from extender.plugin.evaluation import SEARCH
from extender.plugin.explanation import EventSink, Explanations
from extender.plugin.extendedresources import Variant, special_claim_owner
from extender.plugin.filtercache import CachedEvaluation, FilterCache
from extender.plugin.holds import FilterHolds
from extender.plugin.metrics import Metrics
from extender.plugin.nodeallocatable import GATE as NODE_ALLOCATABLE_GATE
from extender.plugin.nodeallocatable import STATUS_FIELD, NodeFit, as_fit_units, pod_requests
from extender.plugin.nodecheck import NodeChecker
from extender.plugin.placement import NodeScorer
from extender.plugin.planning import Planner, PodPlan, SchedulingError
from extender.plugin.podgroups import GANG_PREFIX, OWNER_PREFIX, gang_owner, reserved_for_pod
from extender.plugin.requeue import RequeueNudge
from extender.plugin.verdicts import (
    CONFLICT_REASONS,
    FilterResult,
    Reason,
    Words,
    answer,
    blocked,
    fitting_names,
)
from extender.state.assume import AssumeCache
from extender.state.cache import ClusterCache

log = logging.getLogger(__name__)

_REASON_OF = attrgetter("reason")  # verdict -> its Reason, for counting thousands of verdicts per filter
# How long one node's allocation search may run. Searches take well under a millisecond on typical
# nodes; one that runs this long is a combinatorial corner case. A node's search never yields, so this
# also bounds how long it holds the event loop (and every other request) on its own.
DEFAULT_NODE_TIMEOUT_S = 1.0
# How long one filter may spend checking nodes, whatever their number and however many other requests
# run during its yields. kube-scheduler gives up on an extender after httpTimeout (5 s by default, 10 s
# in deploy/). Before our budget starts the request may wait for the event loop, which another
# request's node search can hold for up to DEFAULT_NODE_TIMEOUT_S; 3 s plus that plus parsing and
# encoding stays under even the 5 s default.
DEFAULT_FILTER_TIMEOUT_S = 3.0
# How long a filter hold (--filter-holds-devices) lasts without a bind.
DEFAULT_HOLD_TTL_S = 30.0
# kube-scheduler tries a pod as soon as it is created, a moment before the resourceclaim controller
# creates its template claims; the in-tree plugin's PreEnqueue keeps such a pod out of scheduling until
# they exist. An extender cannot, and a rejection costs the pod kube-scheduler's backoff (median 1.6 s
# on bench/e2e_throughput.py; a third of the steady-state pods). So filter waits up to this long for
# the claims to show up before it answers "not created yet".
DEFAULT_CLAIM_WAIT_S = 0.25
# How long bind waits for a pod the cache does not know yet (see Scheduler._await_pod), looking every
# POD_POLL_S.
BIND_POD_WAIT_S = 1.0
POD_POLL_S = 0.01


class _ClaimWaiter(NamedTuple):
    namespace: str
    changed: asyncio.Event


class _BindWork(NamedTuple):
    """What bind writes, worked out synchronously (Scheduler._reserve_for_bind)."""

    writes: list[ClaimWrite]
    consumers: dict[str, dict]         # by claim UID, the PodGroup to reserve a shared claim for
    extended: Variant | None           # the special claim to create (extended resources)
    footprint: NodeFit | None          # DRANodeAllocatableResources: what the devices add to the pod
    allocated: list[ClaimRef]          # the pod's claims that are allocated already
    # Writes an allocation that other pods of its PodGroup's cycle share: their binds wait for it.
    shared: bool = False


# A claim to write at bind: with the allocation to write, or None for one allocated already (only the
# reservation is added).
ClaimWrite = tuple[ResourceClaim, dict | None]


class BindFailed(Exception):
    """The bind could not be done; the message goes back to kube-scheduler as the bind error."""


class BindWriter(Protocol):
    """What bind needs of the claim writer (extender/plugin/claimwriter.py)."""

    conflicts: int  # write conflicts answered by a fresh read (a metric)

    async def bind(self, pod: dict, node: str, claims: list[ClaimWrite], consumers: Mapping[str, dict], *,
                   extended: Variant | None = None, node_allocatable: Sequence[dict] | None = None,
                   term: int | None = None, binding: bool = True, held: Sequence[str] = (),
                   before_binding: Callable[[Sequence[ClaimRef]], Awaitable[None]] | None = None) -> None: ...

    async def remove_claim(self, namespace: str, name: str, uid: str, *, term: int | None) -> None: ...

    async def clear_node_allocatable(self, namespace: str, name: str, *, term: int | None) -> None: ...

    async def deallocate(self, raw: dict, *, still: Callable[[dict], str | None],
                         term: int | None) -> str | None: ...


class Scheduler:
    def __init__(
        self,
        cache: ClusterCache,
        assume: AssumeCache,
        writer: BindWriter,
        *,
        scoring: str = DEFAULT_SCORING_POLICY,
        hold_devices: bool = False,
        hold_ttl_s: float = DEFAULT_HOLD_TTL_S,
        node_deadline_s: float = DEFAULT_NODE_TIMEOUT_S,
        filter_deadline_s: float = DEFAULT_FILTER_TIMEOUT_S,
        claim_wait_s: float = DEFAULT_CLAIM_WAIT_S,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.monotonic,
        filter_cache: FilterCache | None = None,
        reasons: Words = Words.UPSTREAM,
        explanations: Explanations | None = None,
        requeue: RequeueNudge | None = None,
        scheduler_names: Collection[str] = (DEFAULT_SCHEDULER,),
        authority: Authority | None = None,
        binding_timeout_s: float = DEFAULT_BINDING_TIMEOUT_S,
        bind_wait_s: float = DEFAULT_BIND_WAIT_S,
        wall_clock: Callable[[], float] = time.time,
        events: EventSink | None = None,
    ) -> None:
        self.cache = cache
        # Whether this replica may allocate now (extender/plugin/authority.py): always, unless wiring
        # gives the one its fence and leader election drive.
        self.authority = authority if authority is not None else Authority.always()
        self.assume = assume
        self.writer = writer
        self.hold_devices = hold_devices
        self.node_deadline_s = node_deadline_s
        self.filter_deadline_s = filter_deadline_s
        self.claim_wait_s = claim_wait_s
        self.metrics = metrics if metrics is not None else Metrics.on(CollectorRegistry())
        self.clock = clock
        self.filter_cache = filter_cache
        self.reasons = reasons  # the words of the answers to kube-scheduler (serve's --reasons)
        self.explanations = explanations  # the pod Events of filters that found no node (None: none)
        self.requeue = requeue  # has kube-scheduler retry the pods we rejected when devices appear
        # Device binding conditions: how long a pod may wait for them (--binding-timeout, counted from the
        # claim's allocationTimestamp) and how long one bind call waits (--bind-wait).
        self.binding = BindingPolicy(cache, timeout_s=binding_timeout_s, wall_clock=wall_clock)
        self.bind_wait_s = bind_wait_s
        self.events = events  # pod Events of our own (BindingConditionsPending); None: none
        evaluation = CachedEvaluation(filter_cache) if filter_cache is not None else SEARCH
        self.planner = Planner(cache, assume, node_deadline_s=node_deadline_s, binding=self.binding)
        self.checker = NodeChecker(cache, self.planner, evaluation=evaluation,
                                   node_deadline_s=node_deadline_s, clock=clock)
        self.scorer = NodeScorer(cache, self.planner, evaluation=evaluation, default_policy=scoring)
        self.holds = FilterHolds(assume, planner=self.planner, checker=self.checker, scorer=self.scorer,
                                 ttl_s=hold_ttl_s)
        self.bind_checks = BindChecks(cache, scheduler_names)
        # Pods whose bind is writing. Their in-flight entries belong to that bind: nothing else may
        # replace or release them (the devices would look free while the write may still land).
        self._binding: set[str] = set()
        # "namespace/podgroup" -> done when the bind writing that PodGroup's shared claims ends. Other
        # binds of the group wait for it, then find the claim allocated and reserved for the group.
        self._group_writes: dict[str, asyncio.Future[None]] = {}
        # Filters waiting for a pod's claims to be created (_await_claims), woken by cache changes.
        self._claim_waiters: dict[str, _ClaimWaiter] = {}
        # Binds waiting for device binding conditions: claim key -> the events that wake them, and by pod
        # UID what each waits for (/debug/state).
        self._binding_waiters: dict[str, set[asyncio.Event]] = {}
        self.waiting_binds: dict[str, dict[str, Any]] = {}
        # pod UID -> the allocations it was last announced waiting for (one BindingConditionsPending
        # event per pod and allocation, not per bind call).
        self._announced: LRUCache[str, tuple[tuple[str, str], ...]] = LRUCache(maxsize=10_000)
        cache.subscribe(self._on_change)
        self.bind_attempts = 0
        self.bind_conflicts = 0

    # ---- state for /debug/state and /metrics ----------------------------------------------------

    def describe_state(self) -> dict[str, Any]:
        """The scheduler's part of /debug/state."""
        return {
            "authority": {"term": self.authority.term, "waitingFor": self.authority.reason or None},
            "inFlight": self.assume.describe(),
            "binds": {"attempts": self.bind_attempts, "conflicts": self.bind_conflicts,
                      "conflictRate": self.bind_conflict_rate},
            "filterCache": self.filter_cache.stats() if self.filter_cache else None,
            "explanations": ({"written": self.explanations.written,
                              "rateLimited": self.explanations.rate_limited}
                             if self.explanations is not None else None),
            "requeue": ({"claim": f"{self.requeue.namespace}/{self.requeue.name}",
                         "waitingPods": self.requeue.waiting, "writes": self.requeue.writes,
                         "failures": self.requeue.failures} if self.requeue is not None else None),
            "bindingConditions": {"enabled": self.binding.enabled, "timeoutSeconds": self.binding.timeout_s,
                                  "bindWaitSeconds": self.bind_wait_s,
                                  "bindsWaiting": sorted(self.waiting_binds.values(),
                                                         key=lambda entry: str(entry["pod"]))},
        }

    def in_flight(self) -> list[dict[str, Any]]:
        """The allocations in flight, as /debug/state and the device map show them."""
        return self.assume.describe()

    def gauges(self) -> dict[str, int]:
        """The scheduler's gauges for /metrics."""
        return {"in_flight": len(self.assume), "write_conflicts": self.writer.conflicts,
                "unknown_outcomes": getattr(self.writer, "unknown_outcomes", 0)}

    @property
    def bind_conflict_rate(self) -> float:
        return self.bind_conflicts / self.bind_attempts if self.bind_attempts else 0.0

    def _count_outcome(self, reason: Reason, count: int) -> None:
        if count:
            self.metrics.count_filter_outcome(reason, count)

    def _on_change(self, kind: str, event_type: str, new: dict, old: dict | None) -> None:
        if self._binding_waiters and kind == "ResourceClaim":
            meta = metadata_of(new)
            for changed in self._binding_waiters.get(f"{meta.get('namespace')}/{meta.get('name')}", ()):
                changed.set()
        if self._claim_waiters and kind in ("Pod", "ResourceClaim"):
            namespace = metadata_of(new).get("namespace")
            for waiter in self._claim_waiters.values():
                if waiter.namespace == namespace:
                    waiter.changed.set()
        if kind == "Pod" and event_type == "DELETED" and not self.holds.is_empty():
            self.holds.release(pod_uid(new))  # a deleted pod's held devices are free at once
        elif kind == "PodGroup" and event_type == "DELETED":
            meta = metadata_of(new)
            key = f"{meta.get('namespace')}/{meta.get('name')}"
            if key not in self._group_writes:
                # Nothing of a deleted PodGroup stays in flight: its claim goes with it (the
                # resourceclaim controller deallocates it), no pod of the group may bind any more.
                self.assume.release_owned_by(OWNER_PREFIX + str(meta.get("uid") or ""))
            # And what its pods' filters held for its cycle (a bind's entries are its pod's, not these).
            self.assume.release_owned_by(GANG_PREFIX + key)

    # ---- filter -------------------------------------------------------------------------------

    async def filter(self, pod: dict, node_names: list[str], *,
                     node_objects: Mapping[str, dict] | None = None, brief: bool = False) -> FilterResult:
        """Which of `node_names` the pod fits. `brief` (the answer to kube-scheduler): the failures in
        the words of `reasons` (see verdicts.split); otherwise every node's own reasons."""
        if not self.planner.needs_dra(pod):
            return FilterResult(list(node_names), {}, {})
        words = self.reasons if brief else Words.FULL
        uid = pod_uid(pod)
        # A pod kube-scheduler retries while its earlier bind still writes keeps that bind's entries.
        binding = uid in self._binding
        holding = self.hold_devices and not binding
        if (holding or gang_owner(pod) is not None) and not binding:
            self.holds.release(uid)  # what it held or shared in an earlier cycle of its PodGroup
        deadline = self.clock() + self.filter_deadline_s
        try:
            await self._remove_stale_claim(pod)
            plan = self.planner.plan(pod)
            if plan.claims_missing:
                pod, plan = await self._await_claims(pod, plan, deadline=deadline)
            if plan.bindings:
                settled = await self._settle_bindings(pod, plan)
                if settled is not None:
                    self._count_outcome(Reason.BINDING_FAILED, len(node_names))
                    return settled
            verdicts = await self.checker.check_all(plan, node_names, node_objects=node_objects,
                                                    use_cache=True, deadline=deadline)
            if self._claims_changed(plan):
                # A claim changed while the checks yielded, possibly deleted and created again under
                # the same name: those verdicts may be about a claim that no longer exists. One fresh
                # pass, within what is left of the same budget; a change during that one is left to
                # bind's re-check.
                plan = self.planner.plan(pod)
                verdicts = await self.checker.check_all(plan, node_names, node_objects=node_objects,
                                                        use_cache=True, deadline=deadline)
        except SchedulingError as error:
            self._count_outcome(Reason.ERROR, len(node_names))
            return FilterResult([], {}, {}, str(error))
        passed = fitting_names(verdicts)
        if len(passed) == len(verdicts):  # the usual warm filter: no verdict to read again
            self._count_outcome(Reason.FITS, len(passed))
        else:
            for reason, count in Counter(map(_REASON_OF, verdicts.values())).items():
                self._count_outcome(reason, count)
        self.checker.remember(uid, verdicts)
        if plan.to_allocate and (holding or (plan.allocates_for_group() and not binding)):
            result = self.holds.hold_best(pod, plan=plan, verdicts=verdicts, words=words, pod_holds=holding)
        else:
            self.holds.extend_group_holds(plan)
            result = answer(verdicts, words=words, passed=passed)
            if result.passed and plan.gang is not None and not binding:
                self.holds.share(uid, plan)
        if plan.extended_variant is not None and words != Words.UPSTREAM:
            describe = plan.extended_variant.describe
            result.failed = {node: describe(message) for node, message in result.failed.items()}
            result.unresolvable = {node: describe(message) for node, message in result.unresolvable.items()}
        if brief and not result.passed and self.explanations is not None:
            self.explanations.after_filter(
                pod, verdicts, describe=plan.extended_variant.describe if plan.extended_variant else None)
        if brief and self.requeue is not None:
            if result.passed:
                self.requeue.admitted(pod)
            elif not result.error:  # an Error sends the pod to backoff, not to the unschedulable queue
                self.requeue.rejected(pod)
        return result

    async def _remove_stale_claim(self, pod: dict) -> None:
        """Delete the pod's special claim of an earlier attempt (upstream's PostFilter does), unless a
        bind of the pod is writing it or the pod is bound."""
        stale = self.planner.extended.stale_claim(pod)
        term = self.authority.term
        if (stale is None or term is None or pod_uid(pod) in self._binding
                or (pod.get("spec") or {}).get("nodeName")):
            return
        if self.planner.awaits_binding(stale, pod):
            return  # its devices' binding conditions decide (_settle_bindings)
        log.info("removing extended resource claim %s of an earlier attempt for pod %s", stale.key,
                 pod_key(pod))
        try:
            await self.writer.remove_claim(stale.namespace, stale.name, stale.uid, term=term)
        except BindError as error:
            log.warning("could not remove extended resource claim %s: %s", stale.key, error)

    async def _settle_bindings(self, pod: dict, plan: PodPlan) -> FilterResult | None:
        """Upstream's PostFilter for the pod's allocated claims whose device binding failed or timed out
        (found here when it happened while kube-scheduler held the pod in its backoff): free them and
        answer with an Error naming claim, device and condition, so the pod's condition says why and
        kube-scheduler tries it again after its backoff, on devices allocated afresh. A claim that others
        use cannot be freed: then the pod fits no node ("resourceclaim not available on the node", as
        upstream). None when there is nothing to settle."""
        bad = [binding for binding in plan.bindings if binding.state in SETTLED_BADLY]
        if not bad:
            return None
        message, in_use = await self._free_failed_bindings(pod, bad, self.authority.term)
        if in_use:
            plan.blocked = blocked(message, Reason.BINDING_FAILED)
            return None
        self.metrics.binding_conditions.labels(outcome=str(bad[0].state)).inc()
        return FilterResult([], {}, {}, message)

    async def _free_failed_bindings(self, pod: dict, bad: Sequence[ClaimBinding], term: int | None, *,
                                    statuses_written: bool = False) -> tuple[str, bool]:
        """Deallocate (the pod's special claim: delete) each claim whose binding failed or timed out, as
        upstream does to reschedule the pod, and clear the pod's nodeAllocatableResourceClaimStatuses
        (`statuses_written`: the calling bind wrote them, which the cache may not show yet). Returns what
        happened, for kube-scheduler, and whether a claim could not be freed because others use it."""
        parts, in_use, freed = [], False, False
        workload_claims = self.cache.features.enabled(WORKLOAD_CLAIMS)
        for binding in bad:
            text = binding.describe()
            claim = self.cache.claim_by_uid(binding.uid)
            if claim is None:
                parts.append(f"{text}; the claim is gone")
                continue
            if special_claim_owner(claim.raw) == pod_uid(pod):
                try:
                    await self.writer.remove_claim(claim.namespace, claim.name, claim.uid, term=term)
                except BindError as error:
                    parts.append(f"{text}; deleting the claim failed: {error}")
                else:
                    parts.append(f"{text}; the claim was deleted")
                    freed = True
                continue
            blocker = release_blocker(claim.raw, pod, self.cache, workload_claims=workload_claims)
            if blocker is not None:
                parts.append(f"{text}; the claim is not deallocated: {blocker}")
                in_use = True
                continue

            def still(fresh: dict) -> str | None:
                again = self.binding.of(fresh)
                if again is None or again.state not in SETTLED_BADLY:
                    return "its binding conditions changed meanwhile"
                return release_blocker(fresh, pod, self.cache, workload_claims=workload_claims)

            try:
                why_not = await self.writer.deallocate(claim.raw, still=still, term=term)
            except BindError as error:
                parts.append(f"{text}; deallocating the claim failed: {error}")
                continue
            if why_not is None:
                log.info("pod %s: %s: deallocated the claim to schedule the pod again", pod_key(pod), text)
                parts.append(f"{text}; the claim was deallocated")
                freed = True
            else:
                parts.append(f"{text}; the claim is not deallocated: {why_not}")
        if freed and (statuses_written or self._carries_statuses(pod)):
            await self._clear_node_allocatable(pod, term)
        if not in_use:
            parts.append("the pod is scheduled again")
        message = "; ".join(parts)
        if self.events is not None:
            # kube-scheduler's FailedScheduling events of a pod form one series that keeps its first
            # message (the wait's): this one says what became of it.
            self.events.record(pod, EVENT_FAILED, message, event_type="Warning")
        return message, in_use

    def _carries_statuses(self, pod: dict) -> bool:
        """Does the pod carry nodeAllocatableResourceClaimStatuses (as the cache has it now)?"""
        return (self.cache.features.enabled(NODE_ALLOCATABLE_GATE)
                and bool((self._cached_copy(pod).get("status") or {}).get(STATUS_FIELD)))

    async def _clear_node_allocatable(self, pod: dict, term: int | None) -> None:
        """Upstream's Unreserve after a failed PreBind: the pod's nodeAllocatableResourceClaimStatuses,
        written by its bind, no longer describe its claims once they are freed. A clear that fails is
        made good by the pod's next bind (see _node_allocatable_to_write)."""
        meta = metadata_of(pod)
        try:
            await self.writer.clear_node_allocatable(str(meta.get("namespace")), str(meta.get("name")),
                                                     term=term)
        except BindError as error:
            log.warning("pod %s: could not clear %s: %s", pod_key(pod), STATUS_FIELD, error)

    async def _await_claims(self, pod: dict, plan: PodPlan, *, deadline: float) -> tuple[dict, PodPlan]:
        """Wait up to `claim_wait_s` (and at most half of what is left of the filter's budget) until
        the pod's claims exist: its cached copy gets the generated claim names (the request's copy never
        will) and the claims reach the cache. Planned again after each change of the pod or of a claim
        in its namespace (_on_change wakes the waiter), not on a timer."""
        wait_s = min(self.claim_wait_s, (deadline - self.clock()) / 2)
        loop = asyncio.get_running_loop()
        until = loop.time() + wait_s
        meta = metadata_of(pod)
        waiter = _ClaimWaiter(str(meta.get("namespace") or ""), asyncio.Event())
        key = f"{pod_uid(pod)}/{id(waiter)}"  # several filters of one pod may wait at once
        self._claim_waiters[key] = waiter
        try:
            while plan.claims_missing and loop.time() < until:
                pod = self._cached_copy(pod)
                plan = self.planner.plan(pod)
                if not plan.claims_missing:
                    break
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout_at(until):
                        await waiter.changed.wait()
                waiter.changed.clear()
        finally:
            del self._claim_waiters[key]
        return pod, plan

    def _cached_copy(self, pod: dict) -> dict:
        """The cache's copy of `pod` (the same UID), else `pod`: kube-scheduler's copy can predate the
        claim names the resourceclaim controller wrote into the pod's status."""
        meta = metadata_of(pod)
        current = self.cache.pod(str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        return current if current is not None and pod_uid(current) == pod_uid(pod) else pod

    def _claims_changed(self, plan: PodPlan) -> bool:
        """Is any claim of `plan` no longer the cached one? The cache replaces a claim object on every
        change, so identity tells (a re-created claim has a new object and a new UID)."""
        cache = self.cache
        return any(cache.claim(entry.claim.namespace, entry.claim.name) is not entry.claim
                   for entry in plan.claims)

    # ---- prioritize ---------------------------------------------------------------------------

    async def prioritize(self, pod: dict, node_names: list[str], *,
                         node_objects: Mapping[str, dict] | None = None) -> dict[str, int]:
        if not self.planner.needs_dra(pod):
            return dict.fromkeys(node_names, 0)
        try:
            plan = self.planner.plan(pod)
            if plan.claims_missing:  # as filter found them: from the cached copy, placement included
                pod = self._cached_copy(pod)
                plan = self.planner.plan(pod)
            uid = pod_uid(pod)
            fitting = self.checker.fitting_from_filter(plan, uid, node_names)
            if fitting is None:
                checked = await self.checker.check_all(plan, node_names, node_objects=node_objects,
                                                       use_cache=True, reuse_for=uid,
                                                       deadline=self.clock() + self.filter_deadline_s)
                fitting = [verdict for verdict in checked.values() if verdict.fits]
        except SchedulingError:
            return dict.fromkeys(node_names, 0)
        scores = self.scorer.scores(pod, fitting=fitting, plan=plan)
        if len(scores) == len(node_names):
            # Every name fits, once each (kube-scheduler sends the nodes filter passed): scores has them
            # all, in order, already.
            return scores
        return {name: scores.get(name, 0) for name in node_names}

    # ---- bind ---------------------------------------------------------------------------------

    async def bind(self, namespace: str, name: str, *, uid: str, node_name: str) -> None:
        """Allocate (re-checked against current state), reserve and bind. Raises BindFailed."""
        pod = self.cache.pod(namespace, name) or await self._await_pod(namespace, name, uid=uid)
        # Waits before the checks below: from them to `_binding.add` nothing may await, or a retried
        # request for the same pod would pass them too and bind it a second time.
        if pod is not None:
            pod = await self._await_claim_names(pod)
        if pod is not None and await self._await_group_writes(pod):
            pod = self.cache.pod(namespace, name)
        pod = self._admitted(pod, namespace, name, uid=uid, node_name=node_name)
        uid = pod_uid(pod)
        if uid in self._binding:
            # kube-scheduler gave up on the earlier bind and retried; that bind still writes.
            raise BindFailed(f"pod {pod_key(pod)} is already being bound by an earlier request")
        term = self.authority.term
        if term is None:
            raise BindFailed(f"pod {pod_key(pod)}: dra-extender may not bind now: {self.authority.reason}")
        self.bind_attempts += 1
        await self._write(pod, node_name, term=term, binding=True)

    async def repair(self, pod: dict, *, term: int) -> None:
        """Allocate and reserve, on the node it is bound to, the claims of a pod that is bound without
        them (whoever bound it): the kubelet would never start it. Raises BindFailed when that cannot
        be done (the devices are taken, the node is gone, ...)."""
        node_name = str((pod.get("spec") or {}).get("nodeName") or "")
        uid = pod_uid(pod)
        if not node_name or uid in self._binding:
            raise BindFailed(f"pod {pod_key(pod)} is not bound, or is being bound now")
        await self._await_group_writes(pod)
        if uid in self._binding:
            raise BindFailed(f"pod {pod_key(pod)} is being bound now")
        await self._write(pod, node_name, term=term, binding=False)

    async def _write(self, pod: dict, node_name: str, *, term: int, binding: bool) -> None:
        """Reserve in the assume cache and write (with the Binding when `binding`)."""
        uid = pod_uid(pod)
        work = (self._reserve_for_bind(pod, node_name) if self.planner.needs_dra(pod)
                else _BindWork([], {}, None, None, []))
        writes, consumers, extended, footprint = work.writes, work.consumers, work.extended, work.footprint
        self.holds.handed_to_bind(uid)
        self._binding.add(uid)
        group_write = self._start_group_write(pod) if consumers or work.shared else None

        node_allocatable = self._node_allocatable_to_write(pod, footprint)

        async def binding_conditions(written: Sequence[ClaimRef]) -> None:
            await self._await_binding_conditions(pod, node_name, [*work.allocated, *written], term=term,
                                                 statuses_written=bool(node_allocatable))

        written_uids = {claim.uid for claim, _ in writes}
        try:
            await self.writer.bind(pod, node_name, writes, consumers, extended=extended,
                                   node_allocatable=node_allocatable,
                                   term=term, binding=binding,
                                   held=[ref.uid for ref in work.allocated if ref.uid not in written_uids],
                                   before_binding=binding_conditions if self.binding.enabled else None)
        except BaseException as error:
            unsettled = error.unsettled if isinstance(error, BindError) else {}
            created = error.created if isinstance(error, BindError) else {}
            for claim, allocation in writes:
                if allocation is None:
                    continue
                self.assume.release(claim.uid)
                # The special claim's write went to the claim the bind created: watch events name that one.
                claim = created.get(claim.uid, claim)
                pending_at = unsettled.get(claim.uid)
                cached = self.cache.claim_by_uid(claim.uid)
                if pending_at is not None and _may_still_apply(cached, pending_at):
                    # The API server may still apply this allocation (the cache does not know): keep
                    # counting its devices until the cache shows the claim allocated, gone or at another
                    # version (extender/plugin/fence.py fences it off if nothing else changes it).
                    # Owned by no pod, so no bind (not even this pod's retry) re-allocates the claim
                    # meanwhile: it is "in the process of being allocated".
                    self.assume.reserve(claim, allocation, f"unsettled:{uid}", pending_at=pending_at)
            if not isinstance(error, BindError):
                raise
            if not error.kept:  # waiting for binding conditions, or freed after they failed: counted there
                self.metrics.bind_failures.labels(stage="write").inc()
            raise BindFailed(str(error)) from None
        finally:
            self._binding.discard(uid)
            if group_write is not None:
                self._group_writes.pop(group_write).set_result(None)
        usage = self.checker.node_usage
        if usage is not None and binding:  # kube-scheduler counts the pod on the node from now on: so do we
            requests = footprint.requests if footprint is not None else as_fit_units(pod_requests(pod, ()))
            usage.assume(uid, node_name, requests)
        if extended is not None and extended.claim is not None:
            # The created claim, allocated, is in the cache now (the writer stores what it wrote): the
            # in-memory claim's entry, under a UID no watch event will ever confirm, has done its job.
            self.assume.release(extended.claim.uid)

    def _node_allocatable_to_write(self, pod: dict, footprint: NodeFit | None) -> list[dict] | None:
        """The pod's nodeAllocatableResourceClaimStatuses for bind to write: the footprint's, or an empty
        list when it has none and the pod still carries some (of claims freed since, whose clearing was
        lost); None: nothing to write."""
        statuses = list(footprint.statuses) if footprint is not None else []
        if statuses:
            return statuses
        return [] if self._carries_statuses(pod) else None

    def _admitted(self, pod: dict | None, namespace: str, name: str, *, uid: str, node_name: str) -> dict:
        """`pod`, when kube-scheduler could have asked to bind it to `node_name`; otherwise BindFailed,
        counted by reason (extender.plugin.bindchecks)."""
        if pod is None:
            refusal = Refusal("unknown-pod", f"pod {namespace}/{name} is not known to dra-extender")
        else:
            found = self.bind_checks.refusal(pod, uid=uid, node_name=node_name)
            if found is None:
                return pod
            refusal = found
        self.metrics.bind_refusals.labels(reason=refusal.reason).inc()
        raise BindFailed(refusal.message)

    async def _await_pod(self, namespace: str, name: str, *, uid: str) -> dict | None:
        """The pod from the cache, polled for up to BIND_POD_WAIT_S: kube-scheduler may bind a pod that
        our watch has not delivered yet. A pod with claims rarely gets here (filter waited for its
        claims, and so for its cached copy), one asking only for extended resources often does, and a
        refused bind costs it kube-scheduler's backoff (seconds)."""
        for _ in range(round(BIND_POD_WAIT_S / POD_POLL_S)):
            await asyncio.sleep(POD_POLL_S)
            pod = self.cache.pod(namespace, name)
            if pod is not None and (not uid or pod_uid(pod) == uid):
                return pod
        return None

    async def _await_claim_names(self, pod: dict) -> dict:
        """The cached pod once it names its generated claims, waiting as filter does (`claim_wait_s`).

        Filter saw kube-scheduler's copy of the pod, which can be ahead of ours: when bind comes, the
        claim names the resourceclaim controller wrote into the pod's status may not have reached our
        watch yet. Refusing then would cost the pod kube-scheduler's backoff (a second or more) for a
        bind filter allowed."""
        if not self.planner.needs_dra(pod):
            return pod
        plan = self.planner.plan(pod)
        if plan.claims_missing:
            pod, _ = await self._await_claims(pod, plan, deadline=self.clock() + 2 * self.claim_wait_s)
        return pod

    async def _await_group_writes(self, pod: dict) -> bool:
        """Wait while another bind writes the shared claims of this pod's PodGroup, or an allocation
        shared in its scheduling cycle; whether it waited."""
        if group_name_of(pod) is None:
            return False
        key = f"{(pod.get('metadata') or {}).get('namespace')}/{group_name_of(pod)}"
        waited = False
        while key in self._group_writes:
            waited = True
            await asyncio.shield(self._group_writes[key])
        return waited

    def _start_group_write(self, pod: dict) -> str:
        key = f"{(pod.get('metadata') or {}).get('namespace')}/{group_name_of(pod)}"
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._group_writes[key] = done
        return key

    def _reserve_for_bind(self, pod: dict, node_name: str) -> _BindWork:
        """Synchronous: re-check and reserve with no await in between (atomic on the event loop)."""
        uid = pod_uid(pod)
        held_on = self.holds.node_of(uid)
        if held_on is not None and held_on != node_name:
            self.holds.release(uid)
        try:
            plan = self.planner.on(self.planner.plan(pod, rebinding=True), node_name)
            verdict = self.checker.check(plan, node_name, use_cache=False)
        except SchedulingError as error:
            self.holds.release(uid)
            raise BindFailed(f"pod {pod_key(pod)}: {error}") from None
        if not verdict.fits:
            self.holds.release(uid)
            # A conflict: another allocation took what filter offered (not, say, a deleted class).
            conflict = verdict.reason in CONFLICT_REASONS
            self.bind_conflicts += conflict
            if conflict:
                self.metrics.bind_conflicts.inc()
            self.metrics.bind_failures.labels(stage="recheck").inc()
            message = verdict.message
            if plan.extended_variant is not None:
                message = plan.extended_variant.describe(message)
            raise BindFailed(f"pod {pod_key(pod)} no longer fits node {node_name}: {message}")
        workload_claims = self.cache.features.enabled(WORKLOAD_CLAIMS)
        writes: list[ClaimWrite] = [
            (claim, None) for claim in plan.allocated
            if not reserved_for_pod(claim.raw, pod, accept_group=workload_claims)
        ]
        allocations = verdict.outcome.allocations if verdict.outcome is not None else []
        for claim, allocation in zip(plan.to_allocate, allocations, strict=True):
            self.assume.reserve(claim, allocation, plan.group_owner(claim) or uid)
            writes.append((claim, allocation))
        shared = False
        for share in plan.pending:
            # Held in the PodGroup's cycle (by this pod or another): the first bind writes that very
            # allocation, the node checked above, as upstream's PreBind does. From now on the entry is
            # this bind's: a new object, so that the holds of the other pods sharing it leave it alone.
            shared = shared or self.holds.shared_by_others(share.claim.uid, share.allocation, uid)
            allocation = dict(share.allocation)
            self.assume.release(share.claim.uid)
            self.assume.reserve(share.claim, allocation, uid)
            writes.append((share.claim, allocation))
        consumers = {claim.uid: plan.group.reference() for claim, _ in writes
                     if plan.group is not None and plan.group_owner(claim) is not None}
        extended = plan.extended_variant
        node = self.cache.node(node_name)
        footprint = self.checker.node_fit(plan, node, verdict) if node is not None else None
        return _BindWork(writes, consumers,
                         extended if extended is not None and extended.claim is not None else None,
                         footprint, [ClaimRef(claim.key, claim.uid) for claim in plan.allocated], shared)

    async def _await_binding_conditions(self, pod: dict, node_name: str, refs: Sequence[ClaimRef], *,
                                        term: int, statuses_written: bool = False) -> None:
        """Upstream's PreBind wait for device binding conditions, for at most `bind_wait_s` of this call.

        Every condition True: return (the pod is bound). A failure condition True, or the binding
        timeout passed: the claims are freed and KeepClaims says so. Otherwise, once this call's wait is
        over, KeepClaims says what is still awaited: kube-scheduler records it in the pod's condition
        and retries the pod after its backoff, while the claims stay allocated and reserved for it; a
        later call (of this process or another, after a restart or a change of leader) decides again
        from the claims alone. A claim gone (or replaced), being deleted, no longer allocated or no longer
        reserved for the pod ends the wait with BindError (what the bind wrote is undone): upstream never
        binds then either. Wakes on every change of one of the claims and at the binding timeout."""
        refs = list(dict.fromkeys(refs))
        keys = [ref.key for ref in refs]
        until = self.clock() + self.bind_wait_s
        uid = pod_uid(pod)
        changed = asyncio.Event()
        for key in keys:
            self._binding_waiters.setdefault(key, set()).add(changed)
        try:
            while True:
                changed.clear()
                bindings = self.binding.of_all(self._claims_to_bind(pod, refs))
                if all(binding.state == State.READY for binding in bindings):
                    if bindings:
                        self.metrics.binding_conditions.labels(outcome=str(State.READY)).inc()
                    return
                bad = [binding for binding in bindings if binding.state in SETTLED_BADLY]
                if bad:
                    self.metrics.binding_conditions.labels(outcome=str(bad[0].state)).inc()
                    message, _ = await self._free_failed_bindings(pod, bad, term,
                                                                  statuses_written=statuses_written)
                    raise KeepClaims(message)
                pending = [binding for binding in bindings if binding.state == State.PENDING]
                self.waiting_binds[uid] = {"pod": pod_key(pod), "node": node_name,
                                           "claims": [binding.to_dict() for binding in pending]}
                self._announce_waiting(pod, node_name, pending)
                left = until - self.clock()
                if left <= 0 or not self.authority.holds(term):
                    self.metrics.binding_conditions.labels(outcome="waiting").inc()
                    raise KeepClaims(
                        "; ".join(binding.describe() for binding in pending)
                        + "; the claims stay allocated and reserved for the pod, kube-scheduler tries again")
                deadlines = [binding.deadline for binding in pending if binding.deadline is not None]
                if deadlines:  # wake just after the earliest binding timeout
                    left = min(left, max(0.0, min(deadlines) - self.binding.wall_clock()) + 0.05)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(left):
                        await changed.wait()
        finally:
            self.waiting_binds.pop(uid, None)
            for key in keys:
                waiters = self._binding_waiters.get(key)
                if waiters is not None:
                    waiters.discard(changed)
                    if not waiters:
                        del self._binding_waiters[key]

    def _claims_to_bind(self, pod: dict, refs: Sequence[ClaimRef]) -> list[ResourceClaim]:
        """The claims `refs` names from the cache; BindError when one is not there for the pod any more."""
        accept_group = self.cache.features.enabled(WORKLOAD_CLAIMS)
        claims = []
        for ref in refs:
            claim = self.cache.claim(*ref.key.split("/", 1))
            if claim is None or claim.uid != ref.uid:
                problem = "was deleted"
            elif claim.deleting:
                problem = "is being deleted"
            elif claim.allocation is None:
                problem = "is not allocated any more"
            elif not reserved_for_pod(claim.raw, pod, accept_group=accept_group):
                problem = "is not reserved for the pod any more"
            else:
                claims.append(claim)
                continue
            raise BindError(f"ResourceClaim {ref.key} {problem} while the pod waited for device binding "
                            "conditions")
        return claims

    def _announce_waiting(self, pod: dict, node_name: str, pending: Sequence[ClaimBinding]) -> None:
        """Upstream's Normal event BindingConditionsPending, once per pod and allocation (not per call)."""
        signature = tuple((binding.uid, str(binding.allocated_at)) for binding in pending)
        uid = pod_uid(pod)
        if self.events is None or self._announced.get(uid) == signature:
            return
        self._announced[uid] = signature
        self.events.record(pod, EVENT_PENDING,
                           f"waiting for binding conditions for device on node {node_name}: "
                           + "; ".join(binding.describe() for binding in pending))

    # ---- preempt ------------------------------------------------------------------------------

    async def preempt(self, pod: dict, victims: Mapping[str, dict]) -> dict[str, dict]:
        """Keep candidates where the pod fits now, or where evicting victims could free devices (or,
        with DRANodeAllocatableResources, the cpu or memory its devices add to its requests).

        kube-scheduler's dry run ignores extender filters, so candidates may come with empty victim
        lists; those are kept only if the pod already fits there. Candidates can be hundreds of
        nodes: they are checked like filter's (cached outcomes, yielding to other requests).
        """
        if not self.planner.needs_dra(pod):
            return dict(victims)
        deadline = self.clock() + self.filter_deadline_s
        try:
            plan = self.planner.plan(pod)
            verdicts = await self.checker.check_all(plan, victims, use_cache=True, deadline=deadline)
        except SchedulingError:
            return {}
        kept = {}
        for node, node_victims in victims.items():
            verdict = verdicts[node]
            if verdict.reason == Reason.NODE_ALLOCATABLE and not verdict.unresolvable:
                # The node lacks cpu or memory for the pod's devices: do the victims free enough?
                evicting = frozenset(str(victim.get("UID")) for victim in node_victims.get("Pods") or ())
                try:
                    verdict = self.checker.check(plan, node, use_cache=True, evicting=evicting)
                except SchedulingError:
                    continue
            # A node whose check timed out is not known to help: evicting pods there could be for nothing.
            if verdict.fits or (not verdict.unresolvable and not verdict.timed_out
                                and await self._eviction_frees_enough(plan, node, node_victims=node_victims,
                                                                     deadline=deadline)):
                kept[node] = node_victims
        return kept

    async def _eviction_frees_enough(self, plan: PodPlan, node_name: str, *, node_victims: dict,
                                     deadline: float) -> bool:
        """Would the pod fit `node_name` once the victims are gone? Only claims whose every consumer is a
        victim (a known pod) lose their devices; victims holding none of those count for nothing."""
        victim_uids = {str(victim.get("UID")) for victim in node_victims.get("Pods") or ()}
        freed = self._claims_freed_by(victim_uids)
        node = self.cache.node(node_name)
        time_left = deadline - self.clock()
        to_allocate = self.planner.on(plan, node_name).to_allocate  # a device plugin's node: its own
        if not freed or node is None or not to_allocate or time_left <= 0:
            return False
        view = self.planner.allocated_view().without(freed)
        allocator = Allocator(self.cache.inventory, view, self.cache.features,
                              deadline_s=min(self.node_deadline_s, time_left))
        try:
            fits = allocator.allocate(node, to_allocate).success
        except (AllocationTimeout, NodeAllocationError, AllocationError):
            fits = False
        await asyncio.sleep(0)  # one search per candidate: let other requests in between
        return fits

    def _claims_freed_by(self, victim_uids: set[str]) -> set[str]:
        """UIDs of the allocated claims of the victim pods that only victims use."""
        freed = set()
        for uid in victim_uids:
            victim = self.cache.pod_by_uid(uid)
            if victim is None:
                continue
            namespace = str(metadata_of(victim).get("namespace") or "")
            for name in known_claim_names(victim):
                claim = self.cache.claim(namespace, name)
                if claim is None or claim.allocation is None:
                    continue
                if set(claim.reserved_uids) <= victim_uids:
                    freed.add(claim.uid or claim.key)
        return freed


def _may_still_apply(cached: ResourceClaim | None, pending_at: str) -> bool:
    """Can a write sent at resourceVersion `pending_at` still apply, as far as the cache knows? Not once
    the cache holds the claim allocated or at a later version (versions only grow)."""
    if cached is None:
        return True
    if cached.allocation is not None:
        return False
    version = cached.resource_version or None
    try:
        return version is None or int(version) <= int(pending_at)
    except (TypeError, ValueError):
        return version == pending_at
