"""Capture and replay on this host's real cgroup v1 hierarchies.

`waterline capture --local` records a run of the agent acting on busy BestEffort pods
(throttled, then raised back when their load stops), so some samples are capped; then
`waterline simulate` replays the scenario. With the same policies the replay decides what
the live agent decided, tick for tick: the same actions on the same pods, caps within
``CAP_NOISE`` cores (the scenario keeps figures to 1e-6 core; a capped figure a little
above its cap, as the kernel counts over a window that is not the CFS period, is taken
as measured). With a lower waterline (``--policies DIR``) the replay throttles more.

The live decisions are read from the capture's own log (one JSON line per action).

`waterline capture --kubeconfig --node-name` watches a node of the real cluster
(devtools/harness/cluster.py) with the agent's token: its pods made by a ReplicaSet and run by kwok,
their cgroups built from their real uids.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from devtools.demo.cgroups import CgroupTree
from devtools.demo.pods import DemoPod
from devtools.harness.agent_env import Pool, demo_pod
from devtools.harness.cluster import RealCluster

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
TICKS = 16
INTERVAL = 0.5
NODE_CORES = 1.0
CAP_NOISE = 1e-3


def manifests(pods: list[DemoPod], line: float) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "demo-node"},
        "status": {"allocatable": {"cpu": f"{NODE_CORES:g}", "memory": "4Gi", "pods": "110"}},
    }
    return [node, *(p.manifest() for p in pods)], policies(line)


def policies(line: float) -> list[dict[str, Any]]:
    policy = {
        "apiVersion": "qos.waterline.io/v1alpha1",
        "kind": "NodeQOSEnsurancePolicy",
        "metadata": {"name": "guard"},
        "spec": {"objectiveEnsurances": [{
            "name": "cpu", "metricRule": {"name": "cpu_total_usage", "value": f"{line:g}"},
            "avoidanceThreshold": 1, "restoreThreshold": 2, "actionName": "throttle",
        }]},
    }  # fmt: skip
    action = {
        "apiVersion": "qos.waterline.io/v1alpha1",
        "kind": "AvoidanceAction",
        "metadata": {"name": "throttle"},
        "spec": {
            "throttle": {"cpuThrottle": {"minCPURatio": 10, "stepCPURatio": 30}},
            "scope": {"qosClasses": ["BestEffort"]},
        },
    }
    return [policy, action]


def live_actions(log: str) -> list[list[tuple[str, str, float | None]]]:
    """The live agent's throttle and restore decisions, by tick."""
    ticks: list[list[tuple[str, str, float | None]]] = [[] for _ in range(TICKS)]
    for line in log.splitlines():
        if not line.startswith("{"):
            continue  # the progress line
        entry = json.loads(line)
        if entry.get("code") in ("throttle", "restore", "restore-step") and "tick" in entry:
            action = entry["code"].removesuffix("-step")  # the report calls both restore
            ticks[entry["tick"] - 1].append((action, entry["pod"], entry.get("cpu_cap")))
    return ticks


def replayed(report: dict[str, Any]) -> list[list[tuple[str, str, float | None]]]:
    return [[(a["action"], a["pod"], a.get("cpuCap")) for a in t["actions"]]
            for t in report["nodes"]["demo-node"]["ticks"]]  # fmt: skip


def same(live: list[Any], replay: list[Any]) -> bool:
    if len(live) != len(replay):
        return False
    for (action, pod, cap), (r_action, r_pod, r_cap) in zip(live, replay, strict=True):
        if (action, pod) != (r_action, r_pod) or (cap is None) != (r_cap is None):
            return False
        if cap is not None and abs(cap - r_cap) > CAP_NOISE:
            return False
    return True


def throttled_core_ticks(report: dict[str, Any]) -> float:
    """Cores taken from the pods, summed over the ticks (caps in force after each)."""
    caps: dict[str, float] = {}
    total = 0.0
    for tick in report["nodes"]["demo-node"]["ticks"]:
        for action in tick["actions"]:
            if action["cpuCap"] is None:
                caps.pop(action["pod"], None)
            else:
                caps[action["pod"]] = action["cpuCap"]
        total += sum(NODE_CORES - cap for cap in caps.values())
    return total


def simulate(scenario: Path, *extra: str) -> dict[str, Any]:
    done = subprocess.run(  # noqa: S603
        [sys.executable, "-m", "agent", "simulate", str(scenario), *extra],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_captured_run_replays_to_the_same_decisions_and_a_lower_line_throttles_more(
    tree: CgroupTree, tmp_path: Path
) -> None:
    batch = [DemoPod("batch-a", "BestEffort", None), DemoPod("batch-b", "BestEffort", None)]
    for pod in batch:
        tree.add_pod(pod)
        tree.start(pod)
    objects, rules = manifests(batch, line=0.6)
    (tmp_path / "objects").mkdir()
    (tmp_path / "objects" / "pods.yaml").write_text(yaml.safe_dump_all(objects))
    (tmp_path / "objects" / "policies.yaml").write_text(yaml.safe_dump_all(rules))
    scenario, log_path = tmp_path / "capture.json", tmp_path / "capture.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(  # noqa: S603
            [sys.executable, "-m", "agent", "capture", "--local",
             "--objects", str(tmp_path / "objects"), "--state-dir", str(tmp_path / "state"),
             "--kubelet-cgroup-root", tree.kubelet_root, "--node-cpu", "pods",
             "--interval", str(INTERVAL), "--ticks", str(TICKS), "-o", str(scenario),
             "--log-format", "json", "--log-level", "info"],
            cwd=ROOT, stderr=log, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            time.sleep(INTERVAL * TICKS / 2)
            for pod in batch:  # the load goes: the caps are raised back
                tree.signal(pod.name, signal.SIGSTOP)
            assert proc.wait(timeout=60) == 0, log_path.read_text()[-3000:]
        finally:
            proc.kill()
    log = log_path.read_text()
    assert "capture: tick 16/16, 16 samples" in log
    doc = json.loads(scenario.read_text())
    assert {o["kind"] for o in doc["objects"]} == {
        "Node", "Pod", "NodeQOSEnsurancePolicy", "AvoidanceAction"}  # fmt: skip
    samples = doc["samples"]
    assert len(samples) == TICKS
    capped = [(s["at"], k, p) for s in samples for k, p in s["pods"].items() if p.get("capped")]
    assert capped, "the agent throttled nothing: no capped sample"
    assert all(p["cpuCap"] > 0 and "cpu" in p for _, _, p in capped)

    live = live_actions(log)
    assert any(a for tick in live for a in tick if a[0] == "throttle"), log[-3000:]
    assert any(a for tick in live for a in tick if a[0] == "restore"), log[-3000:]
    report = simulate(scenario)
    replay = replayed(report)
    assert len(replay) == TICKS
    for i, (want, got) in enumerate(zip(live, replay, strict=True)):
        assert same(want, got), (i, want, got)

    lower = tmp_path / "lower"
    lower.mkdir()
    (lower / "policies.yaml").write_text(yaml.safe_dump_all(policies(line=0.3)))
    tighter = simulate(scenario, "--policies", str(lower), "--html", str(tmp_path / "r.html"))
    assert throttled_core_ticks(tighter) > throttled_core_ticks(report), (replay, replayed(tighter))
    html = (tmp_path / "r.html").read_text()
    assert "Figures measured under a cap" in html


def test_a_cluster_node_is_watched_not_acted_on_and_its_agents_caps_are_read(
    kube: RealCluster, pool: Pool, tree: CgroupTree, tmp_path: Path
) -> None:
    """`--kubeconfig --node-name` on a real node, with the agent's token: objects from the
    kube-apiserver, caps from the cgroup tree (written here by hand, as the node's
    DaemonSet agent would), nothing evicted nor written although the rule is far above
    its line."""
    node = pool.node()
    busy_pod, idle_pod = pool.running(pool.replicaset("batch", 2, node=node), 2)
    batch, idle = demo_pod(busy_pod), demo_pod(idle_pod)
    for pod in (batch, idle):
        tree.add_pod(pod)
    tree.start(batch)
    cgroup = f"{tree.cpu_root}/{batch.container_rel(tree.kubelet_root)}/cpu.cfs_quota_us"
    Path(cgroup).write_text("30000")  # the node's agent capped it at 0.3 cores
    evict = pool.action({"coolDownSeconds": 0, "eviction": {}})
    guard = pool.policy(evict, value="0.01")
    scenario = tmp_path / "node.yaml"
    done = subprocess.run(  # noqa: S603
        [sys.executable, "-m", "agent", "capture", "--kubeconfig", str(kube.agent_kubeconfig(node)),
         "--node-name", node, "--kubelet-cgroup-root", tree.kubelet_root,
         "--node-cpu", "pods", "--state-dir", str(tmp_path / "state"),
         "--interval", "0.5", "--duration", "3", "-o", str(scenario)],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert {p["metadata"]["uid"] for p in pool.pods("batch")} == {batch.uid, idle.uid}  # not evicted
    assert Path(cgroup).read_text().strip() == "30000"  # nothing written
    doc = yaml.safe_load(scenario.read_text())
    kinds = {(o["kind"], o["metadata"]["name"]) for o in doc["objects"]}
    assert {("AvoidanceAction", evict), ("Namespace", pool.namespace), ("Node", node),
            ("NodeQOSEnsurancePolicy", guard), ("Pod", batch.name), ("Pod", idle.name)} <= kinds  # fmt: skip
    pods = {o["metadata"]["name"] for o in doc["objects"] if o["kind"] == "Pod"}
    assert all(o["spec"]["nodeName"] == node for o in doc["objects"] if o["kind"] == "Pod"), pods
    assert all("managedFields" not in o["metadata"] for o in doc["objects"])
    decided = doc["samples"]
    assert 3 <= len(decided) <= 6  # the first ticks may pass while the watches sync
    later = [s["pods"][batch.key] for s in decided[1:]]
    assert later and all(p.get("capped") and p["cpuCap"] == 0.3 for p in later), later
    assert not any(s["pods"][idle.key].get("capped") for s in decided)
    report = simulate(scenario)  # the replay decides what the watched node's rules say
    evicted = report["nodes"][node]["evicted"]
    assert evicted and set(evicted) <= {batch.key, idle.key}
