"""deploy/components/monitoring: every metric an alert or a dashboard panel uses is one that DRA Extender
really serves (read from /metrics of a running extender with its controllers, and of the webhook), so
renaming a metric breaks this test instead of silently blanking a panel or an alert. Also: the alerts
are those docs/operations.md lists, and the component composes with every overlay."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp.test_utils import TestServer
from deploy_manifests import DEPLOY, OVERLAYS, REPO_ROOT, find, find_kubectl, render

MONITORING = DEPLOY / "components" / "monitoring"
DASHBOARD = MONITORING / "dashboards" / "dra-extender.json"
# Series Prometheus itself makes, not DRA Extender.
PROMETHEUS_SERIES = {"up": "gauge"}
# kube-scheduler's own (stable) metrics, which the expressions with job="dra-scheduler" read from the
# second-scheduler sidecar (k8s.io/kubernetes pkg/scheduler/metrics).
KUBE_SCHEDULER_SERIES = {"scheduler_pending_pods": "gauge", "scheduler_schedule_attempts_total": "counter"}
RUNBOOKS = "https://github.com/dra-extender/dra-extender/blob/main/docs/operations.md#"
# Functions over a range of samples, by the type of series they are meant for.
COUNTER_FUNCTIONS = ("rate", "irate", "increase", "resets")
GAUGE_FUNCTIONS = ("delta", "deriv", "idelta", "min_over_time", "max_over_time", "avg_over_time",
                   "predict_linear")
_FUNCTIONS_AND_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or",
                           "unless", "offset", "bool", "inf", "nan"}


def metric_names(expr: str) -> set[str]:
    """The series names a PromQL expression reads: identifiers that are neither functions, keywords,
    label names (inside `{...}` or a `by (...)` clause) nor numbers."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)                    # strings (label values)
    text = re.sub(r"\{[^}]*\}", " ", text)                              # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)                             # range selectors
    text = re.sub(r"\boffset\s+-?\w+", " ", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    text = re.sub(r"(?<![\w:])\d+(\.\d+)?([eE][+-]?\d+)?", " ", text)   # numbers
    names = set()
    for match in re.finditer(r"[A-Za-z_:][\w:]*", text):
        if text[match.end():].lstrip().startswith("("):
            continue  # a function call
        if match.group().lower() not in _FUNCTIONS_AND_KEYWORDS:
            names.add(match.group())
    return names


def test_metric_names_of_promql() -> None:
    assert metric_names(
        'histogram_quantile(0.99, sum by (le, webhook) (rate(a_bucket{job="x",le!="1e-9"}[5m]))) > 1e-9'
    ) == {"a_bucket"}
    assert metric_names("sum(rate(b_total[10m])) / clamp_min(sum(rate(c_count[10m])), 1e-9) > 0.1") == {
        "b_total", "c_count"}
    assert metric_names("x > 100 and deriv(x[15m]) >= 0 unless on(pod) y offset 5m") == {"x", "y"}
    assert metric_names('absent(up{job="dra-extender"} == 1)') == {"up"}


def exposed_series(exposition: str) -> dict[str, str]:
    """Every series name a Prometheus text exposition offers, with the type a query reads it as (a
    histogram's _bucket, _count and _sum are counters), including those of metric families that have no
    sample yet (a labelled counter before its first increment): from the `# TYPE` lines."""
    names: dict[str, str] = {}
    for line in exposition.splitlines():
        parts = line.split()
        if line.startswith("# TYPE ") and len(parts) == 4:
            name, kind = parts[2], parts[3]
            if kind in ("histogram", "summary"):
                names.update({f"{name}{part}": "counter" for part in ("_bucket", "_count", "_sum")})
                if kind == "summary":
                    names[name] = "gauge"
            else:
                names[name] = kind
        elif line and not line.startswith("#"):
            names.setdefault(re.split(r"[{\s]", line, maxsplit=1)[0], "untyped")
    return names


def misread_series(expr: str, types: dict[str, str]) -> list[str]:
    """Series an expression reads as what they are not: a counter outside rate(), increase() and the
    like (its value only says how long the process ran), a gauge inside them, a counter under delta()."""
    problems = []
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    for name in metric_names(expr):
        kind = types.get(name)
        for match in re.finditer(rf"(?<![\w:]){re.escape(name)}(?![\w:])", text):
            before = text[:match.start()].rstrip()
            function = re.search(r"(\w+)\s*\(\s*$", before)
            called = function.group(1) if function else ""
            if kind == "counter" and called in GAUGE_FUNCTIONS:
                problems.append(f"counter {name} under {called}()")
            elif kind == "counter" and called not in COUNTER_FUNCTIONS:
                where = called or "no function"
                problems.append(f"counter {name} read without rate()/increase() (in {where})")
            elif kind == "gauge" and called in COUNTER_FUNCTIONS:
                problems.append(f"gauge {name} under {called}()")
    return problems


def test_misread_series() -> None:
    types = {"a_total": "counter", "g": "gauge"}
    assert misread_series('sum(rate(a_total{x="y"}[5m])) + max(g)', types) == []
    assert misread_series("sum(a_total)", types) == [
        "counter a_total read without rate()/increase() (in sum)"]
    assert misread_series("rate(g[5m])", types) == ["gauge g under rate()"]
    assert misread_series("delta(a_total[5m])", types) == ["counter a_total under delta()"]


@pytest.fixture(scope="module")
def served_metrics() -> dict[str, str]:
    """GET /metrics of the extender's debug port (with the controllers' metrics registered as `serve
    --controllers` registers them) and of the webhook app, over HTTP on loopback."""
    import asyncio

    from allocator import FeatureGates
    from extender.controllers.metrics import ControllerMetrics
    from extender.http.server import ExtenderServer
    from extender.kube.objects_io import load_objects
    from extender.plugin.claimwriter import ClaimWriter
    from extender.plugin.headroom import Headroom, HeadroomGauges
    from extender.plugin.scheduling import Scheduler
    from extender.state.assume import AssumeCache
    from extender.state.cache import ClusterCache
    from extender.state.lookup import ClusterCacheLookup
    from webhook.admission import AdmissionHandler
    from webhook.server import build_app

    async def scrape() -> dict[str, str]:
        cache = ClusterCache.from_objects(load_objects([REPO_ROOT / "examples" / "cluster"]), FeatureGates())
        assume = AssumeCache()
        assume.attach(cache)
        server = ExtenderServer(Scheduler(cache, assume, ClaimWriter(None, cache)))
        server.add_headroom(HeadroomGauges(Headroom(cache, assume), ["gpu.example.com"]))
        ControllerMetrics(server.metrics.registry)
        await server.start("127.0.0.1", 0, 0)
        webhook = TestServer(build_app(AdmissionHandler(ClusterCacheLookup(cache), features=FeatureGates())))
        await webhook.start_server()
        try:
            async with aiohttp.ClientSession() as session:
                texts = []
                for url in (server.urls["debug"] + "/metrics", str(webhook.make_url("/metrics"))):
                    async with session.get(url) as response:
                        assert response.status == 200, url
                        texts.append(await response.text())
        finally:
            await webhook.close()
            await server.stop()
        return {name: kind for text in texts for name, kind in exposed_series(text).items()}

    return asyncio.run(scrape())


def _rules() -> list[dict[str, Any]]:
    rule = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    return [r for group in rule["spec"]["groups"] for r in group["rules"]]


def _panel_expressions() -> list[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [(panel["title"], target["expr"]) for panel in dashboard["panels"] for target in panel["targets"]]


def test_served_metrics_include_each_component(served_metrics: dict[str, str]) -> None:
    # The scrape itself is what the checks below rely on: extender, controllers and webhook all answered.
    assert {"dra_extender_filter_duration_seconds_bucket", "dra_extender_taint_eviction_queue_depth",
            "dra_extender_webhook_decisions_total", "process_cpu_seconds_total", "python_info",
            "dra_extender_build_info", "dra_extender_headroom_pods"} <= served_metrics.keys()


def _types(expr: str, served: dict[str, str]) -> dict[str, str]:
    """The series an expression may read: the extender's, Prometheus's, and kube-scheduler's where the
    expression reads job dra-scheduler."""
    scheduler = KUBE_SCHEDULER_SERIES if 'job="dra-scheduler"' in expr else {}
    return {**served, **PROMETHEUS_SERIES, **scheduler}


@pytest.mark.parametrize("rule", _rules(), ids=lambda rule: rule["alert"])
def test_every_alert_uses_served_metrics(rule: dict[str, Any], served_metrics: dict[str, str]) -> None:
    used = metric_names(rule["expr"])
    types = _types(rule["expr"], served_metrics)
    assert used, rule["expr"]
    assert used - types.keys() == set(), rule["alert"]
    assert misread_series(rule["expr"], types) == [], rule["alert"]
    assert rule["labels"]["severity"] in {"critical", "warning"} and rule["annotations"]["summary"]


@pytest.mark.parametrize("rule", _rules(), ids=lambda rule: rule["alert"])
def test_every_alert_says_what_it_means_and_links_its_runbook(rule: dict[str, Any]) -> None:
    annotations = rule["annotations"]
    assert len(annotations["description"]) > 30
    assert annotations["runbook_url"] == RUNBOOKS + rule["alert"].lower()
    docs = (REPO_ROOT / "docs" / "operations.md").read_text()
    runbooks = docs.split("### Alert runbooks", 1)[1].split("\n## ", 1)[0]
    assert f"\n#### {rule['alert']}\n" in runbooks  # GitHub's anchor of that heading is its lower case


@pytest.mark.parametrize(("title", "expr"), _panel_expressions(), ids=lambda v: v if " " not in v else None)
def test_every_panel_uses_served_metrics(title: str, expr: str, served_metrics: dict[str, str]) -> None:
    used = metric_names(expr)
    types = _types(expr, served_metrics)
    assert used, expr
    assert used - types.keys() == set(), title
    assert misread_series(expr, types) == [], title


def test_dashboard_has_namespace_and_pod_variables_every_query_uses() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    variables = {variable["name"]: variable for variable in dashboard["templating"]["list"]}
    assert {"datasource", "namespace", "pod"} <= variables.keys()
    assert "$namespace" in variables["pod"]["definition"]
    for title, expr in _panel_expressions():
        assert 'namespace=~"$namespace"' in expr and 'pod=~"$pod"' in expr, title


@pytest.fixture(scope="module")
def promtool() -> str:
    from go_tools import PROMTOOL
    from helm_support import tool_or_skip

    return tool_or_skip(PROMTOOL)


def _promtool_check(promtool: str, groups: list[dict[str, Any]], tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": groups}))
    result = subprocess.run([promtool, "check", "rules", str(rules)], capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_accepts_the_rules(promtool: str, tmp_path: Path) -> None:
    spec = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())["spec"]
    _promtool_check(promtool, spec["groups"], tmp_path)


def test_promtool_accepts_every_panel_query(promtool: str, tmp_path: Path) -> None:
    """Each query as a recording rule (Grafana's $variables as the regular expressions they stand for)."""
    rules = [{"record": f"dashboard:panel_{index}",
              "expr": expr.replace("$namespace", ".*").replace("$pod", ".*")}
             for index, (_, expr) in enumerate(_panel_expressions())]
    _promtool_check(promtool, [{"name": "dashboard", "rules": rules}], tmp_path)


def test_promtool_refuses_what_it_should(promtool: str, tmp_path: Path) -> None:
    """The check can fail: a query that does not parse is refused."""
    with pytest.raises(AssertionError, match=r"rules\.yaml"):
        _promtool_check(promtool, [{"name": "x", "rules": [{"record": "x:y", "expr": "sum(rate(a[5m])"}]}],
                        tmp_path)


def test_dashboard_covers_what_operators_watch() -> None:
    used = set().union(*(metric_names(expr) for _, expr in _panel_expressions()))
    for needed in ("dra_extender_filter_duration_seconds_bucket", "dra_extender_bind_duration_seconds_bucket",
                   "dra_extender_bind_conflicts_total", "dra_extender_allocations_in_flight",
                   "dra_extender_cache_objects", "dra_extender_watch_restarts_total",
                   "dra_extender_headroom_pods", "process_resident_memory_bytes", "scheduler_pending_pods",
                   "dra_extender_webhook_decisions_total", "dra_extender_taint_eviction_queue_depth"):
        assert needed in used, needed
    dashboard = json.loads(DASHBOARD.read_text())
    assert len({panel["id"] for panel in dashboard["panels"]}) == len(dashboard["panels"])
    # Air-gapped clusters: nothing to fetch, the data source is whatever Prometheus the user picks.
    assert "http" not in DASHBOARD.read_text()


def test_alerts_are_the_ones_operations_md_lists() -> None:
    docs = (REPO_ROOT / "docs" / "operations.md").read_text()
    section = docs.split("## Metrics and suggested alerts", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `(DRA\w+)` \|", section, re.MULTILINE))
    assert listed == {rule["alert"] for rule in _rules()}


KUBECTL = find_kubectl()


@pytest.mark.skipif(KUBECTL is None, reason="kubectl (for `kubectl kustomize`) is not installed")
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_monitoring_composes_with_every_overlay(tmp_path: Path, overlay: str) -> None:
    assert KUBECTL is not None
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"resources:\n- {os.path.relpath(DEPLOY / 'overlays' / overlay, tmp_path)}\n"
        f"components:\n- {os.path.relpath(MONITORING, tmp_path)}\n"
    )
    docs = render(KUBECTL, tmp_path)
    monitor = find(docs, "ServiceMonitor", "dra-extender")
    service = find(docs, "Service", "dra-extender-metrics")
    labels = service["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
    ports = {port["name"] for port in service["spec"]["ports"]}
    assert {endpoint["port"] for endpoint in monitor["spec"]["endpoints"]} <= ports
    dashboard = find(docs, "ConfigMap", "dra-extender-grafana-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dashboard["data"]["dra-extender.json"]) == json.loads(DASHBOARD.read_text())
    find(docs, "PrometheusRule", "dra-extender")
    # The webhook endpoint is verified with the CA in the Secret its serving certificate lands in.
    tls = monitor["spec"]["endpoints"][1]["tlsConfig"]
    secret = tls["ca"]["secret"]["name"]
    [serving] = [d for d in docs if d["kind"] == "Certificate" and d["spec"]["secretName"] == secret]
    assert tls["serverName"] in serving["spec"]["dnsNames"]
    # The second kube-scheduler's port is scraped where it runs; elsewhere its monitor selects nothing.
    scheduler_monitor = find(docs, "ServiceMonitor", "dra-scheduler")
    selected = [d for d in docs if d["kind"] == "Service" and scheduler_monitor["spec"]["selector"][
        "matchLabels"].items() <= d["metadata"].get("labels", {}).items()]
    if overlay != "second-scheduler":
        assert selected == []
        return
    [scheduler_service] = selected
    [endpoint] = scheduler_monitor["spec"]["endpoints"]
    [port] = [p for p in scheduler_service["spec"]["ports"] if p["name"] == endpoint["port"]]
    deployment = find(docs, "Deployment", "dra-extender")
    containers = deployment["spec"]["template"]["spec"]["containers"]
    [sidecar] = [c for c in containers if c["name"] == "kube-scheduler"]
    assert port["targetPort"] in {p["name"] for p in sidecar["ports"]} and endpoint["scheme"] == "https"


def test_helm_chart_carries_the_same_rules_and_dashboard() -> None:
    """The chart cannot read files outside its folder, so it has copies; without helm at hand (the
    chart-vs-kustomize comparison in test_helm_chart.py) this keeps them equal."""
    chart_files = DEPLOY / "helm" / "dra-extender" / "files"
    assert (chart_files / "dra-extender-dashboard.json").read_text() == DASHBOARD.read_text()
    spec = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())["spec"]
    assert yaml.safe_load((chart_files / "prometheusrule-spec.yaml").read_text()) == spec
