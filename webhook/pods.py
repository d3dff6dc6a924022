"""Validating rule for pods CREATE: refuse pods whose shared claim can never take another consumer; warn
about a scoring annotation the scheduler would ignore.

With DRAWorkloadResourceClaims a pod of a PodGroup that the claim is reserved for does not add itself
(the PodGroup is the consumer), so the limit does not apply to it."""

from __future__ import annotations

from common.claimrefs import group_name_of, is_group_reference
from common.rules import scoring_annotation_problem
from webhook.claim_status import effective_limit
from webhook.lookup import ClusterLookup
from webhook.review import AdmissionRequest, Decision, mapping, sequence, text


def validate_pod_create(
    request: AdmissionRequest, lookup: ClusterLookup, *, reserved_for_limit: int,
    workload_claims: bool = False,
) -> Decision:
    pod = request.object or {}
    namespace = request.namespace or text(
        mapping(pod.get("metadata"), "metadata").get("namespace"), "namespace"
    )
    entries = sequence(mapping(pod.get("spec"), "spec").get("resourceClaims"), "spec.resourceClaims")
    if not entries:
        return Decision()
    scoring = scoring_annotation_problem(pod)
    warnings: list[str] = [f"dra-extender: {scoring}"] if scoring else []
    if not lookup.ready:
        return Decision(
            warnings=[*warnings,
                      "dra-extender webhook: cluster view not synced yet, shared claims not checked"]
        )
    limit = effective_limit(reserved_for_limit)
    group = group_name_of(pod) if workload_claims else None
    problems: list[str] = []
    for i, entry in enumerate(entries):
        path = f"spec.resourceClaims[{i}].resourceClaimName"
        claim_name = text(mapping(entry, f"spec.resourceClaims[{i}]").get("resourceClaimName"), path)
        if not claim_name:
            continue
        claim = lookup.claim(namespace, claim_name)
        if claim is None:
            warnings.append(f"{path}: claim {claim_name} does not exist yet; the pod waits for it")
            continue
        status = mapping(claim.get("status"), "claim.status")
        reserved = sequence(status.get("reservedFor"), "claim.status.reservedFor")
        if group is not None and any(is_group_reference(e) and e.get("name") == group for e in reserved):
            continue
        consumers = len(reserved)
        if consumers >= limit:
            problems.append(
                f"{path}: ResourceClaim {namespace}/{claim_name} is already reserved by "
                f"{consumers} consumers, the limit is {limit}, so this pod could never start; "
                "use a ResourceClaimTemplate (spec.resourceClaims[].resourceClaimTemplateName) "
                "to give each pod its own claim"
            )
    if problems:
        return Decision.deny("; ".join(problems))
    return Decision(warnings=warnings)
