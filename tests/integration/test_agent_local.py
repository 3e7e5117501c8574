"""The local agent on this host's real cgroup v1 hierarchies, with real busy processes.

Each test builds its own kubelet-shaped tree (cgroupfs driver) under a unique kubelet
cgroup root in the ``cpu`` and ``cpuacct`` hierarchies, with busy ``sh`` loops as a
Guaranteed pod (limit 0.5) and BestEffort pods; the fixture kills every process and
removes every cgroup, also when a test fails. Memory cgroups are left alone (moving test
processes out of this sandbox's memory cgroup is not ours to do), so pods have no memory
figure here.

Figures are checked against the kernel: ``cpuacct.usage`` read by the test around the
agent's own sampling window. Waterlines are set from what the pods get on this machine at
the time (a calibration second), because other work shares the two cores.
"""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.defaults import CGROUP_ROOT, PROC_ROOT
from agent.model.settings import AgentSettings
from agent.node.dryrun import ReportingEvictor
from agent.node.host import build_host_parts
from agent.node.local import FileObjectSource
from agent.node.loop import NodeLoop, TickOutcome
from agent.node.tick import NodeBrain
from devtools.demo.cgroups import CgroupTree, KernelMeter
from devtools.demo.pods import DemoPod
from devtools.harness.logs import coded

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
_COUNTER = itertools.count()


def manifests(pods: list[DemoPod], line: float, restore: int) -> list[dict[str, Any]]:
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "demo-node"},
        "status": {"allocatable": {"cpu": "1", "memory": "4Gi", "pods": "110"}},
    }
    policy = {
        "apiVersion": "qos.waterline.io/v1alpha1",
        "kind": "NodeQOSEnsurancePolicy",
        "metadata": {"name": "guard"},
        "spec": {"objectiveEnsurances": [{
            "name": "cpu", "metricRule": {"name": "cpu_total_usage", "value": f"{line:.3f}"},
            "avoidanceThreshold": 1, "restoreThreshold": restore, "actionName": "throttle",
        }]},
    }  # fmt: skip
    action = {
        "apiVersion": "qos.waterline.io/v1alpha1",
        "kind": "AvoidanceAction",
        "metadata": {"name": "throttle"},
        "spec": {
            "throttle": {"cpuThrottle": {"minCPURatio": 0, "stepCPURatio": 50}},
            "scope": {"qosClasses": ["BestEffort"]},
        },
    }
    return [node, *(p.manifest() for p in pods), policy, action]


#: Seconds of each calibration try, longer each time (about 20 s at most in all).
CALIBRATION_WINDOWS = (1.5, 3.0, 6.0, 12.0)


def start_and_calibrate(
    tree: CgroupTree, pods: list[DemoPod]
) -> tuple[KernelMeter, dict[str, float]]:
    for pod in pods:
        tree.add_pod(pod)
        tree.start(pod)
    kernel = KernelMeter(tree, pods)
    kernel.sample()
    # On a busy host a BestEffort pod (cpu.shares 2) may get next to nothing in a short
    # window: measure over longer windows until every pod's share is large enough to set
    # a waterline in, rather than skip (CI must never pass by not running this).
    got: dict[str, float] = {}
    for window in CALIBRATION_WINDOWS:
        time.sleep(window)
        got = kernel.sample()
        if len(got) == len(pods) and min(got.values()) >= 0.05:
            return kernel, got
    raise AssertionError(
        f"the busy pods got {got} cores over {CALIBRATION_WINDOWS[-1]} s: too little to measure"
    )


def busy_pods(
    tree: CgroupTree, *batch_names: str
) -> tuple[DemoPod, list[DemoPod], KernelMeter, float]:
    """A busy Guaranteed pod (limit 500m) and busy BestEffort ones, calibrated, and a
    waterline halfway into what the BestEffort pods get: the agent caps them."""
    web = DemoPod("web", "Guaranteed", 0.5)
    batch = [DemoPod(name, "BestEffort", None) for name in batch_names]
    kernel, got = start_and_calibrate(tree, [web, *batch])
    return web, batch, kernel, got[web.key] + 0.5 * sum(got[p.key] for p in batch)


def state_pods(state_dir: Path) -> dict[str, Any]:
    path = state_dir / "cpu-quota.json"
    return json.loads(path.read_text())["pods"] if path.exists() else {}


def close(measured: float, expected: float, rel: float = 0.10, slack: float = 0.01) -> bool:
    return abs(measured - expected) <= rel * expected + slack


def test_measures_throttles_to_the_cap_and_restores_exactly(
    tree: CgroupTree, tmp_path: Path
) -> None:
    web, batch, kernel, line = busy_pods(tree, "batch-a", "batch-b")
    pods = [web, *batch]
    (tmp_path / "objects").mkdir()
    (tmp_path / "objects" / "o.yaml").write_text(
        yaml.safe_dump_all(manifests(pods, line, restore=2))
    )
    host = build_host_parts(
        CGROUP_ROOT, PROC_ROOT, tree.kubelet_root, str(tmp_path / "state"), dry_run=False,
        settings=AgentSettings(), node_cpu="pods",
    )  # fmt: skip
    collector, throttler = host.collector, host.throttler
    loop = NodeLoop(
        node_name="demo-node", source=FileObjectSource([str(tmp_path / "objects")], "demo-node"),
        collector=collector, brain=NodeBrain(), evictor=ReportingEvictor("test"),
        throttler=throttler, evictions_performed=False,
    )  # fmt: skip

    def step() -> tuple[dict[str, float], TickOutcome]:
        """One second, then the kernel's figures over it and the agent's tick."""
        time.sleep(1.0)
        measured = kernel.sample()
        return measured, loop.tick()

    try:
        kernel.sample()
        loop.tick()  # the first sample of a counter gives no rate
        measured, outcome = step()
        # 1. the agent measures what the kernel counts, within 10%
        for pod in pods:
            agent = outcome.usage[pod.key].cpu
            assert agent is not None and close(agent, measured[pod.key]), (pod.key, agent, measured)
        # 2. the rule triggers and quotas are written
        for _ in range(2):
            if outcome.caps:
                break
            measured, outcome = step()
        caps = dict(outcome.caps)
        assert caps and set(caps) <= {p.key for p in batch}, outcome.report
        for key, cap in caps.items():
            pod = next(p for p in batch if p.key == key)
            assert int(tree.quota(pod)) == max(1000, round(cap * 100_000))
        # 3. within 3 ticks, the kernel holds each throttled pod at its cap (within 10%)
        held: dict[str, list[tuple[float, float]]] = {key: [] for key in caps}
        in_force = caps
        for _ in range(3):
            measured, outcome = step()
            for key, cap in in_force.items():
                held.setdefault(key, []).append((measured.get(key, -1.0), cap))
            in_force = dict(outcome.caps)
        for key, seen in held.items():
            assert any(close(m, cap) for m, cap in seen), (key, seen)
        # 4. the load goes: the caps are raised, then the original quota written back exactly
        tree.stop("web")
        for pod in batch:
            tree.signal(pod.name, signal.SIGSTOP)
        for _ in range(12):
            measured, outcome = step()
            if not outcome.caps:
                break
        assert not outcome.caps
        for pod in batch:
            assert tree.quota(pod) == "-1"
        assert (
            tree.read(tree.cpu_root, web.container_rel(tree.kubelet_root), "cpu.cfs_quota_us")
            == "50000"
        )
        assert state_pods(tmp_path / "state") == {}
    finally:
        throttler.restore_all()  # type: ignore[attr-defined]


def agent_command(objects: Path, state: Path, kubelet_root: str, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "agent", "agent", "--local", "--objects", str(objects),
        "--state-dir", str(state), "--kubelet-cgroup-root", kubelet_root, "--node-cpu", "pods",
        "--metrics-addr", "off", "--no-console", "--log-format", "json", *extra,
    ]  # fmt: skip


def test_a_killed_local_agent_s_caps_are_adopted_then_released_on_exit(
    tree: CgroupTree, tmp_path: Path
) -> None:
    batch = DemoPod("batch", "BestEffort", None)
    _kernel, got = start_and_calibrate(tree, [batch])
    objects, state = tmp_path / "o.yaml", tmp_path / "state"
    # restoreThreshold 100: nothing but a restart can lift this cap during the test
    objects.write_text(yaml.safe_dump_all(manifests([batch], 0.5 * got[batch.key], restore=100)))
    log = (tmp_path / "agent.log").open("wb")
    proc = subprocess.Popen(  # noqa: S603
        agent_command(objects, state, tree.kubelet_root, "--interval", "0.5"),
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while tree.quota(batch) == "-1" and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        throttled = tree.quota(batch)
        assert throttled != "-1", (tmp_path / "agent.log").read_text()[-2000:]
    finally:
        proc.kill()  # no clean-up on the way out: the quota stays written
        proc.wait(timeout=10)
        log.close()
    assert tree.quota(batch) == throttled
    assert batch.uid in state_pods(state)
    again = subprocess.run(  # noqa: S603
        agent_command(objects, state, tree.kubelet_root, "--ticks", "1"),
        cwd=ROOT, capture_output=True, timeout=60,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr.decode()[-2000:]
    # The next start adopts the cap (it stays in force); local mode releases on exit.
    said = again.stderr.decode(errors="replace")[-4000:]  # the whole story when it fails
    assert coded(again.stderr, "caps-adopted"), said
    assert coded(again.stderr, "caps-released"), said
    assert tree.quota(batch) == "-1"
    assert state_pods(state) == {}
