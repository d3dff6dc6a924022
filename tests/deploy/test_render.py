"""Every overlay, and each overlay with the optional eviction controller, rendered by `kubectl kustomize`:
the rendered objects are what the cluster gets, so the checks against the code run on them too."""

from __future__ import annotations

import base64
import os
import re
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy_manifests import (
    DEPLOY,
    EXTENDER_CONTAINER,
    NAMESPACE,
    OVERLAYS,
    container,
    find,
    find_e2e_binary,
    find_kubectl,
    flag_name,
    option_strings,
    render,
    serve_parser,
)

KUBECTL = find_kubectl()
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl (for `kubectl kustomize`) is not installed")
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration",
                  "ValidatingWebhookConfiguration", "MutatingAdmissionPolicy",
                  "MutatingAdmissionPolicyBinding"}


@cache
def _render(directory: Path) -> list[dict[str, Any]]:
    assert KUBECTL is not None
    return render(KUBECTL, directory)


def _with_eviction_controller(tmp_path: Path, overlay: str) -> list[dict[str, Any]]:
    # What an admin writes to add the optional component; kustomize wants relative paths.
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"resources:\n- {os.path.relpath(DEPLOY / 'overlays' / overlay, tmp_path)}\n"
        f"components:\n- {os.path.relpath(DEPLOY / 'components' / 'eviction-controller', tmp_path)}\n"
    )
    return _render(tmp_path)


def _extender_args(docs: list[dict[str, Any]]) -> list[str]:
    return container(find(docs, "Deployment", "dra-extender"), EXTENDER_CONTAINER)["args"]


@pytest.fixture(scope="module", params=["base", *(f"overlays/{o}" for o in OVERLAYS)])
def rendered(request: pytest.FixtureRequest) -> list[dict[str, Any]]:
    return _render(DEPLOY / request.param)


def test_rendered_objects_are_namespaced_where_they_should_be(rendered: list[dict[str, Any]]) -> None:
    for doc in rendered:
        meta = doc["metadata"]
        if doc["kind"] in CLUSTER_SCOPED:
            assert "namespace" not in meta, f"{doc['kind']} {meta['name']}"
        elif doc["kind"] == "RoleBinding" and meta["name"] == "dra-extender-authentication-reader":
            assert meta["namespace"] == "kube-system"
        else:
            assert meta["namespace"] == NAMESPACE, f"{doc['kind']} {meta['name']}"


def test_rendered_extender_args_parse(rendered: list[dict[str, Any]]) -> None:
    serve_parser().parse_args(_extender_args(rendered))


def test_rendered_config_map_volumes_exist(rendered: list[dict[str, Any]]) -> None:
    config_maps = {d["metadata"]["name"] for d in rendered if d["kind"] == "ConfigMap"}
    pod = find(rendered, "Deployment", "dra-extender")["spec"]["template"]["spec"]
    for volume in pod["volumes"]:
        if "configMap" in volume:
            assert volume["configMap"]["name"] in config_maps


def test_second_scheduler_has_no_extender_service_and_loopback_config() -> None:
    docs = _render(DEPLOY / "overlays" / "second-scheduler")
    services = {d["metadata"]["name"] for d in docs if d["kind"] == "Service"}
    assert services == {"dra-extender-webhook", "dra-extender-metrics", "dra-scheduler-metrics"}
    deployment = find(docs, "Deployment", "dra-extender")
    names = [c["name"] for c in deployment["spec"]["template"]["spec"]["containers"]]
    assert names == [EXTENDER_CONTAINER, "kube-scheduler"]
    assert deployment["spec"]["replicas"] == 2
    assert "--extender-tls-cert-file" not in {flag_name(a) for a in _extender_args(docs)}


def test_scheduler_config_serves_the_extender_over_https() -> None:
    args = {flag_name(a) for a in _extender_args(_render(DEPLOY / "overlays" / "scheduler-config"))}
    assert {"--extender-tls-cert-file", "--extender-tls-private-key-file"} <= args


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_eviction_controller_composes_with_every_overlay(tmp_path: Path, overlay: str) -> None:
    docs = _with_eviction_controller(tmp_path, overlay)
    args = _extender_args(docs)
    assert "--controllers=taint-eviction,driver-loss" in args
    find(docs, "ClusterRole", "dra-extender-controllers")
    find(docs, "Role", "dra-extender-leader")
    if "--controllers" in option_strings(serve_parser()):
        serve_parser().parse_args(args)


def test_manual_certs_fill_the_secret_and_every_ca_bundle(tmp_path: Path) -> None:
    """The no-cert-manager path, as docs/operations.md describes it, with certificates from the code that
    `dra-extender certs` runs."""
    from webhook import certs

    component = tmp_path / "manual-certs"
    shutil.copytree(DEPLOY / "components" / "manual-certs", component)
    ca = certs.generate_ca("test CA")
    serving = certs.generate_serving_cert(ca, certs.service_dns_names("dra-extender-webhook", NAMESPACE), [])
    certs.write_serving_files(component / "certs", ca, serving)
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"resources:\n- {os.path.relpath(DEPLOY / 'base', overlay)}\n"
        "components:\n- ../manual-certs\n"
        f"- {os.path.relpath(DEPLOY / 'components' / 'second-scheduler', overlay)}\n"
    )
    docs = _render(overlay)
    secret = find(docs, "Secret", "dra-extender-tls")
    assert secret["type"] == "kubernetes.io/tls"
    assert set(secret["data"]) == {"tls.crt", "tls.key", "ca.crt"}
    ca_bundle = base64.b64decode(secret["data"]["ca.crt"])
    assert ca_bundle == ca.certificate_pem()
    hooks = [hook for doc in docs if doc["kind"].endswith("WebhookConfiguration") for hook in doc["webhooks"]]
    assert len(hooks) == 6
    for hook in hooks:
        assert base64.b64decode(hook["clientConfig"]["caBundle"]) == ca_bundle, hook["name"]
    assert not [d for d in docs if d["apiVersion"].startswith("cert-manager.io/")]


KUBE_SCHEDULER = find_e2e_binary("kube-scheduler")


@pytest.mark.skipif(KUBE_SCHEDULER is None, reason="kube-scheduler of the end-to-end suite is not built")
@pytest.mark.parametrize("config", ["scheduler-config/kube-scheduler-config.yaml",
                                    "second-scheduler/dra-scheduler-config.yaml"])
def test_kube_scheduler_loads_the_configuration(tmp_path: Path, config: str) -> None:
    """kube-scheduler's own strict decoding and validation (extenders, profiles, leader election)."""
    from webhook import certs

    assert KUBE_SCHEDULER is not None
    kubeconfig = tmp_path / "kubeconfig"  # never contacted: --write-config-to exits before connecting
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    ca = certs.generate_ca("test CA")
    client = certs.generate_client_cert(ca, "kube-scheduler")  # what `dra-extender certs --client` writes
    files = {"caFile": ca.certificate_pem(), "certFile": client.certificate_pem(),
             "keyFile": client.key_pem()}
    text = (DEPLOY / "components" / config).read_text()
    # The node-local paths of the real configuration, pointed at test files (kube-scheduler reads the
    # client certificate and key while it builds its extenders).
    text = re.sub(r"kubeconfig: .*", f"kubeconfig: {kubeconfig}", text)
    for field, pem in files.items():
        (tmp_path / field).write_bytes(pem)
        text = re.sub(rf"{field}: .*", f"{field}: {tmp_path / field}", text)
    (tmp_path / "config.yaml").write_text(text)
    result = subprocess.run(
        [KUBE_SCHEDULER, f"--config={tmp_path / 'config.yaml'}", f"--write-config-to={tmp_path / 'out.yaml'}",
         "--secure-port=0", "--authentication-skip-lookup"],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    written = yaml.safe_load((tmp_path / "out.yaml").read_text())
    [extender] = written["extenders"]
    assert extender["nodeCacheCapable"] is True and extender["bindVerb"] == "bind"
    if extender.get("enableHTTPS"):  # over the network: kube-scheduler presents its client certificate
        assert {"caFile", "certFile", "keyFile"} <= set(extender["tlsConfig"])
    for profile in written["profiles"]:
        assert {"name": "DynamicResources", "weight": 0} in profile["plugins"]["multiPoint"]["disabled"]
