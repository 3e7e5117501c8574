"""Static checks of the Grafana dashboard, its ConfigMap, the alert rules and the PodMonitor.

Whether the queries and expressions are valid PromQL and return series is proven against a
real Prometheus in tests/integration/test_prometheus.py; here: the structure Grafana and the
Prometheus operator need, that every query and alert names metrics the agent exports, and
that every alert tells the on-call what happened and where the runbook is.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from agent.metrics import AgentMetrics, NodeSnapshot, PodFigures

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "dashboards" / "waterline.json"
CONFIGMAP = ROOT / "deploy" / "dashboards" / "waterline-dashboard.yaml"
RULES = ROOT / "deploy" / "prometheus" / "rules.yaml"
PODMONITOR = ROOT / "deploy" / "prometheus" / "podmonitor.yaml"
DAEMONSET = ROOT / "deploy" / "daemonset.yaml"
DOCS = ROOT / "docs" / "dashboards.md"

#: Rows the dashboard must have, in this order (the issue's list).
ROWS = [
    "Usage against waterlines",
    "Gaps",
    "Rule states",
    "Actions",
    "Throttled pods",
    "Top pods",
    "Pressure (PSI)",
    "Agent health",
]
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
NAME = re.compile(r"\bwaterline_[a-z0-9_]+\b")


def _dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def _panels() -> list[dict[str, Any]]:
    return [p for p in _dashboard()["panels"] if p["type"] != "row"]


def _queries() -> list[str]:
    return [t["expr"] for p in _panels() for t in p["targets"]]


def _alerts() -> list[dict[str, Any]]:
    rule = yaml.safe_load(RULES.read_text())
    return [r for g in rule["spec"]["groups"] for r in g["rules"]]


def exported_metric_names() -> set[str]:
    """Every sample name the agent's /metrics shows once each metric has a value."""
    metrics = AgentMetrics()
    metrics.publish(
        NodeSnapshot(
            usage={"cpu_total_usage": 1.0},
            waterlines={"evict": {"cpu_total_usage": 1.0}},
            gaps={"evict": {"cpu_total_usage": 0.5}},
            rules={"p/r": "triggered"},
            pods=(PodFigures("ns", "pod", 0.5, 0.25, 1e6),),
            throttled=1,
            invalid_objects={"Pod": 1},
        )
    )
    metrics.tick_duration.observe(0.01)
    metrics.ticks.labels("ok").inc()
    metrics.actions.labels("evict", "evicted").inc()
    metrics.collector_errors.labels("cgroup").inc()
    metrics.last_success.set(1.0)
    text = metrics.render().decode()
    return {s.name for f in text_string_to_metric_families(text) for s in f.samples}


# -- the dashboard ---------------------------------------------------------------------


def test_dashboard_is_a_current_grafana_model() -> None:
    dash = _dashboard()
    assert dash["schemaVersion"] >= 36
    assert dash["uid"] and dash["title"] == "Waterline"
    assert dash["id"] is None, "an exported id would clash on import"
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in dash["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] >= 0 and pos["w"] > 0 and pos["x"] + pos["w"] <= 24, panel["title"]


def test_datasource_node_and_namespace_variables() -> None:
    variables = {v["name"]: v for v in _dashboard()["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("node", "namespace"):
        var = variables[name]
        assert var["type"] == "query" and var["datasource"] == DATASOURCE
        assert var["multi"] and var["includeAll"] and var["allValue"] == ".*"
        assert f", {name})" in var["definition"]
        assert var["query"]["query"] == var["definition"]
    assert "$node" in variables["namespace"]["definition"], "namespaces follow the node choice"


def test_rows_are_the_issues_rows_and_every_panel_sits_in_one() -> None:
    panels = _dashboard()["panels"]
    assert [p["title"] for p in panels if p["type"] == "row"] == ROWS
    assert panels[0]["type"] == "row"
    for row in (p for p in panels if p["type"] == "row"):
        assert not row["collapsed"] and row["panels"] == []  # children follow the row
    by_row: dict[str, int] = {}
    current = ""
    for panel in panels:
        if panel["type"] == "row":
            current = panel["title"]
        else:
            by_row[current] = by_row.get(current, 0) + 1
    assert set(by_row) == set(ROWS), "a row without panels"


def test_every_panel_has_a_query_on_the_datasource_variable() -> None:
    for panel in _panels():
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert panel["targets"], f"{panel['title']} has no query"
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, panel["title"]
            assert target["expr"].strip(), panel["title"]
            assert target["legendFormat"], panel["title"]
        assert panel.get("description"), f"{panel['title']} has no description"


def test_every_query_follows_the_node_and_namespace_choice() -> None:
    for expr in _queries():
        selectors = re.findall(r"waterline_[a-z0-9_]+\{([^}]*)\}", expr)
        assert selectors and len(selectors) == len(NAME.findall(expr)), expr
        for labels in selectors:
            assert 'node=~"$node"' in labels, expr
            if "pod_" in expr:
                assert 'namespace=~"$namespace"' in labels, expr


def test_usage_panels_show_usage_and_the_waterlines_of_their_metric() -> None:
    metrics = {"cpu_total_usage", "cpu_total_utilization", "memory_total_usage",
               "memory_total_utilization"}  # fmt: skip
    seen = set()
    for panel in _panels():
        exprs = [t["expr"] for t in panel["targets"]]
        metric = re.search(r'metric="([a-z_]+)"', exprs[0])
        if len(exprs) == 2 and exprs[0].startswith("waterline_node_usage{") and metric:
            assert f'metric="{metric.group(1)}"' in exprs[1], panel["title"]
            assert exprs[1].startswith("waterline_node_waterline{")
            assert "{{action_type}}" in panel["targets"][1]["legendFormat"]  # one line each
            seen.add(metric.group(1))
    assert seen == metrics


def test_queries_name_only_metrics_the_agent_exports() -> None:
    exported = exported_metric_names()
    for expr in _queries():
        for name in NAME.findall(expr):
            assert name in exported, f"{name} is not exported: {expr}"


def test_configmap_carries_the_dashboard_for_the_grafana_sidecar() -> None:
    cm = yaml.safe_load(CONFIGMAP.read_text())
    assert cm["kind"] == "ConfigMap"
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["data"]["waterline.json"] == DASHBOARD.read_text(), (
        "the ConfigMap is stale: run `python deploy/dashboards/render.py`"
    )
    assert len(CONFIGMAP.read_bytes()) < 256 * 1024  # kubectl apply's annotation limit


# -- alerts ----------------------------------------------------------------------------


def _anchors() -> set[str]:
    return {
        line.lstrip("#").strip().lower().replace(" ", "-")
        for line in DOCS.read_text().splitlines()
        if line.startswith("#")
    }


def test_every_alert_says_what_happened_and_links_its_runbook() -> None:
    alerts = _alerts()
    names = [a["alert"] for a in alerts]
    assert len(names) == len(set(names))
    anchors = _anchors()
    for alert in alerts:
        assert set(alert) <= {"alert", "expr", "for", "labels", "annotations"}, alert["alert"]
        assert alert["labels"]["severity"] in ("info", "warning", "critical")
        assert re.fullmatch(r"\d+[smh]", alert["for"]), alert["alert"]
        notes = alert["annotations"]
        assert notes.get("summary") and notes.get("description"), alert["alert"]
        url = notes.get("runbook_url", "")
        assert url.endswith("docs/dashboards.md#" + alert["alert"].lower()), alert["alert"]
        assert alert["alert"].lower() in anchors, f"docs/dashboards.md has no {alert['alert']}"


def test_alerts_cover_the_issues_cases_on_exported_metrics() -> None:
    exported = exported_metric_names()
    exprs = {a["alert"]: a["expr"] for a in _alerts()}
    for alert, expr in exprs.items():
        assert 'job="waterline-agent"' in expr, alert
        for name in NAME.findall(expr):
            assert name in exported, f"{alert}: {name} is not exported"
    joined = "\n".join(exprs.values())
    for needed in ("up{", "waterline_last_successful_tick_timestamp_seconds",
                   'state="triggered"', 'action="evict"', "waterline_collector_errors_total",
                   "waterline_pod_cpu_cap_cores"):  # fmt: skip
        assert needed in joined, needed


def test_rule_file_keys_are_the_operators() -> None:
    rule = yaml.safe_load(RULES.read_text())
    assert rule["apiVersion"] == "monitoring.coreos.com/v1" and rule["kind"] == "PrometheusRule"
    assert set(rule["spec"]) == {"groups"}
    for group in rule["spec"]["groups"]:
        assert set(group) <= {"name", "interval", "rules", "partial_response_strategy"}


# -- scraping --------------------------------------------------------------------------


def test_podmonitor_selects_the_agent_pods_and_their_metrics_port() -> None:
    pm = yaml.safe_load(PODMONITOR.read_text())
    ds = yaml.safe_load(DAEMONSET.read_text())
    template = ds["spec"]["template"]
    assert pm["apiVersion"] == "monitoring.coreos.com/v1" and pm["kind"] == "PodMonitor"
    assert pm["metadata"]["namespace"] == ds["metadata"]["namespace"]
    assert set(pm["spec"]) <= {"jobLabel", "selector", "namespaceSelector",
                               "podMetricsEndpoints", "podTargetLabels", "sampleLimit"}  # fmt: skip
    selector = pm["spec"]["selector"]["matchLabels"]
    assert selector.items() <= template["metadata"]["labels"].items()
    assert template["metadata"]["labels"][pm["spec"]["jobLabel"]] == "waterline-agent"
    ports = {p["name"]: p["containerPort"] for p in template["spec"]["containers"][0]["ports"]}
    (endpoint,) = pm["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] in ports and endpoint["path"] == "/metrics"
    assert endpoint["honorLabels"] is True, "pod series keep their own namespace and pod"
    assert {
        "action": "replace",
        "sourceLabels": ["__meta_kubernetes_pod_node_name"],
        "targetLabel": "node",
    } in endpoint["relabelings"]


def test_daemonset_carries_plain_scrape_annotations() -> None:
    template = yaml.safe_load(DAEMONSET.read_text())["spec"]["template"]
    notes = template["metadata"]["annotations"]
    ports = [p["containerPort"] for p in template["spec"]["containers"][0]["ports"]]
    assert notes["prometheus.io/scrape"] == "true"
    assert int(notes["prometheus.io/port"]) in ports
    assert notes["prometheus.io/path"] == "/metrics"


@pytest.mark.parametrize("path", [RULES, PODMONITOR, CONFIGMAP], ids=lambda p: p.name)
def test_manifests_live_in_the_waterline_namespace(path: Path) -> None:
    assert yaml.safe_load(path.read_text())["metadata"]["namespace"] == "waterline-system"
