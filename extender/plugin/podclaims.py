"""Resolve the ResourceClaims a pod uses, the way kube-scheduler's DynamicResources plugin does.

A pod names its claims in `spec.resourceClaims[]`: either directly (`resourceClaimName`) or through a
template, in which case the resourceclaim controller records the generated name in
`status.resourceClaimStatuses[]` and the claim must be controlled by the pod. Anything that keeps a
pod from being scheduled yet (claim not created, missing, being deleted, not owned) raises
`ClaimsNotReady` with the message upstream gives, so users see the same words. The reading of the
pod's fields is common.claimrefs', shared with the cache, the controllers and the webhook.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from allocator import ResourceClaim
from common.claimrefs import (
    ClaimSource,
    controlled_by_group_of,
    group_name_of,
    is_controlled_by,
    pod_key,
    pod_uid,
    resolve_entry,
)
from common.objects import metadata_of

# Looked up once: attribute access on an Enum class is slow on Python 3.11 (this runs per claim per verb).
_GENERATED, _NOT_CREATED = ClaimSource.GENERATED, ClaimSource.NOT_CREATED


class ClaimLookup(Protocol):
    def claim(self, namespace: str, name: str) -> ResourceClaim | None: ...


class ClaimsNotReady(Exception):
    """The pod cannot be scheduled until its claims change (upstream: UnschedulableAndUnresolvable)."""


class ClaimNotCreated(ClaimsNotReady):
    """A claim of the pod does not exist yet (for a template: not yet created by the controller)."""


class InvalidPodError(ValueError):
    """The pod's claim references are malformed (an error, not a scheduling verdict)."""


@dataclass(frozen=True)
class PodClaim:
    pod_claim_name: str  # spec.resourceClaims[].name
    claim: ResourceClaim


def claim_references(pod: Mapping) -> list[dict]:
    spec = pod.get("spec") or {}
    refs = spec.get("resourceClaims") or []
    if not isinstance(refs, list) or not all(isinstance(ref, dict) for ref in refs):
        raise InvalidPodError(f"pod {pod_key(pod)}: spec.resourceClaims must be a list of objects")
    return refs


def has_claims(pod: Mapping) -> bool:
    return bool(claim_references(pod))


def claim_name_for(pod: Mapping, ref: Mapping) -> tuple[str | None, bool]:
    """The ResourceClaim name for one `spec.resourceClaims` entry and whether the pod must own it.

    None means the entry is intentionally without a claim. Raises ClaimsNotReady or InvalidPodError.
    """
    name = ref.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidPodError(f"pod {pod_key(pod)}: spec.resourceClaims[] entry without a name")
    source, claim_name = resolve_entry(pod, ref)
    if claim_name is not None or source is _GENERATED:
        return claim_name, source is _GENERATED
    if source is _NOT_CREATED:
        raise ClaimNotCreated(f'pod "{pod_key(pod)}": ResourceClaim not created yet')
    raise InvalidPodError(
        f"pod {pod_key(pod)}: resource claim {name}: neither resourceClaimName nor "
        "resourceClaimTemplateName is set"
    )


def resolve_pod_claims(pod: Mapping, lookup: ClaimLookup, *,
                       accept_group_owner: bool = False) -> list[PodClaim]:
    """The pod's claims in spec order (entries without a claim skipped). Raises ClaimsNotReady.

    `accept_group_owner` (gate DRAWorkloadResourceClaims): a generated claim controlled by the pod's
    PodGroup is the pod's too (see extender.plugin.podgroups)."""
    namespace = metadata_of(pod).get("namespace") or ""
    resolved: list[PodClaim] = []
    for ref in claim_references(pod):
        claim_name, must_own = claim_name_for(pod, ref)
        if claim_name is None:
            continue
        claim = lookup.claim(namespace, claim_name)
        if claim is None:
            # Worded like upstream's claim-cache lookup failure.
            raise ClaimNotCreated(f'could not find ResourceClaim "{namespace}/{claim_name}"')
        if claim.deleting:
            raise ClaimsNotReady(f'resourceclaim "{claim_name}" is being deleted')
        group = group_name_of(pod) if accept_group_owner else None
        if must_own and (claim.namespace != namespace or not (
                is_controlled_by(claim.raw, pod_uid(pod))
                or (group is not None and controlled_by_group_of(claim.raw, pod)))):
            if group is not None:
                raise ClaimsNotReady(
                    f"ResourceClaim {claim.namespace}/{claim.name} was not created for Pod {pod_key(pod)} "
                    f"(neither Pod nor PodGroup {group} is the owner)"
                )
            # Newest upstream (1.36+) capitalises "Pod" in this message.
            raise ClaimsNotReady(
                f"ResourceClaim {claim.namespace}/{claim.name} was not created for Pod {pod_key(pod)} "
                "(Pod is not owner)"
            )
        resolved.append(PodClaim(str(ref["name"]), claim))
    return resolved


def allocation_of(claim_raw: Mapping) -> dict | None:
    return (claim_raw.get("status") or {}).get("allocation") or None


def reserved_for(claim_raw: Mapping) -> list[dict]:
    return list((claim_raw.get("status") or {}).get("reservedFor") or [])
