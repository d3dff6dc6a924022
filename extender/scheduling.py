"""Filter, prioritize, bind and preempt for pods with ResourceClaims.

This module plays the in-tree DynamicResources plugin's part for kube-scheduler (PreEnqueue and
PreFilter checks per pod, Filter per node, Score, and Reserve + PreBind at bind time) on top of the
cluster cache, the assume cache of allocations in flight and the claim writer.

Two pods must never get the same device. All decisions read the cache's allocated state overlaid with
the in-flight allocations, and bind re-runs the allocation for the chosen node and reserves the
result in the assume cache in one synchronous step (no await in between), so concurrent binds on the
event loop cannot both take the last device.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from cachetools import TTLCache

from allocator import (
    AllocatedState,
    AllocationError,
    AllocationOutcome,
    Allocator,
    InvalidObjectError,
    Node,
    NodeAllocationError,
    ResourceClaim,
    node_matches_selector,
)
from allocator.errors import AllocationTimeout
from extender.assume import AssumeCache
from extender.cache import ClusterCache, claim_names_of_pod
from extender.claimwriter import BindError, ClaimWriter
from extender.extendedresources import ExtendedPlan, ExtendedResources, Variant
from extender.filtercache import ClaimRefs, ClaimsSignature, FilterCache, renames
from extender.metrics import Metrics
from extender.podclaims import (
    RESERVED_FOR_MAX,
    ClaimNotCreated,
    ClaimsNotReady,
    InvalidPodError,
    PodClaim,
    group_name_of,
    has_claims,
    pod_key,
    pod_uid,
    resolve_pod_claims,
)
from extender.podgroups import (
    OWNER_PREFIX,
    WORKLOAD_CLAIMS,
    GroupBinding,
    group_binding,
    outsider_problem,
    reservable,
    reserved_for_pod,
)
from extender.scoring import NodeFit, node_scores, policy_for, rank_points

log = logging.getLogger(__name__)

# Rejections that evicting pods could undo: kube-scheduler may try preemption for these nodes.
PREEMPTION_MAY_HELP = frozenset({"in use", "counters", "capacity"})
# Re-check verdicts at bind that mean another pod got there first.
CONFLICT_REASONS = frozenset({"devices", "claim in flight", "claim in use", "claim on other node"})
# How long one filter may run on the event loop before it lets other requests in.
YIELD_AFTER_S = 0.005
# Nodes looked up in the filter cache in one go (well under YIELD_AFTER_S of work), before searching
# the misses one by one.
HIT_BATCH = 512
# How long, and for how many pods, prioritize may reuse the verdicts of the same pod's filter.
# kube-scheduler calls prioritize right after filter, so a few pods suffice (each entry holds a
# verdict per node).
RESULT_TTL_S = 30.0
RESULT_PODS = 64
# How long devices stay in flight after a bind whose writes may have reached the API server but could
# not be confirmed or undone: the watch normally shows the claim long before; this only bounds how
# long devices stay blocked if the write never happened. Longer than the API server's own request
# timeout (60 s by default), after which a late write can no longer be applied.
UNSETTLED_TTL_S = 120.0
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
TIMEOUT = "timeout"  # NodeVerdict.reason of a node whose search did not finish in time
# Upstream's plugin's words for a node without devices for the pod; ours too where another node fits
# (see _split), or where no reason could be given.
CANNOT_ALLOCATE = "cannot allocate all claims"
UNKNOWN_NODE = "node not known to dra-extender"
NAMED_UNKNOWN_NODES = 100
TIMED_OUT_MESSAGE = "timed out trying to allocate devices"
# kube-scheduler tries a pod as soon as it is created, a moment before the resourceclaim controller
# creates its template claims; the in-tree plugin's PreEnqueue keeps such a pod out of scheduling until
# they exist. An extender cannot, and a rejection costs the pod kube-scheduler's backoff (median 1.6 s
# on bench/e2e_throughput.py; a third of the steady-state pods). So filter waits up to this long for
# the claims to show up before it answers "not created yet".
DEFAULT_CLAIM_WAIT_S = 0.25
CLAIM_POLL_S = 0.01
# How long bind waits for a pod the cache does not know yet (see Scheduler._await_pod).
BIND_POD_WAIT_S = 1.0
# Memoised node fits for scoring (see Scheduler._placed_fit): a few entries per node and claim shape.
MAX_FIT_MEMO = 20_000


class SchedulingError(Exception):
    """A real error (invalid claim, CEL runtime error): kube-scheduler retries the pod."""


class BindFailed(Exception):
    """The bind could not be done; the message goes back to kube-scheduler as the bind error."""


class NodeVerdict:
    """Whether the pod fits one node, and why not.

    A failure the filter cache carried over from other claims with the same specs is renamed (message
    and outcome) only when read: a filter where another node fits never reads it (see _split)."""

    __slots__ = ("_carried", "_message", "_outcome", "fits", "node", "reason", "unresolvable")

    def __init__(self, node: str, fits: bool, message: str = "", unresolvable: bool = False,
                 reason: str = "fits", outcome: AllocationOutcome | None = None, *,
                 carried: tuple[AllocationOutcome, ClaimRefs, ClaimRefs] | None = None) -> None:
        self.node = node
        self.fits = fits
        self._message = message
        self.unresolvable = unresolvable
        self.reason = reason  # metric label
        self._outcome = outcome
        self._carried = carried  # (outcome, the claims it names, the claims to name instead)

    def _rename(self) -> None:
        assert self._carried is not None
        outcome, old, new = self._carried
        renamed = outcome.for_claims(renames(old, new))
        assert renamed is not None, "the filter cache only carries over failures that can be renamed"
        self._outcome, self._message, self._carried = renamed, _failure_message(renamed), None

    @property
    def message(self) -> str:
        if self._carried is not None:
            self._rename()
        return self._message

    @property
    def outcome(self) -> AllocationOutcome | None:
        if self._carried is not None:
            self._rename()
        return self._outcome

    @property
    def timed_out(self) -> bool:
        """Not known whether the pod fits: the search ran out of time."""
        return self.reason == TIMEOUT

    def __repr__(self) -> str:
        return (f"NodeVerdict({self.node!r}, fits={self.fits}, reason={self.reason!r}, "
                f"message={self.message!r})")


@dataclass
class PodPlan:
    """Everything about one pod that does not depend on the node."""

    pod: dict
    claims: list[PodClaim] = field(default_factory=list)
    to_allocate: list[ResourceClaim] = field(default_factory=list)
    allocated: list[ResourceClaim] = field(default_factory=list)  # allocated, still to check per node
    # A PodGroup's claims whose allocation another pod of the group has in flight: shared, not
    # allocated again (upstream's fix for gang cycles, kubernetes#137617); checked per node like
    # allocated claims.
    pending: list[tuple[ResourceClaim, dict]] = field(default_factory=list)
    group: GroupBinding | None = None  # the pod's PodGroup, when some of its claims are the group's
    blocked: NodeVerdict | None = None  # a verdict for every node (claims not ready, ...)
    claims_missing: bool = False  # blocked because a claim does not exist (yet)
    # Built on first use by Scheduler.plan_allocator: most filters are answered from the filter cache
    # and never need them.
    allocator: Allocator | None = None
    view: AllocatedState | None = None
    rebinding_uid: str | None = None  # at bind: the pod whose own in-flight entries the view leaves out
    rebinding_group: str | None = None  # ... and the PodGroup owner key whose entries it leaves out
    # FilterCache key part for the claims to allocate, and the cache epoch when the plan was made (the
    # view, made later, reads through to the allocated state, which has not changed while the epoch has
    # not moved).
    signature: ClaimsSignature | None = None
    cache_epoch: int = -1
    # Extended resources backed by DRA (extendedresources.py): the pod's mapped resources, and the
    # special claim variant in to_allocate (the one for nodes without a device plugin for them, or the
    # node's own in a plan made by plan_for_node).
    extended: ExtendedPlan | None = None
    extended_variant: Variant | None = None
    variant_plans: dict[tuple[str, ...], PodPlan] = field(default_factory=dict)


@dataclass
class FilterResult:
    passed: list[str]
    failed: dict[str, str]
    unresolvable: dict[str, str]
    error: str = ""


def _blocked(message: str, reason: str, unresolvable: bool = True) -> NodeVerdict:
    return NodeVerdict("", False, message, unresolvable, reason)


def _timed_out(node_name: str) -> NodeVerdict:
    # Resolvable: a timeout says nothing about the node, a later attempt may find the pod fits there.
    return NodeVerdict(node_name, False, TIMED_OUT_MESSAGE, False, TIMEOUT)


def allocated_devices(outcome: AllocationOutcome | None) -> int:
    if outcome is None:
        return 0
    return sum(len((a.get("devices") or {}).get("results") or []) for a in outcome.allocations)


class Scheduler:
    def __init__(
        self,
        cache: ClusterCache,
        assume: AssumeCache,
        writer: ClaimWriter,
        *,
        scoring: str = "binpack",
        hold_devices: bool = False,
        hold_ttl_s: float = 30.0,
        node_deadline_s: float = DEFAULT_NODE_TIMEOUT_S,
        filter_deadline_s: float = DEFAULT_FILTER_TIMEOUT_S,
        claim_wait_s: float = DEFAULT_CLAIM_WAIT_S,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.monotonic,
        filter_cache: FilterCache | None = None,
    ) -> None:
        self.cache = cache
        self.assume = assume
        self.writer = writer
        self.scoring = scoring
        self.hold_devices = hold_devices
        self.hold_ttl_s = hold_ttl_s
        self.node_deadline_s = node_deadline_s
        self.filter_deadline_s = filter_deadline_s
        self.claim_wait_s = claim_wait_s
        self.metrics = metrics
        self.clock = clock
        self.filter_cache = filter_cache
        self.extended = ExtendedResources(cache)
        # pod uid -> (node, [(claim, allocation)]) in --filter-holds-devices mode.
        self._holds: dict[str, tuple[str, list[tuple[ResourceClaim, dict]]]] = {}
        self._results: TTLCache[str, dict[str, NodeVerdict]] = TTLCache(maxsize=RESULT_PODS, ttl=RESULT_TTL_S)
        self._fit_memo: dict[tuple, tuple[AllocationOutcome, NodeFit]] = {}
        # Pods whose bind is writing. Their in-flight entries belong to that bind: nothing else may
        # replace or release them (the devices would look free while the write may still land).
        self._binding: set[str] = set()
        # "namespace/podgroup" -> done when the bind writing that PodGroup's shared claims ends. Other
        # binds of the group wait for it, then find the claim allocated and reserved for the group.
        self._group_writes: dict[str, asyncio.Future[None]] = {}
        cache.subscribe(self._on_change)
        self.bind_attempts = 0
        self.bind_conflicts = 0

    # ---- per pod ------------------------------------------------------------------------------

    def lookup_claim(self, namespace: str, name: str) -> ResourceClaim | None:
        claim = self.cache.claim(namespace, name)
        if claim is None:
            raw = self.cache.raw("ResourceClaim", f"{namespace}/{name}")
            if raw is not None:
                try:
                    ResourceClaim.from_api(raw)
                except InvalidObjectError as error:
                    raise SchedulingError(f"invalid claim: {error}") from None
        return claim

    def _class_problem(self, claim: ResourceClaim) -> NodeVerdict | None:
        for request in claim.requests:
            if request.exactly is not None:
                name = request.exactly.device_class_name
                if self.cache.device_class(name) is None:
                    return _blocked(f"request {request.name}: device class {name} does not exist",
                                    "class missing", unresolvable=False)
                continue
            if not self.cache.features.enabled("DRAPrioritizedList"):
                return _blocked(
                    f"resource claim {claim.key}, request {request.name}: has subrequests, but the "
                    "DRAPrioritizedList feature is disabled", "feature disabled")
            for sub in request.first_available:
                if self.cache.device_class(sub.device_class_name) is None:
                    return _blocked(
                        f"request {request.name}/{sub.name}: device class {sub.device_class_name} "
                        "does not exist",
                        "class missing", unresolvable=False)
        return None

    def plan(self, pod: dict, *, rebinding: bool = False) -> PodPlan:
        """Resolve and pre-check the pod's claims. Raises SchedulingError for real errors."""
        plan = PodPlan(pod)
        uid = pod_uid(pod)
        workload_claims = self.cache.features.enabled(WORKLOAD_CLAIMS)
        try:
            plan.claims = resolve_pod_claims(pod, _ClaimLookup(self), accept_group_owner=workload_claims)
            if workload_claims and plan.claims:
                plan.group = group_binding(pod, self.cache)
        except ClaimsNotReady as not_ready:
            plan.blocked = _blocked(str(not_ready), "claims not ready")
            plan.claims_missing = isinstance(not_ready, ClaimNotCreated)
            return plan
        except InvalidPodError as invalid:
            raise SchedulingError(str(invalid)) from None
        seen: set[str] = set()
        for entry in plan.claims:
            claim = entry.claim
            if claim.uid in seen:  # the same claim referenced twice by the pod
                continue
            seen.add(claim.uid)
            shared = plan.group is not None and entry.pod_claim_name in plan.group.pod_claim_names
            group = plan.group if shared else None
            if workload_claims:
                problem = outsider_problem(claim, pod, plan.group, entry.pod_claim_name)
                if problem is not None:
                    plan.blocked = _blocked(problem, "claim of a PodGroup")
                    return plan
            if claim.allocation is not None:
                consumer_uid = group.uid if group is not None else uid
                if not reservable(claim.raw, pod, consumer_uid, workload_claims, RESERVED_FOR_MAX):
                    plan.blocked = _blocked("resourceclaim in use", "claim in use")
                    return plan
                plan.allocated.append(claim)
                continue
            in_flight = self.assume.pending(claim.uid)
            if in_flight is not None and in_flight.pod_uid != (group.owner if group is not None else uid):
                plan.blocked = _blocked(f"resource claim {claim.key} is in the process of being allocated",
                                        "claim in flight")
                return plan
            if in_flight is not None and group is not None and not rebinding:
                plan.pending.append((claim, in_flight.allocation))
                continue
            problem = self._class_problem(claim)
            if problem is not None:
                plan.blocked = problem
                return plan
            plan.to_allocate.append(claim)
        self._plan_extended(plan)
        if plan.blocked is not None:
            return plan
        if plan.to_allocate:
            if self.filter_cache is not None and not rebinding:
                self.filter_cache.sync_in_flight()
                plan.signature = self.filter_cache.claims_signature(plan.to_allocate)
                plan.cache_epoch = self.filter_cache.epoch
            plan.rebinding_uid = uid if rebinding else None
            plan.rebinding_group = plan.group.owner if rebinding and plan.group is not None else None
        return plan

    def needs_dra(self, pod: dict) -> bool:
        """Does the pod use claims or extended resources that a DeviceClass maps?"""
        return has_claims(pod) or self.extended.requested(pod)

    def _plan_extended(self, plan: PodPlan) -> None:
        """Add the pod's special claim (extended resources backed by DRA) to the claims to allocate."""
        extended = self.extended.plan(plan.pod)
        if extended is None:
            return
        stale = extended.stale
        if stale is not None:
            if (plan.pod.get("spec") or {}).get("nodeName") and stale.allocation is not None:
                plan.allocated.append(stale)  # a bound pod: its special claim is in place
                return
            # Upstream's brute force too: a claim from an earlier attempt is removed (filter does it,
            # see _remove_stale_claim), never re-checked; until then the pod waits.
            plan.blocked = _blocked(f"extended resource claim {stale.key} of an earlier attempt is "
                                    "being removed", "stale extended claim", unresolvable=False)
            return
        variant = extended.full
        in_flight = self.assume.pending(variant.claim.uid) if variant.claim is not None else None
        if in_flight is not None and in_flight.pod_uid != pod_uid(plan.pod):
            # A bind's write of unknown outcome (see bind): its devices stay counted until it settles.
            plan.blocked = _blocked(f"the extended resource claim of pod {pod_key(plan.pod)} is in the "
                                    "process of being allocated", "claim in flight")
            return
        plan.extended, plan.extended_variant = extended, variant
        if variant.claim is not None:
            plan.to_allocate.append(variant.claim)

    def plan_for_node(self, plan: PodPlan, node: Node) -> PodPlan | str:
        """The plan on `node`: the same one unless a device plugin on the node serves some of the
        pod's extended resources (then the special claim asks only for the rest), or a message why the
        pod cannot fit the node."""
        extended = plan.extended
        if extended is None or plan.extended_variant is None:
            return plan
        served = extended.on_node(node)
        if isinstance(served, str):
            return served
        if served == plan.extended_variant.resources:
            return plan
        node_plan = plan.variant_plans.get(served)
        if node_plan is None:
            variant = extended.variant(served)
            own = plan.extended_variant.claim
            to_allocate = [claim for claim in plan.to_allocate if claim is not own]
            if variant.claim is not None:
                to_allocate.append(variant.claim)
            signature = plan.signature
            if signature is not None and self.filter_cache is not None:
                signature = self.filter_cache.claims_signature(to_allocate) if to_allocate else None
            node_plan = dataclasses.replace(plan, to_allocate=to_allocate, extended_variant=variant,
                                            signature=signature, allocator=None, view=None,
                                            variant_plans={})
            plan.variant_plans[served] = node_plan
        return node_plan

    def _plan_on(self, plan: PodPlan, node_name: str) -> PodPlan:
        """plan_for_node by name, for bind and holds (check_node says why a node does not fit)."""
        node = self.cache.node(node_name)
        on_node = self.plan_for_node(plan, node) if node is not None else plan
        return plan if isinstance(on_node, str) else on_node

    def plan_allocator(self, plan: PodPlan) -> Allocator:
        """The plan's allocator over the devices in use now, made on first use."""
        if plan.allocator is None:
            plan.view = self._allocated_view(plan.rebinding_uid, plan.rebinding_group)
            plan.allocator = Allocator(self.cache.inventory, plan.view, self.cache.features,
                                       deadline_s=self.node_deadline_s)
        return plan.allocator

    def _allocated_view(self, own_pod_uid: str | None, own_group: str | None = None) -> AllocatedState:
        """Allocated devices plus everything in flight; at bind, minus the binding pod's own entries
        (a filter hold or an earlier attempt) and its PodGroup's (a hold by a pod of the group), which
        this bind replaces."""
        if own_pod_uid is None:
            return self.assume.allocated_view(self.cache)
        others = []
        for claim_uid, claim, allocation in self.assume.in_flight():
            entry = self.assume.pending(claim_uid)
            if entry is not None and entry.pod_uid not in (own_pod_uid, own_group):
                others.append((claim_uid, claim, allocation))
        return self.cache.allocated.with_in_flight(others)

    # ---- per node -----------------------------------------------------------------------------

    def _node(self, name: str, node_objects: Mapping[str, dict] | None) -> Node | None:
        if node_objects is not None and name in node_objects:
            try:
                return Node.from_api(node_objects[name])
            except InvalidObjectError:
                return None
        return self.cache.node(name)

    def check_node(
        self,
        plan: PodPlan,
        node_name: str,
        node_objects: Mapping[str, dict] | None = None,
        *,
        use_cache: bool = False,
        time_left_s: float | None = None,
    ) -> NodeVerdict:
        """Does the pod fit this node? Raises SchedulingError for real errors.

        `use_cache` lets filter, prioritize and preempt reuse outcomes from the FilterCache; bind
        and explain always compute afresh. `time_left_s` shortens the search below `node_deadline_s`
        (what is left of a multi-node check's budget)."""
        if plan.blocked is not None:
            blocked = plan.blocked
            return NodeVerdict(node_name, False, blocked.message, blocked.unresolvable, blocked.reason)
        node = self._node(node_name, node_objects)
        if node is None:
            # The answer's key names the node: a request full of made-up names gets a compact answer.
            return NodeVerdict(node_name, False, UNKNOWN_NODE, True,
                               "unknown node")
        if plan.extended is not None:
            on_node = self.plan_for_node(plan, node)
            if isinstance(on_node, str):
                return NodeVerdict(node_name, False, on_node, True, "extended resource")
            plan = on_node
        allocations = [claim.allocation or {} for claim in plan.allocated]
        allocations += [allocation for _, allocation in plan.pending]
        for allocation in allocations:
            selector = allocation.get("nodeSelector")
            if selector and not node_matches_selector(node, selector):
                return NodeVerdict(node_name, False, "resourceclaim not available on the node", True,
                                   "claim on other node")
        if not plan.to_allocate:
            return NodeVerdict(node_name, True)
        node_key = None
        if use_cache and plan.signature is not None and self.filter_cache is not None:
            node_key, cached, computed_for = self.filter_cache.get(plan.signature, node)
            if cached is not None:
                return self._cached_verdict(node_name, cached, computed_for, plan.signature[1])
        allocator = self.plan_allocator(plan)
        allocator.deadline_s = self.node_deadline_s if time_left_s is None else min(
            self.node_deadline_s, time_left_s)
        try:
            outcome = allocator.allocate(node, plan.to_allocate)
        except AllocationTimeout:
            # Never cached (returns before cache.put): the next filter searches this node again.
            return _timed_out(node_name)
        except NodeAllocationError as error:
            outcome = error.outcome if isinstance(error.outcome, AllocationOutcome) else None
            return NodeVerdict(node_name, False, str(error), True, "node error", outcome)
        except AllocationError as error:
            raise SchedulingError(str(error)) from None
        cache = self.filter_cache
        if node_key is not None and cache is not None and cache.epoch == plan.cache_epoch:
            cache.put(plan.signature, node_key, outcome)
        return self._verdict(node_name, outcome)

    @classmethod
    def _cached_verdict(cls, node_name: str, outcome: AllocationOutcome, computed_for: ClaimRefs | None,
                        claims: ClaimRefs) -> NodeVerdict:
        """A verdict from the filter cache; a failure worked out for other claims is renamed to
        `claims` only when read."""
        if computed_for is None:
            return cls._verdict(node_name, outcome)
        return NodeVerdict(node_name, False, "", _unresolvable(outcome), "devices",
                           carried=(outcome, computed_for, claims))

    @staticmethod
    def _verdict(node_name: str, outcome: AllocationOutcome) -> NodeVerdict:
        if outcome.success:
            return NodeVerdict(node_name, True, outcome=outcome)
        return NodeVerdict(node_name, False, _failure_message(outcome), _unresolvable(outcome), "devices",
                           outcome)

    # ---- filter -------------------------------------------------------------------------------

    async def filter(self, pod: dict, node_names: list[str],
                     node_objects: Mapping[str, dict] | None = None, *, brief: bool = False) -> FilterResult:
        """Which of `node_names` the pod fits. `brief`: where some node fits, the others' failures get
        CANNOT_ALLOCATE instead of their reasons (see _split)."""
        if not self.needs_dra(pod):
            return FilterResult(list(node_names), {}, {})
        uid = pod_uid(pod)
        # A pod kube-scheduler retries while its earlier bind still writes keeps that bind's entries.
        holding = self.hold_devices and uid not in self._binding
        if holding:
            self.release_hold(uid)
        deadline = self.clock() + self.filter_deadline_s
        try:
            await self._remove_stale_claim(pod)
            plan = self.plan(pod)
            if plan.claims_missing:
                pod, plan = await self._await_claims(pod, plan, deadline)
            verdicts = await self.check_nodes(plan, node_names, node_objects, deadline=deadline)
            if self._claims_changed(plan):
                # A claim changed while the checks yielded, possibly deleted and created again under
                # the same name: those verdicts may be about a claim that no longer exists. One fresh
                # pass, within what is left of the same budget; a change during that one is left to
                # bind's re-check.
                plan = self.plan(pod)
                verdicts = await self.check_nodes(plan, node_names, node_objects, deadline=deadline)
        except SchedulingError as error:
            self._count_outcome("error", len(node_names))
            return FilterResult([], {}, {}, str(error))
        for reason, count in Counter(verdict.reason for verdict in verdicts.values()).items():
            self._count_outcome(reason, count)
        if uid:
            self._results[uid] = verdicts
        if plan.to_allocate and (holding or _allocates_for_group(plan)):
            result = self._hold_best(pod, plan, verdicts, brief, pod_holds=holding)
        else:
            self._extend_group_holds(plan)
            result = _answer(verdicts, brief)
        if plan.extended_variant is not None:
            describe = plan.extended_variant.describe
            result.failed = {node: describe(message) for node, message in result.failed.items()}
            result.unresolvable = {node: describe(message) for node, message in result.unresolvable.items()}
        return result

    async def _remove_stale_claim(self, pod: dict) -> None:
        """Delete the pod's special claim of an earlier attempt (upstream's PostFilter does), unless a
        bind of the pod is writing it or the pod is bound."""
        stale = self.extended.stale_claim(pod)
        if stale is None or pod_uid(pod) in self._binding or (pod.get("spec") or {}).get("nodeName"):
            return
        log.info("removing extended resource claim %s of an earlier attempt for pod %s", stale.key,
                 pod_key(pod))
        try:
            await self.writer.remove_claim(stale.namespace, stale.name, stale.uid)
        except BindError as error:
            log.warning("could not remove extended resource claim %s: %s", stale.key, error)

    async def _await_claims(self, pod: dict, plan: PodPlan, deadline: float) -> tuple[dict, PodPlan]:
        """Poll for up to `claim_wait_s` (and at most half of what is left of the filter's budget)
        until the pod's claims exist: its cached copy gets the generated claim names (the request's
        copy never will) and the claims reach the cache."""
        meta = pod.get("metadata") or {}
        wait_s = min(self.claim_wait_s, (deadline - self.clock()) / 2)
        for _ in range(round(wait_s / CLAIM_POLL_S)):
            await asyncio.sleep(CLAIM_POLL_S)
            current = self.cache.pod(str(meta.get("namespace") or ""), str(meta.get("name") or ""))
            if current is not None and pod_uid(current) == pod_uid(pod):
                pod = current
            plan = self.plan(pod)
            if not plan.claims_missing:
                break
        return pod, plan

    def _claims_changed(self, plan: PodPlan) -> bool:
        """Is any claim of `plan` no longer the cached one? The cache replaces a claim object on every
        change, so identity tells (a re-created claim has a new object and a new UID)."""
        cache = self.cache
        return any(cache.claim(entry.claim.namespace, entry.claim.name) is not entry.claim
                   for entry in plan.claims)

    async def check_nodes(self, plan: PodPlan, node_names: Iterable[str],
                          node_objects: Mapping[str, dict] | None = None, *,
                          use_cache: bool = True, deadline: float | None = None) -> dict[str, NodeVerdict]:
        """Verdicts for `node_names`, letting other requests run every YIELD_AFTER_S of work.

        Every multi-node check (filter, prioritize, preempt, explain) goes through here, so none of
        them holds the event loop for long. One node's allocation is never interrupted, so a single
        hard search can still hold the loop for up to `node_deadline_s`. After a yield the plan's view
        may be stale (a fits verdict then costs a failed bind, never a double allocation: bind
        re-checks); the filter cache notices the changes and stops storing outcomes computed from
        that view.

        `deadline` (on `self.clock`) bounds the whole check: each node's search gets at most what is
        left, and nodes reached after it are timed out without being searched. Nodes the filter cache
        has an outcome for are answered from it whatever the deadline: that costs no search."""
        verdicts: dict[str, NodeVerdict] = {}
        started = self.clock()
        names = list(node_names)
        for first in range(0, len(names), HIT_BATCH):
            batch = names[first:first + HIT_BATCH]
            hits = self._cached_verdicts(plan, batch, node_objects) if use_cache else {}
            for index, name in enumerate(batch):
                hit = hits.get(name)
                if hit is not None:
                    verdicts[name] = hit
                    continue
                time_left = None if deadline is None else deadline - self.clock()
                if time_left is not None and time_left <= 0:
                    verdicts[name] = _timed_out(name)
                    continue
                verdicts[name] = self.check_node(plan, name, node_objects, use_cache=use_cache,
                                                 time_left_s=time_left)
                if self.clock() - started > YIELD_AFTER_S:
                    started = await self._yield(plan)
                    if use_cache:  # what changed during the yield: the rest of the batch again
                        hits = self._cached_verdicts(plan, batch[index + 1:], node_objects)
            if self.clock() - started > YIELD_AFTER_S:
                started = await self._yield(plan)
        return verdicts

    async def _yield(self, plan: PodPlan) -> float:
        """Let other requests run; returns the clock when this check resumes."""
        await asyncio.sleep(0)
        if self.filter_cache is not None and plan.signature is not None:
            self.filter_cache.sync_in_flight()
        return self.clock()

    def _cached_verdicts(self, plan: PodPlan, names: list[str],
                         node_objects: Mapping[str, dict] | None) -> dict[str, NodeVerdict]:
        """The verdicts the filter cache already has for `names`, in one pass (what check_node would
        answer for them, without its per-node overhead: most of a filter's nodes are hits). Only for
        the usual plan, claims to allocate and nothing else to check per node; with anything else
        every node goes through check_node."""
        filter_cache = self.filter_cache
        signature = plan.signature
        if (filter_cache is None or signature is None or plan.blocked is not None or plan.allocated
                or plan.pending or node_objects is not None):
            return {}
        verdicts: dict[str, NodeVerdict] = {}
        nodes = [node for node in map(self.cache.node, names) if node is not None]
        if plan.extended is not None:  # device-plugin nodes have a plan (and cache entries) of their own
            nodes = [node for node in nodes if self.plan_for_node(plan, node) is plan]
        for node, outcome, computed_for in filter_cache.hits_for(signature, nodes):
            verdicts[node.name] = self._cached_verdict(node.name, outcome, computed_for, signature[1])
        return verdicts

    def _hold_best(self, pod: dict, plan: PodPlan, verdicts: dict[str, NodeVerdict],
                   brief: bool, *, pod_holds: bool = True) -> FilterResult:
        """--filter-holds-devices: pick the best node now and keep its devices in flight until bind.

        A PodGroup's shared claim is always held this way (for the group, whatever the flag): the
        group's other pods then share that allocation and go to the same node(s) instead of each
        working out its own (kube-scheduler's gang cycles filter all pods of a group before the first
        bind). Without `pod_holds` only the group's claims are held."""
        fitting = [v for v in verdicts.values() if v.fits]
        if not fitting:
            return _answer(verdicts, brief)
        scores = self._scores(pod, fitting, plan)
        best = fitting[0]  # the first of the best-scored nodes, in kube-scheduler's order
        for verdict in fitting[1:]:
            if scores.get(verdict.node, 0) > scores.get(best.node, 0):
                best = verdict
        # The verdicts may predate a yield during which other pods took devices: allocate the chosen
        # node again from the current state, with no await before the devices are reserved.
        try:
            current = self._plan_on(self.plan(pod), best.node)
            best = self.check_node(current, best.node)
        except SchedulingError as error:
            return FilterResult([], {}, {}, str(error))
        if not best.fits:
            verdicts = {**verdicts, best.node: best}
            return _answer(verdicts, brief)
        chosen = zip(current.to_allocate, best.outcome.allocations if best.outcome else [], strict=True)
        uid = pod_uid(pod)
        held: list[tuple[ResourceClaim, dict]] = []
        for claim, allocation in chosen:
            group_owner = _group_owner(current, claim)
            if group_owner is not None:
                self._reserve(claim, allocation, group_owner, ttl_s=self.hold_ttl_s)
            elif pod_holds:
                self._reserve(claim, allocation, uid, ttl_s=self.hold_ttl_s)
                held.append((claim, allocation))
        self.holding()  # forget holds that expired (pods deleted or never bound)
        if held:
            self._holds[uid] = (best.node, held)
        log.debug("holding %d claim(s) of pod %s on node %s", len(held), pod_key(pod), best.node)
        result = _split({best.node: best}, brief)
        for verdict in verdicts.values():
            if verdict.node == best.node:
                continue
            if verdict.fits:
                holder = f"PodGroup {current.group.key}" if not pod_holds and current.group else "this pod"
                result.failed[verdict.node] = f"dra-extender holds devices for {holder} on node {best.node}"
            elif verdict.unresolvable:
                result.unresolvable[verdict.node] = _said(verdict, brief)
            else:
                result.failed[verdict.node] = _said(verdict, brief)
        return result

    def release_hold(self, uid: str) -> None:
        hold = self._holds.pop(uid, None)
        if hold is not None:
            for claim, allocation in hold[1]:
                self.assume.release(claim.uid, allocation=allocation)

    def _extend_group_holds(self, plan: PodPlan) -> None:
        """A PodGroup's held allocation stays while pods of the group keep finding it (gang cycles
        filter every pod of a group before binding any)."""
        for claim, _ in plan.pending:
            self.assume.extend(claim.uid, self.hold_ttl_s)

    def _on_change(self, kind: str, event_type: str, new: dict, old: dict | None) -> None:
        if kind == "Pod" and event_type == "DELETED" and self._holds:
            self.release_hold(pod_uid(new))  # a deleted pod's held devices are free at once
        elif kind == "PodGroup" and event_type == "DELETED":
            meta = new.get("metadata") or {}
            if f"{meta.get('namespace')}/{meta.get('name')}" not in self._group_writes:
                # Nothing of a deleted PodGroup stays in flight: its claim goes with it (the
                # resourceclaim controller deallocates it), no pod of the group may bind any more.
                self.assume.release_owned_by(OWNER_PREFIX + str(meta.get("uid") or ""))

    def _hold_alive(self, hold: tuple[str, list[tuple[ResourceClaim, dict]]]) -> bool:
        for claim, allocation in hold[1]:
            entry = self.assume.pending(claim.uid)
            if entry is not None and entry.allocation is allocation:
                return True
        return False

    def holding(self) -> set[str]:
        """UIDs of pods with devices held by filter (--filter-holds-devices); drops expired holds."""
        for uid in [uid for uid, hold in self._holds.items() if not self._hold_alive(hold)]:
            del self._holds[uid]
        return set(self._holds)

    def _count_outcome(self, reason: str, count: int) -> None:
        if self.metrics is not None and count:
            self.metrics.filter_outcomes.labels(reason=reason).inc(count)

    # ---- prioritize ---------------------------------------------------------------------------

    async def prioritize(self, pod: dict, node_names: list[str],
                         node_objects: Mapping[str, dict] | None = None) -> dict[str, int]:
        if not self.needs_dra(pod):
            return dict.fromkeys(node_names, 0)
        cached = self._results.get(pod_uid(pod)) or {}
        missing = [name for name in node_names if name not in cached]
        try:
            plan = self.plan(pod)
            fresh = await self.check_nodes(plan, missing, node_objects,
                                           deadline=self.clock() + self.filter_deadline_s)
        except SchedulingError:
            return dict.fromkeys(node_names, 0)
        verdicts = [cached.get(name) or fresh[name] for name in node_names]
        scores = self._scores(pod, [v for v in verdicts if v.fits], plan)
        return {name: scores.get(name, 0) for name in node_names}

    def _scores(self, pod: dict, fitting: list[NodeVerdict], plan: PodPlan) -> dict[str, int]:
        policy = policy_for(pod, self.scoring)
        placed = policy != "none" and bool(plan.to_allocate)
        memo_spec = None  # the claims spec, while the fit memo may be used (see _placed_fit)
        filter_cache = self.filter_cache
        if placed and filter_cache is not None and plan.signature is not None and (
                plan.cache_epoch == filter_cache.epoch):
            memo_spec = plan.signature[0]
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
                fits[verdict.node] = self._placed_fit(node, outcome, plan, memo_spec)
        return node_scores(policy, fits)

    def _placed_fit(self, node: Node, outcome: AllocationOutcome, plan: PodPlan,
                    memo_spec: bytes | None) -> NodeFit:
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
            if memo is not None and memo[0] is outcome:
                return memo[1]
        pools = {
            (result.get("driver"), result.get("pool"))
            for allocation in outcome.allocations
            for result in (allocation.get("devices") or {}).get("results") or []
        }
        self.plan_allocator(plan)
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
            self._fit_memo[memo_key] = (outcome, fit)
        return fit

    # ---- bind ---------------------------------------------------------------------------------

    async def bind(self, namespace: str, name: str, uid: str, node_name: str) -> None:
        """Allocate (re-checked against current state), reserve and bind. Raises BindFailed."""
        pod = self.cache.pod(namespace, name) or await self._await_pod(namespace, name, uid)
        if pod is None:
            raise BindFailed(f"pod {namespace}/{name} is not known to dra-extender")
        if uid and pod_uid(pod) and pod_uid(pod) != uid:
            raise BindFailed(f"pod {namespace}/{name} has UID {pod_uid(pod)}, not {uid}")
        uid = pod_uid(pod)
        # Waits before the check below: from that check to `_binding.add` nothing may await, or a
        # retried request for the same pod would pass the check too and bind it a second time.
        await self._await_group_writes(pod)
        if uid in self._binding:
            # kube-scheduler gave up on the earlier bind and retried; that bind still writes.
            raise BindFailed(f"pod {pod_key(pod)} is already being bound by an earlier request")
        self.bind_attempts += 1
        writes, consumers, extended = (self._reserve_for_bind(pod, node_name) if self.needs_dra(pod)
                                       else ([], {}, None))
        # The bind's own entries replaced the hold's: from here on they are the bind's to release.
        self._holds.pop(uid, None)
        self._binding.add(uid)
        group_write = self._start_group_write(pod) if consumers else None
        try:
            await self.writer.bind(pod, node_name, writes, consumers, extended=extended)
        except BaseException as error:
            unsettled = error.unsettled if isinstance(error, BindError) else frozenset()
            for claim, allocation in writes:
                if allocation is None:
                    continue
                self._release(claim)
                cached = self.cache.claim_by_uid(claim.uid)
                if claim.uid in unsettled and (cached is None or cached.allocation is None):
                    # The API server may hold this allocation (the cache does not know yet): keep
                    # counting its devices until the watch shows the claim allocated (which drops
                    # the entry) or the TTL passes.
                    # Owned by no pod, so no bind (not even this pod's retry) re-allocates the claim
                    # meanwhile: it is "in the process of being allocated".
                    self._reserve(claim, allocation, f"unsettled:{uid}", ttl_s=UNSETTLED_TTL_S)
            if not isinstance(error, BindError):
                raise
            if self.metrics is not None:
                self.metrics.bind_failures.labels(stage="write").inc()
            raise BindFailed(str(error)) from None
        finally:
            self._binding.discard(uid)
            if group_write is not None:
                self._group_writes.pop(group_write).set_result(None)
        if extended is not None and extended.claim is not None:
            # The created claim, allocated, is in the cache now (the writer stores what it wrote): the
            # in-memory claim's entry, under a UID no watch event will ever confirm, has done its job.
            self._release(extended.claim)

    async def _await_pod(self, namespace: str, name: str, uid: str) -> dict | None:
        """The pod from the cache, polled for up to BIND_POD_WAIT_S: kube-scheduler may bind a pod that
        our watch has not delivered yet. A pod with claims rarely gets here (filter waited for its
        claims, and so for its cached copy), one asking only for extended resources often does, and a
        refused bind costs it kube-scheduler's backoff (seconds)."""
        for _ in range(round(BIND_POD_WAIT_S / CLAIM_POLL_S)):
            await asyncio.sleep(CLAIM_POLL_S)
            pod = self.cache.pod(namespace, name)
            if pod is not None and (not uid or pod_uid(pod) == uid):
                return pod
        return None

    async def _await_group_writes(self, pod: dict) -> None:
        """Wait while another bind writes the shared claims of this pod's PodGroup."""
        if not self.cache.features.enabled(WORKLOAD_CLAIMS) or group_name_of(pod) is None:
            return
        key = f"{(pod.get('metadata') or {}).get('namespace')}/{group_name_of(pod)}"
        while key in self._group_writes:
            await asyncio.shield(self._group_writes[key])

    def _start_group_write(self, pod: dict) -> str:
        key = f"{(pod.get('metadata') or {}).get('namespace')}/{group_name_of(pod)}"
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._group_writes[key] = done
        return key

    def _reserve_for_bind(
        self, pod: dict, node_name: str
    ) -> tuple[list[tuple[ResourceClaim, dict | None]], dict[str, dict], Variant | None]:
        """Synchronous: re-check and reserve with no await in between (atomic on the event loop).

        Returns the claims to write, by claim UID the PodGroup to reserve a shared claim for, and the
        special claim to create (extended resources), if the pod gets one."""
        uid = pod_uid(pod)
        hold = self._holds.get(uid)
        if hold is not None and hold[0] != node_name:
            self.release_hold(uid)
            hold = None
        try:
            plan = self._plan_on(self.plan(pod, rebinding=True), node_name)
            verdict = self.check_node(plan, node_name)
        except SchedulingError as error:
            self.release_hold(uid)
            raise BindFailed(f"pod {pod_key(pod)}: {error}") from None
        if not verdict.fits:
            self.release_hold(uid)
            # A conflict: another allocation took what filter offered (not, say, a deleted class).
            conflict = verdict.reason in CONFLICT_REASONS
            self.bind_conflicts += conflict
            if self.metrics is not None:
                if conflict:
                    self.metrics.bind_conflicts.inc()
                self.metrics.bind_failures.labels(stage="recheck").inc()
            message = verdict.message
            if plan.extended_variant is not None:
                message = plan.extended_variant.describe(message)
            raise BindFailed(f"pod {pod_key(pod)} no longer fits node {node_name}: {message}")
        workload_claims = self.cache.features.enabled(WORKLOAD_CLAIMS)
        writes: list[tuple[ResourceClaim, dict | None]] = [
            (claim, None) for claim in plan.allocated if not reserved_for_pod(claim.raw, pod, workload_claims)
        ]
        allocations = verdict.outcome.allocations if verdict.outcome is not None else []
        for claim, allocation in zip(plan.to_allocate, allocations, strict=True):
            self._reserve(claim, allocation, _group_owner(plan, claim) or uid)
            writes.append((claim, allocation))
        consumers = {claim.uid: plan.group.reference() for claim, _ in writes
                     if plan.group is not None and _group_owner(plan, claim) is not None}
        extended = plan.extended_variant
        return writes, consumers, extended if extended is not None and extended.claim is not None else None

    def _reserve(self, claim: ResourceClaim, allocation: dict, uid: str, ttl_s: float | None = None) -> None:
        self.assume.reserve(claim, allocation, uid, ttl_s=ttl_s)

    def _release(self, claim: ResourceClaim) -> None:
        self.assume.release(claim.uid)

    @property
    def bind_conflict_rate(self) -> float:
        return self.bind_conflicts / self.bind_attempts if self.bind_attempts else 0.0

    # ---- preempt ------------------------------------------------------------------------------

    async def preempt(self, pod: dict, victims: Mapping[str, dict]) -> dict[str, dict]:
        """Keep candidates where the pod fits now, or where evicting victims could free devices.

        kube-scheduler's dry run ignores extender filters, so candidates may come with empty victim
        lists; those are kept only if the pod already fits there. Candidates can be hundreds of
        nodes: they are checked like filter's (cached outcomes, yielding to other requests).
        """
        if not self.needs_dra(pod):
            return dict(victims)
        deadline = self.clock() + self.filter_deadline_s
        try:
            plan = self.plan(pod)
            verdicts = await self.check_nodes(plan, victims, deadline=deadline)
        except SchedulingError:
            return {}
        kept = {}
        for node, node_victims in victims.items():
            verdict = verdicts[node]
            # A node whose check timed out is not known to help: evicting pods there could be for nothing.
            if verdict.fits or (not verdict.unresolvable and not verdict.timed_out
                                and await self._eviction_frees_enough(plan, node, node_victims, deadline)):
                kept[node] = node_victims
        return kept

    async def _eviction_frees_enough(self, plan: PodPlan, node_name: str, node_victims: dict,
                                     deadline: float) -> bool:
        """Would the pod fit `node_name` once the victims are gone? Only claims whose every consumer is a
        victim (a known pod) lose their devices; victims holding none of those count for nothing."""
        victim_uids = {str(victim.get("UID")) for victim in node_victims.get("Pods") or ()}
        freed = self._claims_freed_by(victim_uids)
        node = self.cache.node(node_name)
        time_left = deadline - self.clock()
        to_allocate = self._plan_on(plan, node_name).to_allocate  # a device plugin's node: its own
        if not freed or node is None or not to_allocate or time_left <= 0:
            return False
        view = self._allocated_view(None).without(freed)
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
            namespace = str((victim.get("metadata") or {}).get("namespace") or "")
            for name in claim_names_of_pod(victim):
                claim = self.cache.claim(namespace, name)
                if claim is None or claim.allocation is None:
                    continue
                users = {str(entry.get("uid")) for entry in claim.reserved_for if isinstance(entry, dict)}
                if users <= victim_uids:
                    freed.add(claim.uid or claim.key)
        return freed


def _group_owner(plan: PodPlan, claim: ResourceClaim) -> str | None:
    """The in-flight owner of `claim` when it is the plan's PodGroup's shared claim."""
    group = plan.group
    if group is None:
        return None
    shared = any(entry.claim.uid == claim.uid and entry.pod_claim_name in group.pod_claim_names
                 for entry in plan.claims)
    return group.owner if shared else None


def _allocates_for_group(plan: PodPlan) -> bool:
    return any(_group_owner(plan, claim) is not None for claim in plan.to_allocate)


class _ClaimLookup:
    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler

    def claim(self, namespace: str, name: str) -> ResourceClaim | None:
        return self.scheduler.lookup_claim(namespace, name)


def _answer(verdicts: Mapping[str, NodeVerdict], brief: bool = False) -> FilterResult:
    """The filter answer, with timed-out nodes treated as "not known", not as "does not fit".

    Reporting a timeout as unresolvable (what upstream's plugin first did) parks the pod in
    kube-scheduler's unschedulable queue until a cluster event or up to 5 minutes, although only the
    machine was busy. Following upstream PR #137607, a timeout that leaves no node for the pod is an
    Error: kube-scheduler then retries the pod after its backoff (seconds). We deliberately differ from
    upstream when another node fits: there a node's Error aborts the whole attempt; here the pod goes to
    a node known to fit and the timed-out nodes are only resolvable failures.
    """
    timed_out = sum(1 for verdict in verdicts.values() if verdict.timed_out)
    if timed_out and not any(verdict.fits for verdict in verdicts.values()):
        return FilterResult([], {}, {}, f"{TIMED_OUT_MESSAGE} on {timed_out} of {len(verdicts)} node(s) "
                                        "and no other node fits")
    return _split(verdicts, brief)


def _split(verdicts: Mapping[str, NodeVerdict], brief: bool = False) -> FilterResult:
    """The answer's three lists.

    `brief` (the answer to kube-scheduler): where some node fits, nodes without devices for the pod
    say only CANNOT_ALLOCATE, as upstream's plugin does. kube-scheduler shows the failures' messages
    only when no node is left (in the FailedScheduling event), so working out and sending why for each
    of hundreds of full nodes is CPU and bytes for nothing on every pod that gets scheduled; with no
    node left, every node says why. `dra-extender explain` and simulate always give the details."""
    result = FilterResult([], {}, {})
    unknown = 0
    some_fit = any(verdict.fits for verdict in verdicts.values())
    for name, verdict in verdicts.items():
        if verdict.fits:
            result.passed.append(name)
        elif verdict.reason == "unknown node" and brief:
            # kube-scheduler counts a node its extender leaves out of every list as unschedulable and
            # unresolvable, exactly what an unknown node is: naming a few is enough, so a request of
            # made-up names cannot blow up into an answer several times its size.
            unknown += 1
            if unknown <= NAMED_UNKNOWN_NODES:
                result.unresolvable[name] = verdict.message
        elif verdict.unresolvable:
            result.unresolvable[name] = _said(verdict, brief and some_fit)
        else:
            result.failed[name] = _said(verdict, brief and some_fit)
    return result


def _said(verdict: NodeVerdict, brief: bool) -> str:
    return CANNOT_ALLOCATE if brief and verdict.reason == "devices" else verdict.message


def _failure_message(outcome: AllocationOutcome) -> str:
    return outcome.summary() or CANNOT_ALLOCATE


def _unresolvable(outcome: AllocationOutcome) -> bool:
    """Could evicting pods free what the node lacks? If not, preemption need not try the node."""
    return PREEMPTION_MAY_HELP.isdisjoint(outcome.rejection_keys())
