"""deploy/ without a cluster: every file a kustomization names exists and parses, and the manifests agree
with the code (flags, ports, URL paths, webhook routes and failure behaviour, scheduler configuration)."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
from deploy_manifests import (
    DEPLOY,
    EXTENDER_CONTAINER,
    NAMESPACE,
    REPO_ROOT,
    SERVICE_ACCOUNT,
    arg_value,
    container,
    find,
    flag_name,
    json_patch_args,
    kustomization,
    kustomization_dirs,
    load_docs,
    load_one,
    option_strings,
    referenced_files,
    resource_docs,
    serve_parser,
)

from allocator import FeatureGates
from extender.http.server import DEFAULT_PREFIX, ExtenderServer
from extender.state.cache import ClusterCache
from extender.wiring import Cluster, build_scheduler
from webhook.admission import AdmissionHandler
from webhook.server import build_app

BASE = DEPLOY / "base"
BASE_DOCS = resource_docs(BASE)
DEPLOYMENT = find(BASE_DOCS, "Deployment", "dra-extender")
EXTENDER = container(DEPLOYMENT, EXTENDER_CONTAINER)
SCHEDULER_CONFIG = DEPLOY / "components" / "scheduler-config"
SECOND_SCHEDULER = DEPLOY / "components" / "second-scheduler"
MANUAL_CERTS = DEPLOY / "components" / "manual-certs"
CERT_MANAGER = DEPLOY / "components" / "cert-manager"
EVICTION = DEPLOY / "components" / "eviction-controller"
KUBE_SCHEDULER_CONFIGS = {
    "scheduler-config": SCHEDULER_CONFIG / "kube-scheduler-config.yaml",
    "second-scheduler": SECOND_SCHEDULER / "dra-scheduler-config.yaml",
}


def _routes(app: Any) -> set[tuple[str, str]]:
    return {(route.method, route.resource.canonical) for route in app.router.routes()}


@pytest.fixture(scope="module")
def extender_server() -> ExtenderServer:
    cache = ClusterCache.from_objects([], FeatureGates())
    return ExtenderServer(build_scheduler(Cluster(cache)))


# ---- structure ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("directory", kustomization_dirs(), ids=lambda d: str(d.relative_to(DEPLOY)))
def test_every_referenced_file_exists_and_parses(directory: Path) -> None:
    spec = kustomization(directory)
    expected_kind = "Component" if directory.parent.name == "components" else "Kustomization"
    assert spec["kind"] == expected_kind
    referenced = list(referenced_files(directory))
    # manual-certs names only files `dra-extender certs` generates (tested in test_render.py).
    assert referenced or directory == MANUAL_CERTS, f"{directory}: names no files"
    for field, path in referenced:
        assert path.exists(), f"{directory}/kustomization.yaml {field}: {path} does not exist"
        if path.is_dir():
            assert (path / "kustomization.yaml").is_file(), f"{path}: not a kustomization"
            if field == "components":
                assert kustomization(path)["kind"] == "Component"
            continue
        docs = load_docs(path)
        assert docs, f"{path}: empty"
        if field == "resources":
            for doc in docs:
                assert doc.get("apiVersion") and doc.get("kind") and doc.get("metadata", {}).get("name"), (
                    f"{path}: a document without apiVersion, kind or metadata.name"
                )


def test_every_yaml_file_under_deploy_is_used() -> None:
    used = {path.resolve() for d in kustomization_dirs() for _, path in referenced_files(d)}
    used |= {(d / "kustomization.yaml").resolve() for d in kustomization_dirs()}
    # The Helm chart is not kustomize's: tests/deploy/test_helm_chart.py renders it and compares.
    unused = [p for p in DEPLOY.rglob("*.yaml") if p.resolve() not in used and "helm" not in p.parts]
    assert not unused, f"YAML files no kustomization references: {unused}"


def test_namespaced_objects_live_in_the_extender_namespace() -> None:
    for doc in BASE_DOCS:
        if doc["kind"] in ("Namespace", "ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration",
                           "ValidatingWebhookConfiguration"):
            assert "namespace" not in doc["metadata"]
        else:
            assert doc["metadata"]["namespace"] == NAMESPACE, f"{doc['kind']} {doc['metadata']['name']}"
    assert kustomization(BASE)["namespace"] == NAMESPACE


def test_overlays_combine_the_base_with_a_certificate_source_and_a_scheduling_mode() -> None:
    expected = {
        "cert-manager": ["../../components/cert-manager"],
        "scheduler-config": ["../../components/cert-manager", "../../components/kube-scheduler-client-cert",
                             "../../components/scheduler-config"],
        "second-scheduler": ["../../components/cert-manager", "../../components/second-scheduler"],
    }
    for overlay, components in expected.items():
        spec = kustomization(DEPLOY / "overlays" / overlay)
        assert spec["resources"] == ["../../base"]
        assert spec["components"] == components


def test_manual_certs_component_takes_what_dra_extender_certs_writes_but_not_the_ca_key() -> None:
    from webhook import certs

    [generator] = kustomization(MANUAL_CERTS)["secretGenerator"]
    assert generator["name"] == "dra-extender-tls" and generator["namespace"] == NAMESPACE
    files = dict(entry.split("=", 1) for entry in generator["files"])
    assert files == {"tls.crt": f"certs/{certs.CERT_FILE}", "tls.key": f"certs/{certs.KEY_FILE}",
                     "ca.crt": f"certs/{certs.CA_CERT_FILE}"}
    assert (MANUAL_CERTS / ".gitignore").read_text().splitlines()[-1] == "certs/"


# ---- the extender container against `dra-extender serve` ------------------------------------------------


def test_container_args_are_serve_flags_and_parse() -> None:
    known = option_strings(serve_parser())
    args = EXTENDER["args"]
    assert args[0].startswith("--"), "the image's entrypoint is `dra-extender serve`: args are flags only"
    unknown = [a for a in args if flag_name(a) not in known]
    assert not unknown, f"not flags of `dra-extender serve`: {unknown}"
    parsed = serve_parser().parse_args(args)
    assert parsed.bind_address == "0.0.0.0"
    assert not parsed.snapshot and not parsed.kubeconfig  # in-cluster credentials


def test_container_args_appear_in_serve_help() -> None:
    help_text = subprocess.run(
        [str(Path(sys.executable).with_name("dra-extender")), "serve", "--help"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout
    all_args = [*EXTENDER["args"], *json_patch_args(SCHEDULER_CONFIG / "extender-mtls.yaml"),
                *json_patch_args(SECOND_SCHEDULER / "extender-args.yaml")]
    for arg in all_args:
        assert re.search(rf"(^|\s){re.escape(flag_name(arg))}(\s|$|\[|,)", help_text, re.MULTILINE), arg


def test_overlay_args_parse_together_with_the_base_args() -> None:
    mtls_args = json_patch_args(SCHEDULER_CONFIG / "extender-mtls.yaml")
    parsed = serve_parser().parse_args(EXTENDER["args"] + mtls_args)
    volume = _tls_mount_path()
    assert parsed.extender_tls_cert_file == f"{volume}/tls.crt"
    assert parsed.extender_tls_private_key_file == f"{volume}/tls.key"
    assert parsed.extender_client_ca_file == f"{volume}/ca.crt"


def test_eviction_component_args_match_the_controllers_flags() -> None:
    from extender.flags import add_controller_arguments

    parser = argparse.ArgumentParser()
    add_controller_arguments(parser)
    parsed = parser.parse_args(json_patch_args(EVICTION / "args.yaml"))
    assert "taint-eviction" in parsed.controllers
    assert parsed.leader_elect


def test_eviction_component_args_are_accepted_by_serve() -> None:
    if "--controllers" not in option_strings(serve_parser()):
        pytest.skip("`dra-extender serve` does not register the controllers' flags yet")
    serve_parser().parse_args(EXTENDER["args"] + json_patch_args(EVICTION / "args.yaml"))


def _tls_mount_path() -> str:
    mounts = {m["name"]: m["mountPath"] for m in EXTENDER["volumeMounts"]}
    return mounts["tls"]


def test_webhook_certificate_files_come_from_the_mounted_secret() -> None:
    args = EXTENDER["args"]
    volume = _tls_mount_path()
    assert arg_value(args, "--tls-cert-file") == f"{volume}/tls.crt"
    assert arg_value(args, "--tls-private-key-file") == f"{volume}/tls.key"
    volumes = {v["name"]: v for v in DEPLOYMENT["spec"]["template"]["spec"]["volumes"]}
    certificate = find(load_docs(CERT_MANAGER / "certificates.yaml"), "Certificate", "dra-extender-serving")
    assert volumes["tls"]["secret"]["secretName"] == certificate["spec"]["secretName"]


def test_ports_agree_between_flags_container_and_services() -> None:
    args = EXTENDER["args"]
    ports = {p["name"]: p["containerPort"] for p in EXTENDER["ports"]}
    assert ports == {
        "extender": int(arg_value(args, "--extender-port")),
        "debug": int(arg_value(args, "--debug-port")),
        "webhook": int(arg_value(args, "--webhook-port")),
    }
    services = {d["metadata"]["name"]: d for d in BASE_DOCS if d["kind"] == "Service"}
    assert set(services) == {"dra-extender", "dra-extender-webhook", "dra-extender-metrics"}
    for service in services.values():
        assert service["spec"]["selector"] == DEPLOYMENT["spec"]["selector"]["matchLabels"]
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in ports, f"{service['metadata']['name']}: unknown port {port}"
    assert [(p["port"], p["targetPort"]) for p in services["dra-extender-webhook"]["spec"]["ports"]] == [
        (443, "webhook")]
    metrics_ports = services["dra-extender-metrics"]["spec"]["ports"]
    assert {p["targetPort"] for p in metrics_ports} == {"debug", "webhook"}


def test_probes_use_the_debug_port_routes(extender_server: ExtenderServer) -> None:
    debug_routes = _routes(extender_server.debug_app())
    assert EXTENDER["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "debug"}
    assert EXTENDER["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "debug"}
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert ("GET", EXTENDER[probe]["httpGet"]["path"]) in debug_routes
    assert ("GET", "/metrics") in debug_routes


def test_webhook_routes_serve_metrics_too() -> None:
    routes = _routes(build_app(AdmissionHandler(lookup=None)))  # type: ignore[arg-type]
    assert {("POST", "/webhook/mutate"), ("POST", "/webhook/validate"), ("GET", "/metrics")} <= routes


# ---- the Deployment: safety --------------------------------------------------------------------------------


def test_deployment_runs_one_instance_at_a_time() -> None:
    assert DEPLOYMENT["spec"]["replicas"] == 1
    assert DEPLOYMENT["spec"]["strategy"] == {"type": "Recreate"}
    pdb = find(BASE_DOCS, "PodDisruptionBudget", "dra-extender")
    assert pdb["spec"]["selector"] == DEPLOYMENT["spec"]["selector"]
    assert pdb["spec"]["maxUnavailable"] == 1


def test_pods_are_non_root_read_only_and_bounded() -> None:
    pod = DEPLOYMENT["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == SERVICE_ACCOUNT
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert EXTENDER["securityContext"]["readOnlyRootFilesystem"] is True
    assert EXTENDER["securityContext"]["allowPrivilegeEscalation"] is False
    assert EXTENDER["securityContext"]["capabilities"]["drop"] == ["ALL"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    tmp = [m for m in EXTENDER["volumeMounts"] if m["mountPath"] == "/tmp"]
    assert tmp and "emptyDir" in volumes[tmp[0]["name"]]
    for key in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(EXTENDER["resources"][key])


def test_second_scheduler_patch_keeps_pods_non_root_and_bounded() -> None:
    patch = load_one(SECOND_SCHEDULER / "scheduler-sidecar.yaml")
    containers = patch["spec"]["template"]["spec"]["containers"]
    # The JSON patches of the components append to containers/0: the extender must stay first.
    assert [c["name"] for c in containers] == [EXTENDER_CONTAINER, "kube-scheduler"]
    scheduler = containers[1]
    assert scheduler["image"].startswith("registry.k8s.io/kube-scheduler:v1.37.")
    assert scheduler["securityContext"]["readOnlyRootFilesystem"] is True
    assert {"cpu", "memory"} <= set(scheduler["resources"]["limits"])
    assert "--config=/etc/dra-scheduler/config.yaml" in scheduler["command"]
    mounts = {m["mountPath"]: m["name"] for m in scheduler["volumeMounts"]}
    assert mounts["/etc/dra-scheduler"] == "dra-scheduler-config"
    generator = kustomization(SECOND_SCHEDULER)["configMapGenerator"][0]
    assert generator["name"] == "dra-scheduler-config" and generator["files"][0].startswith("config.yaml=")
    assert patch["spec"]["replicas"] == 2


# ---- webhook configurations against the webhook's routing ------------------------------------------------


def _webhook_configurations() -> list[tuple[str, dict]]:
    return [(doc["kind"], hook) for doc in BASE_DOCS
            if doc["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
            for hook in doc["webhooks"]]


def test_webhook_configurations_call_the_webhook_service_paths() -> None:
    hooks = _webhook_configurations()
    assert hooks
    service = find(BASE_DOCS, "Service", "dra-extender-webhook")
    for kind, hook in hooks:
        target = hook["clientConfig"]["service"]
        expected = "/webhook/mutate" if kind == "MutatingWebhookConfiguration" else "/webhook/validate"
        assert target == {"name": "dra-extender-webhook", "namespace": NAMESPACE, "path": expected,
                          "port": service["spec"]["ports"][0]["port"]}, hook["name"]
        assert hook["sideEffects"] == "None"
        assert hook["timeoutSeconds"] == 5
        assert hook["admissionReviewVersions"] == ["v1"]
        assert hook["failurePolicy"] in ("Fail", "Ignore")
        assert hook["matchConditions"], f"{hook['name']}: no matchConditions"
        assert hook["name"].endswith(".dra-extender.io")


def _rule_keys(kind: str, hook: dict) -> set[tuple[str, str, str, str]]:
    webhook = "mutate" if kind == "MutatingWebhookConfiguration" else "validate"
    return {(webhook, group, resource, operation)
            for rule in hook["rules"] for group in rule["apiGroups"]
            for resource in rule["resources"] for operation in rule["operations"]}


def test_webhook_rules_are_exactly_what_the_webhook_handles_with_matching_failure_policy() -> None:
    handler = AdmissionHandler(lookup=None)  # type: ignore[arg-type]
    handled = handler._rules
    configured: dict[tuple[str, str, str, str], str] = {}
    for kind, hook in _webhook_configurations():
        for key in _rule_keys(kind, hook):
            assert key not in configured, f"{key} sent by two webhooks"
            configured[key] = hook["failurePolicy"]
    assert set(configured) == set(handled), (
        f"configured only: {set(configured) - set(handled)}; handled only: {set(handled) - set(configured)}")
    for key, policy in configured.items():
        # A rule that fails open on an internal error is configured to be skipped when unreachable too.
        assert policy == ("Ignore" if handled[key].fail_open else "Fail"), key


def test_cert_manager_injects_the_serving_certificate_ca() -> None:
    component = kustomization(CERT_MANAGER)
    targets = {(p["target"]["kind"], p["target"]["name"]) for p in component["patches"]}
    assert targets == {("MutatingWebhookConfiguration", "dra-extender"),
                       ("ValidatingWebhookConfiguration", "dra-extender")}
    annotation = load_one(CERT_MANAGER / "inject-ca.yaml")["metadata"]["annotations"]
    certificates = load_docs(CERT_MANAGER / "certificates.yaml")
    serving = find(certificates, "Certificate", "dra-extender-serving")
    assert annotation["cert-manager.io/inject-ca-from"] == f"{NAMESPACE}/{serving['metadata']['name']}"
    assert f"dra-extender-webhook.{NAMESPACE}.svc" in serving["spec"]["dnsNames"]
    assert f"dra-extender.{NAMESPACE}.svc" in serving["spec"]["dnsNames"]
    issuer = serving["spec"]["issuerRef"]["name"]
    ca_issuer = find(certificates, "Issuer", issuer)
    ca_certificate = find(certificates, "Certificate", "dra-extender-ca")
    assert ca_certificate["spec"]["isCA"] is True
    assert ca_issuer["spec"]["ca"]["secretName"] == ca_certificate["spec"]["secretName"]


# ---- kube-scheduler configurations -------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(KUBE_SCHEDULER_CONFIGS))
def test_kube_scheduler_configuration_registers_the_extender(
    name: str, extender_server: ExtenderServer
) -> None:
    config = load_one(KUBE_SCHEDULER_CONFIGS[name])
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert config["kind"] == "KubeSchedulerConfiguration"
    for profile in config["profiles"]:
        assert {"name": "DynamicResources"} in profile["plugins"]["multiPoint"]["disabled"]
    [extender] = config["extenders"]
    url = urlparse(extender["urlPrefix"])
    assert url.path == DEFAULT_PREFIX and url.path.endswith("/scheduler")
    routes = _routes(extender_server.extender_app())
    for verb_field in ("filterVerb", "prioritizeVerb", "bindVerb", "preemptVerb"):
        assert ("POST", f"{url.path}/{extender[verb_field]}") in routes, verb_field
    assert (extender["filterVerb"], extender["prioritizeVerb"], extender["bindVerb"]) == (
        "filter", "prioritize", "bind")
    assert extender["weight"] > 0
    assert extender["nodeCacheCapable"] is True
    assert re.fullmatch(r"\d+s", extender["httpTimeout"])
    assert extender["ignorable"] is False
    assert extender["managedResources"] == []
    assert url.port == int(arg_value(EXTENDER["args"], "--extender-port"))


def test_scheduler_config_overlay_uses_https_with_the_certificate_ca() -> None:
    [extender] = load_one(KUBE_SCHEDULER_CONFIGS["scheduler-config"])["extenders"]
    url = urlparse(extender["urlPrefix"])
    assert url.scheme == "https" and extender["enableHTTPS"] is True
    assert url.hostname == f"dra-extender.{NAMESPACE}.svc"
    assert extender["tlsConfig"]["caFile"]
    assert not extender["tlsConfig"].get("insecure")
    serving = find(load_docs(CERT_MANAGER / "certificates.yaml"), "Certificate", "dra-extender-serving")
    assert extender["tlsConfig"]["serverName"] in serving["spec"]["dnsNames"]
    # `dra-extender certs --service dra-extender-webhook` issues exactly this name too.
    assert extender["tlsConfig"]["serverName"] == f"dra-extender-webhook.{NAMESPACE}.svc"
    generator = kustomization(SCHEDULER_CONFIG)["configMapGenerator"][0]
    assert generator["files"] == ["kube-scheduler-config.yaml"]


def test_second_scheduler_calls_its_sidecar_on_loopback_and_is_leader_elected() -> None:
    config = load_one(KUBE_SCHEDULER_CONFIGS["second-scheduler"])
    [extender] = config["extenders"]
    url = urlparse(extender["urlPrefix"])
    assert (url.scheme, url.hostname) == ("http", "127.0.0.1") and extender["enableHTTPS"] is False
    assert [p["schedulerName"] for p in config["profiles"]] == ["dra-scheduler"]
    election = config["leaderElection"]
    assert election["leaderElect"] is True
    docs = resource_docs(SECOND_SCHEDULER)
    lease_role = find(docs, "Role", "dra-scheduler-leader")
    assert lease_role["metadata"]["namespace"] == election["resourceNamespace"]
    assert lease_role["rules"][0]["resourceNames"] == [election["resourceName"]]
    bound = {d["roleRef"]["name"] for d in docs if d["kind"] in ("ClusterRoleBinding", "RoleBinding")}
    assert {"system:kube-scheduler", "system:volume-scheduler", "extension-apiserver-authentication-reader",
            "dra-scheduler-leader"} <= bound


def test_scheduler_name_policy_sets_the_second_schedulers_name() -> None:
    docs = resource_docs(SECOND_SCHEDULER)
    policy = find(docs, "MutatingAdmissionPolicy", "dra-extender-scheduler-name")
    binding = find(docs, "MutatingAdmissionPolicyBinding", "dra-extender-scheduler-name")
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["matchResources"]["namespaceSelector"]["matchLabels"] == {
        "dra-extender.io/scheduler": "enabled"}
    [mutation] = policy["spec"]["mutations"]
    scheduler_name = load_one(KUBE_SCHEDULER_CONFIGS["second-scheduler"])["profiles"][0]["schedulerName"]
    assert f'schedulerName: "{scheduler_name}"' in mutation["applyConfiguration"]["expression"]


def _ports_open_to_anyone(docs: list[dict]) -> set[int]:
    return {port["port"] for doc in docs if doc["kind"] == "NetworkPolicy"
            for rule in doc["spec"]["ingress"] if not rule.get("from") for port in rule["ports"]}


def test_network_policy_leaves_the_plain_http_extender_port_closed() -> None:
    open_ports = _ports_open_to_anyone(BASE_DOCS + resource_docs(SECOND_SCHEDULER))
    assert int(arg_value(EXTENDER["args"], "--extender-port")) not in open_ports
    assert int(arg_value(EXTENDER["args"], "--webhook-port")) in open_ports


def test_the_debug_port_is_not_open_to_every_pod_and_its_pages_answer_loopback_only() -> None:
    debug_port = int(arg_value(EXTENDER["args"], "--debug-port"))
    for component in (SECOND_SCHEDULER, SCHEDULER_CONFIG):
        assert debug_port not in _ports_open_to_anyone(BASE_DOCS + resource_docs(component))
    policy = find(BASE_DOCS, "NetworkPolicy", "dra-extender")
    [scrape] = [rule for rule in policy["spec"]["ingress"] if rule.get("from")]
    assert {port["port"] for port in scrape["ports"]} == {debug_port}
    scrapers = {"dra-extender.io/metrics-scraper": "true"}
    assert scrape["from"] == [{"namespaceSelector": {"matchLabels": scrapers}}]
    assert not any(arg.startswith("--debug-from-anywhere") for arg in EXTENDER["args"])


def test_https_extender_port_is_open_where_kube_scheduler_calls_it_over_the_network() -> None:
    assert int(arg_value(EXTENDER["args"], "--extender-port")) in _ports_open_to_anyone(
        resource_docs(SCHEDULER_CONFIG))


# ---- image ---------------------------------------------------------------------------------------------


def test_dockerfile_builds_the_fast_extra_and_runs_serve_as_non_root() -> None:
    dockerfile = (REPO_ROOT / "Dockerfile").read_text()
    instructions = [line for line in dockerfile.splitlines() if line and not line.startswith("#")]
    assert sum(line.startswith("FROM ") for line in instructions) >= 2, "multi-stage build expected"
    assert 'ENTRYPOINT ["dra-extender", "serve"]' in instructions
    assert re.search(r'pip install "\.\[fast\]"', dockerfile)
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    assert "fast" in pyproject["project"]["optional-dependencies"]
    [user] = [line.split()[1] for line in instructions if line.startswith("USER ")]
    uid = int(user.split(":")[0])
    assert uid != 0 and uid == DEPLOYMENT["spec"]["template"]["spec"]["securityContext"]["runAsUser"]
    assert re.search(r"FROM \$\{PYTHON_IMAGE\}", dockerfile) and "slim" in dockerfile


def test_dockerignore_lets_in_exactly_what_the_build_copies() -> None:
    lines = [line.strip() for line in (REPO_ROOT / ".dockerignore").read_text().splitlines()]
    allowed = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    assert next(line for line in lines if line and not line.startswith("#")) == "*"
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = {pattern.rstrip("*") for pattern in patterns}
    assert allowed == packages | {"pyproject.toml", pyproject["project"]["readme"]}
    copied = re.findall(r"^COPY (?!--from)(.+) \S+$", (REPO_ROOT / "Dockerfile").read_text(), re.MULTILINE)
    assert {part.rstrip("/") for line in copied for part in line.split()} == allowed
