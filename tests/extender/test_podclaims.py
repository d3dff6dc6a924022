from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from common.rules import RESERVED_FOR_MAX
from extender.plugin.podclaims import (
    ClaimsNotReady,
    InvalidPodError,
    has_claims,
    resolve_pod_claims,
)
from extender.plugin.podgroups import reservable


@dataclass
class Claim:
    namespace: str
    name: str
    uid: str = "claim-uid"
    deleting: bool = False
    raw: dict = field(default_factory=dict)


class Lookup:
    def __init__(self, *claims: Claim) -> None:
        self.claims = {(c.namespace, c.name): c for c in claims}

    def claim(self, namespace: str, name: str) -> Claim | None:
        return self.claims.get((namespace, name))


def pod(resource_claims: list[dict], statuses: list[dict] | None = None, uid: str = "pod-uid") -> dict:
    return {
        "metadata": {"name": "p1", "namespace": "ns", "uid": uid},
        "spec": {"containers": [{"name": "c"}], "resourceClaims": resource_claims},
        "status": {"resourceClaimStatuses": statuses} if statuses is not None else {},
    }


def owned(name: str, uid: str = "pod-uid") -> Claim:
    raw = {"metadata": {"ownerReferences": [{"kind": "Pod", "uid": uid, "controller": True}]}}
    return Claim("ns", name, raw=raw)


def test_pod_without_claims() -> None:
    assert not has_claims({"metadata": {}, "spec": {"containers": []}})
    assert resolve_pod_claims(pod([]), Lookup()) == []


def test_direct_claim_name_resolves_in_spec_order() -> None:
    lookup = Lookup(Claim("ns", "b"), Claim("ns", "a"))
    resolved = resolve_pod_claims(pod([{"name": "x", "resourceClaimName": "b"},
                                       {"name": "y", "resourceClaimName": "a"}]), lookup)
    assert [(r.pod_claim_name, r.claim.name) for r in resolved] == [("x", "b"), ("y", "a")]


def test_template_claim_not_created_yet() -> None:
    with pytest.raises(ClaimsNotReady, match=r'^pod "ns/p1": ResourceClaim not created yet$'):
        resolve_pod_claims(pod([{"name": "gpu", "resourceClaimTemplateName": "t"}], []), Lookup())


def test_template_claim_resolved_through_status_and_owner_checked() -> None:
    refs = [{"name": "gpu", "resourceClaimTemplateName": "t"}]
    statuses = [{"name": "gpu", "resourceClaimName": "p1-gpu-abcde"}]
    resolved = resolve_pod_claims(pod(refs, statuses), Lookup(owned("p1-gpu-abcde")))
    assert resolved[0].claim.name == "p1-gpu-abcde"

    with pytest.raises(ClaimsNotReady) as info:
        resolve_pod_claims(pod(refs, statuses), Lookup(owned("p1-gpu-abcde", uid="someone-else")))
    assert str(info.value) == "ResourceClaim ns/p1-gpu-abcde was not created for Pod ns/p1 (Pod is not owner)"


def test_template_status_without_name_skips_the_claim() -> None:
    refs = [{"name": "gpu", "resourceClaimTemplateName": "t"}]
    assert resolve_pod_claims(pod(refs, [{"name": "gpu"}]), Lookup()) == []


def test_missing_and_deleting_claims() -> None:
    refs = [{"name": "gpu", "resourceClaimName": "c1"}]
    with pytest.raises(ClaimsNotReady, match='could not find ResourceClaim "ns/c1"'):
        resolve_pod_claims(pod(refs), Lookup())
    with pytest.raises(ClaimsNotReady, match=r'^resourceclaim "c1" is being deleted$'):
        resolve_pod_claims(pod(refs), Lookup(Claim("ns", "c1", deleting=True)))


@pytest.mark.parametrize(
    "refs",
    [
        [{"resourceClaimName": "c1"}],
        [{"name": "gpu"}],
        "not-a-list",
        # No such field in the released API (1.37): an entry with only it names no claim.
        [{"name": "gpu", "podGroupResourceClaim": {"resourceClaimName": "c1"}}],
    ],
)
def test_malformed_references_are_invalid(refs: object) -> None:
    bad = pod([])
    bad["spec"]["resourceClaims"] = refs
    with pytest.raises(InvalidPodError, match="ns/p1"):
        resolve_pod_claims(bad, Lookup(Claim("ns", "c1")))


def test_reservation_limit() -> None:
    full = {"status": {"reservedFor": [{"resource": "pods", "name": f"p{i}", "uid": f"u{i}"}
                                       for i in range(RESERVED_FOR_MAX)]}}
    newcomer = {"metadata": {"uid": "new"}, "spec": {}}
    member = {"metadata": {"uid": "u7"}, "spec": {}}
    assert not reservable(full, newcomer, consumer_uid="new", accept_group=False, limit=RESERVED_FOR_MAX)
    assert reservable(full, member, consumer_uid="u7", accept_group=False, limit=RESERVED_FOR_MAX)
    assert reservable({"status": {}}, newcomer, consumer_uid="new", accept_group=False,
                      limit=RESERVED_FOR_MAX)
