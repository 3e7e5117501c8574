"""charts/waterline installed, upgraded and uninstalled by the real ``helm`` on the real
control plane (devtools/harness/cluster.py; kwok nodes run the pods, so nothing runs the programs).

The ``kube`` fixture already has deploy/ in waterline-system (kubectl apply -k), so each
release here takes namespaces of its own and a release name other than "waterline": the
chart prefixes its cluster-scoped names (ClusterRoles, their bindings, the admission
policy) with the release, and its CRDs, present already, are skipped by Helm (crds/ is
installed only where a CRD does not exist, and never upgraded or deleted).

Not here: that caps survive ``helm upgrade`` on a real node. That needs the agent running
on a real kubelet (issue 22's node, built in parallel; the agent's side, a restart adopts
the caps, is tests/integration/test_agent_restart.py). Once a real-node fixture exists,
the upgrade of the second test is the one to run there with a throttled pod on the node.
What the control plane shows of the uninstall is here: a plain ``helm uninstall`` deletes
the agent's ServiceAccount and Roles in the same pass as its DaemonSet, so a stopping
agent's own question "is my DaemonSet gone?" is refused; the watch it keeps on its
DaemonSet (authorized when it started) has seen the deletion, and that answers: it
releases its caps (agent.kube.nodeview.OwnDaemonSet).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.kube.cache import Cache
from agent.kube.fetching import Selectors
from agent.kube.nodeview import OwnDaemonSet
from agent.kube.resources import DAEMONSETS
from agent.kube.watching import start_watches
from agent.node.incluster import agent_uninstalled
from devtools.harness.cluster import RealCluster, unique
from devtools.harness.waiting import wait_until
from tests.chart import CHART, helm

pytestmark = pytest.mark.integration

#: What every namespace has, Waterline or not.
NAMESPACE_DEFAULTS = {("ConfigMap", "kube-root-ca.crt"), ("ServiceAccount", "default")}
#: The namespaced kinds the chart makes, and what a program could leave (Leases, brake).
NAMESPACED = "daemonsets,deployments,replicasets,pods,poddisruptionbudgets,serviceaccounts,roles,rolebindings,configmaps,leases"


def _helm(kube: RealCluster, *args: str, check: bool = True) -> Any:
    return helm(*args, kubeconfig=kube.kubeconfig, check=check)


def _manifest(kube: RealCluster, release: str, namespace: str) -> list[dict[str, Any]]:
    text = _helm(kube, "get", "manifest", release, "--namespace", namespace).stdout
    return [d for d in yaml.safe_load_all(text) if d]


def _exists(kube: RealCluster, doc: dict[str, Any]) -> bool:
    args = ["get", f"{doc['kind']}.{doc['apiVersion'].split('/')[0]}" if "/" in doc["apiVersion"]
            else doc["kind"], doc["metadata"]["name"], "--ignore-not-found", "-o", "name"]  # fmt: skip
    if doc["metadata"].get("namespace"):
        args += ["--namespace", doc["metadata"]["namespace"]]
    return bool(kube.kubectl(*args).stdout.strip())


def _get(kube: RealCluster, *args: str) -> Any:
    return json.loads(kube.kubectl("get", *args, "-o", "json").stdout)


def _agent_pods(kube: RealCluster, namespace: str) -> list[dict[str, Any]]:
    pods = _get(kube, "pods", "-n", namespace, "-l", "app.kubernetes.io/name=waterline-agent")["items"]
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def _left_in(kube: RealCluster, namespace: str) -> set[tuple[str, str]]:
    items = _get(kube, NAMESPACED, "-n", namespace)["items"]
    return {(i["kind"], i["metadata"]["name"]) for i in items} - NAMESPACE_DEFAULTS


def _uninstall(kube: RealCluster, release: str, namespace: str) -> None:
    _helm(kube, "uninstall", release, "--namespace", namespace, "--wait", "--timeout", "120s")


def _stopping_agent_is_told(
    kube: RealCluster, agent: Path, namespace: str, seen: OwnDaemonSet | None = None
) -> bool | None:
    """What an agent asks when it stops (agent/node/incluster.py): True, its DaemonSet is
    gone or being deleted (it releases every cap); None, no answer (it keeps them)."""
    api = kube.client(agent)
    try:
        return agent_uninstalled(api, namespace, "waterline-agent", seen)
    finally:
        api.close()


@contextmanager
def _watching_its_daemonset(kube: RealCluster, agent: Path, namespace: str) -> Iterator[OwnDaemonSet]:
    """The watch a running agent keeps on its own DaemonSet, with the agent's token."""
    api = kube.client(agent)
    cache = Cache(keep_raw=(DAEMONSETS.kind,))
    seen = OwnDaemonSet(cache)
    watch = [(DAEMONSETS, Selectors(namespace=namespace, field_selector="metadata.name=waterline-agent"))]
    informers = start_watches(api, cache, watch)
    try:
        wait_until(lambda: seen.seen, timeout=60)
        yield seen
    finally:
        informers.stop()
        api.close()


def test_install_with_default_values_works_and_uninstall_leaves_only_the_crds(kube: RealCluster) -> None:
    release, ns = unique("wl"), unique("wl-default")
    node, other = kube.node(), kube.node()
    out = _helm(kube, "install", release, str(CHART), "--namespace", ns, "--create-namespace").stdout
    assert "STATUS: deployed" in out
    made = _manifest(kube, release, ns)
    kinds = {d["kind"] for d in made}
    assert kinds == {
        "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "DaemonSet",
        "Deployment", "PodDisruptionBudget", "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding", "ConfigMap",
    }  # fmt: skip
    assert all(_exists(kube, d) for d in made)
    for d in made:  # cluster-scoped names carry the release: deploy/'s stay untouched
        if "namespace" not in d["metadata"]:
            assert d["metadata"]["name"].startswith(f"{release}-waterline-"), d["metadata"]["name"]
    # The agent runs on every node, the controller's two replicas are available.
    pod = kube.wait_for_pod(ns, f"spec.nodeName={node}", "app.kubernetes.io/name=waterline-agent")
    kube.kubectl("rollout", "status", "deployment/waterline-controller", "-n", ns, "--timeout=120s")

    # The release's RBAC and admission policy hold for its own agent: its token (bound to
    # its pod on `node`) sets the Waterline taint on that node, and may not touch another.
    agent = kube.token_kubeconfig(kube.token("waterline-agent", ns, pod=pod))
    taint = "qos.waterline.io/interference=true:PreferNoSchedule"
    kube.kubectl("taint", "nodes", node, taint, kubeconfig=agent)
    refused = kube.kubectl("label", "nodes", other, "stolen=yes", kubeconfig=agent, check=False)
    assert refused.returncode != 0
    assert "may change only the node its token was issued on" in refused.stderr, refused.stderr
    kube.kubectl("taint", "nodes", node, f"{taint}-", kubeconfig=agent)

    # A token of the agent's ServiceAccount, as a stopping agent holds one (not bound to a
    # pod, which kwok removes at once where a kubelet waits for the agent to stop).
    stopping = kube.token_kubeconfig(kube.token("waterline-agent", ns))
    with _watching_its_daemonset(kube, stopping, ns) as seen:
        assert _stopping_agent_is_told(kube, stopping, ns, seen) is False  # a restart: caps kept
        _uninstall(kube, release, ns)
        # Its ServiceAccount went with its DaemonSet: its own question gets no answer...
        assert _stopping_agent_is_told(kube, stopping, ns) is None
        # ...but its watch saw the DaemonSet go: an uninstall, every cap released.
        wait_until(lambda: seen.deleted, timeout=60)
        assert _stopping_agent_is_told(kube, stopping, ns, seen) is True
    assert not [d for d in made if _exists(kube, d)], "helm uninstall left objects of the release"
    wait_until(lambda: not _agent_pods(kube, ns), timeout=120)
    # What remains: the namespace (--create-namespace made it, the release does not own
    # it), empty of Waterline; the CRDs (Helm never deletes them).
    assert _left_in(kube, ns) == set()
    crds = _get(kube, "crd", "-l", "app.kubernetes.io/part-of=waterline")["items"]
    assert len(crds) == 5
    kube.kubectl("delete", "namespace", ns, "--wait=false")


def test_values_file_moves_changes_narrows_and_turns_the_controller_off(
    kube: RealCluster, tmp_path: Path
) -> None:
    release, home, ns = unique("wl"), kube.namespace("wl-release"), unique("wl-edge")
    pool = unique("edge")
    chosen, outside = kube.node(labels={"pool": pool}), kube.node()
    values = {
        "namespace": {"name": ns, "create": True},
        "image": {"repository": "registry.example.com/waterline", "tag": "0.1.0-edge"},
        "agent": {"nodeSelector": {"pool": pool}, "logLevel": "debug",
                  "resources": {"requests": {"cpu": "20m", "memory": "64Mi"}, "limits": {"memory": "200Mi"}}},
        "controller": {"enabled": False},
    }  # fmt: skip
    (tmp_path / "values.yaml").write_text(yaml.safe_dump(values))
    _helm(kube, "install", release, str(CHART), "--namespace", home, "--values", str(tmp_path / "values.yaml"))

    labels = _get(kube, "namespace", ns)["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"
    kube.wait_for_pod(ns, f"spec.nodeName={chosen}", "app.kubernetes.io/name=waterline-agent")
    (pod,) = _agent_pods(kube, ns)  # the chosen node only, not `outside`
    assert pod["spec"]["nodeName"] == chosen != outside
    (container,) = pod["spec"]["containers"]
    assert container["image"] == "registry.example.com/waterline:0.1.0-edge"
    assert container["resources"] == values["agent"]["resources"]
    assert "--log-level=debug" in container["args"]
    # The controller is off: nothing of it, here or cluster-wide.
    assert not _get(kube, "deployments,poddisruptionbudgets", "-n", ns)["items"]
    assert ("ServiceAccount", "waterline-controller") not in _left_in(kube, ns)
    assert not kube.kubectl("get", "clusterrole", f"{release}-waterline-controller",
                            "--ignore-not-found", "-o", "name").stdout  # fmt: skip

    # A new image tag rolls the agent: its pod is replaced by one running the new image.
    before = _get(kube, "daemonset", "waterline-agent", "-n", ns)["metadata"]["generation"]
    _helm(kube, "upgrade", release, str(CHART), "--namespace", home, "--reuse-values",
          "--set", "image.tag=0.1.0-edge2")  # fmt: skip
    kube.kubectl("rollout", "status", "daemonset/waterline-agent", "-n", ns, "--timeout=120s")
    ds = _get(kube, "daemonset", "waterline-agent", "-n", ns)
    assert ds["metadata"]["generation"] == before + 1
    assert ds["status"]["updatedNumberScheduled"] == ds["status"]["desiredNumberScheduled"] == 1
    wait_until(lambda: [p["metadata"]["uid"] for p in _agent_pods(kube, ns)] not in ([], [pod["metadata"]["uid"]]),
              timeout=120)  # fmt: skip
    (rolled,) = _agent_pods(kube, ns)
    assert rolled["spec"]["containers"][0]["image"] == "registry.example.com/waterline:0.1.0-edge2"
    assert rolled["spec"]["nodeName"] == chosen

    # Uninstall as the chart's README says, agents first: while they go, their question
    # is answered (their DaemonSet is being deleted), so each would release its caps.
    stopping = kube.token_kubeconfig(kube.token("waterline-agent", ns))
    kube.kubectl("delete", "daemonset", "waterline-agent", "-n", ns, "--cascade=foreground", "--wait=false")
    assert _stopping_agent_is_told(kube, stopping, ns) is True
    kube.kubectl("wait", "--for=delete", "daemonset/waterline-agent", "-n", ns, "--timeout=120s")
    assert not _agent_pods(kube, ns)
    assert _stopping_agent_is_told(kube, stopping, ns) is True
    made = _manifest(kube, release, home)
    _uninstall(kube, release, home)
    assert not [d for d in made if d["kind"] != "Namespace" and _exists(kube, d)]
    # The namespace was the chart's: it goes too, with whatever the programs left in it.
    wait_until(lambda: not kube.kubectl("get", "namespace", ns, "--ignore-not-found", "-o", "name").stdout,
              timeout=180)  # fmt: skip


def test_a_bad_value_is_refused_before_anything_is_made(kube: RealCluster) -> None:
    release, ns = unique("wl"), kube.namespace("wl-bad")
    done = _helm(kube, "install", release, str(CHART), "--namespace", ns,
                 "--set", "agent.interval=-1", check=False)  # fmt: skip
    assert done.returncode != 0
    assert "/agent/interval" in done.stderr, done.stderr
    done = _helm(kube, "install", release, str(CHART), "--namespace", ns,
                 "--set", "agent.intervall=5", check=False)  # fmt: skip
    assert done.returncode != 0 and "intervall" in done.stderr, done.stderr
    assert _helm(kube, "status", release, "--namespace", ns, check=False).returncode != 0
    assert _left_in(kube, ns) == set()
