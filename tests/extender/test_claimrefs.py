"""common.claimrefs is the one reading of a pod's claim references: the scheduler's strict reading
(extender.plugin.podclaims), the cache's lenient one and the webhook's pod_references_claim agree on it."""

from __future__ import annotations

import pytest

from common.claimrefs import ClaimSource, known_claim_names, resolve_entry
from extender.plugin.podclaims import ClaimNotCreated, InvalidPodError, claim_name_for
from webhook.claims import pod_references_claim

ENTRIES = [
    {"name": "direct", "resourceClaimName": "shared"},
    {"name": "made", "resourceClaimTemplateName": "t"},
    {"name": "skipped", "resourceClaimTemplateName": "t"},
    {"name": "pending", "resourceClaimTemplateName": "t"},
]
POD = {
    "metadata": {"namespace": "ns", "name": "p", "uid": "pod-uid"},
    "spec": {"resourceClaims": ENTRIES},
    "status": {
        "resourceClaimStatuses": [{"name": "made", "resourceClaimName": "p-made-x1"},
                                  {"name": "skipped", "resourceClaimName": None}],
        "extendedResourceClaimStatus": {"resourceClaimName": "p-extended-x2", "requestMappings": []},
    },
}


def claim(name: str) -> dict:
    return {"metadata": {"namespace": "ns", "name": name}}


def test_each_entry_resolves_once_for_everybody() -> None:
    assert [resolve_entry(POD, entry) for entry in ENTRIES] == [
        (ClaimSource.DIRECT, "shared"),
        (ClaimSource.GENERATED, "p-made-x1"),
        (ClaimSource.GENERATED, None),
        (ClaimSource.NOT_CREATED, None),
    ]
    assert resolve_entry(POD, {"name": "neither"}) == (ClaimSource.UNSET, None)


def test_strict_lenient_and_webhook_readings_agree() -> None:
    assert [claim_name_for(POD, entry) for entry in ENTRIES[:3]] == [
        ("shared", False), ("p-made-x1", True), (None, True)]
    with pytest.raises(ClaimNotCreated, match="not created yet"):
        claim_name_for(POD, ENTRIES[3])
    with pytest.raises(InvalidPodError, match="neither resourceClaimName nor"):
        claim_name_for(POD, {"name": "neither"})
    known = known_claim_names(POD)
    assert known == ["shared", "p-made-x1", "p-extended-x2"]
    assert all(pod_references_claim(POD, claim(name)) for name in known)
    assert not pod_references_claim(POD, claim("someone-elses"))
