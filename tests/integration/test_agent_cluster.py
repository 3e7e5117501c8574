"""The agent's in-cluster path end to end: watches on a dev API server, a real busy pod in
real cgroups v1, an eviction through the Eviction API, the result on /metrics."""

from __future__ import annotations

import argparse
import itertools
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agent.kube.backoff import BackoffArgs
from agent.kube.client import KubeApi
from agent.kube.creating import create
from agent.kube.errors import KubeNotFound, KubeUnreachable
from agent.kube.resources import ACTIONS, EVENTS, NODES, PODS, POLICIES
from agent.kube.watching import WatchArgs
from agent.node.arguments import add_arguments
from agent.node.incluster import ClusterEffects
from agent.node.lifecycle import Agent
from agent.node.loop import TickOutcome
from agent.node.wiring import build_agent
from devtools.apiserver.server import DevServer
from devtools.apiserver.testing import pdb, serve
from devtools.demo.cgroups import CgroupTree
from devtools.demo.pods import DemoPod
from tests.unit.fake_cgroups import FakeTree

pytestmark = pytest.mark.integration
_COUNTER = itertools.count()


def objects(pod: DemoPod) -> list[dict[str, Any]]:
    manifest = pod.manifest()
    manifest["spec"]["nodeName"] = "node-1"
    return [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"},
         "status": {"allocatable": {"cpu": "2", "memory": "4Gi", "pods": "110"}}},
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "demo"}},
        manifest,
        {"apiVersion": "qos.waterline.io/v1alpha1", "kind": "NodeQOSEnsurancePolicy",
         "metadata": {"name": "guard"},
         "spec": {"objectiveEnsurances": [{"name": "cpu", "actionName": "evict",
                  "metricRule": {"name": "cpu_total_usage", "value": "0.02"}}]}},
        {"apiVersion": "qos.waterline.io/v1alpha1", "kind": "AvoidanceAction",
         "metadata": {"name": "evict"},
         "spec": {"coolDownSeconds": 0, "eviction": {"terminationGracePeriodSeconds": 1}}},
    ]  # fmt: skip


def test_in_cluster_agent_evicts_through_the_api(tree: CgroupTree, tmp_path: Path) -> None:
    batch = DemoPod("batch", "BestEffort", None)
    tree.add_pod(batch)
    tree.start(batch)
    with serve(objects(batch)) as running:
        parser = argparse.ArgumentParser()
        add_arguments(parser)
        args = parser.parse_args([
            "--kubeconfig", str(running.kubeconfig), "--node-name", "node-1",
            "--kubelet-cgroup-root", tree.kubelet_root, "--node-cpu", "pods",
            "--state-dir", str(tmp_path / "state"), "--metrics-addr", "127.0.0.1:0",
        ])  # fmt: skip
        agent = build_agent(args)
        assert agent.server is not None
        agent.server.start()
        seen: list[TickOutcome] = []
        agent.loop.publishers.append(seen.append)
        try:
            for _ in range(20):
                outcome = agent.loop.tick()
                if outcome.report is not None and outcome.report.actions:
                    break
                time.sleep(0.5)
            url = f"http://127.0.0.1:{agent.server.port}/metrics"
            with urllib.request.urlopen(url, timeout=5) as resp:
                text = resp.read().decode()
        finally:
            agent.server.stop()
            if agent.stop_source is not None:
                agent.stop_source()
        actions = [a for o in seen if o.report is not None for a in o.report.actions]
        assert [(a.action, a.pod, a.result) for a in actions] == [
            ("evict", "demo/batch", "evicted")
        ]
        with pytest.raises(KubeNotFound):
            running.api.request("GET", PODS.path("demo", "batch"))
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert samples[("waterline_actions_total", (("action", "evict"), ("result", "evicted")))] == 1.0


# -- the agent's in-cluster side on a fake cgroup tree --------------------------------
#
# A fake cgroup v1 tree under --cgroup-root makes the load exact: each step adds CPU
# seconds to a pod's cpuacct.usage counter (lots of them = far above any waterline, none =
# idle), and the throttler's quota writes land in the fake cpu.cfs_quota_us files.

QOS = "qos.waterline.io/v1alpha1"
FAST_WATCHES = WatchArgs(watch_timeout_seconds=5, backoff=BackoffArgs(initial=0.05, maximum=0.3))


def fake_pod(
    name: str, node: str = "node-1", labels: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "demo", "uid": f"uid-{name}",
                     "labels": labels or {}, "creationTimestamp": "2026-01-01T00:00:00Z",
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                          "name": "rs", "uid": "rs", "controller": True}]},
        "spec": {"nodeName": node, "containers": [{"name": "main"}]},
        "status": {"phase": "Running", "qosClass": "BestEffort",
                   "startTime": "2026-01-01T00:00:00Z",
                   "containerStatuses": [{"name": "main", "containerID": f"containerd://c-{name}"}]},
    }  # fmt: skip


def node(name: str, taints: list[dict[str, str]] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"pool": "batch"}},
        "spec": {"taints": taints or []},
        "status": {"allocatable": {"cpu": "2", "memory": "4Gi", "pods": "110"}},
    }  # fmt: skip


def policy(name: str, action: str, value: str = "0.5", restore: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": QOS, "kind": "NodeQOSEnsurancePolicy", "metadata": {"name": name},
        "spec": {"nodeSelector": {"matchLabels": {"pool": "batch"}},
                 "objectiveEnsurances": [{"name": "cpu", "actionName": action,
                                          "restoreThreshold": restore,
                                          "metricRule": {"name": "cpu_total_usage",
                                                         "value": value}}]},
    }  # fmt: skip


def action(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": QOS, "kind": "AvoidanceAction", "metadata": {"name": name}, "spec": spec}


class Load:
    """The fake tree's pods and their CPU counters."""

    def __init__(self, root: Path, names: list[str]) -> None:
        self.tree = FakeTree(root, 1)
        self.seconds: dict[str, float] = {}
        for name in names:
            self.add(name)

    def rel(self, name: str) -> str:
        return f"kubepods/besteffort/poduid-{name}"

    def add(self, name: str) -> None:
        self.tree.add(self.rel(name))
        self.tree.add(f"{self.rel(name)}/c-{name}")
        self.seconds[name] = 0.0

    def run(self, **busy: float) -> None:
        """Advance each named pod's counter by that many CPU seconds."""
        for name, add in busy.items():
            self.seconds[name] += add
            for rel in (self.rel(name), f"{self.rel(name)}/c-{name}"):
                self.tree.set(rel, cpu_seconds=self.seconds[name])

    def quota(self, name: str) -> int:
        return int(self.tree.quota(f"{self.rel(name)}/c-{name}"))


def agent_args(kubeconfig: Path, tmp_path: Path, *extra: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args([
        "--kubeconfig", str(kubeconfig), "--node-name", "node-1", "--node-cpu", "pods",
        "--cgroup-root", str(tmp_path / "cg"), "--state-dir", str(tmp_path / "state"),
        "--metrics-addr", "off", *extra,
    ])  # fmt: skip


def tick_until(
    agent: Agent,
    load: Load,
    busy: dict[str, float],
    done: Callable[[list[TickOutcome]], bool],
    ticks: int = 40,
) -> list[TickOutcome]:
    """Tick (with ``busy`` load between ticks) until ``done(outcomes so far)``."""
    seen: list[TickOutcome] = []
    for _ in range(ticks):
        load.run(**busy)
        seen.append(agent.loop.tick())
        if done(seen):
            return seen
        time.sleep(0.05)
    raise AssertionError(f"not reached after {ticks} ticks: {[o.error for o in seen][-3:]}")


def actions(outcomes: list[TickOutcome]) -> list[tuple[str, str, str | None]]:
    return [(a.action, a.pod, a.result) for o in outcomes if o.report for a in o.report.actions]


def get(api: KubeApi, path: str) -> dict[str, Any]:
    """GET, once more if the pooled connection was one to the stopped server."""
    try:
        return api.request("GET", path)
    except KubeUnreachable:
        return api.request("GET", path)


def events(api: KubeApi, namespace: str) -> list[tuple[str, str, str]]:
    items = get(api, EVENTS.path(namespace))["items"]
    return sorted((e["involvedObject"]["name"], e["reason"], e["message"]) for e in items)


def reasons(api: KubeApi, namespace: str) -> set[tuple[str, str]]:
    return {(name, reason) for name, reason, _ in events(api, namespace)}


def node_taints(api: KubeApi) -> list[dict[str, Any]]:
    return list(get(api, NODES.path(None, "node-1")).get("spec", {}).get("taints") or [])


OURS = {"key": "qos.waterline.io/interference", "value": "true", "effect": "PreferNoSchedule"}
OTHER = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}


def test_agent_in_cluster_evicts_respects_budgets_emits_events(tmp_path: Path) -> None:
    load = Load(tmp_path / "cg", ["hog", "guarded"])
    objects = [
        node("node-1", taints=[OTHER, OURS]),  # OURS left behind by an earlier run
        node("node-2"),
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "demo"}},
        fake_pod("hog"),
        fake_pod("guarded", labels={"app": "guarded"}),
        fake_pod("elsewhere", node="node-2"),
        pdb("guarded", {"app": "guarded"}, namespace="demo", maxUnavailable=0),
    ]
    with serve(objects) as running:
        api = running.api
        agent = build_agent(agent_args(running.kubeconfig, tmp_path), FAST_WATCHES)
        try:
            # Its node's pods only; no policy yet, so nothing happens; the leftover taint
            # goes (a fresh agent has no triggered rule), the other taint stays.
            first = tick_until(agent, load, {"hog": 5, "guarded": 10},
                               lambda s: len(s) >= 3 and s[-1].ok)  # fmt: skip
            assert sorted(p.key for p in first[-1].pods) == ["demo/guarded", "demo/hog"]
            assert actions(first) == []
            tick_until(agent, load, {}, lambda s: node_taints(api) == [OTHER], ticks=10)

            # A policy created after the start is picked up; the budget blocks one pod,
            # the other is evicted through the subresource.
            create(api, ACTIONS, action("evict", {"coolDownSeconds": 0,
                                                  "eviction": {"terminationGracePeriodSeconds": 1},
                                                  "scope": {"qosClasses": ["BestEffort"]}}))  # fmt: skip
            create(api, POLICIES, policy("guard", "evict"))
            create(api, POLICIES, policy("broken", "no-such-action"))
            done = tick_until(agent, load, {"hog": 5, "guarded": 10},
                              lambda s: ("evict", "demo/hog", "evicted") in actions(s))  # fmt: skip
        finally:
            agent.stop_source and agent.stop_source()
        got = actions(done)
        assert got.index(("evict", "demo/guarded", "blocked-by-pdb")) < got.index(
            ("evict", "demo/hog", "evicted")
        )
        posted = [path for method, path in running.server.requests if method == "POST"]
        assert "/api/v1/namespaces/demo/pods/hog/eviction" in posted
        assert not any(path.startswith("/api/v1/namespaces/demo/pods/hog?") for m, path
                       in running.server.requests if m == "DELETE")  # fmt: skip
        with pytest.raises(KubeNotFound):
            api.request("GET", PODS.path("demo", "hog"))
        assert api.request("GET", PODS.path("demo", "guarded"))["metadata"]["name"] == "guarded"

        pod_events = events(api, "demo")
        assert {(n, r) for n, r, _ in pod_events} == {
            ("hog", "Evicted"),
            ("guarded", "EvictionBlocked"),
        }
        evicted = next(m for n, r, m in pod_events if r == "Evicted")
        assert "rule guard/cpu (action evict): cpu_total_usage" in evicted
        cluster_events = {(n, r): m for n, r, m in events(api, "default")}
        assert ("node-1", "RuleTriggered") in cluster_events
        # Invalid policies are only logged by agents (their Events are the controller's).
        assert not any(r == "InvalidPolicy" for _, r in cluster_events)


def test_agent_taints_keeps_throttling_while_the_server_is_down_and_catches_up(
    tmp_path: Path,
) -> None:
    load = Load(tmp_path / "cg", ["batch-a", "batch-b"])
    throttle = action("throttle", {
        "coolDownSeconds": 1, "disableScheduling": True,
        "throttle": {"cpuThrottle": {"minCPURatio": 10, "stepCPURatio": 100}},
        "scope": {"qosClasses": ["BestEffort"]},
    })  # fmt: skip
    objects = [
        node("node-1"),
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "demo"}},
        fake_pod("batch-a"),
        fake_pod("batch-b"),
        policy("guard", "throttle"),
        throttle,
    ]
    config = tmp_path / "waterline.yaml"
    config.write_text("agent:\n  executeExcessPercent: 10\n")
    with serve(objects, bookmark_interval=0.1) as running:
        api, store, port = running.api, running.server.store, running.server.port
        agent = build_agent(
            agent_args(running.kubeconfig, tmp_path, "--config", str(config)), FAST_WATCHES
        )
        assert agent.loop.brain.settings.execute_excess_percent == 10
        restarted: DevServer | None = None
        try:
            # Up: batch-a busy -> throttled to 10% of the node's 2 cores, node tainted.
            tick_until(agent, load, {"batch-a": 5},
                       lambda s: ("throttle", "demo/batch-a", None) in actions(s))  # fmt: skip
            assert load.quota("batch-a") == 20000  # 0.2 cores of a 100 ms period
            tick_until(agent, load, {"batch-a": 5}, lambda s: OURS in node_taints(api))
            assert ("batch-a", "Throttled") in reasons(api, "demo")

            # Down: the server stops; the agent keeps ticking on the last known policies.
            running.server.stop()
            view_down = tick_until(agent, load, {"batch-a": 5},
                                   lambda s: not agent_reachable(agent))  # fmt: skip
            assert view_down[-1].ok
            down = tick_until(agent, load, {"batch-a": 5, "batch-b": 5},
                              lambda s: ("throttle", "demo/batch-b", None) in actions(s))  # fmt: skip
            assert all(o.ok for o in down)
            assert load.quota("batch-b") == 20000
            # Idle: the rule restores and the caps are lifted, all while the server is down.
            idle = tick_until(agent, load, {"batch-a": 0, "batch-b": 0},
                              lambda s: not agent.loop.brain.caps())  # fmt: skip
            assert {a[1] for a in actions(idle) if a[0] == "restore"} == {
                "demo/batch-a",
                "demo/batch-b",
            }
            assert load.quota("batch-a") == -1 and load.quota("batch-b") == -1
            # Meanwhile a pod is bound to the node (written to the store behind the server).
            load.add("late")
            store.create(PODS, "demo", fake_pod("late"))

            # Back on the same port: the agent catches up by itself.
            restarted = DevServer(store, port=port, bookmark_interval=0.1).start()
            back = tick_until(agent, load, {},
                              lambda s: "demo/late" in {p.key for p in s[-1].pods}
                              and OURS not in node_taints(api))  # fmt: skip
            assert back[-1].ok
            assert ("node-1", "RuleRestored") in reasons(api, "default")
            # Events for what happened during the outage were dropped, not replayed.
            assert ("batch-b", "Throttled") not in reasons(api, "demo")
        finally:
            agent.restore_all("test end")
            agent.stop_source and agent.stop_source()
            if restarted is not None:
                restarted.stop()


def agent_reachable(agent: Agent) -> bool:
    effects = next(p for p in agent.loop.publishers if isinstance(p, ClusterEffects))
    return bool(effects.reachable())
