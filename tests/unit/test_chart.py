"""charts/waterline: one install with deploy/, through the real ``helm``.

* the chart renders deploy/: ``helm template`` with default values is ``kubectl kustomize
  deploy/`` object by object (Helm's and kustomize's own labels left out), the Prometheus
  operator's objects are ``deploy/prometheus/``, each cgroup layout is its component in
  ``deploy/components/``; what Helm takes verbatim (CRDs, dashboard JSON, alert rules)
  are copies `make chart` keeps, and the chart's version is pyproject.toml's;
* ``helm lint --strict`` is clean; every rendering passes Kubernetes' own schemas;
* values.schema.json refuses a bad value or an unknown key, and helm's message names it;
* the values do what values.yaml says (namespace, image, resources, placement, the
  controller off, the programs' settings, the release's prefix on cluster-scoped names).

Without helm or kubectl built (hack/cluster/build helm kubectl) these skip, and fail in CI.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from agent.cluster.config import parse_config
from agent.model import settings as agent_settings
from devtools import chart as chart_sync
from tests.chart import (
    CHART,
    DEPLOY,
    HELM_LABELS,
    by_key,
    compare,
    helm,
    key,
    kustomize,
    render,
    render_text,
)

#: As tests/unit/test_deploy.py: the oldest Kubernetes we install on.
KUBE_VERSION = "1.30.0"
#: deploy/batch-pods/ needs MutatingAdmissionPolicy v1 (GA in Kubernetes 1.36).
BATCH_PODS_KUBE_VERSION = "1.36.0"
OPERATOR_GROUP = "monitoring.coreos.com/"
CLUSTER_SCOPED = {
    "Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding",
    "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
    "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding",
}  # fmt: skip

#: Every option on, as a user's values file might say.
EVERYTHING: dict[str, Any] = {
    "namespace": {"name": "qos", "create": True},
    "image": {"repository": "registry.example.com/waterline", "tag": "0.1.0-rc1", "pullPolicy": "Always"},
    "imagePullSecrets": [{"name": "regcred"}],
    "agent": {
        "interval": 0.5,
        "logLevel": "debug",
        "settings": {"executeExcessPercent": 5, "evictionRateLimit": {"perMinute": 20, "burst": 2}},
        "cgroupLayout": "v1-cgroupfs",
        "nodeSelector": {"pool": "batch"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "batch", "effect": "NoSchedule"}],
        "resources": {"requests": {"cpu": "50m", "memory": "96Mi"}, "limits": {"memory": "256Mi"}},
    },
    "controller": {
        "replicas": 3,
        "interval": 30,
        "logLevel": "warning",
        "settings": {"defrag": {"enabled": True}, "clusterEvictionBudget": {"perMinute": 50}},
        "nodeSelector": {"node-role.kubernetes.io/control-plane": ""},
        "tolerations": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}],
    },
    "prometheus": {"podMonitor": {"enabled": True}, "prometheusRule": {"enabled": True},
                   "labels": {"release": "kube-prometheus-stack"}},  # fmt: skip
}
#: The values file of tests/integration/test_helm.py's second install, checked here first.
CUSTOM: dict[str, Any] = {
    "namespace": {"name": "waterline-edge", "create": True},
    "image": {"repository": "registry.example.com/waterline", "tag": "0.1.0-edge"},
    "agent": {"nodeSelector": {"pool": "edge"},
              "resources": {"requests": {"cpu": "20m", "memory": "64Mi"}, "limits": {"memory": "200Mi"}}},
    "controller": {"enabled": False},
}  # fmt: skip


def _kinds(docs: list[dict[str, Any]]) -> set[str]:
    return {d["kind"] for d in docs}


def _one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    assert len(found) == 1, f"{kind} {name}: {len(found)} rendered"
    return found[0]


# -- one source: the chart renders deploy/ ------------------------------------------------


def test_chart_version_is_the_projects() -> None:
    meta = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert meta["version"] == meta["appVersion"] == chart_sync.project_version()


def test_what_helm_takes_verbatim_is_a_copy_of_deploy() -> None:
    """CRDs, the dashboard JSON and the alert rules: `make chart` copies them."""
    stale = [str(p.relative_to(CHART)) for p in chart_sync.stale()]
    assert not stale, f"{stale} differ from deploy/ or pyproject.toml: run make chart"


def test_default_values_render_deploy_object_by_object() -> None:
    """``helm template waterline charts/waterline -n waterline-system --include-crds`` is
    ``kubectl kustomize deploy/`` but for the Namespace, which a Helm release's namespace
    exists before (``--create-namespace``; the next test renders it with namespace.create)."""
    deploy = [d for d in kustomize(DEPLOY) if d["kind"] != "Namespace"]
    problems = compare(deploy, render())
    assert not problems, "the chart and deploy/ differ:\n" + "\n".join(problems)


def test_a_namespace_made_by_the_chart_is_deploys() -> None:
    values = {"namespace": {"name": "waterline-system", "create": True}}
    problems = compare(kustomize(DEPLOY), render(values, namespace="default"))
    assert not problems, "the chart and deploy/ differ:\n" + "\n".join(problems)


def test_the_chart_refuses_to_make_the_releases_own_namespace() -> None:
    done = render_text({"namespace": {"name": "waterline-system", "create": True}}, check=False)
    assert done.returncode != 0
    assert "namespace.create" in done.stderr and "--create-namespace" in done.stderr


def test_prometheus_objects_render_deploy_prometheus() -> None:
    on = {"prometheus": {"podMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}}}
    default = {key(d) for d in render()}
    added = [d for d in render(on) if key(d) not in default]
    problems = compare(kustomize(DEPLOY / "prometheus"), added)
    assert not problems, "the chart and deploy/prometheus/ differ:\n" + "\n".join(problems)


def test_batch_pods_render_deploy_batch_pods() -> None:
    """batchPods.enabled adds the MutatingAdmissionPolicy of deploy/batch-pods/, nothing else."""
    default = {key(d) for d in render()}
    added = [d for d in render({"batchPods": {"enabled": True}}) if key(d) not in default]
    problems = compare(kustomize(DEPLOY / "batch-pods"), added)
    assert not problems, "the chart and deploy/batch-pods/ differ:\n" + "\n".join(problems)
    for doc in added:  # MutatingAdmissionPolicy v1: Kubernetes 1.36+, not the 1.30 of the rest
        kubernetes_validate.validate(doc, BATCH_PODS_KUBE_VERSION, strict=True)


@pytest.mark.parametrize("layout", ["v2-cgroupfs", "v1-systemd", "v1-cgroupfs"])
def test_each_cgroup_layout_is_its_deploy_component(layout: str, tmp_path: Path) -> None:
    base = os.path.relpath(DEPLOY, tmp_path)
    overlay = {"resources": [base], "components": [f"{base}/components/cgroup-{layout}"]}
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(overlay))
    want = [_one(kustomize(tmp_path), "DaemonSet")]
    got = [_one(render({"agent": {"cgroupLayout": layout}}), "DaemonSet")]
    problems = compare(want, got)
    assert not problems, f"cgroup-{layout} differs:\n" + "\n".join(problems)


# -- helm lint, Kubernetes' schemas ---------------------------------------------------------


@pytest.mark.parametrize("values", [None, EVERYTHING, CUSTOM], ids=["default", "everything", "custom"])
def test_helm_lint_is_clean(values: dict[str, Any] | None, tmp_path: Path) -> None:
    args = ["lint", "--strict", str(CHART)]
    if values:
        (tmp_path / "values.yaml").write_text(yaml.safe_dump(values))
        args += ["--values", str(tmp_path / "values.yaml")]
    out = helm(*args).stdout
    assert "1 chart(s) linted, 0 chart(s) failed" in out
    assert "[WARNING]" not in out and "[ERROR]" not in out, out


@pytest.mark.parametrize("values", [None, EVERYTHING, CUSTOM], ids=["default", "everything", "custom"])
def test_every_rendering_passes_kubernetes_schemas(values: dict[str, Any] | None) -> None:
    docs = render(values)
    for doc in docs:
        if doc["apiVersion"].startswith(OPERATOR_GROUP):
            continue  # the operator's kinds: their fields are deploy/prometheus/'s (above)
        kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)
        namespaced = doc["kind"] not in CLUSTER_SCOPED
        assert bool(doc["metadata"].get("namespace")) is namespaced, key(doc)


# -- values.schema.json -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"agent": {"interval": -1}}, "/agent/interval"),
        ({"agent": {"intervall": 1}}, "intervall"),
        ({"agnet": {}}, "agnet"),
        ({"agent": {"settings": {"executeExcessPercent": 150}}}, "/agent/settings/executeExcessPercent"),
        ({"agent": {"settings": {"evictionRateLimit": {"burst": 0}}}}, "/agent/settings/evictionRateLimit/burst"),
        ({"agent": {"cgroupLayout": "v3"}}, "/agent/cgroupLayout"),
        ({"controller": {"replicas": "two"}}, "/controller/replicas"),
        ({"controller": {"settings": {"defrg": {}}}}, "defrg"),
        ({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
        ({"namespace": {"name": "Waterline_System"}}, "/namespace/name"),
    ],
    ids=lambda v: json.dumps(v) if isinstance(v, dict) else v,
)
def test_schema_refuses_a_bad_value_naming_it(values: dict[str, Any], named: str) -> None:
    done = render_text(values, check=False)
    assert done.returncode != 0, f"{values} was accepted"
    assert "values don't meet the specifications of the schema" in done.stderr, done.stderr
    assert named in done.stderr, done.stderr


def test_schema_knows_the_programs_settings() -> None:
    """agent.settings has the agent's fields, controller.settings the controller's sections:
    a setting added to a program and not to the schema (or the other way) fails here."""
    schema = json.loads((CHART / "values.schema.json").read_text())["properties"]
    agent = schema["agent"]["properties"]["settings"]["properties"]
    assert set(agent) == set(agent_settings._FIELDS)
    controller = schema["controller"]["properties"]["settings"]["properties"]
    assert set(controller) == set(agent_settings.CONFIG_SECTIONS) - {"agent"}


# -- the values do what they say --------------------------------------------------------------


def test_custom_values_move_change_and_leave_out_what_they_say() -> None:
    docs = render(CUSTOM)
    ns = _one(docs, "Namespace")
    assert ns["metadata"]["name"] == "waterline-edge"
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    for doc in docs:
        if doc["kind"] not in CLUSTER_SCOPED:
            assert doc["metadata"]["namespace"] == "waterline-edge", key(doc)
    pod = _one(docs, "DaemonSet")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == "registry.example.com/waterline:0.1.0-edge"
    assert container["resources"] == CUSTOM["agent"]["resources"]
    assert pod["nodeSelector"] == {"pool": "edge"}
    # The controller off: no workload, budget, identity or permissions of its own.
    assert not {"Deployment", "PodDisruptionBudget"} & _kinds(docs)
    assert not [d for d in docs if "controller" in d["metadata"]["name"]]
    # The admission policy names the agent of this namespace.
    (condition,) = _one(docs, "ValidatingAdmissionPolicy")["spec"]["matchConditions"]
    assert "system:serviceaccount:waterline-edge:waterline-agent" in condition["expression"]


def test_settings_reach_the_programs_as_they_parse_them() -> None:
    docs = render(EVERYTHING)
    config = _one(docs, "ConfigMap", "waterline-config")["data"]
    agent_file = yaml.safe_load(config["agent.yaml"])
    parsed = agent_settings.parse_agent_settings(agent_file["agent"], prefix="agent.")
    assert parsed.execute_excess_percent == 5 and parsed.eviction_rate_limit.burst == 2
    controller = parse_config(yaml.safe_load(config["controller.yaml"]))
    assert "defrag" in controller.enabled and controller.brake.per_minute == 50
    (agent,) = _one(docs, "DaemonSet")["spec"]["template"]["spec"]["containers"]
    assert agent["args"][-3:] == ["--interval=0.5", "--log-level=debug", "--config=/etc/waterline/agent.yaml"]
    assert {"name": "config", "mountPath": "/etc/waterline", "readOnly": True} in agent["volumeMounts"]
    deployment = _one(docs, "Deployment")
    (controller_container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert controller_container["args"] == [
        "controller", "--interval=30", "--log-level=warning", "--config=/etc/waterline/controller.yaml"
    ]  # fmt: skip
    # The controller reads its file at start: a settings change rolls it.
    assert "checksum/config" in deployment["spec"]["template"]["metadata"]["annotations"]


def test_prometheus_objects_carry_the_selector_labels() -> None:
    docs = render(EVERYTHING)
    for kind in ("PodMonitor", "PrometheusRule"):
        for doc in [d for d in docs if d["kind"] == kind]:
            assert doc["metadata"]["labels"]["release"] == "kube-prometheus-stack", key(doc)
            assert doc["metadata"]["namespace"] == "qos"


def test_another_release_prefixes_only_cluster_scoped_names() -> None:
    """Namespaced names are the programs' (the agent finds its DaemonSet, the controller
    its Lease, the alerts their job by them); cluster-scoped ones carry the release, so a
    second release (other nodes, another cgroup layout) never takes the first one's."""
    default = by_key(render())
    other = by_key(render(release="edge", namespace="edge-system"))
    scoped = {k for k in default if k[0] in CLUSTER_SCOPED and k[0] != "CustomResourceDefinition"}
    assert scoped and {("ClusterRole", "", "edge-waterline-agent")} <= set(other)
    for kind, _ns, name in scoped:
        assert (kind, "", f"edge-{name}") in other, (kind, name)
    binding = other[("ClusterRoleBinding", "", "edge-waterline-controller")]
    assert binding["roleRef"]["name"] == "edge-waterline-controller"
    assert binding["subjects"][0]["namespace"] == "edge-system"
    vap_binding = other[("ValidatingAdmissionPolicyBinding", "", "edge-waterline-agent-own-node-taint-only")]
    assert vap_binding["spec"]["policyName"] == "edge-waterline-agent-own-node-taint-only"
    namespaced = {(k[0], k[2]) for k in default if k[0] not in CLUSTER_SCOPED}
    assert namespaced == {(k[0], k[2]) for k in other if k[0] not in CLUSTER_SCOPED}
    for doc in other.values():
        if doc["kind"] != "CustomResourceDefinition":  # crds/ is Helm's verbatim
            assert set(doc["metadata"]["labels"]) >= HELM_LABELS, key(doc)
