"""The controller's deployment (issue 11): `kubectl kustomize deploy/` renders, and every
rendered object passes Kubernetes' own schemas (offline, strict); the Deployment has its
probes on the health port, a named metrics port, a priorityClassName and a PDB; the
PodMonitor scrapes it and the alerts (leaders != 1, rounds failing, the brake) use only
metrics it exports and link runbooks that exist in docs/controller.md."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from agent import defaults
from agent.cluster.metrics import ControllerMetrics
from tests.chart import kustomize

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
DOCS = ROOT / "docs" / "controller.md"
VERSIONS = ("1.30.0", "1.32.0")  # the oldest we install on; the kubectl installed here
OPERATOR_GROUP = "monitoring.coreos.com/"


@pytest.mark.parametrize("version", VERSIONS)
def test_the_rendered_install_passes_kubernetes_schemas(version: str) -> None:
    docs = kustomize(DEPLOY)
    kinds = {d["kind"] for d in docs}
    assert {"Deployment", "DaemonSet", "PodDisruptionBudget", "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding", "Role", "RoleBinding"} <= kinds  # fmt: skip
    for doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)


def test_the_rendered_monitoring_objects() -> None:
    docs = kustomize(DEPLOY / "prometheus")
    names = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert ("PodMonitor", "waterline-controller") in names
    assert ("PrometheusRule", "waterline-controller") in names
    assert all(d["apiVersion"].startswith(OPERATOR_GROUP) for d in docs)


def _docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


def _one(name: str, kind: str) -> dict[str, Any]:
    (doc,) = [d for d in _docs(name) if d["kind"] == kind]
    return doc


def test_probes_port_priority_and_identity() -> None:
    pod = _one("controller.yaml", "Deployment")["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == {"metrics": defaults.METRICS_PORT}
    assert c["livenessProbe"]["httpGet"] == {"path": defaults.HEALTH_PATH, "port": "metrics"}
    assert c["readinessProbe"]["httpGet"] == {"path": defaults.READY_PATH, "port": "metrics"}
    assert pod["priorityClassName"] == "system-cluster-critical"
    env = {e["name"]: e for e in c["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"


def test_the_lease_is_held_under_the_pod_name(monkeypatch: pytest.MonkeyPatch) -> None:
    from agent.cluster.command import default_identity

    monkeypatch.setenv("POD_NAME", "waterline-controller-7d9c-x2x4z")
    assert default_identity() == "waterline-controller-7d9c-x2x4z"
    monkeypatch.delenv("POD_NAME")
    assert re.fullmatch(r".+_\d+", default_identity())  # hostname_pid


def test_a_pdb_keeps_one_replica() -> None:
    deployment = _one("controller.yaml", "Deployment")
    pdb = _one("controller.yaml", "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1 and "maxUnavailable" not in pdb["spec"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert deployment["spec"]["replicas"] > pdb["spec"]["minAvailable"]


def test_the_podmonitor_scrapes_the_controller_port() -> None:
    pm = yaml.safe_load((DEPLOY / "prometheus" / "controller-podmonitor.yaml").read_text())
    template = _one("controller.yaml", "Deployment")["spec"]["template"]
    assert pm["spec"]["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
    assert template["metadata"]["labels"][pm["spec"]["jobLabel"]] == "waterline-controller"
    (endpoint,) = pm["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] == "metrics" and endpoint["path"] == "/metrics"


def _alerts() -> dict[str, dict[str, Any]]:
    rule = yaml.safe_load((DEPLOY / "prometheus" / "controller-rules.yaml").read_text())
    return {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}


def _exported() -> set[str]:
    m = ControllerMetrics()
    m.leader.set(1)
    m.brake.set(1)
    m.rounds.labels("ok").inc()
    text = m.render().decode()
    return {s.name for f in text_string_to_metric_families(text) for s in f.samples}


def test_alerts_use_exported_metrics_and_link_runbooks() -> None:
    exported = _exported()
    anchors = {line.lstrip("#").strip().lower().replace(" ", "-")
               for line in DOCS.read_text().splitlines() if line.startswith("#")}  # fmt: skip
    for name, alert in _alerts().items():
        for metric in re.findall(r"\bwaterline_[a-z0-9_]+\b", alert["expr"]):
            assert metric in exported, f"{name}: {metric} is not exported"
        assert 'job="waterline-controller"' in alert["expr"]
        assert alert["annotations"]["runbook_url"].endswith("docs/controller.md#" + name.lower())
        assert name.lower() in anchors, f"docs/controller.md has no section {name}"


def test_the_leader_count_and_brake_alerts() -> None:
    alerts = _alerts()
    leaders = alerts["WaterlineControllerLeaders"]
    assert leaders["for"] == "2m" and leaders["expr"].endswith("!= 1")
    assert "or vector(0)" in leaders["expr"]  # no replica scraped at all is 0 leaders
    assert "waterline_cluster_brake" in alerts["WaterlineClusterBrake"]["expr"]
