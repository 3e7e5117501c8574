"""The real kubectl against the dev API server: discovery, built-in kinds, CRDs applied and
their custom resources printed with their columns, client-side apply (create, then
strategic merge patch for built-ins and merge patch for custom resources), validation
errors that name the field, watch, delete. Skipped where kubectl is not installed."""

from __future__ import annotations

import json
import queue
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from devtools.apiserver.catalog import BUILTINS
from devtools.apiserver.server import DevServer
from devtools.apiserver.store import Store

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
]

ROOT = Path(__file__).resolve().parents[2]
NODE = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {"name": "node-1", "labels": {"node-role.kubernetes.io/worker": ""}},
    "status": {
        "conditions": [{"type": "Ready", "status": "True"}],
        "nodeInfo": {"kubeletVersion": "v1.32.0"},
    },
}


def header_of(plural: str) -> list[str]:
    """The header kubectl prints for a CRD's kind: NAME, then its printer columns."""
    crd = yaml.safe_load((ROOT / f"deploy/crds/qos.waterline.io_{plural}.yaml").read_text())
    columns = crd["spec"]["versions"][0].get("additionalPrinterColumns") or [{"name": "Age"}]
    return ["NAME", *(c["name"].upper() for c in columns if not c.get("priority"))]


class Kubectl:
    def __init__(self, server: DevServer, tmp: Path) -> None:
        self.server, self.tmp = server, tmp
        self.kubeconfig = tmp / "kubeconfig"
        server.write_kubeconfig(self.kubeconfig)

    def argv(self, *args: str) -> list[str]:
        return [
            "kubectl",
            f"--kubeconfig={self.kubeconfig}",
            f"--cache-dir={self.tmp / 'cache'}",
            "--request-timeout=20s",
            *args,
        ]

    def run(
        self, *args: str, ok: bool = True, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            self.argv(*args), capture_output=True, text=True, timeout=60, input=stdin
        )
        if ok:
            assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
        return done

    def rows(self, *args: str) -> list[list[str]]:
        """The header and the rows of ``kubectl get``, cut at the header's column starts
        (an empty cell stays an empty string)."""
        lines = self.run("get", *args).stdout.splitlines()
        starts = [m.start() for m in re.finditer(r"\S+(?: \S+)*", lines[0])] if lines else []
        bounds = list(zip(starts, [*starts[1:], None], strict=True))
        return [[line[a:b].strip() for a, b in bounds] for line in lines]


@pytest.fixture
def kubectl(tmp_path: Path) -> Iterator[Kubectl]:
    server = DevServer(Store(BUILTINS, grace_cap=0.3), bookmark_interval=0.5)
    server.seed_namespaces()
    server.start()
    try:
        yield Kubectl(server, tmp_path)
    finally:
        server.stop()


def test_get_nodes_and_the_built_in_kinds(kubectl: Kubectl) -> None:
    assert "No resources found" in kubectl.run("get", "nodes").stderr
    kubectl.run("apply", "-f", "-", stdin=yaml.safe_dump(NODE))
    header, row = kubectl.rows("nodes")
    assert header == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert row[:3] + row[4:] == ["node-1", "Ready", "worker", "v1.32.0"]
    assert row[3].endswith("s")  # an age in seconds
    resources = kubectl.run("api-resources", "-o", "name").stdout.split()
    for name in (
        "pods",
        "nodes",
        "namespaces",
        "events",
        "configmaps",
        "deployments.apps",
        "replicasets.apps",
        "statefulsets.apps",
        "daemonsets.apps",
        "jobs.batch",
        "poddisruptionbudgets.policy",
        "priorityclasses.scheduling.k8s.io",
        "leases.coordination.k8s.io",
        "events.events.k8s.io",
        "customresourcedefinitions.apiextensions.k8s.io",
    ):
        assert name in resources
    assert [r[0] for r in kubectl.rows("ns")[1:]] == [
        "default",
        "kube-node-lease",
        "kube-public",
        "kube-system",
    ]


def test_apply_crds_and_policies_then_get_them_with_their_columns(kubectl: Kubectl) -> None:
    crds = kubectl.run("apply", "-f", str(ROOT / "deploy/crds")).stdout
    assert "nodeqosensurancepolicies.qos.waterline.io created" in crds
    applied = kubectl.run("apply", "-f", str(ROOT / "config/policies"))
    assert "nodeqosensurancepolicy.qos.waterline.io/memory-guard created" in applied.stdout
    assert "avoidanceaction.qos.waterline.io/throttle created" in applied.stdout
    rows = kubectl.rows("nodeqosensurancepolicies")
    assert rows[0] == header_of("nodeqosensurancepolicies")  # the CRD's printer columns
    rules = rows[0].index("RULES")
    assert [(r[0], r[rules]) for r in rows[1:]] == [
        ("batch-pool-cpu", "cpu-high"),
        ("latency-critical-wait", "victims-wait"),
        ("memory-guard", "memory-high"),
        ("online-cpu-pressure-preview", "cpu-pressure"),
    ]
    assert kubectl.rows("nqp")[1:] and kubectl.rows("nqp")[0] == rows[0]  # the short name
    actions = kubectl.rows("avoidanceactions", "throttle")
    assert actions[0] == header_of("avoidanceactions")
    assert actions[1][actions[0].index("COOLDOWN")] == "300"
    everything = kubectl.run("get", "waterline").stdout  # the CRDs' category
    assert "nodeqosensurancepolicy.qos.waterline.io/memory-guard" in everything
    assert "avoidanceaction.qos.waterline.io/evict" in everything
    # the schema's defaults are applied, the status subresource keeps status out of apply
    policy = yaml.safe_load(kubectl.run("get", "nqp", "memory-guard", "-o", "yaml").stdout)
    assert policy["spec"]["objectiveEnsurances"][0]["strategy"] == "None"
    again = kubectl.run("apply", "-f", str(ROOT / "config/policies")).stdout
    assert "avoidanceaction.qos.waterline.io/throttle unchanged" in again


def test_apply_refuses_a_bad_policy_naming_the_field(kubectl: Kubectl) -> None:
    kubectl.run("apply", "-f", str(ROOT / "deploy/crds"))
    policy = next(yaml.safe_load_all((ROOT / "config/policies/memory-eviction.yaml").read_text()))
    policy["spec"]["objectiveEnsurances"][0]["avoidanceThreshold"] = 0
    bad = kubectl.run("apply", "-f", "-", ok=False, stdin=yaml.safe_dump(policy))
    assert bad.returncode != 0
    assert 'The NodeQOSEnsurancePolicy "memory-guard" is invalid' in bad.stderr
    assert "spec.objectiveEnsurances[0].avoidanceThreshold" in bad.stderr
    policy["spec"]["objectiveEnsurances"][0]["avoidanceThreshold"] = 3
    policy["spec"]["colour"] = "blue"
    unknown = kubectl.run("apply", "-f", "-", ok=False, stdin=yaml.safe_dump(policy))
    assert 'unknown field "spec.colour"' in unknown.stderr
    assert unknown.returncode != 0
    assert "No resources found" in kubectl.run("get", "nqp").stderr


def test_apply_merges_a_deployment_strategically(kubectl: Kubectl) -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "containers": [
                        {
                            "name": "main",
                            "image": "nginx",
                            "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                        }
                    ]
                },
            },
        },
    }
    kubectl.run("apply", "-f", "-", stdin=yaml.safe_dump(deployment))
    # someone else adds a sidecar: apply keeps it, as a strategic merge on the name does
    kubectl.run(
        "patch",
        "deployment",
        "web",
        "--type=strategic",
        "-p",
        '{"spec":{"template":{"spec":{"containers":[{"name":"sidecar","image":"envoy"}]}}}}',
    )
    container = deployment["spec"]["template"]["spec"]["containers"][0]  # type: ignore[index]
    container["env"] = [{"name": "B", "value": "3"}, {"name": "C", "value": "4"}]
    deployment["spec"]["replicas"] = 3  # type: ignore[index]
    assert "configured" in kubectl.run("apply", "-f", "-", stdin=yaml.safe_dump(deployment)).stdout
    got = yaml.safe_load(kubectl.run("get", "deploy", "web", "-o", "yaml").stdout)
    containers = got["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["main", "sidecar"]
    assert containers[0]["env"] == [{"name": "B", "value": "3"}, {"name": "C", "value": "4"}]
    assert containers[0]["image"] == "nginx"
    assert got["spec"]["replicas"] == 3 and got["metadata"]["generation"] == 3
    assert kubectl.rows("deploy")[0] == ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]


def test_watch_pods_sees_modified_then_delete(kubectl: Kubectl) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web-1", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "main", "image": "nginx"}]},
    }
    kubectl.run("apply", "-f", "-", stdin=yaml.safe_dump(pod))
    watch = subprocess.Popen(
        kubectl.argv("get", "pods", "--watch", "--output-watch-events"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    output: queue.Queue[str] = queue.Queue()
    threading.Thread(
        target=lambda: [output.put(x) for x in watch.stdout or ()], daemon=True
    ).start()

    def row() -> list[str]:
        return output.get(timeout=15).split()

    try:
        assert row() == ["EVENT", "NAME", "READY", "STATUS", "RESTARTS", "AGE"]
        assert row()[:2] == ["ADDED", "web-1"]
        kubectl.run("label", "pod", "web-1", "tier=frontend")
        assert row()[:2] == ["MODIFIED", "web-1"]
        started = time.monotonic()
        assert 'pod "web-1" deleted' in kubectl.run("delete", "pod", "web-1").stdout
        assert time.monotonic() - started < 10  # kubectl waited for the pod to go
        events = [row() for _ in range(2)]
        assert [e[0] for e in events] == ["MODIFIED", "DELETED"]
        assert events[0][3] == "Terminating"
    finally:
        watch.terminate()
        watch.wait(10)
    assert "No resources found" in kubectl.run("get", "pods").stderr


def test_create_raw_and_get_yaml_round_trip(kubectl: Kubectl) -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "raw"}, "data": {"a": "1"}}
    source = kubectl.tmp / "cm.json"
    source.write_text(json.dumps(cm))
    kubectl.run("create", "--raw", "/api/v1/namespaces/default/configmaps", "-f", str(source))
    got = yaml.safe_load(kubectl.run("get", "cm", "raw", "-o", "yaml").stdout)
    assert got["data"] == {"a": "1"} and got["metadata"]["namespace"] == "default"
    assert kubectl.rows("cm")[1][:2] == ["raw", "1"]
    cm["metadata"]["namespace"] = "elsewhere"  # type: ignore[index]
    source.write_text(json.dumps(cm))
    wrong = kubectl.run(
        "create", "--raw", "/api/v1/namespaces/default/configmaps", "-f", str(source), ok=False
    )
    assert "does not match the namespace sent on the request" in wrong.stderr


def test_crds_and_policies_in_one_apply_once_the_crds_exist(kubectl: Kubectl) -> None:
    """kubectl maps every object to a resource before it creates any: custom resources
    in the same apply as their new CRDs are refused (as by any API server); once the CRDs
    are there (``--objects deploy/crds``, or an earlier apply) one apply does both."""
    both = ("apply", "-f", str(ROOT / "deploy/crds"), "-f", str(ROOT / "config/policies"))
    first = kubectl.run(*both, ok=False)
    assert "ensure CRDs are installed first" in first.stderr
    assert "nodeqosensurancepolicies.qos.waterline.io created" in first.stdout
    again = kubectl.run(*both).stdout
    assert "nodeqosensurancepolicies.qos.waterline.io unchanged" in again
    assert "nodeqosensurancepolicy.qos.waterline.io/memory-guard created" in again


def test_deleting_a_crd_stops_serving_its_kind(kubectl: Kubectl) -> None:
    kubectl.run("apply", "-f", str(ROOT / "deploy/crds"))
    kubectl.run("apply", "-f", str(ROOT / "config/policies"))
    kubectl.run(
        "wait", "--for=condition=established", "crd/queues.qos.waterline.io", "--timeout=10s"
    )
    kubectl.run(
        "delete", "-f", str(ROOT / "deploy/crds/qos.waterline.io_nodeqosensurancepolicies.yaml")
    )
    gone = kubectl.run("get", "nqp", ok=False)
    assert gone.returncode != 0 and "nodeqosensurancepolicies" in gone.stderr
    assert len(kubectl.rows("avoidanceactions")) == 5  # the samples' actions, and the header


def test_create_namespace_works_and_other_create_kinds_say_what_to_do(kubectl: Kubectl) -> None:
    """kubectl create <kind> sends protobuf: a Namespace (the first thing a session
    creates) is read; another kind is refused with the way out, not 'not valid JSON'."""
    made = kubectl.run("create", "namespace", "waterline-system")
    assert made.stdout.strip() == "namespace/waterline-system created"
    kubectl.run("label", "namespace", "waterline-system", "team=qos")
    labels = kubectl.run("get", "ns", "waterline-system", "-o", "jsonpath={.metadata.labels}").stdout
    assert json.loads(labels)["team"] == "qos"
    refused = kubectl.run("create", "configmap", "c", "--from-literal=a=b", ok=False)
    assert refused.returncode != 0
    assert "use kubectl apply -f" in refused.stderr and "ConfigMap" in refused.stderr
