"""Everything about one pod that does not depend on the node: its claims, resolved and pre-checked.

The Planner plays the part of the in-tree DynamicResources plugin's PreEnqueue and PreFilter: it resolves
the pod's claims, blocks the pod for every node when a claim is not ready, in use, in flight for someone
else or asks for a missing class, and adds the special claim for extended resources backed by DRA.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import NamedTuple

from allocator import AllocatedState, Allocator, InvalidObjectError, Node, ResourceClaim
from common.claimrefs import WORKLOAD_CLAIMS, pod_key, pod_uid
from common.rules import RESERVED_FOR_MAX
from extender.plugin.bindingconditions import BindingPolicy, ClaimBinding
from extender.plugin.extendedresources import ExtendedPlan, ExtendedResources, Variant
from extender.plugin.nodeallocatable import GATE as NODE_ALLOCATABLE_GATE
from extender.plugin.nodeallocatable import unshareable
from extender.plugin.podclaims import (
    ClaimNotCreated,
    ClaimsNotReady,
    InvalidPodError,
    PodClaim,
    has_claims,
    resolve_pod_claims,
)
from extender.plugin.podgroups import (
    GroupBinding,
    gang_owner,
    group_binding,
    outsider_problem,
    reservable,
    reserved_for_pod,
)
from extender.plugin.verdicts import ClaimsSignature, NodeVerdict, Reason, blocked, claims_signature
from extender.state.assume import AssumeCache
from extender.state.cache import ClusterCache


class SchedulingError(Exception):
    """A real error (invalid claim, CEL runtime error): kube-scheduler retries the pod."""


class PendingShare(NamedTuple):
    """A claim whose allocation a pod of the same PodGroup has in flight: the group's shared claim, or
    any claim held in the group's scheduling cycle (podgroups.gang_owner)."""

    claim: ResourceClaim
    allocation: dict


@dataclass
class PodPlan:
    """Everything about one pod that does not depend on the node."""

    pod: dict
    claims: list[PodClaim] = field(default_factory=list)
    to_allocate: list[ResourceClaim] = field(default_factory=list)
    allocated: list[ResourceClaim] = field(default_factory=list)  # allocated, still to check per node
    # Claims whose allocation a pod of the same PodGroup has in flight: shared, not allocated again
    # (upstream's fix for gang cycles, kubernetes#137617); checked per node like allocated claims. At
    # bind, only those held for the group's scheduling cycle (`gang`): bind writes their allocation.
    pending: list[PendingShare] = field(default_factory=list)
    group: GroupBinding | None = None  # the pod's PodGroup, when some of its claims are the group's
    gang: str | None = None  # the in-flight owner of its PodGroup's scheduling cycle (podgroups.gang_owner)
    blocked: NodeVerdict | None = None  # a verdict for every node (claims not ready, ...)
    claims_missing: bool = False  # blocked because a claim does not exist (yet)
    # Built on first use by Planner.allocator_for: most filters are answered from the filter cache
    # and never need them.
    allocator: Allocator | None = None
    view: AllocatedState | None = None
    rebinding_uid: str | None = None  # at bind: the pod whose own in-flight entries the view leaves out
    rebinding_group: str | None = None  # ... and the PodGroup owner key whose entries it leaves out
    # Set by the filter cache's evaluation when it keys the plan (CachedEvaluation.prepare): the key of
    # the claims to allocate, and the cache epoch then.
    signature: ClaimsSignature | None = None
    cache_epoch: int = -1
    # Extended resources backed by DRA (extendedresources.py): the pod's mapped resources, and the
    # special claim variant in to_allocate (the one for nodes without a device plugin for them, or the
    # node's own in a plan made by Planner.for_node).
    extended: ExtendedPlan | None = None
    extended_variant: Variant | None = None
    variant_plans: dict[tuple[str, ...], PodPlan] = field(default_factory=dict)
    # The allocated claims whose devices have binding conditions, with their state (bindingconditions.py).
    bindings: list[ClaimBinding] = field(default_factory=list)

    def group_owner(self, claim: ResourceClaim) -> str | None:
        """The in-flight owner of `claim` when it is the plan's PodGroup's shared claim."""
        group = self.group
        if group is None:
            return None
        shared = any(entry.claim.uid == claim.uid and entry.pod_claim_name in group.pod_claim_names
                     for entry in self.claims)
        return group.owner if shared else None

    def hold_owner(self, claim: ResourceClaim) -> str | None:
        """Who holds `claim` in flight from filter to bind when the pod is in a PodGroup: the group for
        its shared claim, the group's scheduling cycle for its other claims (not the special claim for
        extended resources, which is the pod's alone)."""
        owner = self.group_owner(claim)
        if owner is None and self.gang is not None and any(
                entry.claim.uid == claim.uid for entry in self.claims):
            return self.gang
        return owner

    def allocates_for_group(self) -> bool:
        return any(self.hold_owner(claim) is not None for claim in self.to_allocate)


class Planner:
    def __init__(self, cache: ClusterCache, assume: AssumeCache, *, node_deadline_s: float,
                 binding: BindingPolicy | None = None) -> None:
        self.cache = cache
        self.assume = assume
        self.node_deadline_s = node_deadline_s
        self.extended = ExtendedResources(cache)
        self.binding = binding if binding is not None else BindingPolicy(cache)

    def claim(self, namespace: str, name: str) -> ResourceClaim | None:
        """The cached claim (the ClaimLookup of resolve_pod_claims); an invalid one is a SchedulingError."""
        claim = self.cache.claim(namespace, name)
        if claim is None:
            raw = self.cache.raw("ResourceClaim", f"{namespace}/{name}")
            if raw is not None:
                try:
                    ResourceClaim.from_api(raw)
                except InvalidObjectError as error:
                    raise SchedulingError(f"invalid claim: {error}") from None
        return claim

    def needs_dra(self, pod: dict) -> bool:
        """Does the pod use claims or extended resources that a DeviceClass maps?"""
        return has_claims(pod) or self.extended.requested(pod)

    def _class_problem(self, claim: ResourceClaim) -> NodeVerdict | None:
        for request in claim.requests:
            if request.exactly is not None:
                name = request.exactly.device_class_name
                if self.cache.device_class(name) is None:
                    return blocked(f"request {request.name}: device class {name} does not exist",
                                   Reason.CLASS_MISSING, unresolvable=False)
                continue
            if not self.cache.features.enabled("DRAPrioritizedList"):
                return blocked(
                    f"resource claim {claim.key}, request {request.name}: has subrequests, but the "
                    "DRAPrioritizedList feature is disabled", Reason.FEATURE_DISABLED)
            for sub in request.first_available:
                if self.cache.device_class(sub.device_class_name) is None:
                    return blocked(
                        f"request {request.name}/{sub.name}: device class {sub.device_class_name} "
                        "does not exist",
                        Reason.CLASS_MISSING, unresolvable=False)
        return None

    def plan(self, pod: dict, *, rebinding: bool = False) -> PodPlan:
        """Resolve and pre-check the pod's claims. Raises SchedulingError for real errors."""
        plan = PodPlan(pod, gang=gang_owner(pod))
        uid = pod_uid(pod)
        workload_claims = self.cache.features.enabled(WORKLOAD_CLAIMS)
        try:
            plan.claims = resolve_pod_claims(pod, self, accept_group_owner=workload_claims)
            if workload_claims and plan.claims:
                plan.group = group_binding(pod, self.cache)
        except ClaimsNotReady as not_ready:
            plan.blocked = blocked(str(not_ready), Reason.CLAIMS_NOT_READY)
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
                    plan.blocked = blocked(problem, Reason.CLAIM_OF_A_PODGROUP)
                    return plan
            if claim.allocation is not None:
                consumer_uid = group.uid if group is not None else uid
                if not reservable(claim.raw, pod, consumer_uid=consumer_uid, accept_group=workload_claims,
                                  limit=RESERVED_FOR_MAX):
                    plan.blocked = blocked("resourceclaim in use", Reason.CLAIM_IN_USE)
                    return plan
                others = (bool(claim.reserved_uids)
                          and not reserved_for_pod(claim.raw, pod, accept_group=workload_claims))
                plan.blocked = self._mapped_claim_shared(claim, claim.allocation, others=others)
                if plan.blocked is not None:
                    return plan
                plan.allocated.append(claim)
                continue
            in_flight = self.assume.pending(claim.uid)
            owner = in_flight.pod_uid if in_flight is not None else None
            own = group.owner if group is not None else uid
            if owner is not None and owner != own and owner != plan.gang:
                plan.blocked = blocked(f"resource claim {claim.key} is in the process of being allocated",
                                       Reason.CLAIM_IN_FLIGHT)
                return plan
            # Held for the group (its shared claim: until bind; the cycle's: at bind too, which writes it).
            if in_flight is not None and (owner == plan.gang or (group is not None and not rebinding)):
                plan.blocked = self._mapped_claim_shared(claim, in_flight.allocation, others=True)
                if plan.blocked is not None:
                    return plan
                plan.pending.append(PendingShare(claim, in_flight.allocation))
                continue
            class_problem = self._class_problem(claim)
            if class_problem is not None:
                plan.blocked = class_problem
                return plan
            plan.to_allocate.append(claim)
        self._plan_extended(plan)
        if plan.blocked is not None:
            return plan
        if plan.allocated:
            plan.bindings = self.binding.of_all(plan.allocated)
        if plan.to_allocate:
            plan.rebinding_uid = uid if rebinding else None
            plan.rebinding_group = plan.group.owner if rebinding and plan.group is not None else None
        return plan

    def _mapped_claim_shared(self, claim: ResourceClaim, allocation: dict, *,
                             others: bool) -> NodeVerdict | None:
        """With DRANodeAllocatableResources, a claim with a mapped device that others use (`others`)
        blocks the pod (extender.plugin.nodeallocatable)."""
        if not others or not self.cache.features.enabled(NODE_ALLOCATABLE_GATE):
            return None
        message = unshareable(claim, allocation, self.cache.inventory)
        return blocked(message, Reason.CLAIM_IN_USE) if message is not None else None

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
            if self.awaits_binding(stale, plan.pod):
                # Kept from an earlier bind call that waits for its devices' binding conditions; bind and
                # filter delete it once they failed or timed out (Scheduler._free_failed_bindings).
                plan.allocated.append(stale)
                return
            # Upstream's brute force too: a claim from an earlier attempt is removed (filter does it,
            # see Scheduler._remove_stale_claim), never re-checked; until then the pod waits.
            plan.blocked = blocked(f"extended resource claim {stale.key} of an earlier attempt is "
                                   "being removed", Reason.STALE_EXTENDED_CLAIM, unresolvable=False)
            return
        variant = extended.full
        in_flight = self.assume.pending(variant.claim.uid) if variant.claim is not None else None
        if in_flight is not None and in_flight.pod_uid != pod_uid(plan.pod):
            # A bind's write of unknown outcome (see Scheduler.bind): its devices stay counted until it
            # settles.
            plan.blocked = blocked(f"the extended resource claim of pod {pod_key(plan.pod)} is in the "
                                   "process of being allocated", Reason.CLAIM_IN_FLIGHT)
            return
        plan.extended, plan.extended_variant = extended, variant
        if variant.claim is not None:
            plan.to_allocate.append(variant.claim)

    def awaits_binding(self, claim: ResourceClaim, pod: dict) -> bool:
        """Is `claim` allocated and reserved for `pod` with devices that have binding conditions, i.e.
        left by a bind of the pod that waits for them?"""
        return (claim.allocation is not None and self.binding.of(claim) is not None
                and reserved_for_pod(claim.raw, pod, accept_group=False))

    def for_node(self, plan: PodPlan, node: Node) -> PodPlan | str:
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
            if signature is not None:  # keyed by the node evaluation: key the node's claims alike
                signature = claims_signature(to_allocate) if to_allocate else None
            node_plan = dataclasses.replace(plan, to_allocate=to_allocate, extended_variant=variant,
                                            signature=signature, allocator=None, view=None,
                                            variant_plans={})
            plan.variant_plans[served] = node_plan
        return node_plan

    def on(self, plan: PodPlan, node_name: str) -> PodPlan:
        """for_node by name, for bind, holds and preempt (a node check says why a node does not fit)."""
        node = self.cache.node(node_name)
        on_node = self.for_node(plan, node) if node is not None else plan
        return plan if isinstance(on_node, str) else on_node

    def allocator_for(self, plan: PodPlan) -> Allocator:
        """The plan's allocator over the devices in use now, made on first use."""
        if plan.allocator is None:
            plan.view = self.allocated_view(own_pod_uid=plan.rebinding_uid, own_group=plan.rebinding_group)
            plan.allocator = Allocator(self.cache.inventory, plan.view, self.cache.features,
                                       deadline_s=self.node_deadline_s)
        return plan.allocator

    def allocated_view(self, *, own_pod_uid: str | None = None,
                       own_group: str | None = None) -> AllocatedState:
        """Allocated devices plus everything in flight; at bind, minus the binding pod's own entries
        (a filter hold or an earlier attempt) and its PodGroup's (a hold by a pod of the group), which
        this bind replaces."""
        if own_pod_uid is None:
            return self.assume.allocated_view(self.cache)
        own = (own_pod_uid, own_group) if own_group is not None else (own_pod_uid,)
        return self.assume.allocated_view(self.cache, excluding_owners=own)
