"""Reading ResourceClaim specs and pod claim references as the webhook rules need them (raw dicts)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from common.claimrefs import (
    EXTENDED_CLAIM_ANNOTATION,
    POD_CLAIM_NAME_ANNOTATION,
    is_controlled_by,
    known_claim_names,
    pod_uid,
)
from webhook.review import mapping, sequence, text


@dataclass(frozen=True, slots=True)
class RequestTarget:
    """What an allocation result's `request` ("req" or "req/sub") names in the claim spec."""

    exists: bool
    # The exact request or subrequest the devices were allocated for; None when the reference is
    # missing or names a whole firstAvailable request (then the chosen subrequest is unknown).
    source: dict | None


def request_target(claim: dict, reference: str) -> RequestTarget:
    devices = mapping(mapping(claim.get("spec"), "spec").get("devices"), "spec.devices")
    name, _, sub = reference.partition("/")
    for i, request in enumerate(sequence(devices.get("requests"), "spec.devices.requests")):
        request = mapping(request, f"spec.devices.requests[{i}]")
        if request.get("name") != name:
            continue
        alternatives = sequence(request.get("firstAvailable"), f"spec.devices.requests[{i}].firstAvailable")
        if not sub:
            if alternatives:
                return RequestTarget(exists=True, source=None)
            return RequestTarget(exists=True, source=mapping(request.get("exactly"), "exactly"))
        for j, alternative in enumerate(alternatives):
            alternative = mapping(alternative, f"spec.devices.requests[{i}].firstAvailable[{j}]")
            if alternative.get("name") == sub:
                return RequestTarget(exists=True, source=alternative)
        return RequestTarget(exists=False, source=None)
    return RequestTarget(exists=False, source=None)


def claim_selectors(claim_spec: dict, path: str) -> Iterator[tuple[str, str]]:
    """(field path, CEL expression) of every selector in a ResourceClaimSpec located at `path`."""
    devices = mapping(claim_spec.get("devices"), f"{path}.devices")
    for i, request in enumerate(sequence(devices.get("requests"), f"{path}.devices.requests")):
        request_path = f"{path}.devices.requests[{i}]"
        request = mapping(request, request_path)
        yield from _selectors(
            mapping(request.get("exactly"), f"{request_path}.exactly"), f"{request_path}.exactly"
        )
        alternatives = sequence(request.get("firstAvailable"), f"{request_path}.firstAvailable")
        for j, alternative in enumerate(alternatives):
            alternative_path = f"{request_path}.firstAvailable[{j}]"
            yield from _selectors(mapping(alternative, alternative_path), alternative_path)


def _selectors(request: dict, path: str) -> Iterator[tuple[str, str]]:
    for k, selector in enumerate(sequence(request.get("selectors"), f"{path}.selectors")):
        selector_path = f"{path}.selectors[{k}].cel.expression"
        cel = mapping(mapping(selector, f"{path}.selectors[{k}]").get("cel"), f"{path}.selectors[{k}].cel")
        if "expression" in cel:
            yield selector_path, text(cel.get("expression"), selector_path)


def pod_references_claim(pod: dict, claim: dict) -> bool:
    """Whether `pod` uses `claim`, directly by name or through a claim generated for it (the names
    common.claimrefs resolves) or, in case our view of the pod lags behind, through the claim being
    controlled by the pod and annotated as generated for one of its template entries or as its
    extended-resource claim. Raises MalformedReview naming a field of the wrong type."""
    claim_meta = mapping(claim.get("metadata"), "claim.metadata")
    spec_entries = [
        e
        for e in sequence(mapping(pod.get("spec"), "pod.spec").get("resourceClaims"), "pod claims")
        if isinstance(e, dict)
    ]
    status = mapping(pod.get("status"), "pod.status")
    sequence(status.get("resourceClaimStatuses"), "pod.status.resourceClaimStatuses")
    mapping(status.get("extendedResourceClaimStatus"), "pod.status.extendedResourceClaimStatus")
    if claim_meta.get("name") in known_claim_names(pod):
        return True
    mapping(pod.get("metadata"), "pod.metadata")
    sequence(claim_meta.get("ownerReferences"), "metadata.ownerReferences")
    if not is_controlled_by(claim, pod_uid(pod)):
        return False
    # A list, not a set: names from the request may be of any JSON type, including unhashable ones.
    templated = [e.get("name") for e in spec_entries if e.get("resourceClaimTemplateName")]
    annotations = mapping(claim_meta.get("annotations"), "claim.metadata.annotations")
    return (
        annotations.get(POD_CLAIM_NAME_ANNOTATION) in templated
        or annotations.get(EXTENDED_CLAIM_ANNOTATION) == "true"
    )
