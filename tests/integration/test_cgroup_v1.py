"""The collector and the throttler against the real cgroup v1 hierarchies of this host.

Busy processes are started inside a kubepods-shaped tree (cgroupfs driver, under a unique
kubelet ``--cgroup-root``: ``kubepods-waterline-test-<pid>-<n>/kubepods/besteffort/...``)
in the ``cpu`` and ``cpuacct`` hierarchies. Memory is left alone: moving test processes
between memory cgroups would take them out of whatever limits this sandbox put on us.
Every cgroup and process made here is removed by the fixture's finalizer, also on failure.

CPU figures are checked against ``cpuacct.usage`` read around the code's own reads, and
only as bounds load cannot break (tests/integration/kernel_cpu.py): other work shares the
two cores, so a busy loop may get far less than it asks for.
"""

from __future__ import annotations

import errno
import itertools
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.model.objects import BEST_EFFORT, Container, Pod
from collectors.cgroups import CgroupMounts, detect_mounts
from collectors.pod_stats import PodStatsCollector, PodStatsSample
from devtools.harness.fake_cgroups import Clock
from devtools.harness.waiting import wait_until
from engine.caps import MIN_CPU_CAP
from executors.cgroup_throttle import CgroupThrottler
from executors.quota_state import QuotaState
from tests.descriptors import open_fds_of
from tests.integration.kernel_cpu import (
    Around,
    cap_allows,
    cpu_stat,
    longest,
    rate_bounds,
    stamped,
)
from tests.need import need

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
_COUNTER = itertools.count()


class V1Node:
    """A throwaway kubepods tree with busy processes in it."""

    def __init__(self) -> None:
        detected = detect_mounts()
        cpu, acct = detected.v1.get("cpu"), detected.v1.get("cpuacct")
        if cpu is None or acct is None:
            need(f"cpu and cpuacct as cgroup v1 controllers (this host: {detected.mode})")
        self.mounts = CgroupMounts(detected.cgroup_root, {"cpu": cpu, "cpuacct": acct})
        self.roots = sorted({cpu, acct})
        self.kubelet_root = f"kubepods-waterline-test-{os.getpid()}-{next(_COUNTER)}"
        self.dirs: list[str] = []
        self.procs: list[subprocess.Popen[bytes]] = []
        try:
            self._mkdir(self.kubelet_root)
        except OSError as err:
            need(f"cannot create cgroups under {cpu}: {err}")
        self._mkdir(f"{self.kubelet_root}/kubepods")
        self._mkdir(f"{self.kubelet_root}/kubepods/besteffort")

    def _mkdir(self, rel: str) -> None:
        for root in self.roots:
            os.mkdir(f"{root}/{rel}")
            if rel not in self.dirs:
                self.dirs.append(rel)

    def pod_rel(self, uid: str) -> str:
        return f"{self.kubelet_root}/kubepods/besteffort/pod{uid}"

    def add_pod(self, name: str, uid: str, busy: dict[str, int]) -> Pod:
        """A pod whose containers run ``busy[name]`` busy-looping processes each."""
        self._mkdir(self.pod_rel(uid))
        containers = []
        for cname, n in busy.items():
            cid = f"{uid}{cname}"
            rel = f"{self.pod_rel(uid)}/{cid}"
            self._mkdir(rel)
            for _ in range(n):
                self.spawn_in(rel)
            containers.append(Container(cname, container_id=f"containerd://{cid}"))
        return Pod(namespace="it", name=name, uid=uid, qos_class=BEST_EFFORT,
                   containers=tuple(containers))  # fmt: skip

    def spawn_in(self, rel: str) -> None:
        procs_files = [f"{root}/{rel}/cgroup.procs" for root in self.roots]

        def enter() -> None:  # runs in the child before exec: born inside the cgroup
            for path in procs_files:
                with open(path, "w") as f:
                    f.write(str(os.getpid()))

        self.procs.append(
            subprocess.Popen(["sh", "-c", "while :; do :; done"], preexec_fn=enter)  # noqa: PLW1509
        )

    def acct(self, rel: str) -> int:
        return int(Path(self.mounts.v1["cpuacct"], rel, "cpuacct.usage").read_text())

    def quota(self, rel: str) -> str:
        return Path(self.mounts.v1["cpu"], rel, "cpu.cfs_quota_us").read_text().strip()

    def rmdir(self, rel: str) -> None:
        """Remove a cgroup whose tasks are gone (a killed task can take a moment to leave)."""
        for root in self.roots:
            for _ in range(100):
                try:
                    os.rmdir(f"{root}/{rel}")
                    break
                except OSError as err:
                    if err.errno == errno.ENOENT:
                        break
                    time.sleep(0.02)
            else:
                raise AssertionError(f"cannot remove the cgroup {root}/{rel}")

    def stop_all(self) -> None:
        """SIGSTOP every busy process and wait until each is stopped: counters stand still."""
        for proc in self.procs:
            proc.send_signal(signal.SIGSTOP)
        for proc in self.procs:
            for _ in range(500):
                state = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
                if state == "T":
                    break
                time.sleep(0.01)

    def cleanup(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)
        for rel in reversed(self.dirs):
            for root in self.roots:
                for _ in range(50):  # a killed task can take a moment to leave
                    try:
                        os.rmdir(f"{root}/{rel}")
                        break
                    except FileNotFoundError:
                        break
                    except OSError:
                        time.sleep(0.02)


@pytest.fixture
def node() -> Iterator[V1Node]:
    if os.geteuid() != 0:
        need("root, to create cgroups")
    made = V1Node()
    try:
        yield made
    finally:
        made.cleanup()


def test_collector_matches_cpuacct_over_the_same_window(node: V1Node) -> None:
    """The collector's rates are the kernel's: each lies between what the test's reads of
    the same counters just before and just after each collect allow (a bound however
    long a read took on a busy core), and the busy loops ran in between."""
    pods = [
        node.add_pod("one", "u1", {"a": 1}),
        node.add_pod("two", "u2", {"a": 1, "b": 0}),
    ]
    collector = PodStatsCollector(node.mounts, kubelet_root=node.kubelet_root)
    rels = [node.pod_rel("u1"), node.pod_rel("u2"), f"{node.pod_rel('u1')}/u1a"]

    def counters() -> list[float]:
        return [node.acct(r) / 1e9 for r in rels]

    def collect() -> tuple[PodStatsSample, Around]:
        before = stamped(counters)
        sample = collector.collect(pods)
        return sample, (before, stamped(counters))

    first, around1 = collect()
    assert all(u.cpu is None for u in first.usage.values())  # first sample: no rate
    time.sleep(1.0)
    sample, around2 = collect()
    one, two = sample.usage["it/one"], sample.usage["it/two"]
    measured = [one.cpu, two.cpu, one.containers["a"].cpu]
    bounds = [rate_bounds(around1, around2, i) for i in range(len(rels))]
    for i, (got, (least, most)) in enumerate(zip(measured, bounds, strict=True)):
        assert around2[0].value[i] > around1[1].value[i], "a busy loop got no CPU at all"
        assert got is not None and least - 1e-9 <= got <= most + 1e-9, (rels[i], measured, bounds)
    assert two.containers["b"].cpu == pytest.approx(0.0, abs=0.01)  # the idle container


def _uncapped(node: V1Node, rels: list[str]) -> list[float]:
    """What each cgroup's busy loop gets here now, in cores: the least the counters allow
    (the window from just before the first reads to just after the last), over longer
    windows until every loop gets enough to be capped (about 15 s at most)."""
    got: list[float] = []
    for window in (1.0, 2.0, 4.0, 8.0):
        first = [stamped(lambda r=r: node.acct(r)) for r in rels]
        time.sleep(window)
        last = [stamped(lambda r=r: node.acct(r)) for r in rels]
        got = [(b.value - a.value) / 1e9 / longest(a, b) for a, b in zip(first, last, strict=True)]
        if min(got) >= 2 * MIN_CPU_CAP:
            return got
    raise AssertionError(f"the busy loops got {got} cores over {window} s: too little to cap")


def test_quota_caps_kernel_usage_and_restore_writes_minus_one(node: V1Node, tmp_path: Path) -> None:
    """The quota written is the cap asked for, read back exactly; the kernel enforces it:
    both capped loops are throttled (``nr_throttled`` grows: only a quota does that) and
    use no more than the quota lets through, a bound load cannot break (load only lowers
    usage). The cap is half of what the loops get here before it (0.2 core at most): on a
    busy host a fixed cap can be more than a loop gets, and then nothing would show the
    quota at work."""
    pods = [node.add_pod("be1", "t1", {"a": 1}), node.add_pod("be2", "t2", {"a": 1})]
    throttler = CgroupThrottler(
        node.mounts, QuotaState(str(tmp_path / "state")), kubelet_root=node.kubelet_root
    )
    containers = [f"{node.pod_rel(p.uid)}/{p.uid}a" for p in pods]
    assert [node.quota(c) for c in containers] == ["-1", "-1"]
    uncapped = _uncapped(node, containers)
    cap = min(0.2, max(MIN_CPU_CAP, math.floor(min(uncapped) / 2 * 100) / 100))
    for pod in pods:
        assert throttler.apply(pod, {"a": cap})
    quota = str(max(1000, round(cap * 100_000)))
    assert [node.quota(c) for c in containers] == [quota, quota]
    assert {uid: rec.containers["a"].cap for uid, rec in throttler.throttled_pods().items()} == {
        "t1": int(quota) / 100_000, "t2": int(quota) / 100_000}  # fmt: skip

    collector = PodStatsCollector(node.mounts, kubelet_root=node.kubelet_root)
    collector.collect(pods)
    stat = [f"{node.mounts.v1['cpu']}/{c}/cpu.stat" for c in containers]
    first = [stamped(lambda c=c: node.acct(c)) for c in containers]
    throttled0 = [cpu_stat(s)["nr_throttled"] for s in stat]
    wait_until(lambda: all(cpu_stat(s)["nr_throttled"] > n for s, n in zip(stat, throttled0, strict=True)),
               60, what=f"the kernel throttling both loops capped at {cap} core")  # fmt: skip
    time.sleep(max(0.0, 2.0 - (time.monotonic() - first[0].before)))  # a window of 2 s at least
    last = [stamped(lambda c=c: node.acct(c)) for c in containers]
    before_collect = [cpu_stat(s)["nr_throttled"] for s in stat]
    sample = collector.collect(pods)
    after_collect = [cpu_stat(s)["nr_throttled"] for s in stat]
    used = [(b.value - a.value) / 1e9 for a, b in zip(first, last, strict=True)]
    window = longest(first[0], last[-1])
    print(f"uncapped {uncapped} cores; capped at {cap}: {used} cpu-s in {window:.2f} s "
          f"(the quota allows {cap_allows(cap, window):.3f})")  # fmt: skip
    for i, pod in enumerate(pods):
        assert used[i] <= cap_allows(cap, longest(first[i], last[i])), (pod.key, used, window)
        # the agent's reading of the same counters: between the kernel's before and after it
        throttling = sample.stats[pod.key].containers["a"].throttling
        assert throttling is not None and throttling.throttled_ratio is not None
        assert throttling.throttled_ratio > 0, throttling
        assert before_collect[i] <= throttling.nr_throttled <= after_collect[i], throttling

    for pod in pods:
        throttler.restore(pod)
    assert [node.quota(c) for c in containers] == ["-1", "-1"]
    assert throttler.throttled_pods() == {}


THROTTLER = """
import sys, time
from agent.model.objects import Container, Pod
from collectors.cgroups import CgroupMounts
from executors.cgroup_throttle import CgroupThrottler
from executors.quota_state import QuotaState
cg_root, cpu, acct, kubelet_root, state_dir, uid = sys.argv[1:7]
mounts = CgroupMounts(cg_root, {"cpu": cpu, "cpuacct": acct})
pod = Pod(namespace="it", name="victim", uid=uid, qos_class="BestEffort",
          containers=(Container("a", container_id=f"containerd://{uid}a"),))
CgroupThrottler(mounts, QuotaState(state_dir), kubelet_root=kubelet_root).apply(pod, {"a": 0.2})
print("throttled", flush=True)
time.sleep(60)
"""


def test_new_throttler_restores_after_the_old_one_was_killed(node: V1Node, tmp_path: Path) -> None:
    pod = node.add_pod("victim", "k1", {"a": 1})
    container = f"{node.pod_rel('k1')}/k1a"
    state_dir = str(tmp_path / "state")
    child = subprocess.Popen(
        [sys.executable, "-c", THROTTLER, node.mounts.cgroup_root, node.mounts.v1["cpu"],
         node.mounts.v1["cpuacct"], node.kubelet_root, state_dir, "k1"],
        cwd=ROOT, stdout=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert child.stdout is not None
        lines = iter(child.stdout.readline, b"")  # the child also logs to stdout
        assert any(line.strip() == b"throttled" for line in lines)
        assert node.quota(container) == "20000"
        child.send_signal(signal.SIGKILL)  # mid-throttle: no chance to clean up
        child.wait(timeout=10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=10)
    assert node.quota(container) == "20000"  # still throttled by the dead agent

    fresh = CgroupThrottler(node.mounts, QuotaState(state_dir), kubelet_root=node.kubelet_root)
    assert set(fresh.throttled_pods()) == {"k1"}
    restored = fresh.reconcile({pod.uid}, keep=lambda _record: False)  # no rule needs it
    assert restored == ["k1"]
    assert node.quota(container) == "-1"
    assert fresh.throttled_pods() == {}


def _open_fds(node: V1Node) -> int:
    """The process's descriptors of this node's cgroup files (``open_fds_of``)."""
    return open_fds_of(f"/{node.kubelet_root}/")


def test_held_descriptors_read_what_a_fresh_open_reads(node: V1Node) -> None:
    """The collector reads a cgroup read before by ``pread`` on descriptors it holds
    (issue 32); on the kernel's cgroup files that must be what opening them afresh reads.
    The busy processes are stopped so that the counters stand still between the two."""
    pods = [node.add_pod("one", "h1", {"a": 1, "b": 0}), node.add_pod("two", "h2", {"a": 2})]
    time.sleep(0.3)  # some CPU time in the counters
    node.stop_all()
    clock = Clock()
    held = PodStatsCollector(node.mounts, kubelet_root=node.kubelet_root, clock=clock)
    fresh = PodStatsCollector(node.mounts, kubelet_root=node.kubelet_root, clock=clock, max_open_files=0)
    for _ in range(3):
        a, b = held.collect(pods), fresh.collect(pods)
        assert (a.usage, a.stats, a.missing) == (b.usage, b.stats, b.missing)
        clock.t += 1
    assert held.open_files >= 2 * 5 and fresh.open_files == 0  # cpuacct.usage, cpu.stat: 5 cgroups
    one = a.stats["it/one"]
    assert one.containers["a"].cpu_seconds is not None and one.containers["a"].cpu_seconds > 0
    assert one.containers["a"].cpu == 0.0  # stopped: the counter stood still
    held.close()


def test_a_real_cgroup_removed_and_made_again_is_read_anew_and_nothing_leaks(node: V1Node) -> None:
    """A held descriptor of a removed cgroup reads ENODEV (kernfs): the collector must open
    the cgroup made again at the same path (its counter starts from 0), drop one removed
    for good, and give back the descriptors of the cgroups it no longer reads."""
    pod = node.add_pod("web", "r1", {"a": 0, "b": 0})
    rel = f"{node.pod_rel('r1')}/r1a"
    clock = Clock()
    collector = PodStatsCollector(node.mounts, kubelet_root=node.kubelet_root, clock=clock)
    baseline = _open_fds(node)
    for round_ in range(5):
        node.spawn_in(rel)  # CPU time in the old cgroup's counter, then its task leaves
        time.sleep(0.2)
        node.procs[-1].kill()
        node.procs[-1].wait(timeout=10)
        collector.collect([pod])
        clock.t += 1
        old = collector.collect([pod]).stats["it/web"].containers["a"]
        assert old.cpu_seconds is not None and old.cpu_seconds > 0, (round_, old)
        assert collector.open_files > 0 and _open_fds(node) == baseline + collector.open_files
        node.rmdir(rel)
        node._mkdir(rel)
        clock.t += 1
        new = collector.collect([pod]).stats["it/web"].containers["a"]
        assert new.cpu_seconds == 0.0 and new.cpu is None, (round_, new)  # the new cgroup's
        assert _open_fds(node) == baseline + collector.open_files
    node.rmdir(rel)  # gone for good: the pod is read without it, its files closed
    clock.t += 1
    sample = collector.collect([pod])
    assert set(sample.stats["it/web"].containers) == {"b"}
    assert _open_fds(node) == baseline + collector.open_files
    collector.collect([])
    assert (collector.open_files, _open_fds(node)) == (0, baseline)
