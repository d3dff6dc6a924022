"""deploy/ against the real kube-apiserver: every overlay, rendered by the kubectl built for this suite,
is accepted by a server-side dry run, and the base ClusterRole grants the service account exactly the
calls the code makes (asked of the API server's own authorizer with SubjectAccessReviews)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
import yaml
from e2e_api import Api, ApiStatusError
from e2e_cluster import REPO_ROOT, ControlPlane
from e2e_objects import create_stub_crds, delete_crds

sys.path.insert(0, str(REPO_ROOT / "tests" / "deploy"))
from deploy_manifests import DEPLOY, NAMESPACE, OVERLAYS, SERVICE_ACCOUNT, find, load_docs
from test_rbac import Permission, calls_of

# The fixture's extender runs as SERVICE_ACCOUNT with the base and the controllers' roles bound; the
# base ClusterRole alone is checked through a copy bound to an account of its own.
CHECKED_ACCOUNT = f"{SERVICE_ACCOUNT}-base-check"
CHECKED_USER = f"system:serviceaccount:{NAMESPACE}:{CHECKED_ACCOUNT}"
TEST_ROLE = "e2e-deploy-dra-extender"
# Just enough of cert-manager's API for the dry run of the Issuers and Certificates.
CERT_MANAGER_KINDS = (("Issuer", "issuers"), ("Certificate", "certificates"))


def _kubectl(plane: ControlPlane, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(plane.bin_dir / "kubectl"), f"--kubeconfig={plane.admin.kubeconfig}", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def deploy_namespace(control_plane: ControlPlane, api: Api) -> Iterator[str]:
    """The namespace the manifests use (a dry run cannot create objects in a namespace it only pretends to
    create) and cert-manager's kinds, both removed afterwards."""
    created_namespace = api.get_or_none(f"/api/v1/namespaces/{NAMESPACE}") is None
    if created_namespace:
        api.create("/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
    crds = create_stub_crds(api, "cert-manager.io", CERT_MANAGER_KINDS)
    yield NAMESPACE
    delete_crds(api, crds)
    if created_namespace:
        api.delete(f"/api/v1/namespaces/{NAMESPACE}")


@pytest.mark.parametrize("overlay", ["base", *(f"overlays/{o}" for o in OVERLAYS)])
def test_overlay_is_accepted_by_a_server_side_dry_run(
    control_plane: ControlPlane, deploy_namespace: str, overlay: str
) -> None:
    rendered = _kubectl(control_plane, "kustomize", str(DEPLOY / overlay))
    assert rendered.returncode == 0, rendered.stderr
    kinds = {doc["kind"] for doc in yaml.safe_load_all(rendered.stdout) if doc}
    assert "Deployment" in kinds
    applied = _kubectl(
        control_plane,
        "apply",
        "--server-side",
        "--dry-run=server",
        "--force-conflicts",
        "--field-manager=dra-extender-deploy-test",
        "-f",
        "-",
        stdin=rendered.stdout,
    )
    assert applied.returncode == 0, f"{overlay}:\n{applied.stderr}\n{applied.stdout}"
    assert "(server dry run)" in applied.stdout


def _allowed(api: Api, permission: Permission, namespace: str, name: str | None = None) -> bool:
    resource, _, subresource = permission.resource.partition("/")
    attributes = {
        "verb": permission.verb,
        "group": permission.group,
        "resource": resource,
        "subresource": subresource,
        "namespace": namespace,
    }
    if name:
        attributes["name"] = name
    review = api.create(
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": CHECKED_USER,
                "groups": [
                    "system:serviceaccounts",
                    f"system:serviceaccounts:{NAMESPACE}",
                    "system:authenticated",
                ],
                "resourceAttributes": attributes,
            },
        },
    )
    return bool(review["status"].get("allowed"))


def test_base_cluster_role_allows_exactly_the_extenders_calls(api: Api, deploy_namespace: str) -> None:
    rules = find(load_docs(DEPLOY / "base" / "rbac.yaml"), "ClusterRole", "dra-extender")["rules"]
    # A copy under another name: the fixture's own ClusterRole dra-extender must stay as it is.
    roles = "/apis/rbac.authorization.k8s.io/v1/clusterroles"
    bindings = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"
    api.create(roles, {"metadata": {"name": TEST_ROLE}, "rules": rules})
    api.create(
        bindings,
        {
            "metadata": {"name": TEST_ROLE},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": TEST_ROLE},
            "subjects": [{"kind": "ServiceAccount", "name": CHECKED_ACCOUNT, "namespace": NAMESPACE}],
        },
    )
    try:
        # The Lease is the base's namespaced Role's, not the ClusterRole's.
        base = {p for p in calls_of("base") if p.resource != "leases"}
        controllers_only = calls_of("controllers") - base
        deadline = time.monotonic() + 10
        # The authorizer's informer picks the new role up within a moment.
        while not _allowed(api, next(iter(base)), "default") and time.monotonic() < deadline:
            time.sleep(0.2)
        denied = [str(p) for p in sorted(base) if not _allowed(api, p, "default", "x")]
        assert not denied, f"the base ClusterRole does not allow: {denied}"
        excess = [str(p) for p in sorted(controllers_only) if _allowed(api, p, "default", "x")]
        assert not excess, f"the base ClusterRole allows what only the controllers need: {excess}"
        assert not _allowed(api, Permission("patch", "resource.k8s.io", "resourceclaims/binding"), "default")
    finally:
        for path in (f"{bindings}/{TEST_ROLE}", f"{roles}/{TEST_ROLE}"):
            with contextlib.suppress(ApiStatusError):
                api.delete(path)
