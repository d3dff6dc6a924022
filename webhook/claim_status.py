"""Validating rule for resourceclaims/status UPDATE: well-formed reservations and allocations.

Checks about existing state are applied to what the update adds, never to what it keeps: a claim that
already carries a stale entry or more entries than a newly lowered limit must stay writable, otherwise the
controller that cleans it up would be locked out.
"""

from __future__ import annotations

from common.rules import RESERVED_FOR_MAX
from webhook.claims import pod_references_claim, request_target
from webhook.lookup import ClusterLookup
from webhook.review import AdmissionRequest, Decision, mapping, sequence, summarize_problems, text

REQUIRED_ENTRY_FIELDS = ("resource", "name", "uid")


def effective_limit(configured: int) -> int:
    return min(RESERVED_FOR_MAX, configured)


def validate_claim_status(
    request: AdmissionRequest, lookup: ClusterLookup, reserved_for_limit: int
) -> Decision:
    claim = request.object or {}
    meta = mapping(claim.get("metadata"), "metadata")
    namespace = request.namespace or text(meta.get("namespace"), "metadata.namespace")
    status = mapping(claim.get("status"), "status")
    old_status = mapping((request.old_object or {}).get("status"), "oldObject.status")
    reserved = [
        mapping(e, f"status.reservedFor[{i}]")
        for i, e in enumerate(sequence(status.get("reservedFor"), "status.reservedFor"))
    ]
    old_reserved = sequence(old_status.get("reservedFor"), "oldObject.status.reservedFor")
    old_uids = {e.get("uid") for e in old_reserved if isinstance(e, dict) and isinstance(e.get("uid"), str)}
    allocation = status.get("allocation")
    problems: list[str] = []
    warnings: list[str] = []

    limit = effective_limit(reserved_for_limit)
    if len(reserved) > limit and len(reserved) > len(old_reserved):
        origin = "the API maximum" if limit == RESERVED_FOR_MAX else "the cluster's --reserved-for-limit"
        problems.append(f"status.reservedFor: {len(reserved)} entries exceed the limit of {limit} ({origin})")

    seen: set[str] = set()
    added: list[tuple[int, dict]] = []
    for i, entry in enumerate(reserved):
        missing = [f for f in REQUIRED_ENTRY_FIELDS if not entry.get(f)]
        if missing:
            problems.append(f"status.reservedFor[{i}]: {', '.join(missing)} required")
            continue
        uid = text(entry.get("uid"), f"status.reservedFor[{i}].uid")
        if uid in seen:
            problems.append(f"status.reservedFor[{i}].uid: duplicate value {uid!r} (UIDs must be unique)")
        seen.add(uid)
        if uid not in old_uids:
            added.append((i, entry))

    if reserved and not allocation:
        problems.append("status.reservedFor: may not be set without status.allocation")
    if added and meta.get("deletionTimestamp"):
        problems.append(
            f"status.reservedFor[{added[0][0]}]: no new reservations while the claim is being deleted"
        )

    pod_entries = [(i, e) for i, e in added if e.get("resource") == "pods" and not e.get("apiGroup")]
    if pod_entries and not lookup.ready:
        warnings.append("dra-extender webhook: cluster view not synced yet, pod reservations not verified")
    elif pod_entries:
        problems.extend(_pod_reference_problems(pod_entries, namespace, claim, lookup))

    if allocation and allocation != old_status.get("allocation"):
        problems.extend(_unknown_request_problems(claim, mapping(allocation, "status.allocation")))

    if problems:
        return Decision.deny(summarize_problems(problems), code=422, reason="Invalid")
    return Decision(warnings=warnings)


def _pod_reference_problems(
    entries: list[tuple[int, dict]], namespace: str, claim: dict, lookup: ClusterLookup
) -> list[str]:
    claim_name = mapping(claim.get("metadata"), "metadata").get("name")
    problems = []
    for i, entry in entries:
        name = text(entry.get("name"), f"status.reservedFor[{i}].name")
        pod = lookup.pod(namespace, name)
        if pod is None:
            problems.append(f"status.reservedFor[{i}]: pod {namespace}/{name} does not exist")
            continue
        pod_uid = mapping(pod.get("metadata"), "pod.metadata").get("uid")
        if pod_uid != entry.get("uid"):
            problems.append(
                f"status.reservedFor[{i}].uid: pod {namespace}/{name} has UID {pod_uid}, "
                f"not {entry.get('uid')} (stale reference)"
            )
        elif not pod_references_claim(pod, claim):
            problems.append(
                f"status.reservedFor[{i}]: pod {namespace}/{name} does not reference claim {claim_name}"
            )
    return problems


def _unknown_request_problems(claim: dict, allocation: dict) -> list[str]:
    results_path = "status.allocation.devices.results"
    results = sequence(
        mapping(allocation.get("devices"), "status.allocation.devices").get("results"), results_path
    )
    problems = []
    for i, result in enumerate(results):
        reference = text(
            mapping(result, f"{results_path}[{i}]").get("request"), f"{results_path}[{i}].request"
        )
        if not request_target(claim, reference).exists:
            problems.append(
                f"{results_path}[{i}].request: {reference!r} names no request in spec.devices.requests"
            )
    return problems
