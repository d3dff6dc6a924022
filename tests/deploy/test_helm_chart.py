"""deploy/helm/dra-extender renders the same objects as the kustomize overlays, mode by mode, so the two
never drift; `helm lint` passes; values.schema.json refuses unknown keys and wrong types; combinations
that cannot work refuse to render; the pod rolls when what it reads changes; the chart README is the one
chart_readme.py writes.

helm is the Go module helm.sh/helm/v3/cmd/helm at a pinned version, built on first use into
~/.cache/dra-extender (tests/deploy/go_tools.py); without Go these tests skip and say so. The same
chart on a real API server: tests/e2e/test_helm_install.py."""

from __future__ import annotations

import base64
import difflib
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from deploy_manifests import DEPLOY, NAMESPACE, find, find_kubectl, render
from helm_support import CHART, KUBE_VERSION, helm_or_skip, run_helm

sys.path.insert(0, str(DEPLOY / "helm"))
import chart_readme

# Labels only the chart sets (Helm's conventions); the base kustomization sets part-of on some objects.
CHART_ONLY_LABELS = {"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/part-of"}
# Annotations only the chart sets: the pod's config hash, and when the chart renews its own certificate.
CHART_ONLY_ANNOTATIONS = {"checksum/config", "dra-extender.io/renew-after"}
KUBECTL = find_kubectl()
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl (for `kubectl kustomize`) is not installed")


@pytest.fixture(scope="session")
def helm() -> str:
    return helm_or_skip()


def helm_template(helm: str, *settings: str, tests: bool = False) -> list[dict[str, Any]]:
    """The chart's objects, without the `helm test` hooks unless `tests`."""
    result = _run_template(helm, settings, tests)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def helm_template_error(helm: str, *settings: str) -> str:
    result = _run_template(helm, settings, tests=True)
    assert result.returncode != 0, f"rendered although it should refuse: {settings}"
    return result.stderr


def _run_template(helm: str, settings: tuple[str, ...], tests: bool) -> subprocess.CompletedProcess[str]:
    args = ["template", "dra-extender", str(CHART), "--namespace", NAMESPACE, "--kube-version", KUBE_VERSION]
    if not tests:
        args.append("--skip-tests")
    for setting in settings:  # "key=value" for --set, or "--set-json key=value" and the like
        args += setting.split(" ", 1) if setting.startswith("--") else ["--set", setting]
    return run_helm(helm, *args)


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


def _without_chart_annotations(metadata: dict[str, Any]) -> None:
    annotations = {k: v for k, v in (metadata.pop("annotations", None) or {}).items()
                   if k not in CHART_ONLY_ANNOTATIONS}
    if annotations:
        metadata["annotations"] = annotations


def normalized(docs: list[dict[str, Any]], hashed_names: dict[str, str]) -> dict[tuple[str, str, str], Any]:
    """Objects without the chart's own labels and annotations, kustomize's generated-name hashes replaced by
    the plain names, in _canonical form."""
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
        _without_chart_annotations(doc["metadata"])
        if doc["kind"] == "Deployment":
            _without_chart_annotations(doc["spec"]["template"]["metadata"])
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
    assert_same_objects(helm_template(helm, f"mode={mode}", "createNamespace=true"),
                        kustomize(tmp_path, [DEPLOY / "overlays" / mode], []))


@pytest.mark.parametrize("mode", MODES)
def test_chart_with_controllers_and_monitoring_renders_the_overlay_with_those_components(
    helm: str, tmp_path: Path, mode: str
) -> None:
    chart = helm_template(helm, f"mode={mode}", "createNamespace=true", "controllers.enabled=true",
                          "monitoring.enabled=true")
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

    chart = helm_template(helm, "certificates.source=self-signed", "createNamespace=true")
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
                          "createNamespace=true", f"certificates.provided.caBundle={bundle}")
    kustomized = [d for d in kustomize(tmp_path, [DEPLOY / "base"],
                                       [component, DEPLOY / "components" / "scheduler-config"])
                  if d["kind"] != "Secret"]  # the user created it
    assert_same_objects(chart, kustomized)


def test_values_reach_the_objects(helm: str) -> None:
    docs = helm_template(helm, "mode=second-scheduler", "replicas=3", "image.repository=registry.example/dra",
                         "image.tag=9.9", "resources.limits.memory=8Gi", "networkPolicy.enabled=false",
                         "scheduler.name=gpu-scheduler",
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
        (["mode=bogus"], "at '/mode': value must be one of"),
        (["certificates.source=vault"], "at '/certificates/source': value must be one of"),
        (["certificates.source=provided"], "caBundle"),
        (["controllers.enabled=true", "controllers.leaderElection=false"], "leaderElection must be true"),
        (["podLabels.app\\.kubernetes\\.io/name=other"], "podLabels cannot set app.kubernetes.io/name"),
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


# ---- values.schema.json --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("monitoring.enabld=true", "at '/monitoring': additional properties 'enabld' not allowed"),
        ("replica=3", "additional properties 'replica' not allowed"),
        ("image.digest=sha256:0", "at '/image': additional properties 'digest' not allowed"),
        ("replicas=two", "at '/replicas': got string, want null or integer"),
        ("replicas=0", "at '/replicas': minimum: got 0"),
        ("--set-string networkPolicy.enabled=yes", "at '/networkPolicy/enabled': got string, want boolean"),
        ("mode=bogus", "at '/mode': value must be one of"),
        ("certificates.source=vault", "at '/certificates/source': value must be one of"),
        ("image.pullPolicy=Sometimes", "at '/image/pullPolicy'"),
        ("nodeSelector.disk=1", "at '/nodeSelector/disk': got number, want string"),
        ("tolerations[0].operator=Maybe", "at '/tolerations/0/operator'"),
        ("tolerations[0].keys=a", "at '/tolerations/0': additional properties 'keys' not allowed"),
        ("affinity.nodeAfinity.x=1", "at '/affinity': additional properties 'nodeAfinity' not allowed"),
        ("imagePullSecrets[0].nam=regcred", "at '/imagePullSecrets/0'"),
        ("resources.limits.memory=2 Gi", "at '/resources/limits/memory'"),
        ("scheduler.name=Not_A_Name", "at '/scheduler/name'"),
        ("extraArgs={serve}", "at '/extraArgs/0'"),
        ("podAnnotations.a=1", "at '/podAnnotations/a': got number, want string"),
        ("priorityClassName=7", "at '/priorityClassName': got number"),
        ("monitoring.interval=soon", "at '/monitoring/interval'"),
    ],
)
def test_schema_refuses_unknown_keys_and_wrong_types(helm: str, setting: str, message: str) -> None:
    assert message in helm_template_error(helm, setting)


def _schema_objects(node: Any, where: str) -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(node, dict):
        if node.get("type") == "object" or "object" in (node.get("type") or []):
            yield where, node
        for key, child in node.items():
            yield from _schema_objects(child, f"{where}/{key}")
    elif isinstance(node, list):
        for index, child in enumerate(node):
            yield from _schema_objects(child, f"{where}/{index}")


def test_every_object_in_the_schema_is_closed_or_a_typed_map() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    open_objects = []
    for where, node in _schema_objects(schema, "#"):
        extra = node.get("additionalProperties")
        if extra is False:
            assert node.get("properties"), f"{where}: closed but lists no properties"
        elif not (isinstance(extra, dict) and extra):
            open_objects.append(where)
    assert not open_objects, f"objects taking any key: {open_objects}"


def _differences(schema: dict[str, Any], values: dict[str, Any], prefix: str = "") -> Iterator[str]:
    """Keys that one of values.yaml and the schema has and the other has not, descending into the chart's
    own objects (not into Kubernetes types from $defs such as resources: values.yaml need not list those)."""
    properties = schema.get("properties") or {}
    for name in sorted(set(properties) ^ set(values)):
        yield f"{prefix}{name} ({'schema' if name in properties else 'values.yaml'} only)"
    for name in sorted(set(properties) & set(values)):
        child = properties[name]
        if "$ref" not in child and child.get("additionalProperties") is False:
            yield from _differences(child, values[name], f"{prefix}{name}.")


def test_schema_and_values_yaml_name_the_same_keys() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert not list(_differences(schema, values))


def test_chart_readme_is_the_one_written_from_values_yaml() -> None:
    assert (CHART / "README.md").read_text() == chart_readme.render(), (
        "deploy/helm/dra-extender/README.md is stale: run `python deploy/helm/chart_readme.py`"
    )


def test_chart_readme_refuses_an_undocumented_value(tmp_path: Path) -> None:
    chart = tmp_path / "chart"
    shutil.copytree(CHART, chart)
    values = chart / "values.yaml"
    values.write_text(values.read_text().replace("  # The ServiceMonitor's scrape interval.\n", ""))
    with pytest.raises(chart_readme.ValuesError, match=r"monitoring\.interval has no comment"):
        chart_readme.render(chart)


# ---- what the pod reads, and the usual pod values ------------------------------------------------


def _pod_template(docs: list[dict[str, Any]]) -> dict[str, Any]:
    template: dict[str, Any] = find(docs, "Deployment", "dra-extender")["spec"]["template"]
    return template


def _checksum(helm: str, *settings: str) -> str:
    value: str = _pod_template(helm_template(helm, *settings))["metadata"]["annotations"]["checksum/config"]
    return value


@pytest.mark.parametrize("source", ["cert-manager", "provided"])
def test_config_checksum_follows_the_second_schedulers_configuration(helm: str, source: str) -> None:
    certs = [f"certificates.source={source}", "certificates.provided.caBundle=Zm9v"]
    default = _checksum(helm, *certs)
    assert _checksum(helm, *certs) == default, "the same values must give the same pod template"
    assert _checksum(helm, *certs, "replicas=3", "extraArgs={--log-level=debug}") == default
    assert _checksum(helm, *certs, "scheduler.name=foo") != default
    assert _checksum(helm, *certs, "--set-json scheduler.extraArgs=[\"--v=4\"]") == default


def test_config_checksum_follows_the_certificate_the_chart_makes(helm: str) -> None:
    # helm template cannot look up the existing Secret, so each render makes a new certificate.
    docs = helm_template(helm, "certificates.source=self-signed")
    again = helm_template(helm, "certificates.source=self-signed")
    assert (_pod_template(docs)["metadata"]["annotations"]["checksum/config"]
            != _pod_template(again)["metadata"]["annotations"]["checksum/config"])
    renew_after = int(find(docs, "Secret", "dra-extender-tls")["metadata"]["annotations"]
                      ["dra-extender.io/renew-after"])
    serving = _serving_certificate(docs)
    assert abs(renew_after - (serving.not_valid_after_utc.timestamp() - 30 * 86400)) < 120


def _serving_certificate(docs: list[dict[str, Any]]) -> Any:
    from cryptography import x509

    secret = find(docs, "Secret", "dra-extender-tls")
    return x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        (["mode=second-scheduler"], None),
        (["mode=scheduler-config"], "system-cluster-critical"),
        (["mode=scheduler-config", "priorityClassName="], None),
        (["mode=second-scheduler", "priorityClassName=dra-critical"], "dra-critical"),
    ],
)
def test_priority_class_defaults_by_mode(helm: str, settings: list[str], expected: str | None) -> None:
    spec = _pod_template(helm_template(helm, *settings))["spec"]
    assert spec.get("priorityClassName") == expected


def test_pod_values_reach_the_pod_and_the_test_pod(helm: str) -> None:
    docs = helm_template(
        helm,
        "--set-json imagePullSecrets=[{\"name\":\"regcred\"}]",
        "nodeSelector.pool=system",
        "--set-json tolerations=[{\"key\":\"dedicated\",\"operator\":\"Equal\",\"value\":\"system\","
        "\"effect\":\"NoSchedule\"}]",
        "--set-json affinity={\"nodeAffinity\":{\"requiredDuringSchedulingIgnoredDuringExecution\":"
        "{\"nodeSelectorTerms\":[{\"matchExpressions\":[{\"key\":\"zone\",\"operator\":\"In\","
        "\"values\":[\"a\"]}]}]}}}",
        "podAnnotations.example\\.com/owner=team-a",
        "podLabels.team=a",
        "image.tag=",
        tests=True,
    )
    template = _pod_template(docs)
    spec = template["spec"]
    assert spec["imagePullSecrets"] == [{"name": "regcred"}]
    assert spec["nodeSelector"] == {"pool": "system"}
    assert spec["tolerations"][0]["key"] == "dedicated"
    assert spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert template["metadata"]["annotations"]["example.com/owner"] == "team-a"
    assert "checksum/config" in template["metadata"]["annotations"]
    assert template["metadata"]["labels"] == {"team": "a", "app.kubernetes.io/name": "dra-extender"}
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    assert spec["containers"][0]["image"] == f"dra-extender:{app_version}"
    test_pod = find(docs, "Pod", "dra-extender-test")
    assert test_pod["spec"]["imagePullSecrets"] == spec["imagePullSecrets"]
    assert test_pod["spec"]["tolerations"] == spec["tolerations"]
    assert test_pod["spec"]["nodeSelector"] == spec["nodeSelector"]
    assert test_pod["spec"]["containers"][0]["image"] == spec["containers"][0]["image"]


def test_the_chart_renders_no_namespace_unless_asked(helm: str) -> None:
    assert not [d for d in helm_template(helm) if d["kind"] == "Namespace"]
    [namespace] = [d for d in helm_template(helm, "createNamespace=true") if d["kind"] == "Namespace"]
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


# ---- helm test -----------------------------------------------------------------------------------


@pytest.mark.parametrize("network_policy", [True, False])
def test_helm_test_asks_readyz_through_the_metrics_service(helm: str, network_policy: bool) -> None:
    docs = helm_template(helm, f"networkPolicy.enabled={str(network_policy).lower()}", tests=True)
    pod = find(docs, "Pod", "dra-extender-test")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
    service = find(docs, "Service", "dra-extender-metrics")
    [port] = [p for p in service["spec"]["ports"] if p["name"] == "metrics"]
    assert env["READYZ_URL"] == f"http://dra-extender-metrics.{NAMESPACE}.svc:{port['port']}/readyz"
    test_policy = ("NetworkPolicy", "dra-extender-test")
    policies = [d for d in docs if (d["kind"], d["metadata"]["name"]) == test_policy]
    if network_policy:
        [policy] = policies
        assert policy["metadata"]["annotations"]["helm.sh/hook"] == "test"
        rule = policy["spec"]["ingress"][0]
        assert rule["from"][0]["podSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
        assert rule["ports"] == [{"port": port["port"], "protocol": "TCP"}]
    else:
        assert not policies


class _Readyz(http.server.BaseHTTPRequestHandler):
    answers: list[int] = []

    def do_GET(self) -> None:
        status = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        body = b"ok\n" if status == 200 else b"cluster cache not synced yet\n"
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def readyz_server() -> Iterator[tuple[str, type[_Readyz]]]:
    handler = type("Handler", (_Readyz,), {"answers": [503, 200]})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/readyz", handler
    server.shutdown()
    thread.join(5)


def _readyz_check(helm: str, url: str, timeout_s: str) -> subprocess.CompletedProcess[str]:
    """The test pod's own command, run here with the pod's environment pointed at `url`."""
    pod = find(helm_template(helm, tests=True), "Pod", "dra-extender-test")
    command = pod["spec"]["containers"][0]["command"]
    assert command[:2] == ["python", "-c"]
    env = dict(os.environ, READYZ_URL=url, READYZ_TIMEOUT_SECONDS=timeout_s)
    return subprocess.run([sys.executable, "-c", command[2]], env=env, capture_output=True, text=True,
                          timeout=60, check=False)


def test_helm_test_pod_waits_for_readyz(helm: str, readyz_server: tuple[str, type[_Readyz]]) -> None:
    url, _ = readyz_server
    result = _readyz_check(helm, url, "20")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines() == [f"{url}: 503 cluster cache not synced yet", f"{url}: 200 ok"]


def test_helm_test_pod_fails_when_readyz_never_answers_ok(
    helm: str, readyz_server: tuple[str, type[_Readyz]]
) -> None:
    url, handler = readyz_server
    handler.answers = [503]
    result = _readyz_check(helm, url, "1")
    assert result.returncode == 1
    assert "did not answer 200 in time" in result.stderr
