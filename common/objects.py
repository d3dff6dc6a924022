"""Typed views of the Kubernetes objects we read, and the one accessor for an object's metadata.

Objects stay the plain dicts the API server's JSON decodes to (typed models cost far too much on the
hot path); these TypedDicts name the parts the servers read, so a reader sees what a function expects
and mypy checks the keys. Only the fields we read are declared: nothing else is cached or served.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict, cast


class OwnerReference(TypedDict, total=False):
    apiVersion: str
    kind: str
    name: str
    uid: str
    controller: bool


class ObjectMeta(TypedDict, total=False):
    name: str
    namespace: str
    uid: str
    resourceVersion: str
    generation: int
    creationTimestamp: str
    deletionTimestamp: str
    labels: dict[str, str]
    annotations: dict[str, str]
    finalizers: list[str]
    ownerReferences: list[OwnerReference]


ListMeta = TypedDict("ListMeta", {"resourceVersion": str, "continue": str, "remainingItemCount": int},
                    total=False)


class PodClaimEntry(TypedDict, total=False):
    """One `spec.resourceClaims[]` entry of a Pod (or a PodGroup)."""

    name: str
    resourceClaimName: str
    resourceClaimTemplateName: str


class PodSpec(TypedDict, total=False):
    nodeName: str
    schedulerName: str
    nodeSelector: dict[str, str]
    affinity: dict[str, Any]
    tolerations: list[dict[str, Any]]
    priority: int
    resourceClaims: list[PodClaimEntry]
    containers: list[dict[str, Any]]
    initContainers: list[dict[str, Any]]
    overhead: dict[str, str]


class PodClaimStatus(TypedDict, total=False):
    name: str
    resourceClaimName: str | None


class PodStatus(TypedDict, total=False):
    phase: str
    resourceClaimStatuses: list[PodClaimStatus]
    extendedResourceClaimStatus: dict[str, Any]


class Pod(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: PodSpec
    status: PodStatus


class ConsumerReference(TypedDict, total=False):
    """One `status.reservedFor[]` entry of a ResourceClaim."""

    apiGroup: str
    resource: str
    name: str
    uid: str


class ResourceClaimStatus(TypedDict, total=False):
    allocation: dict[str, Any]
    reservedFor: list[ConsumerReference]
    devices: list[dict[str, Any]]


class ResourceClaim(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: dict[str, Any]
    status: ResourceClaimStatus


def metadata_of(obj: Mapping[str, Any]) -> ObjectMeta:
    """`obj`'s metadata; an empty one when the object has none (a fresh dict: writing to it changes
    nothing)."""
    meta = obj.get("metadata")
    return cast(ObjectMeta, meta) if isinstance(meta, dict) else ObjectMeta()


def list_metadata_of(listing: Mapping[str, Any]) -> ListMeta:
    """A list response's metadata (resourceVersion, continue); an empty one when it has none."""
    meta = listing.get("metadata")
    return cast(ListMeta, meta) if isinstance(meta, dict) else ListMeta()


def qualified_name(name: str, driver: str) -> str:
    """A device attribute's or capacity's name with its domain: one without lives in the driver's."""
    return name if "/" in name else f"{driver}/{name}"


def parse_namespaced_name(text: str) -> tuple[str, str]:
    """NAMESPACE/NAME as flags name an object; ValueError naming what is wrong."""
    namespace, _, name = text.partition("/")
    if not namespace or not name or "/" in name:
        raise ValueError(f"expected NAMESPACE/NAME, got {text!r}")
    return namespace, name
