"""`dra-extender explain` as a user with narrow RBAC on a real kube-apiserver: a missing permission ends
the command within seconds and names every missing verb and resource as RBAC writes them; a user who
may read one namespace's pods and the cluster's DRA objects, but not list pods cluster-wide, still
gets one pod explained (explain reads only that pod's objects)."""

from __future__ import annotations

import contextlib
import io
import logging
import time
import uuid

import orjson
from e2e_api import Api
from e2e_cluster import ControlPlane
from e2e_objects import create_driver, create_pod

from extender.cli import main


def _user(control_plane: ControlPlane, api: Api, namespace: str, *, cluster_reads: bool) -> str:
    """A kubeconfig for a new user who may get pods in `namespace` and, with `cluster_reads`, list the
    cluster-wide objects one pod's explanation reads."""
    user = f"narrow-{uuid.uuid4().hex[:6]}"
    credentials = control_plane._credentials(user, user)
    api.create(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles", {
        "metadata": {"name": user},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}],
    })
    api.create(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings", {
        "metadata": {"name": user},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": user},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    })
    if cluster_reads:
        api.create("/apis/rbac.authorization.k8s.io/v1/clusterroles", {
            "metadata": {"name": user},
            "rules": [
                {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]},
                {"apiGroups": ["resource.k8s.io"], "verbs": ["list"],
                 "resources": ["resourceslices", "resourceclaims", "deviceclasses", "devicetaintrules"]},
            ],
        })
        api.create("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
            "metadata": {"name": user},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": user},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        })
    return str(credentials.kubeconfig)


def _explain(kubeconfig: str, *args: str) -> tuple[int, str, str, float]:
    """The command's exit code, output and error, and how long it took, run in this process: the time
    is the command's own, not the interpreter's start on a busy machine."""
    out, err = io.StringIO(), io.StringIO()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level  # the command sets up logging for itself
    started = time.monotonic()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["explain", "--kubeconfig", kubeconfig, *args])
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    return code, out.getvalue(), err.getvalue(), time.monotonic() - started


def test_a_missing_permission_fails_fast_and_names_what_is_missing(
    control_plane: ControlPlane, api: Api, namespace: str
) -> None:
    kubeconfig = _user(control_plane, api, namespace, cluster_reads=False)
    code, _, error, took = _explain(kubeconfig, "-A")
    assert code == 2 and took < 5, (took, error)
    assert error.startswith("error: permission denied: "), error
    for missing in ("cannot list, watch nodes at the cluster scope",
                    "cannot list, watch pods at the cluster scope",
                    "cannot list, watch resourceslices.resource.k8s.io at the cluster scope",
                    "cannot list, watch resourceclaims.resource.k8s.io at the cluster scope"):
        assert missing in error, error
    # One pod: only its own get is allowed here, the cluster-wide lists are named.
    code, _, error, took = _explain(kubeconfig, "somepod", "-n", namespace)
    assert code == 2 and took < 5, (took, error)
    assert "cannot list resourceslices.resource.k8s.io at the cluster scope" in error
    assert "pods" not in error  # the one pod's get is granted, and no list of pods is needed


def test_one_pod_is_explained_without_listing_every_pod(
    control_plane: ControlPlane, api: Api, namespace: str
) -> None:
    create_driver(api, nodes=2, devices=2)
    create_pod(api, namespace, "waiting", claim="absent-claim")
    kubeconfig = _user(control_plane, api, namespace, cluster_reads=True)
    code, out, error, took = _explain(kubeconfig, f"{namespace}/waiting", "-o", "json")
    assert code == 1, error  # its claim does not exist: a finding, not an error
    assert out, error
    report = orjson.loads(out)
    assert report["pod"] == f"{namespace}/waiting"
    assert "absent-claim" in report["error"] or any("absent-claim" in n["message"] for n in report["nodes"])
    assert took < 20
