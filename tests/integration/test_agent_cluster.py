"""The agent's in-cluster path end to end: watches on a dev API server, a real busy pod in
real cgroups v1, an eviction through the Eviction API, the result on /metrics."""

from __future__ import annotations

import argparse
import itertools
import os
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agent.defaults import CGROUP_ROOT, PROC_ROOT
from agent.demo import CgroupTree, DemoPod, v1_roots
from agent.kube.devserver.testing import serve
from agent.kube.errors import KubeNotFound
from agent.kube.resources import PODS
from agent.node.command import add_arguments, build_agent
from agent.node.loop import TickOutcome

pytestmark = pytest.mark.integration
_COUNTER = itertools.count()


@pytest.fixture
def tree() -> Iterator[CgroupTree]:
    if os.geteuid() != 0:
        pytest.skip("needs root to create cgroups")
    try:
        cpu, acct, _memory = v1_roots(CGROUP_ROOT, PROC_ROOT)
    except ValueError as err:
        pytest.skip(str(err))
    made = CgroupTree(cpu, acct, None, f"waterline-itc-{os.getpid()}-{next(_COUNTER)}")
    try:
        yield made
    finally:
        assert not made.cleanup()


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
         "spec": {"coolDownSeconds": 0, "eviction": {"terminationGracePeriodSeconds": 0}}},
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
