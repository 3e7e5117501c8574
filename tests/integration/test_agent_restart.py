"""Restarts resume, they do not reset (issue 10), on this host's real cgroup v1 hierarchies
with real busy processes: the agent runs as a process in cluster mode against a dev API
server that holds its DaemonSet, so SIGTERM is a restart, not an uninstall.

* throttle, SIGTERM, start again: the cap stays in force across the restart (the kernel's
  cpuacct figures of the capped pod never exceed the cap + 10% in the restart window),
  the new agent adopts it, and once the node is cool throttle-up hands it back step by
  step to the exact original quota;
* a state file that cannot be read: moved aside, and the original quota written back from
  the pod spec.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from agent.kube.fetching import get_object
from agent.kube.patching import merge_patch
from agent.kube.resources import POLICIES
from devtools.apiserver.testing import serve
from devtools.demo.cgroups import CgroupTree
from devtools.demo.pods import DemoPod
from tests.integration.test_agent_local import busy_pods, manifests, state_pods

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
DAEMONSET = {
    "apiVersion": "apps/v1", "kind": "DaemonSet",
    "metadata": {"name": "waterline-agent", "namespace": "waterline-system"},
    "spec": {"selector": {"matchLabels": {"app": "waterline-agent"}}},
}  # fmt: skip


@contextmanager
def agent(kubeconfig: Path, state: Path, tree: CgroupTree, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """The agent as the DaemonSet runs it (cluster mode), logging JSON to ``log``."""
    command = [
        sys.executable, "-X", "faulthandler", "-m", "agent", "agent", "--kubeconfig", str(kubeconfig),
        "--node-name", "demo-node", "--state-dir", str(state), "--kubelet-cgroup-root",
        tree.kubelet_root, "--node-cpu", "pods", "--metrics-addr", "off", "--interval", "0.5",
        "--log-format", "json",
    ]  # fmt: skip
    env = {**os.environ, "POD_NAMESPACE": "waterline-system"}
    with log.open("ab") as out:
        proc = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=env)  # noqa: S603
        try:
            yield proc
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)


def wait_for(what: Callable[[], bool], timeout: float, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.1)


def stop(proc: subprocess.Popen[bytes], log: Path) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)  # faulthandler writes every thread's stack to the log
        proc.wait(timeout=10)
        pytest.fail(f"the agent did not stop within 20 s of SIGTERM:\n{log.read_text()[-6000:]}")
    assert code == 0, log.read_text()[-3000:]


def cap_of(quota: str) -> float:
    return int(quota) / 100_000  # the cgroup's period is 100 ms


def objects(pods: list[DemoPod], line: float) -> list[dict[str, Any]]:
    """restoreThreshold 100: while the test runs only a restart could lift the cap, until
    it lowers the threshold to let the cool node restore."""
    docs = manifests(pods, line, restore=100)
    docs[-1]["spec"]["throttle"]["cpuThrottle"] = {"minCPURatio": 20, "stepCPURatio": 25}
    return [*docs, DAEMONSET]


def test_caps_stay_in_force_across_a_restart_and_come_back_step_by_step(
    tree: CgroupTree, tmp_path: Path
) -> None:
    web, (batch,), kernel, line = busy_pods(tree, "batch")
    state, log = tmp_path / "state", tmp_path / "agent.log"
    with serve(objects([web, batch], line)) as running:
        with agent(running.kubeconfig, state, tree, log) as first:
            wait_for(lambda: tree.quota(batch) != "-1", 30, log)
            time.sleep(1.5)  # let it settle at the cap that closes the gap
            capped = tree.quota(batch)
            stop(first, log)
        assert b"caps kept for the next agent to adopt" in log.read_bytes()
        assert tree.quota(batch) == capped and batch.uid in state_pods(state)
        cap = cap_of(capped)
        # The restart window: from the old agent's exit until the new one has adopted the
        # cap and ticked on for four seconds, the kernel's figures in 2 s windows (a 1 s
        # window whose edges cut two 100 ms CFS periods can hold 11 periods' quota: the
        # 10% margin by itself, whatever the agent does).
        kernel.sample()
        seen: list[float] = []
        with agent(running.kubeconfig, state, tree, log) as second:
            adopted = lambda: b"caps adopted from the state file" in log.read_bytes()  # noqa: E731
            deadline = time.monotonic() + 30
            after = None
            while after is None or time.monotonic() < after + 4.0:
                assert time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(2.0)
                seen.append(kernel.sample().get(batch.key, 0.0))
                if after is None and adopted():
                    after = time.monotonic()
            assert cap_of(tree.quota(batch)) <= cap + 1e-9  # still capped, never lifted
            assert max(seen) <= cap * 1.10, (cap, seen)
            # The node goes cool: the cap comes back in steps of 25% of the node's core.
            rules = get_object(running.api, POLICIES, "guard")["spec"]["objectiveEnsurances"]
            rules[0]["restoreThreshold"] = 2
            merge_patch(running.api, POLICIES, "guard", {"spec": {"objectiveEnsurances": rules}})
            tree.stop("web")
            tree.signal("batch", signal.SIGSTOP)
            start = log.stat().st_size  # no raise before two cool ticks (restoreThreshold)
            wait_for(lambda: tree.quota(batch) == "-1", 40, log)
            stop(second, log)
    # Every quota the agent wrote for the pod, from its own log (polling the file could
    # miss a step on a loaded machine): the cap in force when the node went cool (the last
    # write before, by either agent), the raises, then the original it wrote back.
    before, after_cool = log.read_bytes()[:start], log.read_bytes()[start:]
    steps = quota_writes(before, batch.key)[-1:] + quota_writes(after_cool, batch.key)
    steps.append(tree.quota(batch))
    raised = [cap_of(q) for q in steps[:-1]]
    assert len(raised) >= 3 and raised == sorted(raised), steps  # step by step, upwards
    # Each raise is min(25% of the node's core, the gap left under the waterline) (DESIGN,
    # throttle-up): the first tick after the node cools may still count some of web's use.
    gaps = [e["gap_before"] for e in log_entries(after_cool, batch.key, "restore-step")]
    assert len(gaps) == len(raised) - 1, (steps, gaps)
    for a, b, gap in zip(raised[:-1], raised[1:], gaps, strict=True):
        assert b - a == pytest.approx(min(0.25, gap), abs=0.002), (steps, gaps)
    assert steps[-1] == "-1"  # the original, exactly
    assert state_pods(state) == {}
    print(f"\nkernel-measured usage of the capped pod (cap {cap:.3f} cores) in the restart "
          f"window, 2 s windows: {[round(v, 3) for v in seen]}; caps handed back: {steps}")


def quota_writes(log: bytes, pod_key: str) -> list[str]:
    """The cfs quotas the agent's JSON log says it wrote for one pod, in order."""
    return [str(entry["quota_us"]) for entry in log_entries(log, pod_key, "throttled")]


def log_entries(log: bytes, pod_key: str, event: str) -> list[dict[str, Any]]:
    """The agent's JSON log lines of one event for one pod, in order."""
    entries = []
    for line in log.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("event") == event and entry.get("pod") == pod_key:
            entries.append(entry)
    return entries


def test_an_unreadable_state_file_is_moved_aside_and_quotas_rebuilt_from_the_specs(
    tree: CgroupTree, tmp_path: Path
) -> None:
    web, (batch,), _kernel, line = busy_pods(tree, "batch")
    state, log = tmp_path / "state", tmp_path / "agent.log"
    with serve(objects([web, batch], line)) as running:
        with agent(running.kubeconfig, state, tree, log) as first:
            wait_for(lambda: tree.quota(batch) != "-1", 30, log)
            stop(first, log)
        assert tree.quota(batch) != "-1"
        (state / "cpu-quota.json").write_text('{"version": 1, "pods": {"tor')  # torn, garbage
        tree.stop("web")  # cool: nothing to throttle again
        tree.signal("batch", signal.SIGSTOP)
        with agent(running.kubeconfig, state, tree, log) as second:
            wait_for(lambda: b"quotas rebuilt from the pod specs" in log.read_bytes(), 30, log)
            assert tree.quota(batch) == "-1"  # BestEffort: no limit, unlimited
            assert (
                tree.read(tree.cpu_root, web.container_rel(tree.kubelet_root), "cpu.cfs_quota_us")
                == "50000"  # its 500m limit, as the kubelet wrote it
            )
            stop(second, log)
    assert [p.name for p in state.iterdir() if p.name.startswith("cpu-quota.json.corrupt-")]
