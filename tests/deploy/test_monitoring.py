"""deploy/components/monitoring: every metric an alert or a dashboard panel uses is one that DRA Extender
really serves (read from /metrics of a running extender with its controllers, and of the webhook), so
renaming a metric breaks this test instead of silently blanking a panel or an alert. Also: the alerts
are those docs/operations.md lists, and the component composes with every overlay."""

from __future__ import annotations

import json
import os
import re
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
PROMETHEUS_SERIES = {"up"}
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


def exposed_series(exposition: str) -> set[str]:
    """Every series name a Prometheus text exposition offers, including those of metric families that
    have no sample yet (a labelled counter before its first increment): from the `# TYPE` lines."""
    names = set()
    for line in exposition.splitlines():
        parts = line.split()
        if line.startswith("# TYPE ") and len(parts) == 4:
            name, kind = parts[2], parts[3]
            if kind == "histogram":
                names |= {f"{name}_bucket", f"{name}_count", f"{name}_sum"}
            elif kind == "summary":
                names |= {name, f"{name}_count", f"{name}_sum"}
            else:
                names.add(name)
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{\s]", line, maxsplit=1)[0])
    return names


@pytest.fixture(scope="module")
def served_metrics() -> set[str]:
    """GET /metrics of the extender's debug port (with the controllers' metrics registered as `serve
    --controllers` registers them) and of the webhook app, over HTTP on loopback."""
    import asyncio

    from allocator import FeatureGates
    from extender.controllers.metrics import ControllerMetrics
    from extender.http.server import ExtenderServer
    from extender.kube.objects_io import load_objects
    from extender.plugin.claimwriter import ClaimWriter
    from extender.plugin.scheduling import Scheduler
    from extender.state.assume import AssumeCache
    from extender.state.cache import ClusterCache
    from extender.state.lookup import ClusterCacheLookup
    from webhook.admission import AdmissionHandler
    from webhook.server import build_app

    async def scrape() -> set[str]:
        cache = ClusterCache.from_objects(load_objects([REPO_ROOT / "examples" / "cluster"]), FeatureGates())
        assume = AssumeCache()
        assume.attach(cache)
        server = ExtenderServer(Scheduler(cache, assume, ClaimWriter(None, cache)))
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
        return set().union(*(exposed_series(text) for text in texts))

    return asyncio.run(scrape())


def _rules() -> list[dict[str, Any]]:
    rule = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    return [r for group in rule["spec"]["groups"] for r in group["rules"]]


def _panel_expressions() -> list[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [(panel["title"], target["expr"]) for panel in dashboard["panels"] for target in panel["targets"]]


def test_served_metrics_include_each_component(served_metrics: set[str]) -> None:
    # The scrape itself is what the checks below rely on: extender, controllers and webhook all answered.
    assert {"dra_extender_filter_duration_seconds_bucket", "dra_extender_taint_eviction_queue_depth",
            "dra_extender_webhook_decisions_total"} <= served_metrics


@pytest.mark.parametrize("rule", _rules(), ids=lambda rule: rule["alert"])
def test_every_alert_uses_served_metrics(rule: dict[str, Any], served_metrics: set[str]) -> None:
    used = metric_names(rule["expr"])
    assert used, rule["expr"]
    assert used - served_metrics - PROMETHEUS_SERIES == set(), rule["alert"]
    assert rule["labels"]["severity"] in {"critical", "warning"} and rule["annotations"]["summary"]


@pytest.mark.parametrize(("title", "expr"), _panel_expressions(), ids=lambda v: v if " " not in v else None)
def test_every_panel_uses_served_metrics(title: str, expr: str, served_metrics: set[str]) -> None:
    used = metric_names(expr)
    assert used, expr
    assert used - served_metrics == set(), title


def test_dashboard_covers_what_operators_watch() -> None:
    used = set().union(*(metric_names(expr) for _, expr in _panel_expressions()))
    for needed in ("dra_extender_filter_duration_seconds_bucket", "dra_extender_bind_duration_seconds_bucket",
                   "dra_extender_bind_conflicts_total", "dra_extender_allocations_in_flight",
                   "dra_extender_cache_objects", "dra_extender_watch_restarts_total",
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


def test_helm_chart_carries_the_same_rules_and_dashboard() -> None:
    """The chart cannot read files outside its folder, so it has copies; without helm at hand (the
    chart-vs-kustomize comparison in test_helm_chart.py) this keeps them equal."""
    chart_files = DEPLOY / "helm" / "dra-extender" / "files"
    assert (chart_files / "dra-extender-dashboard.json").read_text() == DASHBOARD.read_text()
    spec = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())["spec"]
    assert yaml.safe_load((chart_files / "prometheusrule-spec.yaml").read_text()) == spec
