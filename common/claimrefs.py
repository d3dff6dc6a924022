"""How a pod names its ResourceClaims and how a claim names its consumers: read one way by the
scheduler (extender.plugin.podclaims, strict), the cluster cache and the controllers, and the webhook.

A pod lists its claims in `spec.resourceClaims[]`, each either directly (`resourceClaimName`) or
through a template: the resourceclaim controller then records the generated claim's name under the
entry's name in `status.resourceClaimStatuses[]` (a null name there means "intentionally no claim"),
and the claim must be controlled by the pod (or, with workload claims, by its PodGroup). The claim
for extended resources backed by DRA is named in `status.extendedResourceClaimStatus`.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from common.objects import OwnerReference, metadata_of

# The feature gate under which a PodGroup may be a claim's consumer (see extender.plugin.podgroups).
WORKLOAD_CLAIMS = "DRAWorkloadResourceClaims"
PODGROUP_API_GROUP = "scheduling.k8s.io"
PODGROUP_RESOURCE = "podgroups"
# Set by the resourceclaim controller on a claim generated from a template: the pod's entry name.
POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
# resourceapi.ExtendedResourceClaimAnnotation, "true" on the special claim of extended resources.
EXTENDED_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"


class ClaimSource(StrEnum):
    """Where one `spec.resourceClaims` entry gets its claim's name."""

    DIRECT = "resourceClaimName"
    GENERATED = "generated"  # from a template, the name recorded in status (None: no claim wanted)
    NOT_CREATED = "not created"  # from a template, nothing recorded yet
    UNSET = "unset"  # neither resourceClaimName nor resourceClaimTemplateName: a malformed entry


# (where the name comes from, the claim's name: set for DIRECT and GENERATED only). A plain tuple: this
# is made per claim of every verb, and a NamedTuple costs several times as much to create.
ClaimReference = tuple[ClaimSource, str | None]


def pod_key(pod: Mapping[str, Any]) -> str:
    meta = metadata_of(pod)
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def pod_uid(pod: Mapping[str, Any]) -> str:
    return str(metadata_of(pod).get("uid") or "")


# Attribute access on an Enum class is slow on Python 3.11 and this runs per claim of every verb: the
# members and the answers that carry no name are looked up once here.
_DIRECT, _GENERATED = ClaimSource.DIRECT, ClaimSource.GENERATED
_NO_CLAIM: ClaimReference = (ClaimSource.GENERATED, None)
_NOT_CREATED: ClaimReference = (ClaimSource.NOT_CREATED, None)
_UNSET: ClaimReference = (ClaimSource.UNSET, None)


def resolve_entry(pod: Mapping[str, Any], entry: Mapping[str, Any]) -> ClaimReference:
    """The claim name one `spec.resourceClaims` entry of `pod` resolves to now. The first
    resourceClaimStatuses entry under the entry's name counts (the API server keeps names unique)."""
    direct = entry.get("resourceClaimName")
    if direct:
        return _DIRECT, str(direct)
    if not entry.get("resourceClaimTemplateName"):
        return _UNSET
    for status in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
        if isinstance(status, dict) and status.get("name") == entry.get("name"):
            generated = status.get("resourceClaimName")
            return (_GENERATED, str(generated)) if generated else _NO_CLAIM
    return _NOT_CREATED


def extended_claim_name(pod: Mapping[str, Any]) -> str | None:
    """The special claim of extended resources backed by DRA (extender.plugin.extendedresources), if
    written."""
    extended = (pod.get("status") or {}).get("extendedResourceClaimStatus")
    name = extended.get("resourceClaimName") if isinstance(extended, dict) else None
    return name if isinstance(name, str) and name else None


def known_claim_names(pod: Mapping[str, Any]) -> list[str]:
    """Names of the ResourceClaims the pod uses that can be known now, never raising: entries whose
    claim is not created yet, intentionally absent or malformed contribute nothing; the extended
    resources' claim comes last."""
    names: list[str] = []
    for entry in (pod.get("spec") or {}).get("resourceClaims") or ():
        if isinstance(entry, dict):
            _, name = resolve_entry(pod, entry)
            if name:
                names.append(name)
    extended = extended_claim_name(pod)
    if extended is not None:
        names.append(extended)
    return names


def controller_of(claim_raw: Mapping[str, Any]) -> OwnerReference | None:
    """The claim's controller ownerReference (the API server allows at most one)."""
    for owner in metadata_of(claim_raw).get("ownerReferences") or ():
        if isinstance(owner, dict) and owner.get("controller") is True:
            return owner
    return None


def is_controlled_by(claim_raw: Mapping[str, Any], uid: str) -> bool:
    controller = controller_of(claim_raw)
    return controller is not None and bool(uid) and controller.get("uid") == uid


def group_name_of(pod: Mapping[str, Any]) -> str | None:
    """`spec.schedulingGroup.podGroupName` (scheduling.k8s.io PodGroup), or None outside any group."""
    group = (pod.get("spec") or {}).get("schedulingGroup")
    name = group.get("podGroupName") if isinstance(group, dict) else None
    return name if isinstance(name, str) and name else None


def controlled_by_group_of(claim_raw: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    """The claim was generated for the pod's PodGroup: its controller is that PodGroup (any version of
    the scheduling.k8s.io group, as upstream checks; a pod does not know its PodGroup's UID)."""
    group = group_name_of(pod)
    controller = controller_of(claim_raw)
    return (controller is not None and group is not None and controller.get("kind") == "PodGroup"
            and controller.get("name") == group
            and str(controller.get("apiVersion") or "").startswith(PODGROUP_API_GROUP + "/"))


def is_group_reference(entry: object) -> bool:
    """A `status.reservedFor` entry naming a PodGroup."""
    return (isinstance(entry, dict) and entry.get("apiGroup") == PODGROUP_API_GROUP
            and entry.get("resource") == PODGROUP_RESOURCE)


# MaxPodGroupResourceClaims in scheduling/v1beta1.
MAX_GROUP_CLAIMS = 4
GROUP_CLAIM_SOURCE_FIELDS = ("resourceClaimName", "resourceClaimTemplateName")


def check_group_claims(claims: list[Any]) -> None:
    """Raises ValueError naming the field when a PodGroup's spec.resourceClaims (a list) cannot be read."""
    if len(claims) > MAX_GROUP_CLAIMS:
        raise ValueError(f"spec.resourceClaims: must have at most {MAX_GROUP_CLAIMS} items, "
                         f"has {len(claims)}")
    for i, entry in enumerate(claims):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not entry["name"]:
            raise ValueError(f"spec.resourceClaims[{i}].name: required")
        if sum(1 for field in GROUP_CLAIM_SOURCE_FIELDS if entry.get(field)) != 1:
            raise ValueError(f"spec.resourceClaims[{i}]: exactly one of resourceClaimName and "
                             "resourceClaimTemplateName must be set")
