"""The pod collector's held descriptors (issue 32) on fake cgroup trees.

A cgroup read before is read through descriptors held open across ticks. These tests ask
that the descriptors are bounded (the files of the cgroups read, at most the budget),
closed when their cgroup is no longer read (pods coming and going: the process's count of
open files comes back), and that a cgroup removed and made again at the same path is read
anew; and that none of it changes a figure: a collector holding nothing (budget 0, every
file opened and closed each tick) reads the same samples in lockstep.
"""

from __future__ import annotations

import gc
import os
import random
import resource
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.model.objects import BURSTABLE, GUARANTEED, Pod
from collectors.files import OnceLog
from collectors.layout import CGROUPFS, SYSTEMD, container_names, pod_path
from collectors.pod_stats import PodStatsCollector, PodStatsSample
from devtools.harness.fake_cgroups import Clock, FakeTree, ListLogger, make_pod
from tests.descriptors import open_fds_of

FILES_PER_CGROUP = {1: 4, 2: 5}  # v1: cpuacct.usage, cpu.stat, memory.*; v2: + the PSI files


def _process_fds() -> int:
    """The process's open descriptors (the collectors of earlier tests collected first:
    a collector closes what it holds when it goes)."""
    gc.collect()
    return len(os.listdir("/proc/self/fd"))


def _open_fds(node: Node) -> int:
    """The process's descriptors of ``node``'s tree only (``open_fds_of``)."""
    return open_fds_of(f"{node.root}/")


class Node:
    """A fake tree with pods whose cgroups can be made, removed and made again."""

    def __init__(self, root: Path, version: int) -> None:
        self.root = root
        self.tree = FakeTree(root, version)
        self.version = version
        self.driver = CGROUPFS if version == 1 else SYSTEMD
        self.pods: dict[str, Pod] = {}

    def rels(self, pod: Pod) -> list[str]:
        rel = pod_path(self.driver, pod.qos_class, pod.uid)
        return [rel, *(f"{rel}/{container_names(self.driver, c.container_id)[0]}" for c in pod.containers)]

    def add(self, uid: str, containers: int = 2, cpu: float = 1.0) -> Pod:
        pod = make_pod(f"p-{uid}", uid, BURSTABLE if containers else GUARANTEED,
                       {f"c{i}": f"containerd://{uid}c{i}" for i in range(containers)})  # fmt: skip
        self.pods[uid] = pod
        self.make(pod, cpu)
        return pod

    def make(self, pod: Pod, cpu: float) -> None:
        for rel in self.rels(pod):
            self.tree.add(rel)
            self.set(rel, cpu)

    def set(self, rel: str, cpu: float) -> None:
        psi = (1.5, 0.5) if self.version == 2 else None
        self.tree.set(rel, cpu, periods=int(cpu * 10), throttled=1, usage=5000, inactive=1000, psi=psi)

    def tick(self, cpu: float) -> None:
        for pod in self.pods.values():
            for rel in self.rels(pod):
                if self.tree.dirs(rel)[0].is_dir():
                    self.set(rel, cpu)

    def remove(self, pod: Pod, forget: bool = True) -> None:
        for d in self.tree.dirs(self.rels(pod)[0]):
            shutil.rmtree(d)
        if forget:
            del self.pods[pod.uid]


@pytest.fixture(params=[1, 2], ids=["v1", "v2"])
def node(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Node]:
    yield Node(tmp_path / "cg", request.param)


def _pair(node: Node, clock: Clock, budget: int | None = None) -> tuple[PodStatsCollector, PodStatsCollector]:
    """A collector holding descriptors (within ``budget``) and one holding none."""
    held = PodStatsCollector(node.tree.mounts, clock=clock, log=OnceLog(ListLogger()), max_open_files=budget)
    fresh = PodStatsCollector(node.tree.mounts, clock=clock, log=OnceLog(ListLogger()), max_open_files=0)
    return held, fresh


def _same(held: PodStatsCollector, fresh: PodStatsCollector, pods: list[Pod]) -> PodStatsSample:
    a, b = held.collect(pods), fresh.collect(pods)
    assert (a.usage, a.stats, a.missing) == (b.usage, b.stats, b.missing)
    assert fresh.open_files == 0
    return a


def test_descriptors_stay_flat_across_pod_churn(node: Node) -> None:
    """200 ticks of pods coming and going (cgroups removed with them): the process holds
    the files of the cgroups read that tick and no more, and none once they are gone."""
    rng = random.Random(7)
    clock = Clock()
    held, fresh = _pair(node, clock)
    baseline = _open_fds(node)
    per_cgroup = FILES_PER_CGROUP[node.version]
    made = 0
    for tick in range(200):
        for pod in list(node.pods.values()):
            if rng.random() < 0.1:
                node.remove(pod)
        while len(node.pods) < 12 and rng.random() < 0.5:
            made += 1
            node.add(f"u{made}", containers=rng.randint(0, 3))
        node.tick(float(tick))
        sample = _same(held, fresh, list(node.pods.values()))
        cgroups = sum(1 + len(s.containers) for s in sample.stats.values())
        assert cgroups == sum(len(node.rels(p)) for p in node.pods.values())
        # v1 has no PSI files: found absent on the first cgroup's first read, which holds
        # nothing then (the next tick holds it)
        assert held.open_files == per_cgroup * cgroups or (tick == 0 and node.version == 1)
        assert _open_fds(node) == baseline + held.open_files
        clock.t += 1
    assert made > 50  # the churn did come and go
    for pod in list(node.pods.values()):
        node.remove(pod)
    _same(held, fresh, [])
    assert (held.open_files, _open_fds(node)) == (0, baseline)


def test_close_gives_every_descriptor_back_and_reading_goes_on(node: Node) -> None:
    clock = Clock()
    held, fresh = _pair(node, clock)
    pods = [node.add("a"), node.add("b", containers=1)]
    baseline = _open_fds(node)
    _same(held, fresh, pods)
    _same(held, fresh, pods)
    assert held.open_files == FILES_PER_CGROUP[node.version] * 5
    held.close()
    assert (held.open_files, _open_fds(node)) == (0, baseline)
    clock.t += 2
    node.tick(3.0)
    assert _same(held, fresh, pods).usage["default/p-a"].cpu == pytest.approx(1.0)


def test_a_cgroup_removed_and_made_again_at_the_same_path_is_read_anew(node: Node) -> None:
    """The held descriptors of a removed cgroup read the old files (or ENODEV on kernfs):
    the new cgroup at the same path must be read, as a fresh open reads it."""
    clock = Clock()
    held, fresh = _pair(node, clock)
    pod = node.add("a", cpu=10.0)
    _same(held, fresh, [pod])
    clock.t += 1
    node.tick(12.0)
    assert _same(held, fresh, [pod]).usage["default/p-a"].cpu == pytest.approx(2.0)
    node.remove(pod, forget=False)
    node.make(pod, 1.0)  # the same paths, new files: a counter that starts again
    clock.t += 1
    again = _same(held, fresh, [pod]).stats["default/p-a"]
    assert again.pod.cpu_seconds == pytest.approx(1.0) and again.pod.cpu is None
    assert again.containers["c0"].cpu_seconds == pytest.approx(1.0)
    clock.t += 1
    node.tick(1.5)
    assert _same(held, fresh, [pod]).usage["default/p-a"].cpu == pytest.approx(0.5)
    node.remove(pod, forget=False)  # and gone for good: missing, its descriptors closed
    clock.t += 1
    assert _same(held, fresh, [pod]).missing == ("default/p-a",)
    assert held.open_files == 0


def test_the_budget_bounds_the_descriptors_not_the_figures(node: Node) -> None:
    """Beyond its budget a collector opens and closes the other cgroups' files each tick,
    with the same figures."""
    clock = Clock()
    budget = 2 * FILES_PER_CGROUP[node.version] + 1
    held, fresh = _pair(node, clock, budget)
    baseline = _open_fds(node)
    pods = [node.add(f"u{i}", containers=2) for i in range(4)]
    for tick in range(4):
        node.tick(1.0 + tick)
        _same(held, fresh, pods)
        assert held.open_files == 2 * FILES_PER_CGROUP[node.version]
        assert _open_fds(node) == baseline + held.open_files
        clock.t += 1


def test_the_default_budget_leaves_room_under_the_process_limit(node: Node) -> None:
    """With a soft RLIMIT_NOFILE of 512 a collector holds at most 256 descriptors (the
    rest is the process's), whatever the pods need; the figures are the same."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if _process_fds() > 200:
        pytest.fail(f"this process already holds {_process_fds()} descriptors: the test needs room under 512")
    pods = [node.add(f"u{i}", containers=3) for i in range(20)]  # 80 cgroups: 320 or 400 files
    resource.setrlimit(resource.RLIMIT_NOFILE, (512, hard))
    try:
        clock = Clock()
        held, fresh = _pair(node, clock)
        for tick in range(3):
            node.tick(1.0 + tick)
            _same(held, fresh, pods)
            assert 0 < held.open_files <= 256
            clock.t += 1
        held.close()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_what_was_said_of_a_cgroup_goes_with_it(node: Node) -> None:
    """Issue 32: a cgroup file that cannot be read is said once; once the pod went, the
    log keeps nothing of it (it would otherwise hold one entry per such pod for the life
    of the agent, up to its bound)."""
    logger = ListLogger()
    log = OnceLog(logger)
    collector = PodStatsCollector(node.tree.mounts, clock=Clock(), log=log)
    pods = [node.add(f"u{i}", containers=1) for i in range(10)]
    for pod in pods:  # a memory.stat missing in every pod cgroup
        (node.tree.dirs(node.rels(pod)[0])[-1] / "memory.stat").unlink()
    collector.collect(pods)
    collector.collect(pods)

    def missing() -> int:
        return sum(e == "cgroup file missing" for e, _f in logger.events)

    said = log.remembered  # and v1's "no per-cgroup PSI here", once, of the first pod
    assert missing() == 10 and said in (10, 11)
    for pod in pods[1:]:
        node.remove(pod)
    collector.collect(pods[:1])
    assert log.remembered == said - 9 and missing() == 10
