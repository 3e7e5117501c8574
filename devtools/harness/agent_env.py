"""What the node agent's tests on the real cluster share (devtools/harness/cluster.py, the ``kube``
fixture).

A test takes a :class:`Pool`: its own namespace, kwok nodes labelled with the pool's name
(so that its policies select them and no one else's), ReplicaSets whose pods the real
scheduler places on those nodes and kwok runs, and the cluster-scoped objects it made
(policies, actions, the brake), removed at the end with the namespace and the nodes. The
agent under test runs with its own ServiceAccount token (``kube.agent_kubeconfig``, bound
to the agent DaemonSet's pod on its node), usually through a fault proxy.

kwok runs no containers, so a test builds the cgroups the agent reads once the pod exists,
from its real uid and containerIDs (kwok's are ``containerd://<pod uid>-<container>``):
a fake tree whose CPU counters the test advances (:class:`Load`, the load is exact), or
real cgroup v1 groups with busy processes (:func:`demo_pod` for ``CgroupTree``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from agent.kube.backoff import BackoffArgs
from agent.kube.client import KubeApi
from agent.kube.creating import create
from agent.kube.deleting import delete
from agent.kube.errors import KubeNotFound, KubeUnreachable
from agent.kube.resources import ACTIONS, EVENTS, NODES, PODS, POLICIES, Resource
from agent.kube.watching import WatchArgs
from agent.node.arguments import add_arguments
from agent.node.lifecycle import Agent
from agent.node.loop import TickOutcome
from agent.node.wiring import build_agent
from devtools.demo.pods import DemoPod
from devtools.harness.cluster import RealCluster, unique
from devtools.harness.fake_cgroups import FakeTree
from devtools.harness.faultproxy import FaultProxy
from devtools.harness.waiting import wait_until

QOS = "qos.waterline.io/v1alpha1"
POOL_LABEL = "waterline.test/pool"
FAST_WATCHES = WatchArgs(watch_timeout_seconds=5, backoff=BackoffArgs(initial=0.05, maximum=0.3))
#: The agent's interference taint (agent.node.taint), and somebody else's.
OURS = {"key": "qos.waterline.io/interference", "value": "true", "effect": "PreferNoSchedule"}
OTHER = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
TOLERATE_OTHER = {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}


class Pool:
    """One test's namespace, nodes and cluster-scoped objects; :meth:`close` removes them."""

    def __init__(self, kube: RealCluster, prefix: str = "agent") -> None:
        self.kube = kube
        self.namespace = kube.namespace(prefix)
        self.labels = {POOL_LABEL: self.namespace}
        self.nodes: list[str] = []
        self._made: list[tuple[Resource, str, str | None]] = []

    @property
    def api(self) -> KubeApi:
        """The admin's: for setting up and looking, never for the agent."""
        return self.kube.api

    def node(self, cpu: str = "2", taints: Iterable[Mapping[str, str]] = ()) -> str:
        name = self.kube.node(labels=self.labels, allocatable={"cpu": cpu, "memory": "4Gi"},
                              taints=taints)  # fmt: skip
        self.nodes.append(name)
        return name

    def create(self, resource: Resource, manifest: Mapping[str, Any]) -> dict[str, Any]:
        made = create(self.api, resource, manifest)
        meta = manifest["metadata"]
        self._made.append((resource, meta["name"], meta.get("namespace")))
        return made

    def action(self, spec: Mapping[str, Any], name: str | None = None) -> str:
        name = name or unique("act")
        self.create(ACTIONS, {"apiVersion": QOS, "kind": "AvoidanceAction",
                              "metadata": {"name": name}, "spec": dict(spec)})  # fmt: skip
        return name

    def policy(self, action: str, value: str = "0.5", restore: int = 1, name: str | None = None,
               **rule: Any) -> str:  # fmt: skip
        """A policy of one cpu_total_usage rule for the pool's nodes."""
        name = name or unique("guard")
        objective = {"name": "cpu", "actionName": action, "restoreThreshold": restore,
                     "metricRule": {"name": "cpu_total_usage", "value": value}, **rule}  # fmt: skip
        self.create(POLICIES, {
            "apiVersion": QOS, "kind": "NodeQOSEnsurancePolicy", "metadata": {"name": name},
            "spec": {"nodeSelector": {"matchLabels": dict(self.labels)},
                     "objectiveEnsurances": [objective]},
        })  # fmt: skip
        return name

    def replicaset(
        self, name: str, replicas: int = 1, node: str | None = None,
        labels: Mapping[str, str] | None = None, resources: Mapping[str, Any] | None = None,
        finalizers: Iterable[str] = (), tolerations: Iterable[Mapping[str, str]] = (),
    ) -> str:  # fmt: skip
        """A ReplicaSet of pause pods on the pool's nodes (on ``node`` when given)."""
        selector = {"kubernetes.io/hostname": node} if node else dict(self.labels)
        pod_labels = {"app": name, **(labels or {})}
        self.kube.apply([{
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {
                         "metadata": {"labels": pod_labels, "finalizers": list(finalizers)},
                         "spec": {"nodeSelector": selector, "tolerations": list(tolerations),
                                  "containers": [{"name": "main", "image": "pause",
                                                  "resources": dict(resources or {})}]}}},
        }])  # fmt: skip
        return name

    def pods(self, app: str | None = None) -> list[dict[str, Any]]:
        query = [("labelSelector", f"app={app}")] if app else []
        return list(self.api.request("GET", PODS.path(self.namespace), query=query)["items"])

    def running(self, app: str, count: int, timeout: float = 90) -> list[dict[str, Any]]:
        """The app's Running pods (not being deleted), once there are ``count``, oldest
        first (then by name)."""
        found: list[dict[str, Any]] = []

        def enough() -> bool:
            found[:] = [p for p in self.pods(app) if p["status"].get("phase") == "Running"
                        and not p["metadata"].get("deletionTimestamp")
                        and p["status"].get("containerStatuses")]  # fmt: skip
            return len(found) >= count

        wait_until(enough, timeout)
        return sorted(found, key=lambda p: (p["metadata"]["creationTimestamp"], p["metadata"]["name"]))

    def events(self, names: Iterable[str] | None = None, namespace: str | None = None,
               component: str = "waterline-agent") -> list[tuple[str, str, str]]:  # fmt: skip
        """(object name, reason, message) of the Events ``component`` recorded in the
        pool's namespace (or ``namespace``), about ``names`` when given."""
        wanted = set(names) if names is not None else None
        items = get(self.api, EVENTS.path(namespace or self.namespace))["items"]
        return sorted(
            (e["involvedObject"]["name"], e["reason"], e.get("message", "")) for e in items
            if (wanted is None or e["involvedObject"]["name"] in wanted)
            and e.get("reportingComponent") == component
        )  # fmt: skip

    def taints(self, node: str) -> list[dict[str, Any]]:
        return list(get(self.api, NODES.path(None, node)).get("spec", {}).get("taints") or [])

    def close(self) -> None:
        for resource, name, namespace in reversed(self._made):
            with contextlib.suppress(KubeNotFound):
                delete(self.api, resource, name, namespace)
        for pod in self.pods():  # what a test held back with a finalizer
            if pod["metadata"].get("finalizers"):
                with contextlib.suppress(KubeNotFound):
                    self.api.request("PATCH", PODS.path(self.namespace, pod["metadata"]["name"]),
                                     body={"metadata": {"finalizers": None}},
                                     content_type="application/merge-patch+json")  # fmt: skip
        self.kube.kubectl("delete", "namespace", self.namespace, "--wait=false", check=False)
        if self.nodes:
            self.kube.kubectl("delete", "node", *self.nodes, "--wait=false", check=False)


def name_of(pod: Mapping[str, Any]) -> str:
    return str(pod["metadata"]["name"])


def key_of(pod: Mapping[str, Any]) -> str:
    return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"


def cgroup_paths(pod: Mapping[str, Any]) -> list[str]:
    """Where a cgroupfs kubelet puts the pod's cgroup and its containers' (containerd),
    relative to a controller root: the pod's first."""
    qos = pod["status"]["qosClass"]
    rel = "/".join(p for p in ("kubepods", "" if qos == "Guaranteed" else qos.lower(),
                               f"pod{pod['metadata']['uid']}") if p)  # fmt: skip
    containers = [s["containerID"].partition("://")[2] for s in pod["status"]["containerStatuses"]]
    return [rel, *(f"{rel}/{c}" for c in containers)]


def demo_pod(pod: Mapping[str, Any], cpu_limit: float | None = None) -> DemoPod:
    """The real pod as the demo's cgroup tree knows pods (its uid, its container's id)."""
    (status,) = pod["status"]["containerStatuses"]
    return DemoPod(name_of(pod), pod["status"]["qosClass"], cpu_limit, uid=pod["metadata"]["uid"],
                   container_id=status["containerID"].partition("://")[2],
                   namespace=pod["metadata"]["namespace"])  # fmt: skip


class Load:
    """A fake cgroup v1 tree for real pods, and their CPU counters."""

    def __init__(self, root: Path, pods: Iterable[Mapping[str, Any]] = ()) -> None:
        self.tree = FakeTree(root, 1)
        self.cgroups: dict[str, list[str]] = {}
        self.seconds: dict[str, float] = {}
        self.add(*pods)

    def add(self, *pods: Mapping[str, Any]) -> None:
        for pod in pods:
            rels = cgroup_paths(pod)
            for rel in rels:
                self.tree.add(rel)
            self.cgroups[name_of(pod)] = rels
            self.seconds[name_of(pod)] = 0.0

    def run(self, busy: Mapping[str, float]) -> None:
        """Advance each named pod's counters by that many CPU seconds."""
        for name, add in busy.items():
            self.seconds[name] += add
            for rel in self.cgroups[name]:
                self.tree.set(rel, cpu_seconds=self.seconds[name])

    def quota(self, name: str) -> int:
        return int(self.tree.quota(self.cgroups[name][1]))

    def quotas(self) -> dict[str, int]:
        return {name: self.quota(name) for name in self.cgroups}


def agent_args(kubeconfig: Path, tmp: Path, node: str, *extra: str) -> argparse.Namespace:
    """`waterline agent` in cluster mode on a fake cgroup tree at ``tmp/cg``."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args([
        "--kubeconfig", str(kubeconfig), "--node-name", node, "--node-cpu", "pods",
        "--cgroup-root", str(tmp / "cg"), "--state-dir", str(tmp / "state"),
        "--metrics-addr", "off", *extra,
    ])  # fmt: skip


def start_agent(kubeconfig: Path, tmp: Path, node: str, *extra: str) -> Agent:
    """An in-process agent, ticked by the test; ``agent.stop_source()`` stops its watches."""
    return build_agent(agent_args(kubeconfig, tmp, node, *extra), FAST_WATCHES)


@contextmanager
def running_agent(kubeconfig: Path, tmp: Path, node: str, *extra: str) -> Iterator[Agent]:
    """:func:`start_agent`, its watches stopped at the end."""
    agent = start_agent(kubeconfig, tmp, node, *extra)
    try:
        yield agent
    finally:
        if agent.stop_source is not None:
            agent.stop_source()


def tick_until(
    agent: Agent, load: Load | None, busy: Mapping[str, float],
    done: Callable[[list[TickOutcome]], bool], timeout: float = 60.0,
) -> list[TickOutcome]:  # fmt: skip
    """Tick (with ``busy`` load before each tick) until ``done(outcomes so far)``."""
    seen: list[TickOutcome] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if load is not None:
            load.run(busy)
        seen.append(agent.loop.tick())
        if done(seen):
            return seen
        time.sleep(0.05)
    raise AssertionError(f"not reached in {timeout} s ({len(seen)} ticks): "
                         f"{[o.error for o in seen][-3:]} {actions(seen)[-5:]}")  # fmt: skip


def actions(outcomes: Iterable[TickOutcome]) -> list[tuple[str, str, str | None]]:
    return [(a.action, a.pod, a.result) for o in outcomes if o.report for a in o.report.actions]


def eviction_posts(proxy: FaultProxy) -> list[str]:
    """The pods whose eviction was asked, in order (one name a request)."""
    return [s.path.split("?")[0].split("/")[-2] for s in proxy.seen("POST", "/eviction")]


def get(api: KubeApi, path: str) -> dict[str, Any]:
    """GET, once more if the pooled connection was one to a server that went away."""
    try:
        return api.request("GET", path)
    except KubeUnreachable:
        return api.request("GET", path)


def dump(obj: Any) -> str:
    return json.dumps(obj, indent=1, default=str)[:3000]
