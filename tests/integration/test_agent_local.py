"""The local agent on this host's real cgroup v1 hierarchies, with real busy processes.

Each test builds its own kubelet-shaped tree (cgroupfs driver) under a unique kubelet
cgroup root in the ``cpu`` and ``cpuacct`` hierarchies, with busy ``sh`` loops as a
Guaranteed pod (limit 0.5) and BestEffort pods; the fixture kills every process and
removes every cgroup, also when a test fails. Memory cgroups are left alone (moving test
processes out of this sandbox's memory cgroup is not ours to do), so pods have no memory
figure here.

Other work shares the two cores, so a pod may get far less CPU than it asks for: what the
agent wrote (the quotas read back, its state file, its tick's outcome) is asserted
exactly, and the kernel's figures only as bounds load cannot break
(``tests/integration/kernel_cpu.py``): the agent's rate between the test's reads of
``cpuacct.usage`` just before and after each tick, a capped pod throttled and under what
its quota lets through. The waterline is just above an idle tree, so any busy pod is
above it and each BestEffort cap lands on the floor, a quota any pod that runs exceeds.
"""

from __future__ import annotations

import itertools
import json
import math
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
from devtools.harness.waiting import wait_until
from engine.caps import MIN_CPU_CAP
from tests.integration.kernel_cpu import (
    Around,
    assert_quota_binds,
    cpu_stat,
    rate_bounds,
    stamped,
)

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
_COUNTER = itertools.count()


def manifests(pods: list[DemoPod], line: float, restore: int) -> list[dict[str, Any]]:
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "demo-node"},
        "status": {"allocatable": {"cpu": f"{NODE_CORES:g}", "memory": "4Gi", "pods": "110"}},
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
#: The waterline, cores: above an idle tree (the restore phase stops every pod: 0), below
#: any busy one. The throttle (quantified, minCPURatio 0) then takes each BestEffort pod
#: that uses more than the floor down to the floor (MIN_CPU_CAP), whatever the pods get on
#: this machine at the time; a line set from a calibration gave caps just under what a pod
#: got then, which a loaded machine can leave it short of, so nothing showed the quota work.
LINE = 2 * MIN_CPU_CAP
#: The node's cores (its allocatable), the cap a BestEffort pod returns to.
NODE_CORES = 1.0
#: Ticks under the line before the caps are raised.
RESTORE = 2
#: What each busy pod must get before the agent runs: more than the floor, so there is a
#: cap to write (beside eight busy processes on their CPU the BestEffort pods got 0.018).
ABOVE_FLOOR = 1.5 * MIN_CPU_CAP


def start_and_calibrate(
    tree: CgroupTree, pods: list[DemoPod], least: float = 0.05
) -> tuple[KernelMeter, dict[str, float]]:
    """Start the pods and measure what each gets, until every one gets ``least`` cores.
    This file's tests ask for no more than the floor and a half (``ABOVE_FLOOR``): the
    agent caps only a pod it can lower, and only such a pod shows a quota at work."""
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
        if len(got) == len(pods) and min(got.values()) >= least:
            return kernel, got
    raise AssertionError(
        f"the busy pods got {got} cores over {CALIBRATION_WINDOWS[-1]} s: too little to measure"
    )


def busy_pods(
    tree: CgroupTree, *batch_names: str
) -> tuple[DemoPod, list[DemoPod], KernelMeter, float]:
    """A busy Guaranteed pod (limit 500m) and busy BestEffort ones, calibrated, and a
    waterline halfway into what the BestEffort pods get: the agent caps them
    (tests/integration/test_image.py's in-container run)."""
    web = DemoPod("web", "Guaranteed", 0.5)
    batch = [DemoPod(name, "BestEffort", None) for name in batch_names]
    kernel, got = start_and_calibrate(tree, [web, *batch])
    return web, batch, kernel, got[web.key] + 0.5 * sum(got[p.key] for p in batch)


def state_pods(state_dir: Path) -> dict[str, Any]:
    path = state_dir / "cpu-quota.json"
    return json.loads(path.read_text())["pods"] if path.exists() else {}


def close(measured: float, expected: float, rel: float = 0.10, slack: float = 0.01) -> bool:
    return abs(measured - expected) <= rel * expected + slack


class Bracketed:
    """The agent's ticks, each between two reads of every pod's ``cpuacct.usage``, each
    stamped with the clock. The agent reads a counter and the clock inside its tick, so
    the rate it computes between two ticks lies between what the test's reads allow
    (:meth:`agent_rate_bounds`), however long a read or the tick took on a busy core."""

    def __init__(self, loop: NodeLoop, tree: CgroupTree, pods: list[DemoPod]) -> None:
        self.loop, self.tree, self.pods = loop, tree, pods
        self.ticks: list[Around] = []

    def _counters(self) -> dict[str, float]:
        return {p.key: self.tree.cpu_seconds(p) for p in self.pods}

    def tick(self) -> TickOutcome:
        before = stamped(self._counters)
        outcome = self.loop.tick()
        self.ticks.append((before, stamped(self._counters)))
        return outcome

    def agent_rate_bounds(self, key: str) -> tuple[float, float]:
        """The least and the most cores the last two ticks' reads allow for ``key``."""
        return rate_bounds(self.ticks[-2], self.ticks[-1], key)


def test_measures_throttles_to_the_cap_and_restores_exactly(
    tree: CgroupTree, tmp_path: Path
) -> None:
    """A busy Guaranteed pod (limit 500m) and two busy BestEffort pods above the line:
    the agent measures what the kernel counts, caps the BestEffort pods (the quota read
    back is the cap it decided and recorded), the kernel enforces the caps (throttled,
    and no more than the quota lets through), and when the load goes the original quotas
    are written back exactly. The kernel's figures are used only as bounds load cannot
    break (tests/integration/kernel_cpu.py)."""
    web = DemoPod("web", "Guaranteed", 0.5)
    batch = [DemoPod(name, "BestEffort", None) for name in ("batch-a", "batch-b")]
    pods = [web, *batch]
    start_and_calibrate(tree, pods, least=ABOVE_FLOOR)
    (tmp_path / "objects").mkdir()
    (tmp_path / "objects" / "o.yaml").write_text(
        yaml.safe_dump_all(manifests(pods, LINE, restore=RESTORE))
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
    agent = Bracketed(loop, tree, pods)

    def step() -> TickOutcome:
        time.sleep(1.0)
        return agent.tick()

    def stat(pod: DemoPod) -> dict[str, int]:
        return cpu_stat(f"{tree.cpu_root}/{pod.container_rel(tree.kubelet_root)}/cpu.stat")

    try:
        agent.tick()  # the first sample of a counter gives no rate
        outcome = step()
        # 1. the agent measures what the kernel counts: within what the test's reads allow
        for pod in pods:
            got, (least, most) = outcome.usage[pod.key].cpu, agent.agent_rate_bounds(pod.key)
            assert got is not None and least - 1e-9 <= got <= most + 1e-9, (pod.key, got, least, most)
        # 2. the rule triggers and the agent caps every BestEffort pod it can lower; each
        # quota read back is the cap the agent decided, and its state file says the same
        for _ in range(10):
            if set(outcome.caps) == {p.key for p in batch}:
                break
            outcome = step()
        caps = dict(outcome.caps)
        assert set(caps) == {p.key for p in batch}, outcome.report
        recorded = state_pods(tmp_path / "state")
        for key, cap in caps.items():
            pod = next(p for p in batch if p.key == key)
            assert cap == pytest.approx(MIN_CPU_CAP), caps  # the gap takes each to the floor
            assert int(tree.quota(pod)) == max(1000, round(cap * 100_000))
            assert recorded[pod.uid]["containers"]["main"]["cap"] == pytest.approx(cap)
        # 3. the kernel enforces them: each capped pod is throttled (only a quota does
        # that) and uses no more than its quota lets through over the window
        by_key = {p.key: p for p in batch}
        assert_quota_binds(caps, lambda key: tree.cpu_seconds(by_key[key]),
                           lambda key: stat(by_key[key])["nr_throttled"])  # fmt: skip
        outcome = agent.tick()  # web still runs above the line: the caps are held as they are
        assert dict(outcome.caps) == caps, outcome.report
        # 4. the load goes: the caps are raised (never lowered), then the original quota is
        # written back exactly. With every pod stopped the usage is 0 whatever the machine
        # does, so the ticks this takes are arithmetic: the restore threshold, then raises of
        # at most the line's gap (LINE) a tick until each pod is back at the node's core.
        tree.stop("web")
        for pod in batch:
            tree.signal(pod.name, signal.SIGSTOP)
        raised = dict(caps)
        for _ in range(RESTORE + math.ceil(len(batch) * (NODE_CORES - MIN_CPU_CAP) / LINE) + 5):
            time.sleep(0.05)
            outcome = agent.tick()
            assert all(outcome.caps.get(k, NODE_CORES) >= raised[k] - 1e-9 for k in raised), (
                raised, outcome.caps)  # fmt: skip
            raised = {k: outcome.caps.get(k, NODE_CORES) for k in raised}
            if not outcome.caps:
                break
        assert not outcome.caps, outcome.caps
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
    start_and_calibrate(tree, [batch], least=ABOVE_FLOOR)
    objects, state = tmp_path / "o.yaml", tmp_path / "state"
    # restoreThreshold 100: nothing but a restart can lift this cap during the test
    objects.write_text(yaml.safe_dump_all(manifests([batch], LINE, restore=100)))
    log = (tmp_path / "agent.log").open("wb")
    proc = subprocess.Popen(  # noqa: S603
        agent_command(objects, state, tree.kubelet_root, "--interval", "0.5"),
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip

    def capped() -> bool:
        """The quota written and the cap recorded: the agent records a cap after its write,
        and a kill in between leaves no cap to adopt (the next start hands it back)."""
        assert proc.poll() is None, (tmp_path / "agent.log").read_text()[-2000:]
        record = state_pods(state).get(batch.uid, {}).get("containers", {}).get("main", {})
        return tree.quota(batch) != "-1" and record.get("cap") is not None

    try:
        # 120 s: the agent's start (its imports) on a busy core
        wait_until(capped, 120, what="the batch pod capped and the cap recorded",
                   explain=lambda: (tmp_path / "agent.log").read_text()[-2000:])  # fmt: skip
        throttled = tree.quota(batch)
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
