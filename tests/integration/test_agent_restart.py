"""Restarts resume, they do not reset, on the real cluster: the agent runs as a process in
cluster mode with its own token, and its DaemonSet is deploy/'s, so SIGTERM is a restart,
not an uninstall.

On this host's real cgroup v1 hierarchies with real busy processes (issue 10):

* throttle, SIGTERM, start again: the cap stays in force across the restart (the quota
  file and the state unchanged; in the restart window the kernel throttles the capped pod
  and it uses no more than the quota lets through: bounds load cannot break, from
  tests/integration/kernel_cpu.py), the new agent adopts it, and once the node is cool
  throttle-up hands it back step by step to the exact original quota;
* a state file that cannot be read: moved aside, and the original quota written back from
  the pod spec.

And the kube-apiserver restarted (kill -9, started again) under a running agent, on a fake
cgroup tree whose CPU counters a thread advances: the agent's watches recover (the real
server's 410 for their old resourceVersions, then a relist), no eviction is asked twice,
and the caps stay as they were.
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Self

import pytest

from agent.kube.patching import merge_patch
from agent.kube.resources import POLICIES
from devtools.demo.cgroups import CgroupTree
from devtools.demo.pods import DemoPod
from devtools.harness.agent_env import Load, Pool, demo_pod, name_of
from devtools.harness.cluster import NAMESPACE, RealCluster
from devtools.harness.faultproxy import FaultProxy
from devtools.harness.logs import coded
from devtools.harness.waiting import wait_until
from engine.caps import MIN_CPU_CAP
from tests.integration.kernel_cpu import cap_allows, cpu_stat, longest, stamped
from tests.integration.test_agent_local import (
    ABOVE_FLOOR,
    LINE,
    NODE_CORES,
    start_and_calibrate,
    state_pods,
)

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def agent(kubeconfig: Path, node: str, state: Path, log: Path, *cgroups: str) -> Iterator[subprocess.Popen[bytes]]:
    """The agent as the DaemonSet runs it (cluster mode), logging JSON to ``log``."""
    command = [
        sys.executable, "-X", "faulthandler", "-m", "agent", "agent", "--kubeconfig", str(kubeconfig),
        "--node-name", node, "--state-dir", str(state), "--node-cpu", "pods",
        "--interval", "0.5", "--log-format", "json", *cgroups,
    ]  # fmt: skip
    env = {**os.environ, "POD_NAMESPACE": NAMESPACE}
    with log.open("ab") as out:
        proc = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=env)  # noqa: S603
        try:
            yield proc
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)


def real_cgroups(tree: CgroupTree) -> tuple[str, ...]:
    return ("--kubelet-cgroup-root", tree.kubelet_root, "--metrics-addr", "off")


def wait_for(what: Callable[[], bool], timeout: float, log: Path) -> None:
    wait_until(what, timeout, interval=0.1, explain=lambda: log.read_text()[-3000:])


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


def quota_of(cap: float) -> str:
    """The quota the agent writes for ``cap`` cores (1 ms at least)."""
    return str(max(1000, round(cap * 100_000)))


def busy_pods(pool: Pool, tree: CgroupTree) -> tuple[str, DemoPod, DemoPod]:
    """A busy Guaranteed pod (limit 500m) and a busy BestEffort one on a node of one core,
    made by ReplicaSets and run by kwok, their cgroups real, each getting more than the
    floor and a half: under the line just above an idle tree (test_agent_local's LINE) the
    agent caps the BestEffort pod at the floor, whatever the machine's load leaves it."""
    node = pool.node(cpu=f"{NODE_CORES:g}")
    half = {"cpu": "500m", "memory": "64Mi"}
    (web_pod,) = pool.running(pool.replicaset("web", node=node,
                                              resources={"requests": half, "limits": half}), 1)  # fmt: skip
    (batch_pod,) = pool.running(pool.replicaset("batch", node=node), 1)
    assert web_pod["status"]["qosClass"] == "Guaranteed"
    web, batch = demo_pod(web_pod, cpu_limit=0.5), demo_pod(batch_pod)
    start_and_calibrate(tree, [web, batch], least=ABOVE_FLOOR)
    return node, web, batch


def throttle_policy(pool: Pool) -> str:
    """The line just above an idle tree; restoreThreshold 100: while the test runs only a
    restart could lift the cap, until it lowers the threshold to let the cool node
    restore. No floor under the cap but the agent's own (minCPURatio 0)."""
    action = pool.action({"throttle": {"cpuThrottle": {"minCPURatio": 0, "stepCPURatio": 25}},
                          "scope": {"qosClasses": ["BestEffort"]}})  # fmt: skip
    return pool.policy(action, value=f"{LINE:.3f}", restore=100, avoidanceThreshold=1)


def recorded_cap(state: Path, pod: DemoPod) -> float | None:
    """The cap the state file records for the pod's container (written after the quota)."""
    cap = state_pods(state).get(pod.uid, {}).get("containers", {}).get("main", {}).get("cap")
    return None if cap is None else float(cap)


def stat(tree: CgroupTree, pod: DemoPod) -> dict[str, int]:
    return cpu_stat(f"{tree.cpu_root}/{pod.container_rel(tree.kubelet_root)}/cpu.stat")


def test_caps_stay_in_force_across_a_restart_and_come_back_step_by_step(
    kube: RealCluster, pool: Pool, tree: CgroupTree, tmp_path: Path
) -> None:
    node, web, batch = busy_pods(pool, tree)
    guard = throttle_policy(pool)
    kubeconfig = kube.agent_kubeconfig(node)
    state, log = tmp_path / "state", tmp_path / "agent.log"
    with agent(kubeconfig, node, state, log, *real_cgroups(tree)) as first:
        # 120 s: the agent's start (its imports, its first lists) on a busy core
        wait_for(lambda: recorded_cap(state, batch) is not None, 120, log)
        stop(first, log)
    assert coded(log.read_bytes(), "caps-kept")
    cap = recorded_cap(state, batch)
    assert cap == pytest.approx(MIN_CPU_CAP)  # the gap takes it to the floor
    capped = tree.quota(batch)
    assert capped == quota_of(cap)
    # The restart window: from the old agent's exit until the new one has adopted the cap,
    # the kernel has throttled the pod under it, and at least four seconds have passed.
    # The cap is the floor, which nothing but a raise can change, and restoreThreshold 100
    # allows none: the quota stays exactly as it was. The kernel's figures are bounds load
    # cannot break (tests/integration/kernel_cpu.py): the pod throttled, and using no more
    # than the quota lets through over the window.
    first_read, throttled = stamped(lambda: tree.cpu_seconds(batch)), stat(tree, batch)["nr_throttled"]
    with agent(kubeconfig, node, state, log, *real_cgroups(tree)) as second:
        wait_for(lambda: bool(coded(log.read_bytes(), "caps-adopted")), 120, log)
        assert tree.quota(batch) == capped and recorded_cap(state, batch) == cap
        wait_for(lambda: stat(tree, batch)["nr_throttled"] > throttled, 60, log)
        time.sleep(max(0.0, 4.0 - (time.monotonic() - first_read.before)))
        last_read = stamped(lambda: tree.cpu_seconds(batch))
        used, window = last_read.value - first_read.value, longest(first_read, last_read)
        assert used <= cap_allows(cap, window), (cap, used, window)
        assert tree.quota(batch) == capped and recorded_cap(state, batch) == cap  # never lifted
        # The node goes cool and its line moves up to its core: the cap comes back in steps
        # of 25% of the node's core (a line just above the idle tree would raise it by its
        # gap, 0.02 core, a tick).
        rules = kube.api.request("GET", POLICIES.path(None, guard))["spec"]["objectiveEnsurances"]
        rules[0]["restoreThreshold"] = 2
        rules[0]["metricRule"]["value"] = f"{NODE_CORES:g}"
        tree.stop(web.name)
        tree.signal(batch.name, signal.SIGSTOP)
        start = log.stat().st_size  # no raise before two cool ticks (restoreThreshold)
        merge_patch(kube.api, POLICIES, guard, {"spec": {"objectiveEnsurances": rules}})
        wait_for(lambda: tree.quota(batch) == "-1", 120, log)
        stop(second, log)
    # Every quota the agent wrote for the pod, from its own log (polling the file could
    # miss a step on a loaded machine): the cap in force when the node went cool (the last
    # write before, by either agent), the raises, then the original it wrote back.
    before, after_cool = log.read_bytes()[:start], log.read_bytes()[start:]
    steps = quota_writes(before, batch.key)[-1:] + quota_writes(after_cool, batch.key)
    steps.append(tree.quota(batch))
    raised = [cap_of(q) for q in steps[:-1]]
    # Step by step, upwards, from the floor: at least one raise short of the original.
    assert raised[0] == pytest.approx(cap) and len(raised) >= 2 and raised == sorted(raised), steps
    # Each raise is min(25% of the node's core, the gap left under the waterline) (DESIGN,
    # throttle-up): the first tick after the node cools may still count some of web's use,
    # and a tick before the new line reaches the agent has the old line's gap.
    gaps = [e["gap_before"] for e in log_entries(after_cool, batch.key, "restore-step")]
    assert len(gaps) == len(raised) - 1, (steps, gaps)
    for a, b, gap in zip(raised[:-1], raised[1:], gaps, strict=True):
        assert b - a == pytest.approx(min(0.25, gap), abs=0.002), (steps, gaps)
    assert steps[-1] == "-1"  # the original, exactly
    assert state_pods(state) == {}
    print(f"\nthe capped pod (cap {cap:.3f} cores) in the restart window: {used:.4f} cpu-s in "
          f"{window:.2f} s (the quota allows {cap_allows(cap, window):.4f}), throttled "
          f"{stat(tree, batch)['nr_throttled'] - throttled} times; caps handed back: {steps}")


def quota_writes(log: bytes, pod_key: str) -> list[str]:
    """The cfs quotas the agent's JSON log says it wrote for one pod, in order."""
    return [str(entry["quota_us"]) for entry in log_entries(log, pod_key, "throttled")]


def log_entries(log: bytes, pod_key: str | None, code: str) -> list[dict[str, Any]]:
    """The agent's JSON log events of one code (for one pod), in order."""
    return coded(log, code, pod=pod_key)


def test_an_unreadable_state_file_is_moved_aside_and_quotas_rebuilt_from_the_specs(
    kube: RealCluster, pool: Pool, tree: CgroupTree, tmp_path: Path
) -> None:
    node, web, batch = busy_pods(pool, tree)
    throttle_policy(pool)
    kubeconfig = kube.agent_kubeconfig(node)
    state, log = tmp_path / "state", tmp_path / "agent.log"
    with agent(kubeconfig, node, state, log, *real_cgroups(tree)) as first:
        # 120 s: the agent's start on a busy core (30 s passed with its log still empty)
        wait_for(lambda: recorded_cap(state, batch) is not None, 120, log)
        stop(first, log)
    assert tree.quota(batch) == quota_of(MIN_CPU_CAP)
    (state / "cpu-quota.json").write_text('{"version": 1, "pods": {"tor')  # torn, garbage
    tree.stop(web.name)  # cool: nothing to throttle again
    tree.signal(batch.name, signal.SIGSTOP)
    with agent(kubeconfig, node, state, log, *real_cgroups(tree)) as second:
        wait_for(lambda: bool(coded(log.read_bytes(), "caps-rebuilt")), 120, log)
        assert tree.quota(batch) == "-1"  # BestEffort: no limit, unlimited
        assert (
            tree.read(tree.cpu_root, web.container_rel(tree.kubelet_root), "cpu.cfs_quota_us")
            == "50000"  # its 500m limit, as the kubelet wrote it
        )
        stop(second, log)
    assert [p.name for p in state.iterdir() if p.name.startswith("cpu-quota.json.corrupt-")]


# -- the kube-apiserver restarted under a running agent ------------------------------------


class Background:
    """A thread running ``step`` every ``period`` seconds while in its ``with`` block."""

    period = 0.1

    def __init__(self) -> None:
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def step(self) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        while not self.stopping.wait(self.period):
            self.step()

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.thread.join(5)


class Loader(Background):
    """Advances the fake tree's counters: ``cores`` a pod."""

    def __init__(self, load: Load, cores: dict[str, float]) -> None:
        super().__init__()
        self.load, self.cores = load, cores
        self.last = time.monotonic()

    def step(self) -> None:
        now = time.monotonic()
        self.load.run({name: cores * (now - self.last) for name, cores in self.cores.items()})
        self.last = now


class QuotaWatch(Background):
    """Every distinct set of quota files seen, polled every 50 ms."""

    period = 0.05

    def __init__(self, load: Load) -> None:
        super().__init__()
        self.load = load
        self.seen: list[dict[str, int]] = []

    def step(self) -> None:
        now = self.load.quotas()
        if not self.seen or self.seen[-1] != now:
            self.seen.append(now)


def evictions(proxy: FaultProxy) -> list[tuple[str, int]]:
    """(pod, status) of every eviction asked, in order."""
    return [(s.path.split("?")[0].split("/")[-2], s.status) for s in proxy.seen("POST", "/eviction")]


def test_the_apiserver_restarted_under_a_running_agent(
    kube: RealCluster, pool: Pool, tmp_path: Path
) -> None:
    """Three batch pods capped (at the minimum, never restored while the test runs),
    victims evicted one every 5 s (evictionRateLimit 12 a minute, burst 1) before, during
    and after a kill -9 and start of the kube-apiserver. The agent runs through the fault
    proxy, whose log tells what it asked."""
    node = pool.node()
    batch = pool.running(pool.replicaset("batch", 3, node=node, labels={"tier": "batch"}), 3)
    victims = pool.running(pool.replicaset("victim", 6, node=node, labels={"tier": "victim"}), 6)
    load = Load(tmp_path / "cg", [*batch, *victims])
    throttle = pool.action({"throttle": {"cpuThrottle": {"minCPURatio": 10, "stepCPURatio": 100}},
                            "scope": {"qosClasses": ["BestEffort"],
                                      "podSelector": {"matchLabels": {"tier": "batch"}}}})  # fmt: skip
    evict = pool.action({"coolDownSeconds": 0, "eviction": {"maxPodsPerRound": 1},
                         "scope": {"qosClasses": ["BestEffort"],
                                   "podSelector": {"matchLabels": {"tier": "victim"}}}})  # fmt: skip
    pool.policy(throttle, restore=1000)
    pool.policy(evict)
    config = tmp_path / "waterline.yaml"
    config.write_text("agent:\n  evictionRateLimit: {perMinute: 12, burst: 1}\n")
    state, log = tmp_path / "state", tmp_path / "agent.log"
    cores = {name_of(p): 2.0 for p in batch} | {name_of(p): 0.5 for p in victims}
    with kube.proxy() as proxy, Loader(load, cores):
        fake = ("--cgroup-root", str(tmp_path / "cg"), "--config", str(config),
                "--metrics-addr", "127.0.0.1:0")  # fmt: skip
        with agent(kube.agent_kubeconfig(node, proxy.url), node, state, log, *fake) as proc:
            capped = {name_of(p): 20000 for p in batch}  # 10% of the node's 2 cores
            wait_for(lambda: all(load.quota(n) == q for n, q in capped.items())
                     and sum(s == 201 for _, s in evictions(proxy)) >= 2, 60, log)  # fmt: skip
            with QuotaWatch(load) as quotas:
                before = len(proxy.requests)
                evicted_before = sum(s == 201 for _, s in evictions(proxy))
                started = time.monotonic()
                kube.restart_apiserver()
                restart = time.monotonic() - started
                # Back: the watches relisted, evictions go on.
                wait_for(lambda: sum(s == 201 for _, s in evictions(proxy)) >= evicted_before + 2,
                         90, log)  # fmt: skip
                recovered = time.monotonic() - started
                metrics = _get(_metrics_url(log) + "/metrics")
                ready = _get(_metrics_url(log) + "/readyz")
            stop(proc, log)
        after = proxy.requests[before:]
    # Caps: the same quota files from before the restart until the agent stopped.
    assert quotas.seen == [{**capped, **{name_of(p): -1 for p in victims}}], quotas.seen[:5]
    # Watches: the server's 410 for a resourceVersion older than its new watch cache (the
    # revision etcd was at when the server died: a watch that had seen the last write
    # before the kill resumes without one), then a relist of that resource.
    gone = sorted({path.split("?")[0] for path, code in proxy.watch_errors if code == 410}
                  | {s.path.split("?")[0] for s in after if s.watch and s.status == 410})  # fmt: skip
    listed = {s.path.split("?")[0] for s in after if s.method == "GET" and not s.watch and s.status == 200}
    assert gone and set(gone) <= listed, (gone, listed)
    relists = [s for s in after if s.method == "GET" and not s.watch and s.path.split("?")[0] in gone]
    assert log_entries(log.read_bytes(), None, "watch-relist")
    assert ready[0] == 200, ready
    # Evictions: no pod asked for twice once it was evicted, none evicted twice.
    asked = evictions(proxy)
    by_pod: dict[str, list[int]] = collections.defaultdict(list)
    for pod, status in asked:
        by_pod[pod].append(status)
    twice = {pod: s for pod, s in by_pod.items() if s.count(201) > 1 or (201 in s and s[-1] != 201)}
    assert not twice, asked
    failed = [(p, s) for p, s in asked if s != 201]
    evicted = [p for p, s in asked if s == 201]
    print(f"\nkube-apiserver kill -9 and start: ready again in {restart:.1f} s, the agent "
          f"evicting again {recovered:.1f} s after the kill; watch 410s from the real server: "
          f"{len(gone)} ({gone}); relists: {len(relists)}; evictions asked {len(asked)}, "
          f"evicted {len(evicted)} (each once), "
          f"not answered 201: {failed}; quota files changed during the restart: "
          f"{len(quotas.seen) - 1} times")
    assert "waterline_actions_total" in metrics[1]


def _metrics_url(log: Path) -> str:
    (entry,) = [e for e in log_entries(log.read_bytes(), None, "serving-metrics")][-1:]
    return f"http://127.0.0.1:{entry['port']}"


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
