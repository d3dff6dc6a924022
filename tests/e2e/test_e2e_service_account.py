"""dra-extender runs as the ServiceAccount of deploy/, limited to its ClusterRoles: the API server
authenticates the fixture's token as that account, allows the calls the code makes and refuses others."""

from __future__ import annotations

import orjson
import pytest
from e2e_api import Api, wait_for
from e2e_cluster import ControlPlane
from e2e_objects import bound, claim_of_pod, claim_spec, create_driver, create_pod, create_template, pods

# (verb, resource, subresource) the extender's role grants, checked through its own token.
ALLOWED = [
    ("list", "nodes", ""),
    ("watch", "resourceslices.resource.k8s.io", ""),
    ("create", "pods", "binding"),
    ("update", "resourceclaims.resource.k8s.io", "status"),
    ("delete", "pods", ""),  # the eviction controller component
    # The special claim of a pod with extended resources backed by DRA, as upstream's kube-scheduler
    # role grants with DRAExtendedResource; and the pod's extendedResourceClaimStatus.
    ("create", "resourceclaims.resource.k8s.io", ""),
    ("delete", "resourceclaims.resource.k8s.io", ""),
    ("patch", "pods", "status"),
]
# Outside the roles: what a broader grant would let a compromised extender do.
DENIED = [
    ("delete", "nodes", ""),
    ("update", "nodes", ""),
    ("create", "pods", ""),
    ("get", "secrets", ""),
    ("list", "namespaces", ""),
    ("patch", "resourceclaims.resource.k8s.io", "status"),
    ("patch", "pods", ""),
    ("update", "pods", "status"),
    ("delete", "resourceclaimtemplates.resource.k8s.io", ""),
    ("create", "clusterrolebindings.rbac.authorization.k8s.io", ""),
]


def _can_i(control_plane: ControlPlane, verb: str, resource: str, subresource: str, namespace: str) -> bool:
    args = ["auth", "can-i", verb, resource, f"--namespace={namespace}"]
    if subresource:
        args.append(f"--subresource={subresource}")
    answer = control_plane.kubectl(*args, kubeconfig=control_plane.extender_kubeconfig)
    assert answer.stdout.strip() in ("yes", "no"), f"kubectl {' '.join(args)}: {answer.stderr}"
    return answer.stdout.strip() == "yes"


def test_extender_token_authenticates_as_the_deployed_service_account(control_plane: ControlPlane) -> None:
    process = control_plane.components["dra-extender"]
    assert f"--kubeconfig={control_plane.extender_kubeconfig}" in process.args
    whoami = control_plane.kubectl(
        "auth", "whoami", "-o", "json", kubeconfig=control_plane.extender_kubeconfig
    )
    assert whoami.returncode == 0, whoami.stderr
    user = orjson.loads(whoami.stdout)["status"]["userInfo"]
    assert (
        user["username"] == control_plane.extender_user == "system:serviceaccount:dra-extender:dra-extender"
    )
    assert "system:masters" not in user.get("groups", [])


@pytest.mark.parametrize(("verb", "resource", "subresource"), ALLOWED)
def test_extender_may_make_the_calls_of_its_role(
    control_plane: ControlPlane, namespace: str, verb: str, resource: str, subresource: str
) -> None:
    assert _can_i(control_plane, verb, resource, subresource, namespace)


@pytest.mark.parametrize(("verb", "resource", "subresource"), DENIED)
def test_extender_may_not_act_outside_its_role(
    control_plane: ControlPlane, namespace: str, verb: str, resource: str, subresource: str
) -> None:
    assert not _can_i(control_plane, verb, resource, subresource, namespace)


def test_scheduling_as_the_service_account_is_never_refused(
    control_plane: ControlPlane, api: Api, namespace: str
) -> None:
    """A pod goes through filter, bind and the claim writes with the deployed permissions only."""
    driver = create_driver(api, nodes=1, devices=1)
    try:
        create_template(api, namespace, "one-gpu", claim_spec(driver.device_class))
        create_pod(api, namespace, "worker", template="one-gpu")
        wait_for("the pod bound", lambda: bound(pods(api, namespace)), timeout_s=60)
        claim = claim_of_pod(api, namespace, "worker")
        assert claim["status"]["allocation"] and claim["status"]["reservedFor"]
        assert control_plane.forbidden_requests() == []
    finally:
        api.delete(f"/api/v1/namespaces/{namespace}/pods/worker", grace_period_seconds=0)
        driver.cleanup()
