"""The Helm chart installed by helm on a real kube-apiserver, as the README says: `helm install
--create-namespace` works, the namespace takes the restricted Pod Security label the pods meet, `helm
upgrade --set scheduler.name=foo` rolls the pods, bad values are refused before anything changes, and
the chart's self-signed certificate (and kube-scheduler's client certificate from its CA) survives
upgrades until it is due.

The control plane is this module's own, without dra-extender: the chart installs cluster-wide objects
under the names the shared fixture uses (ClusterRole dra-extender, the webhook configurations), and
its webhooks point at pods that never run here (there is no kubelet). kube-controller-manager still
turns the Deployment into ReplicaSets and pods, which the Pod Security admission checks."""

from __future__ import annotations

import base64
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from e2e_api import Api, wait_for
from e2e_cluster import REPO_ROOT, ControlPlane, control_plane_binaries, running
from e2e_objects import create_stub_crds, delete_crds

sys.path.insert(0, str(REPO_ROOT / "tests" / "deploy"))
from helm_support import CHART, helm_or_skip, run_helm

NAMESPACE = "dra-extender"
RELEASE = "dra-extender"
REPOSITORY = "registry.example/dra-extender"
LABEL_HINT = f"kubectl label namespace {NAMESPACE} pod-security.kubernetes.io/enforce=restricted"
APPS = f"/apis/apps/v1/namespaces/{NAMESPACE}"
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
CERT_MANAGER_KINDS = (("Issuer", "issuers"), ("Certificate", "certificates"))
INSTALL = ("install", RELEASE, str(CHART), "-n", NAMESPACE, "--create-namespace")
UPGRADE = ("upgrade", RELEASE, str(CHART), "-n", NAMESPACE, "--reuse-values")


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    helm_or_skip()  # before starting a control plane for nothing
    plane = ControlPlane(
        control_plane_binaries(), tmp_path_factory.mktemp("helm"), scheduler_mode="in-tree", webhooks=False
    )
    with running(plane, []):
        assert plane.api is not None
        # The README's default certificate source; nothing issues certificates here.
        crds = create_stub_crds(plane.api, "cert-manager.io", CERT_MANAGER_KINDS)
        yield plane
        delete_crds(plane.api, crds)


@pytest.fixture(scope="module")
def api(plane: ControlPlane) -> Api:
    assert plane.api is not None
    return plane.api


class Helm:
    """helm as the cluster admin, with its own config and cache directories."""

    def __init__(self, binary: str, plane: ControlPlane, home: Path) -> None:
        self.binary, self.plane, self.home = binary, plane, home

    def __call__(self, *args: str) -> tuple[int, str, str]:
        env = {f"HELM_{kind}_HOME": str(self.home / kind.lower()) for kind in ("CACHE", "CONFIG", "DATA")}
        result = run_helm(self.binary, *args, kubeconfig=str(self.plane.admin.kubeconfig), env=env)
        return result.returncode, result.stdout, result.stderr

    def ok(self, *args: str) -> str:
        code, out, err = self(*args)
        assert code == 0, f"helm {' '.join(args)} failed ({code}):\n{err}\n{out}"
        return out


@pytest.fixture
def helm(plane: ControlPlane, tmp_path: Path, api: Api) -> Iterator[Helm]:
    """helm; afterwards the release is uninstalled and the namespace deleted, whatever the test did."""
    runner = Helm(helm_or_skip(), plane, tmp_path)
    yield runner
    runner("uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout=60s")
    for pod in api.items(PODS):
        api.delete(f"{PODS}/{pod['metadata']['name']}", grace_period_seconds=0)
    api.delete(f"/api/v1/namespaces/{NAMESPACE}")
    wait_for("the namespace gone", lambda: api.get_or_none(f"/api/v1/namespaces/{NAMESPACE}") is None)


def _deployment(api: Api) -> dict[str, Any]:
    return api.get(f"{APPS}/deployments/dra-extender")


def _current_pods(api: Api, wanted: int) -> list[dict[str, Any]]:
    """The pods of the Deployment's current template, once the controllers have made `wanted` of them (a
    rolling update makes one at a time here: no pod gets ready without a kubelet)."""
    deployment = _deployment(api)
    if (deployment.get("status") or {}).get("observedGeneration") != deployment["metadata"]["generation"]:
        return []
    revision = deployment["metadata"].get("annotations", {}).get("deployment.kubernetes.io/revision")
    current = [rs for rs in api.items(f"{APPS}/replicasets")
               if rs["metadata"].get("annotations", {}).get("deployment.kubernetes.io/revision") == revision]
    if len(current) != 1:
        return []
    template_hash = current[0]["metadata"]["labels"]["pod-template-hash"]
    pods = api.items(PODS, labelSelector=f"pod-template-hash={template_hash}")
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    if len(pods) < wanted:
        return []
    assert all(p["metadata"]["annotations"] == annotations for p in pods)
    return pods


def test_readme_install_label_and_upgrade_that_rolls_the_pods(
    plane: ControlPlane, api: Api, helm: Helm
) -> None:
    # The README's commands, REGISTRY=registry.example.
    out = helm.ok(*INSTALL, "--set", f"image.repository={REPOSITORY}")
    assert "STATUS: deployed" in out
    assert LABEL_HINT in out, "NOTES.txt must say how to label the namespace --create-namespace made"
    assert "dra-extender.io/scheduler=enabled" in out

    namespace = api.get(f"/api/v1/namespaces/{NAMESPACE}")
    assert "pod-security.kubernetes.io/enforce" not in namespace["metadata"].get("labels", {})
    first = _deployment(api)
    pods = wait_for("the first pods", lambda: _current_pods(api, 2))
    assert {p["spec"]["containers"][0]["image"] for p in pods} == {f"{REPOSITORY}:0.1.0"}

    labelled = plane.kubectl(*LABEL_HINT.split()[1:])
    assert labelled.returncode == 0, labelled.stderr
    assert "violate" not in labelled.stderr, f"the pods break the restricted profile:\n{labelled.stderr}"
    # The label is enforced: a pod the restricted profile forbids is refused in that namespace.
    refused = plane.kubectl("run", "unconfined", "-n", NAMESPACE, "--image=busybox", "--dry-run=server")
    assert refused.returncode != 0 and "violates PodSecurity" in refused.stderr, refused.stderr

    out = helm.ok(*UPGRADE, "--set", "scheduler.name=foo")
    assert LABEL_HINT not in out, "NOTES.txt repeats the label command although the label is there"
    second = _deployment(api)
    assert second["metadata"]["generation"] == first["metadata"]["generation"] + 1
    annotations = (first["spec"]["template"]["metadata"]["annotations"],
                   second["spec"]["template"]["metadata"]["annotations"])
    assert annotations[0]["checksum/config"] != annotations[1]["checksum/config"]
    config = api.get(f"/api/v1/namespaces/{NAMESPACE}/configmaps/dra-scheduler-config")
    assert yaml.safe_load(config["data"]["config.yaml"])["profiles"][0]["schedulerName"] == "foo"
    # New pods for the new template, admitted under the restricted label.
    wait_for("the first rolled pod", lambda: _current_pods(api, 1))

    # Refused values change nothing: the release stays at revision 2, the Deployment at its generation.
    code, _, err = helm(*UPGRADE, "--set", "monitoring.enabld=true")
    assert code != 0 and "additional properties 'enabld' not allowed" in err, err
    assert "REVISION: 2" in helm.ok("status", RELEASE, "-n", NAMESPACE)
    assert _deployment(api)["metadata"]["generation"] == second["metadata"]["generation"]

    # What `helm test` would create (it cannot run a pod without a kubelet) passes the restricted profile.
    hooks = helm.ok("get", "hooks", RELEASE, "-n", NAMESPACE)
    assert {d["kind"] for d in yaml.safe_load_all(hooks) if d} == {"Pod", "NetworkPolicy"}
    admitted = plane.kubectl("create", "--dry-run=server", "-f", "-", stdin=hooks)
    assert admitted.returncode == 0 and "Warning" not in admitted.stderr, admitted.stderr


def test_refused_install_creates_nothing(api: Api, helm: Helm) -> None:
    code, _, err = helm(*INSTALL, "--set", "replicas=two")
    assert code != 0 and "at '/replicas': got string, want null or integer" in err, err
    assert api.get_or_none(f"/api/v1/namespaces/{NAMESPACE}") is None
    assert api.get_or_none("/apis/rbac.authorization.k8s.io/v1/clusterroles/dra-extender") is None


def _tls(api: Api) -> dict[str, Any]:
    return api.get(f"/api/v1/namespaces/{NAMESPACE}/secrets/dra-extender-tls")


def _client_issued_by_the_ca(api: Api, tls: dict[str, Any]) -> dict[str, Any]:
    """Secret dra-extender-kube-scheduler-client, checked to hold a client certificate of `tls`'s CA."""
    from cryptography import x509

    client = api.get(f"/api/v1/namespaces/{NAMESPACE}/secrets/dra-extender-kube-scheduler-client")
    assert client["data"]["ca.crt"] == tls["data"]["ca.crt"]
    certificate = x509.load_pem_x509_certificate(base64.b64decode(client["data"]["tls.crt"]))
    certificate.verify_directly_issued_by(x509.load_pem_x509_certificate(base64.b64decode(tls["data"]["ca.crt"])))
    return client


def _ca_bundles(api: Api) -> set[str]:
    hooks = api.get("/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/dra-extender")
    return {hook["clientConfig"]["caBundle"] for hook in hooks["webhooks"]}


def test_self_signed_certificate_is_kept_until_due_then_renewed_and_the_pod_rolls(
    plane: ControlPlane, api: Api, helm: Helm
) -> None:
    # One replica: the test follows one pod through the certificate's renewal (HA runs two).
    helm.ok(*INSTALL, "--set", "mode=scheduler-config", "--set", "certificates.source=self-signed",
            "--set", "replicas=1")
    secret, first = _tls(api), _deployment(api)
    assert _ca_bundles(api) == {secret["data"]["ca.crt"]}
    client = _client_issued_by_the_ca(api, secret)  # kube-scheduler's, for the extender's mutual TLS
    [pod] = wait_for("the pod", lambda: _current_pods(api, 1))
    # system-cluster-critical outside kube-system: admitted, and resolved to its priority.
    assert pod["spec"]["priorityClassName"] == "system-cluster-critical"
    assert pod["spec"]["priority"] == 2000000000

    helm.ok(*UPGRADE, "--set", "nodeSelector.pool=system")
    kept, second = _tls(api), _deployment(api)
    assert kept["data"] == secret["data"], "an upgrade before renew-after must keep the certificate"
    assert _client_issued_by_the_ca(api, kept)["data"] == client["data"], "and kube-scheduler's"
    assert (second["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
            == first["spec"]["template"]["metadata"]["annotations"]["checksum/config"])

    # Due: the next upgrade makes a new CA and certificate, gives the webhooks the new CA, rolls the pod.
    api.patch(f"/api/v1/namespaces/{NAMESPACE}/secrets/dra-extender-tls",
              {"metadata": {"annotations": {"dra-extender.io/renew-after": "1"}}})
    helm.ok(*UPGRADE)
    renewed, third = _tls(api), _deployment(api)
    assert renewed["data"]["tls.crt"] != secret["data"]["tls.crt"]
    assert renewed["data"]["ca.crt"] != secret["data"]["ca.crt"]
    assert _ca_bundles(api) == {renewed["data"]["ca.crt"]}
    assert _client_issued_by_the_ca(api, renewed)["data"]["tls.crt"] != client["data"]["tls.crt"]
    assert int(renewed["metadata"]["annotations"]["dra-extender.io/renew-after"]) > 1
    assert base64.b64decode(renewed["data"]["tls.key"]).startswith(b"-----BEGIN")
    assert (third["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
            != second["spec"]["template"]["metadata"]["annotations"]["checksum/config"])
