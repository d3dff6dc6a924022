"""Workload claims (KEP-5729, gate DRAWorkloadResourceClaims): one ResourceClaim shared by a PodGroup.

A pod belongs to a PodGroup through `spec.schedulingGroup.podGroupName` (scheduling.k8s.io/v1beta1,
same namespace). When one of the pod's `spec.resourceClaims` entries equals one of the PodGroup's
`spec.resourceClaims` entries in every field (name, resourceClaimName, resourceClaimTemplateName), that
claim is the group's: it is reserved for the PodGroup (`{apiGroup: scheduling.k8s.io, resource:
podgroups, name, uid}`) instead of for each pod, so the 256-entry limit of `status.reservedFor` no
longer caps the group's size. The pod still finds the claim's name where it always does (by name, or
for a template in its own `status.resourceClaimStatuses`, which the resourceclaim controller fills with
the group's claim); a generated group claim is controlled by the PodGroup instead of the pod.

Deliberate difference from upstream 1.37: upstream lets a pod outside the group name a group's claim
by `resourceClaimName` and reserves it for that pod next to the PodGroup. We refuse that (see
`outsider_problem`): such a pod would keep the devices after the PodGroup is deleted and the group's
claim could never be deallocated with the group.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from common.claimrefs import (
    GROUP_CLAIM_SOURCE_FIELDS,
    PODGROUP_API_GROUP,
    PODGROUP_RESOURCE,
    controller_of,
    group_name_of,
    is_group_reference,
    pod_key,
    pod_uid,
)
from common.objects import metadata_of
from extender.plugin.podclaims import ClaimsNotReady, claim_references

# In-flight owner prefix for allocations made for a PodGroup (see AssumeCache): group members share
# them, every other pod sees the claim "in the process of being allocated".
OWNER_PREFIX = "podgroup:"
# In-flight owner prefix for the other claims a pod of a PodGroup holds from filter to bind (see
# gang_owner), followed by "namespace/name" of the PodGroup.
GANG_PREFIX = "gang:"


class PodGroupLookup(Protocol):
    def pod_group(self, namespace: str, name: str) -> dict | None: ...


def _same_entry(pod_entry: Mapping[str, Any], group_entry: Mapping[str, Any]) -> bool:
    return pod_entry.get("name") == group_entry.get("name") and all(
        (pod_entry.get(field) or None) == (group_entry.get(field) or None)
        for field in GROUP_CLAIM_SOURCE_FIELDS)


@dataclass(frozen=True)
class GroupBinding:
    """The PodGroup a pod's shared claims are reserved for, and which of the pod's claims those are."""

    namespace: str
    name: str
    uid: str
    pod_claim_names: frozenset[str]  # the pod's spec.resourceClaims[].name entries that are the group's

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def owner(self) -> str:
        """Who owns the group's in-flight allocations in the AssumeCache."""
        return OWNER_PREFIX + self.uid

    def reference(self) -> dict:
        return {"apiGroup": PODGROUP_API_GROUP, "resource": PODGROUP_RESOURCE, "name": self.name,
                "uid": self.uid}


def group_binding(pod: Mapping[str, Any], lookup: PodGroupLookup) -> GroupBinding | None:
    """Which of the pod's claims are its PodGroup's (upstream's resourceclaim.BindTo for every entry).

    None for a pod outside any PodGroup. Raises ClaimsNotReady while the PodGroup is not known (as
    upstream's PreFilter, which cannot tell where the claims must be reserved) and InvalidPodError when
    the group's own entries are malformed."""
    group_name = group_name_of(pod)
    if group_name is None:
        return None
    namespace = str(metadata_of(pod).get("namespace") or "")
    group = lookup.pod_group(namespace, group_name)
    if group is None:
        raise ClaimsNotReady(f'podgroup.{PODGROUP_API_GROUP} "{group_name}" not found')
    group_entries = ((group.get("spec") or {}).get("resourceClaims")) or []
    shared = frozenset(
        str(entry.get("name"))
        for entry in claim_references(pod)
        if any(_same_entry(entry, group_entry) for group_entry in group_entries)
    )
    meta = metadata_of(group)
    return GroupBinding(namespace, group_name, str(meta.get("uid") or ""), shared)


def gang_owner(pod: Mapping[str, Any]) -> str | None:
    """The in-flight owner of the claims the pod's filter holds for its PodGroup's scheduling cycle; None
    for a pod outside any PodGroup.

    kube-scheduler (GenericWorkload) schedules the pods naming a PodGroup in one cycle, whatever its
    policy: it filters and reserves every pod before it binds any, and the in-tree plugin lets a later
    pod of the cycle reuse the allocation an earlier one made in Reserve, for any claim, while devices
    reserved by earlier pods are taken for later ones. An extender sees no Reserve, so the filter of
    such a pod holds its claims in flight for the group (extender.plugin.holds). Keyed by the PodGroup's
    name, not its UID: the PodGroup is watched only with DRAWorkloadResourceClaims, and the name is what
    kube-scheduler groups by (a pod naming a PodGroup that does not exist is not scheduled)."""
    group_name = group_name_of(pod)
    if group_name is None:
        return None
    return f"{GANG_PREFIX}{metadata_of(pod).get('namespace') or ''}/{group_name}"


def reserved_for_pod(claim_raw: Mapping[str, Any], pod: Mapping[str, Any], *, accept_group: bool) -> bool:
    """The claim lists the pod, or (with the gate) the pod's PodGroup, as a consumer.

    A pod does not know its PodGroup's UID; like upstream, a group entry matches by name (the claim
    is in the pod's namespace)."""
    uid = pod_uid(pod)
    group = group_name_of(pod) if accept_group else None
    for entry in (claim_raw.get("status") or {}).get("reservedFor") or ():
        if not isinstance(entry, dict):
            continue
        if entry.get("uid") == uid or (group is not None and is_group_reference(entry)
                                       and entry.get("name") == group):
            return True
    return False


def owning_group(claim_raw: Mapping[str, Any]) -> str | None:
    """The PodGroup the claim belongs to: the one it is reserved for, else the one controlling it."""
    for entry in (claim_raw.get("status") or {}).get("reservedFor") or ():
        if is_group_reference(entry):
            return str(entry.get("name"))
    controller = controller_of(claim_raw)
    if controller is not None and controller.get("kind") == "PodGroup" and str(
            controller.get("apiVersion") or "").startswith(PODGROUP_API_GROUP + "/"):
        return str(controller.get("name"))
    return None


def outsider_problem(claim: Any, pod: Mapping[str, Any], binding: GroupBinding | None,
                     pod_claim_name: str) -> str | None:
    """Why `pod` may not use a claim that belongs to a PodGroup (None when it may).

    Members may, through an entry that matches the group's. Everybody else may not (our deliberate
    difference, see the module docstring)."""
    group = owning_group(claim.raw)
    if group is None:
        return None
    if binding is not None and binding.name == group and pod_claim_name in binding.pod_claim_names:
        return None
    if binding is not None and binding.name == group:
        why = f"its spec.resourceClaims entry {pod_claim_name} does not match the PodGroup's entry"
    else:
        why = "the pod is not in that PodGroup"
    return (f"resourceclaim {claim.key} is shared by PodGroup {claim.namespace}/{group}: {why} "
            f"(pod {pod_key(pod)})")


def reservable(claim_raw: Mapping[str, Any], pod: Mapping[str, Any], *, consumer_uid: str | None,
               accept_group: bool, limit: int) -> bool:
    """Can the consumer be added to (or is it already in) the claim's reservedFor?"""
    if reserved_for_pod(claim_raw, pod, accept_group=accept_group):
        return True
    reserved = (claim_raw.get("status") or {}).get("reservedFor") or []
    already = any(isinstance(e, dict) and e.get("uid") == consumer_uid for e in reserved)
    return already or len(reserved) < limit

