"""deploy/ and config/: every manifest parses and passes Kubernetes' own schemas, the
DaemonSet agrees with the agent's defaults, RBAC grants exactly what the programs use,
the CRDs are structural, and every sample in config/ passes its CRD's schema (with the
API server's pruning made strict: an unknown field is an error, as kubectl's default
server-side field validation reports it)."""

from __future__ import annotations

import argparse
import copy
import functools
import os
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from agent import defaults
from collectors.layout import kubepods_path
from tests.chart import kustomize
from tests.deploy_manifests import DEPLOY as COMPONENTS_BASE
from tests.deploy_manifests import agent_args, agent_daemonset, agent_mounts, component_names

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
CONFIG = ROOT / "config"
#: The oldest Kubernetes minor we install on: CEL validation rules are GA from 1.29, and
#: the admission policy on the agent's node patches (ValidatingAdmissionPolicy v1, the
#: node name in service account tokens) needs 1.30.
KUBE_VERSION = "1.30.0"
#: deploy/batch-pods/, its own step, needs MutatingAdmissionPolicy v1 (GA in 1.36).
NEWER = {"batch-pods": "1.36.0"}
GROUP = defaults.API_GROUP
#: PodMonitor and PrometheusRule have no Kubernetes schema here (checked by their own test).
OPERATOR_GROUP = "monitoring.coreos.com/"
#: Where the agent's container sees the host's /proc (its own /proc stays its own).
HOST_PROC = "/host/proc"


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def _manifest_files() -> list[Path]:
    return sorted(p for p in DEPLOY.rglob("*.yaml") if p.name != "kustomization.yaml")


@functools.cache
def _parsed_manifests() -> tuple[dict[str, Any], ...]:
    return tuple(d for p in _manifest_files() for d in _docs(p))


def _all_manifests() -> list[dict[str, Any]]:
    """Every document in deploy/ (a fresh copy: tests may change what they get)."""
    return copy.deepcopy(list(_parsed_manifests()))


def _one(kind: str, name: str | None = None) -> dict[str, Any]:
    found = [
        d
        for d in _all_manifests()
        if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)
    ]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def _crds() -> dict[str, dict[str, Any]]:
    """CRDs by kind."""
    return {
        d["spec"]["names"]["kind"]: d
        for d in _all_manifests()
        if d["kind"] == "CustomResourceDefinition"
    }


# -- every manifest --------------------------------------------------------------------


@pytest.mark.parametrize("path", _manifest_files(), ids=lambda p: str(p.relative_to(DEPLOY)))
def test_manifest_parses_and_passes_kubernetes_schema(path: Path) -> None:
    docs = _docs(path)
    assert docs, f"{path} is empty"
    for doc in docs:
        assert doc.get("apiVersion") and doc.get("kind") and doc["metadata"].get("name")
        if doc["apiVersion"].startswith(OPERATOR_GROUP):
            continue  # the Prometheus operator's kinds: tests/unit/test_dashboards.py
        version = NEWER.get(path.relative_to(DEPLOY).parts[0], KUBE_VERSION)
        kubernetes_validate.validate(doc, version, strict=True)


def test_kubernetes_schema_check_is_strict() -> None:
    """A typo in a field name must fail, or the test above proves nothing."""
    ds = copy.deepcopy(_one("DaemonSet"))
    ds["spec"]["template"]["spec"]["containers"][0]["volumeMount"] = []
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(ds, KUBE_VERSION, strict=True)


def _kustomization_resources(directory: Path) -> list[Path]:
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    listed = [directory / r for r in kustomization["resources"]]
    for path in listed:
        assert path.exists(), f"{directory}/kustomization.yaml lists a missing {path}"
    return listed


def test_kustomization_installs_every_manifest() -> None:
    """`kubectl apply -k deploy/` installs every manifest, except those a sub-directory's
    own kustomization.yaml installs on request (say, objects that need another project's
    CRDs, such as the Prometheus operator's)."""
    covered = set()
    for path in _kustomization_resources(DEPLOY):
        covered |= set(_kustomization_resources(path)) if path.is_dir() else {path}
    for sub in DEPLOY.glob("*/kustomization.yaml"):
        covered |= set(_kustomization_resources(sub.parent))
    assert sorted(covered) == _manifest_files(), "a manifest in deploy/ is in no kustomization"
    core = {d["kind"] for p in _kustomization_resources(DEPLOY) if p.is_file() for d in _docs(p)}
    assert {
        "CustomResourceDefinition",
        "Namespace",
        "DaemonSet",
        "Deployment",
        "ClusterRole",
    } <= core


def test_namespaced_objects_live_in_the_waterline_namespace() -> None:
    cluster_scoped = {
        "Namespace",
        "CustomResourceDefinition",
        "ClusterRole",
        "ClusterRoleBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
    }
    for doc in _all_manifests():
        if doc["kind"] not in cluster_scoped:
            assert doc["metadata"].get("namespace") == defaults.NAMESPACE, doc["metadata"]["name"]
    assert _one("Namespace")["metadata"]["name"] == defaults.NAMESPACE


# -- the DaemonSet agrees with the agent's defaults -----------------------------------


def _agent_pod() -> dict[str, Any]:
    return _one("DaemonSet", "waterline-agent")["spec"]["template"]["spec"]


def _agent_container() -> dict[str, Any]:
    containers = _agent_pod()["containers"]
    assert len(containers) == 1
    return containers[0]


def test_agent_command_image_and_node_name() -> None:
    c = _agent_container()
    assert c["image"] == defaults.IMAGE
    node_name = f"--node-name=$({defaults.NODE_NAME_ENV})"
    assert c["args"] == ["agent", node_name, f"--proc-root={HOST_PROC}"]
    env = {e["name"]: e for e in c["env"]}
    assert env[defaults.NODE_NAME_ENV]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    # its namespace (the brake ConfigMap, its own DaemonSet) from the downward API
    assert env[defaults.POD_NAMESPACE_ENV]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert _one("DaemonSet")["metadata"]["name"] == defaults.AGENT_DAEMONSET


def test_agent_arguments_parse_to_the_mounted_paths() -> None:
    """The DaemonSet's args, read by the agent's own parser, land on the mounted paths
    and serve metrics on the exposed port."""
    from agent.node.arguments import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = [a.replace(f"$({defaults.NODE_NAME_ENV})", "node-a") for a in _agent_container()["args"]]
    assert args[0] == "agent"
    parsed = parser.parse_args(args[1:])
    assert parsed.node_name == "node-a"
    mounts = _mounts()
    assert {parsed.proc_root, parsed.cgroup_root, parsed.state_dir} <= set(mounts)
    assert parsed.metrics_addr.rsplit(":", 1)[-1] == str(defaults.METRICS_PORT)


def test_agent_port_and_probes_use_the_metrics_port() -> None:
    c = _agent_container()
    ports = {p["name"]: p for p in c["ports"]}
    assert ports["metrics"]["containerPort"] == defaults.METRICS_PORT
    assert c["livenessProbe"]["httpGet"] == {"path": defaults.HEALTH_PATH, "port": "metrics"}
    assert c["readinessProbe"]["httpGet"] == {"path": defaults.READY_PATH, "port": "metrics"}
    annotations = _one("DaemonSet")["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(defaults.METRICS_PORT)


def _mounts() -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """mountPath -> (volumeMount, volume)."""
    volumes = {v["name"]: v for v in _agent_pod()["volumes"]}
    return {m["mountPath"]: (m, volumes[m["name"]]) for m in _agent_container()["volumeMounts"]}


@pytest.mark.parametrize(
    ("mount_path", "host_path", "writable"),
    [
        (HOST_PROC, "/proc", False),
        (defaults.CGROUP_ROOT, "/sys/fs/cgroup", False),
        ("/sys/fs/cgroup/kubepods.slice", "/sys/fs/cgroup/kubepods.slice", True),
        (defaults.STATE_DIR, defaults.STATE_DIR, True),
        ("/run/dbus", "/run/dbus", False),  # systemd's bus socket (executors/busctl.py)
    ],
)
def test_agent_host_mounts(mount_path: str, host_path: str, writable: bool) -> None:
    mount, volume = _mounts()[mount_path]
    assert volume["hostPath"]["path"] == host_path
    assert bool(mount.get("readOnly")) is not writable


def test_agent_state_directory_is_made_on_first_start() -> None:
    state = _mounts()[defaults.STATE_DIR][1]
    assert state["hostPath"]["type"] == "DirectoryOrCreate"  # first start on a fresh node


# -- the agent's host mounts, for every cgroup layout (deploy/components/) ---------------

#: deploy/daemonset.yaml and each of deploy/components/: (cgroup version, kubelet's driver).
LAYOUTS: dict[str | None, tuple[int, str]] = {
    None: (2, "systemd"),
    "cgroup-v2-cgroupfs": (2, "cgroupfs"),
    "cgroup-v1-systemd": (1, "systemd"),
    "cgroup-v1-cgroupfs": (1, "cgroupfs"),
}
V1_READ = ("cpu", "cpuacct", "memory")  # the hierarchies the collectors read on v1


def _kubepods(version: int, driver: str) -> str:
    """Where the agent's own layout code looks for kubepods: in the cpu controller's
    hierarchy (v1) or the unified one (v2), spelled as kubelet's driver spells it."""
    hierarchy = f"{defaults.CGROUP_ROOT}/cpu" if version == 1 else defaults.CGROUP_ROOT
    return f"{hierarchy}/{kubepods_path(driver)}"


def test_every_component_is_a_known_layout() -> None:
    assert set(component_names()) == {c for c in LAYOUTS if c}


@pytest.mark.parametrize("component", list(LAYOUTS), ids=str)
def test_agent_writes_only_kubepods_and_state(component: str | None) -> None:
    version, driver = LAYOUTS[component]
    ds = agent_daemonset(component)
    kubernetes_validate.validate(ds, KUBE_VERSION, strict=True)
    mounts = agent_mounts(ds)
    assert len({m.name for m in mounts}) == len({m.path for m in mounts}) == len(mounts)
    writable = {m.path for m in mounts if not m.read_only}
    # v1: the memory hierarchy's kubepods too (batch pods' memory limits; v2 has one tree)
    memory = {f"{defaults.CGROUP_ROOT}/memory/{kubepods_path(driver)}"} if version == 1 else set()
    assert writable == {_kubepods(version, driver), defaults.STATE_DIR, *memory}  # no /tmp: none used
    cgroup = [m for m in mounts if m.path.startswith(defaults.CGROUP_ROOT)]
    for m in cgroup:  # at the host's own paths; never created on a node that lacks them
        assert (m.host_path, m.host_type) == (m.path, "Directory")
    read_only = {m.path for m in cgroup if m.read_only}
    if version == 2:
        assert read_only == {defaults.CGROUP_ROOT}
    else:  # read-only one hierarchy at a time: the tmpfs's read-only stops at its own mount
        assert read_only == {f"{defaults.CGROUP_ROOT}/{h}" for h in V1_READ}
    for kubepods in [m.path for m in cgroup if not m.read_only]:
        assert any(kubepods.startswith(f"{top}/") for top in read_only)


@pytest.mark.parametrize("component", list(LAYOUTS), ids=str)
def test_agent_reads_the_hosts_proc_beside_its_own(component: str | None) -> None:
    ds = agent_daemonset(component)
    mounts = agent_mounts(ds)
    (proc,) = [m for m in mounts if m.host_path == "/proc"]
    assert (proc.path, proc.read_only) == (HOST_PROC, True)
    assert not [m for m in mounts if m.path == "/proc" or m.path.startswith("/proc/")]
    assert f"--proc-root={HOST_PROC}" in agent_args(ds)


@pytest.mark.parametrize("component", [c for c in LAYOUTS if c])
def test_components_render_the_same_through_kubectl_kustomize(
    component: str, tmp_path: Path
) -> None:
    """The patch reading in tests/deploy_manifests.py agrees with kustomize's own."""
    base = os.path.relpath(COMPONENTS_BASE, tmp_path)
    overlay = {"resources": [base], "components": [f"{base}/components/{component}"]}
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(overlay))
    (ds,) = [d for d in kustomize(tmp_path) if d["kind"] == "DaemonSet"]
    assert agent_mounts(ds) == agent_mounts(agent_daemonset(component))


def test_agent_least_privilege() -> None:
    pod, c = _agent_pod(), _agent_container()
    sc = c["securityContext"]
    assert sc["privileged"] is False
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert not pod.get("hostNetwork") and not pod.get("hostIPC")
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"


@pytest.mark.parametrize("component", list(LAYOUTS), ids=str)
def test_agent_shares_the_hosts_pid_namespace(component: str | None) -> None:
    """The tasks of the pods' cgroups (cgroup.procs) are listed in the reader's pid
    namespace only, and their schedstat is read at the same pids under the host's /proc:
    every layout runs in the host's pid namespace and reads the host's /proc."""
    ds = agent_daemonset(component)
    assert ds["spec"]["template"]["spec"]["hostPID"] is True
    assert [m.path for m in agent_mounts(ds) if m.host_path == "/proc"] == [HOST_PROC]


def test_agent_runs_on_every_node_and_is_node_critical() -> None:
    pod, c = _agent_pod(), _agent_container()
    assert {"operator": "Exists"} in pod["tolerations"]  # every taint, every effect
    assert pod["priorityClassName"] == "system-node-critical"
    assert not pod.get("nodeSelector") and not pod.get("affinity")
    assert c["resources"]["requests"]["cpu"] and c["resources"]["requests"]["memory"]
    assert c["resources"]["limits"]["memory"]


def test_make_image_builds_the_image_the_manifests_run() -> None:
    """`make image` tags IMAGE_REPOSITORY:<pyproject's version>; deploy/ runs defaults.IMAGE."""
    makefile = (ROOT / "Makefile").read_text()
    (repository,) = re.findall(r"^IMAGE_REPOSITORY \?= (\S+)$", makefile, re.MULTILINE)
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert f"{repository}:{version}" == defaults.IMAGE


def test_controller_deployment_and_lease() -> None:
    deploy = _one("Deployment", "waterline-controller")
    assert deploy["spec"]["replicas"] >= 2  # a warm follower
    c = deploy["spec"]["template"]["spec"]["containers"][0]
    assert c["image"] == defaults.IMAGE
    assert c["args"] == ["controller"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["LEASE_NAME"] == defaults.CONTROLLER_LEASE_NAME
    assert env["LEASE_NAMESPACE"] == defaults.CONTROLLER_LEASE_NAMESPACE
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert deploy["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True
    assert "volumes" not in deploy["spec"]["template"]["spec"]


# -- RBAC (exactly the calls in code: tests/unit/test_rbac.py) ------------------------


def test_no_wildcards_and_no_pod_deletes() -> None:
    """Pods leave through the Eviction API; the one exception is the controller's own
    reservation placeholders, in its own namespace (a Role, never a ClusterRole)."""
    for doc in _all_manifests():
        own_namespace = doc["kind"] == "Role" and doc["metadata"]["name"] == "waterline-controller"
        for rule in doc.get("rules", []):
            for key in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[key], f"{doc['metadata']['name']}: wildcard {key}"
            deletes = {"pods", "nodes"} & set(rule["resources"]) and "delete" in rule["verbs"]
            assert not deletes or (own_namespace and set(rule["resources"]) == {"pods"})


# -- CRDs --------------------------------------------------------------------------------

CRD_KINDS = {
    "NodeQOSEnsurancePolicy": "nodeqosensurancepolicies",
    "AvoidanceAction": "avoidanceactions",
    "PodMigrationJob": "podmigrationjobs",
    "Reservation": "reservations",
    "Queue": "queues",
}
WITH_STATUS = {"PodMigrationJob", "Reservation", "Queue", "NodeQOSEnsurancePolicy", "AvoidanceAction"}


def _schema(kind: str) -> dict[str, Any]:
    (version,) = _crds()[kind]["spec"]["versions"]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


def test_crd_names_group_scope_and_subresources() -> None:
    crds = _crds()
    assert set(crds) == set(CRD_KINDS)
    for kind, plural in CRD_KINDS.items():
        spec = crds[kind]["spec"]
        assert crds[kind]["metadata"]["name"] == f"{plural}.{GROUP}"
        assert spec["group"] == GROUP and spec["scope"] == "Cluster"
        assert spec["names"]["plural"] == plural
        (version,) = spec["versions"]
        assert version["name"] == defaults.API_VERSION and version["served"] and version["storage"]
        assert ("status" in version.get("subresources", {})) == (kind in WITH_STATUS)


def _walk(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for name, child in (node.get("properties") or {}).items():
        yield from _walk(child, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from _walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _walk(node["additionalProperties"], f"{path}{{}}")


@pytest.mark.parametrize("kind", sorted(CRD_KINDS))
def test_crd_schema_is_structural(kind: str) -> None:
    """The API server's structural rules: every node has a type unless it is int-or-string
    or preserves unknown fields; properties only on objects, items only on arrays; never
    both properties and additionalProperties; every default passes its own schema."""
    for path, node in _walk(_schema(kind)):
        where = f"{kind}{path}"
        assert (
            node.get("type")
            or node.get("x-kubernetes-int-or-string")
            or node.get("x-kubernetes-preserve-unknown-fields")
        ), f"{where}: no type"
        if "properties" in node or "additionalProperties" in node:
            assert node["type"] == "object", where
            assert not ("properties" in node and "additionalProperties" in node), where
        if "items" in node:
            assert node["type"] == "array", where
        if "default" in node:
            jsonschema.validate(node["default"], _strict(node))


def _strict(node: dict[str, Any]) -> dict[str, Any]:
    """The CRD schema as JSON Schema with pruning turned into an error."""
    out = dict(node)
    out.pop("x-kubernetes-validations", None)
    if out.get("x-kubernetes-int-or-string") and "anyOf" not in out:
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if "properties" in out:
        out["properties"] = {k: _strict(v) for k, v in out["properties"].items()}
        if not out.get("x-kubernetes-preserve-unknown-fields"):
            out.setdefault("additionalProperties", False)
    if isinstance(out.get("items"), dict):
        out["items"] = _strict(out["items"])
    if isinstance(out.get("additionalProperties"), dict):
        out["additionalProperties"] = _strict(out["additionalProperties"])
    return out


def _defaulted(node: dict[str, Any], value: Any) -> Any:
    """Apply schema defaults the way the API server does (only under present parents)."""
    if isinstance(value, dict) and "properties" in node:
        out = dict(value)
        for name, child in node["properties"].items():
            if name not in out and "default" in child:
                out[name] = copy.deepcopy(child["default"])
            if name in out:
                out[name] = _defaulted(child, out[name])
        return out
    if isinstance(value, list) and isinstance(node.get("items"), dict):
        return [_defaulted(node["items"], v) for v in value]
    return value


@functools.cache
def _validator(kind: str) -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator(_strict(_schema(kind)))


def _validate(obj: dict[str, Any]) -> dict[str, Any]:
    """Validate a custom resource against its CRD; return it with defaults applied."""
    assert obj["apiVersion"] == f"{GROUP}/{defaults.API_VERSION}"
    defaulted: dict[str, Any] = _defaulted(_schema(obj["kind"]), obj)
    _validator(obj["kind"]).validate(defaulted)
    assert "namespace" not in obj["metadata"], "Waterline's resources are cluster-scoped"
    return defaulted


# -- the samples in config/ -------------------------------------------------------------


def _samples() -> list[tuple[str, dict[str, Any]]]:
    files = sorted((CONFIG / "policies").glob("*.yaml")) + sorted(
        (CONFIG / "samples").glob("*.yaml")
    )
    return [(f"{p.parent.name}/{p.name}#{i}", d) for p in files for i, d in enumerate(_docs(p))]


@pytest.mark.parametrize(("where", "obj"), _samples(), ids=[w for w, _ in _samples()])
def test_sample_passes_its_crd_schema(where: str, obj: dict[str, Any]) -> None:
    _validate(obj)


def test_samples_cover_every_kind_and_the_documented_cases() -> None:
    objs = [o for _, o in _samples()]
    kinds = {o["kind"] for o in objs}
    assert kinds == set(CRD_KINDS)
    actions = {o["metadata"]["name"]: o for o in objs if o["kind"] == "AvoidanceAction"}
    policies = [o for o in objs if o["kind"] == "NodeQOSEnsurancePolicy"]
    rules = [r for p in policies for r in p["spec"].get("objectiveEnsurances", [])]
    for rule in rules:
        assert rule["actionName"] in actions, f"{rule['name']} names a missing action"
        assert rule["metricRule"]["name"] in _registered_metrics()
    for action in actions.values():
        assert "throttle" in action["spec"] or "eviction" in action["spec"]  # the CEL rule
    batch = [
        p
        for p in policies
        if p["spec"].get("nodeSelector", {}).get("matchLabels") == {"pool": "batch"}
    ]
    assert any(
        actions[r["actionName"]]["spec"].get("throttle")
        for p in batch
        for r in p["spec"]["objectiveEnsurances"]
    )
    memory = [r for r in rules if r["metricRule"]["name"].startswith("memory")]
    assert any("eviction" in actions[r["actionName"]]["spec"] for r in memory)
    assert any(r.get("strategy") == "Preview" for r in rules)
    isolated = [p["spec"]["cpuIsolation"] for p in policies if "cpuIsolation" in p["spec"]]
    assert any("idle" in c for c in isolated) and any("burst" in c for c in isolated)
    # the pool with an idle class watches no node CPU line (a node at 100% hurts nobody)
    for p in policies:
        if "idle" in p["spec"].get("cpuIsolation", {}):
            selected = p["spec"].get("nodeSelector", {}).get("matchLabels")
            same_pool = [q for q in policies if q["spec"].get("nodeSelector", {}).get("matchLabels") == selected]
            assert not [r for q in same_pool for r in q["spec"].get("objectiveEnsurances", [])
                        if r["metricRule"]["name"].startswith("cpu_total")]


def _registered_metrics() -> set[str]:
    from agent.model import registry
    return {m.name for m in registry.METRICS}


def test_defaults_follow_the_design() -> None:
    policy = _validate(
        {
            "apiVersion": f"{GROUP}/v1alpha1",
            "kind": "NodeQOSEnsurancePolicy",
            "metadata": {"name": "p"},
            "spec": {
                "objectiveEnsurances": [
                    {
                        "name": "r",
                        "metricRule": {"name": "cpu_total_usage", "value": 6},
                        "actionName": "a",
                    }
                ]
            },
        }
    )
    rule = policy["spec"]["objectiveEnsurances"][0]
    assert (rule["avoidanceThreshold"], rule["restoreThreshold"], rule["strategy"]) == (
        1,
        1,
        "None",
    )
    action = _validate(
        {
            "apiVersion": f"{GROUP}/v1alpha1",
            "kind": "AvoidanceAction",
            "metadata": {"name": "a"},
            "spec": {"eviction": {}},
        }
    )
    assert action["spec"]["coolDownSeconds"] == 300
    assert action["spec"]["scope"] == {
        "qosClasses": ["BestEffort", "Burstable"],
        "maxPriority": 999999,
    }
    queue = _validate(
        {"apiVersion": f"{GROUP}/v1alpha1", "kind": "Queue", "metadata": {"name": "q"}}
    )
    assert queue["spec"] == {"weight": 1, "reclaimable": True}
    job = _validate(
        {
            "apiVersion": f"{GROUP}/v1alpha1",
            "kind": "PodMigrationJob",
            "metadata": {"name": "j"},
            "spec": {"podRef": {"namespace": "default", "name": "p"}},
        }
    )
    assert job["spec"]["mode"] == "ReservationFirst" and job["spec"]["paused"] is False


BAD = [
    ("NodeQOSEnsurancePolicy", ("spec", "objectiveEnsurances", 0, "avoidanceThreshold"), 0),
    ("NodeQOSEnsurancePolicy", ("spec", "objectiveEnsurances", 0, "strategy"), "Enforce"),
    ("NodeQOSEnsurancePolicy", ("spec", "objectiveEnsurances", 0, "metricRule", "value"), "six"),
    ("NodeQOSEnsurancePolicy", ("spec", "objectiveEnsurances", 0, "actionNmae"), "typo"),
    ("AvoidanceAction", ("spec", "throttle", "cpuThrottle", "minCPURatio"), 101),
    ("AvoidanceAction", ("spec", "throttle", "cpuThrottle", "stepCPURatio"), 0),
    ("AvoidanceAction", ("spec", "coolDownSeconds"), -1),
    ("AvoidanceAction", ("spec", "scope", "qosClasses"), ["Besteffort"]),
    ("PodMigrationJob", ("spec", "mode"), "Teleport"),
    ("PodMigrationJob", ("spec", "ttl"), "ten minutes"),
    ("PodMigrationJob", ("status", "phase"), "Done"),
    ("Reservation", ("status", "phase"), "Held"),
    ("Queue", ("spec", "weight"), 0),
    ("Queue", ("spec", "capability", "cpu"), "lots"),
]


@pytest.mark.parametrize(
    ("kind", "path", "value"), BAD, ids=[f"{k}:{'.'.join(map(str, p))}" for k, p, _ in BAD]
)
def test_schema_rejects_bad_fields(kind: str, path: tuple[Any, ...], value: Any) -> None:
    obj = copy.deepcopy(next(o for _, o in _samples() if o["kind"] == kind))
    target: Any = obj
    for key in path[:-1]:
        if isinstance(target, dict):
            target = target.setdefault(key, {})
        else:
            target = target[key]
    target[path[-1]] = value
    with pytest.raises(jsonschema.ValidationError):
        _validate(obj)


def test_samples_parse_with_the_engines_own_parsers() -> None:
    """The CRD schema and the Python parsers must accept the same samples."""
    from agent.model import migration, policy, reservation
    objs = [o for _, o in _samples()]
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for o in objs:
        by_kind.setdefault(o["kind"], []).append(o)
    actions = {a["metadata"]["name"]: policy.parse_action(a) for a in by_kind["AvoidanceAction"]}
    for p in by_kind["NodeQOSEnsurancePolicy"]:
        policy.parse_policy(p, actions)
    for j in by_kind["PodMigrationJob"]:
        migration.parse_pod_migration_job(j)
    for r in by_kind["Reservation"]:
        reservation.parse_reservation(r)
