"""deploy/helm/dra-extender renders the same objects as the kustomize overlays, mode by mode, so the two
never drift; `helm lint` passes; combinations that cannot work refuse to render.

helm is the Go module helm.sh/helm/v3/cmd/helm at a pinned version, built on first use into
~/.cache/dra-extender (tests/deploy/build_helm.py); without Go these tests skip and say so."""

from __future__ import annotations

import base64
import difflib
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from deploy_manifests import DEPLOY, NAMESPACE, find, find_kubectl, render

CHART = DEPLOY / "helm" / "dra-extender"
KUBE_VERSION = "1.37.1"
# Labels only the chart sets (Helm's conventions); the base kustomization sets part-of on some objects.
CHART_ONLY_LABELS = {"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/part-of"}
KUBECTL = find_kubectl()
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl (for `kubectl kustomize`) is not installed")


@pytest.fixture(scope="session")
def helm() -> str:
    import build_helm
    from build_control_plane import BuildUnavailable

    try:
        return str(build_helm.ensure_built())
    except BuildUnavailable as missing:
        pytest.skip(f"helm is not available: {missing}")
    except RuntimeError as failed:  # e.g. no network to the Go module proxy
        pytest.skip(f"helm could not be built with `go install`: {str(failed)[:500]}")


def helm_template(helm: str, *settings: str) -> list[dict[str, Any]]:
    result = _run_template(helm, settings)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def helm_template_error(helm: str, *settings: str) -> str:
    result = _run_template(helm, settings)
    assert result.returncode != 0, f"rendered although it should refuse: {settings}"
    return result.stderr


def _run_template(helm: str, settings: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    args = [helm, "template", "dra-extender", str(CHART), "--namespace", NAMESPACE,
            "--kube-version", KUBE_VERSION]
    for setting in settings:
        args += ["--set", setting]
    return subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)


def kustomize(tmp_path: Path, resources: list[Path], components: list[Path]) -> list[dict[str, Any]]:
    """What an admin writes to combine an overlay (or the base) with components."""
    directory = tmp_path / "overlay"
    directory.mkdir(exist_ok=True)
    (directory / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(r, directory) for r in resources],
        "components": [os.path.relpath(c, directory) for c in components],
    }))
    assert KUBECTL is not None
    return render(KUBECTL, directory)


def _by_key(docs: list[dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): d for d in docs}


_WHITESPACE = {"expression": " ".join, "caBundle": "".join}


def _canonical(value: Any) -> Any:
    """Whitespace that means nothing: kustomize re-encodes folded (>-) scalars whose lines are more
    indented with extra blank lines (CEL ignores them), and wraps the base64 it copies into caBundle."""
    if isinstance(value, dict):
        return {k: _WHITESPACE[k](v.split()) if k in _WHITESPACE and isinstance(v, str) else _canonical(v)
                for k, v in value.items()}
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    return value


def normalized(docs: list[dict[str, Any]], hashed_names: dict[str, str]) -> dict[tuple[str, str, str], Any]:
    """Objects without the chart's own labels, kustomize's generated-name hashes replaced by the plain names,
    in _canonical form."""
    text = orjson.dumps(_canonical(docs)).decode()
    for hashed, plain in hashed_names.items():
        text = text.replace(f'"{hashed}"', f'"{plain}"')
    out = []
    for doc in orjson.loads(text):
        labels = doc["metadata"].get("labels") or {}
        labels = {k: v for k, v in labels.items() if k not in CHART_ONLY_LABELS}
        doc["metadata"].pop("labels", None)
        if labels:
            doc["metadata"]["labels"] = labels
        out.append(doc)
    return _by_key(out)


def assert_same_objects(chart: list[dict[str, Any]], kustomized: list[dict[str, Any]]) -> None:
    plain_names = {d["metadata"]["name"] for d in chart}
    hashed = {}
    for doc in kustomized:
        name = doc["metadata"]["name"]
        match = re.fullmatch(r"(.+)-[a-z0-9]{10}", name)
        if doc["kind"] in ("ConfigMap", "Secret") and match and match.group(1) in plain_names:
            hashed[name] = match.group(1)
    ours, theirs = normalized(chart, hashed), normalized(kustomized, hashed)
    assert sorted(ours) == sorted(theirs)
    for key in theirs:
        if ours[key] != theirs[key]:
            diff = difflib.unified_diff(yaml.safe_dump(theirs[key]).splitlines(),
                                        yaml.safe_dump(ours[key]).splitlines(), "kustomize", "helm",
                                        lineterm="")
            pytest.fail(f"{key} differs:\n" + "\n".join(diff))


MODES = {"second-scheduler": "second-scheduler", "scheduler-config": "scheduler-config"}


@pytest.mark.parametrize("mode", MODES)
def test_chart_renders_the_overlay(helm: str, tmp_path: Path, mode: str) -> None:
    assert_same_objects(helm_template(helm, f"mode={mode}"),
                        kustomize(tmp_path, [DEPLOY / "overlays" / mode], []))


@pytest.mark.parametrize("mode", MODES)
def test_chart_with_controllers_and_monitoring_renders_the_overlay_with_those_components(
    helm: str, tmp_path: Path, mode: str
) -> None:
    chart = helm_template(helm, f"mode={mode}", "controllers.enabled=true", "monitoring.enabled=true")
    kustomized = kustomize(tmp_path, [DEPLOY / "overlays" / mode],
                           [DEPLOY / "components" / name for name in ("eviction-controller", "monitoring")])
    assert_same_objects(chart, kustomized)


def _manual_certs(tmp_path: Path) -> Path:
    from webhook import certs

    component = tmp_path / "manual-certs"
    shutil.copytree(DEPLOY / "components" / "manual-certs", component)
    ca = certs.generate_ca("test CA")
    serving = certs.generate_serving_cert(ca, certs.service_dns_names("dra-extender-webhook", NAMESPACE), [])
    certs.write_serving_files(component / "certs", ca, serving)
    return component


def _without_pem(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Certificates differ on every render: blank them after checking them separately."""
    for doc in docs:
        if doc["kind"] == "Secret":
            doc["data"] = dict.fromkeys(doc["data"], "<pem>")
        for hook in doc.get("webhooks", []):
            hook["clientConfig"]["caBundle"] = "<pem>"
    return docs


def test_self_signed_certificates_match_the_manual_certs_component(helm: str, tmp_path: Path) -> None:
    from cryptography import x509

    chart = helm_template(helm, "certificates.source=self-signed")
    secret = find(chart, "Secret", "dra-extender-tls")
    ca_pem = base64.b64decode(secret["data"]["ca.crt"])
    for doc in chart:
        for hook in doc.get("webhooks", []):
            assert base64.b64decode(hook["clientConfig"]["caBundle"]) == ca_pem, hook["name"]
    serving = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    serving.verify_directly_issued_by(x509.load_pem_x509_certificate(ca_pem))
    names = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "dra-extender-webhook.dra-extender.svc" in names.get_values_for_type(x509.DNSName)
    kustomized = kustomize(tmp_path, [DEPLOY / "base"],
                           [_manual_certs(tmp_path), DEPLOY / "components" / "second-scheduler"])
    assert_same_objects(_without_pem(chart), _without_pem(kustomized))


def test_provided_certificates_use_the_given_secret_and_ca_bundle(helm: str, tmp_path: Path) -> None:
    component = _manual_certs(tmp_path)
    bundle = base64.b64encode((component / "certs" / "ca.crt").read_bytes()).decode()
    chart = helm_template(helm, "mode=scheduler-config", "certificates.source=provided",
                          f"certificates.provided.caBundle={bundle}")
    kustomized = [d for d in kustomize(tmp_path, [DEPLOY / "base"],
                                       [component, DEPLOY / "components" / "scheduler-config"])
                  if d["kind"] != "Secret"]  # the user created it
    assert_same_objects(chart, kustomized)


def test_values_reach_the_objects(helm: str) -> None:
    docs = helm_template(helm, "mode=second-scheduler", "replicas=3", "image.repository=registry.example/dra",
                         "image.tag=9.9", "resources.limits.memory=8Gi", "networkPolicy.enabled=false",
                         "createNamespace=false", "scheduler.name=gpu-scheduler",
                         "extraArgs={--feature-gates=DRAWorkloadResourceClaims=true}",
                         "scheduler.extraArgs={--feature-gates=GenericWorkload=true}")
    deployment = find(docs, "Deployment", "dra-extender")
    assert deployment["spec"]["replicas"] == 3
    [extender, scheduler] = deployment["spec"]["template"]["spec"]["containers"]
    assert extender["image"] == "registry.example/dra:9.9"
    assert extender["args"][-1] == "--feature-gates=DRAWorkloadResourceClaims=true"
    assert scheduler["command"][-1] == "--feature-gates=GenericWorkload=true"
    assert extender["resources"]["limits"]["memory"] == "8Gi"
    assert not [d for d in docs if d["kind"] in ("NetworkPolicy", "Namespace")]
    config = yaml.safe_load(find(docs, "ConfigMap", "dra-scheduler-config")["data"]["config.yaml"])
    assert config["profiles"][0]["schedulerName"] == "gpu-scheduler"
    assert config["leaderElection"]["resourceName"] == "gpu-scheduler"
    docs = helm_template(helm, "mode=scheduler-config")
    policy = find(docs, "NetworkPolicy", "dra-extender-scheduler-config")
    ports = [p["port"] for p in policy["spec"]["ingress"][0]["ports"]]
    assert ports == [8888]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (["mode=bogus"], "mode must be"),
        (["certificates.source=vault"], "certificates.source must be"),
        (["certificates.source=provided"], "caBundle"),
        (["controllers.enabled=true", "controllers.leaderElection=false"], "leaderElection must be true"),
        (["replicas=0"], "at least 1"),
    ],
)
def test_combinations_that_cannot_work_refuse_to_render(helm: str, settings: list[str], message: str) -> None:
    assert message in helm_template_error(helm, *settings)


@pytest.mark.parametrize("mode", MODES)
def test_helm_lint_passes(helm: str, mode: str) -> None:
    result = subprocess.run([helm, "lint", str(CHART), "--strict", "--set", f"mode={mode}",
                             "--kube-version", KUBE_VERSION],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
