"""The ``lc_*`` reader's held descriptors (issue 32) on fake cgroup and /proc trees.

The run-queue wait reader reads a task's ``schedstat`` (and v2's ``cgroup.threads``) read
before through a descriptor held open across ticks, as the pod collector reads its cgroup
files. These tests ask that it changes no figure and no log line (a reader holding
nothing, every file opened and closed each tick, reads the same in lockstep through tasks
coming, going, reusing ids, garbage and cgroups removed); that v1's ``tasks`` is never
held (the kernel answers a held one from a list up to a second old); that a file not read
in a tick is closed at its end; and that the pod collector and this reader together hold
no more than the one bound they share.
"""

from __future__ import annotations

import gc
import os
import random
import shutil
from pathlib import Path

import pytest

from agent.model.objects import GUARANTEED, Node, Pod
from agent.node.sampling import CountingLog, HostCollector
from collectors.files import FileBudget, OnceLog
from collectors.interference import TaskWaitReader, read_whole
from collectors.layout import CGROUPFS, SYSTEMD, container_names, pod_path
from collectors.node_stats import NodeStatsCollector
from collectors.pod_stats import PodStatsCollector
from devtools.harness.fake_cgroups import Clock, FakeTree, ListLogger, make_pod


def _held_under(root: Path) -> list[str]:
    """What the process holds open under ``root`` (other tests' threads open sockets
    meanwhile: only this tree's files are counted)."""
    gc.collect()
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(f"{root}/"):
            out.append(target)
    return out


class Tasks:
    """A fake /proc and the task lists of some container cgroups, changed at random."""

    def __init__(self, tmp: Path, version: int, cgroups: int) -> None:
        self.tree = FakeTree(tmp / "cg", version)
        self.version = version
        self.proc = tmp / "proc"
        self.proc.mkdir()
        self.base = self.tree.root / "cpu" if version == 1 else self.tree.root
        self.rels = [f"kubepods/pod{i}/c{i}" for i in range(cgroups)]
        self.members: dict[str, list[int]] = {}
        self.next_tid = 100
        for rel in self.rels:
            self.make(rel)

    def make(self, rel: str) -> None:
        self.tree.add(rel)
        tids = [self.new_task() for _ in range(3)]
        self.members[rel] = tids
        self.write_list(rel)

    def new_task(self, tid: int | None = None) -> int:
        if tid is None:
            tid, self.next_tid = self.next_tid, self.next_tid + 1
        self.schedstat(tid, 0)
        return tid

    def schedstat(self, tid: int, delay: int, text: str | None = None) -> None:
        d = self.proc / str(tid)
        d.mkdir(exist_ok=True)
        (d / "schedstat").write_text(text if text is not None else f"999 {delay} 3\n")

    def write_list(self, rel: str) -> None:
        name = "tasks" if self.version == 1 else "cgroup.threads"
        (self.base / rel / name).write_text("".join(f"{t}\n" for t in self.members[rel]))

    def step(self, rng: random.Random) -> None:
        """One tick of the node: run delays grow; tasks start, exit (before or after the
        list is read), reuse an id, turn to garbage, are replaced by another file; a
        cgroup goes and comes back."""
        for rel, tids in self.members.items():
            if not (self.base / rel).is_dir():
                continue
            for tid in tids:
                path = self.proc / str(tid) / "schedstat"
                if path.exists():
                    delay = int(path.read_text().split()[1]) if path.read_text()[0].isdigit() else 0
                    self.schedstat(tid, delay + rng.randrange(0, 5_000_000))
        roll = rng.random()
        rel = rng.choice(self.rels)
        tids = self.members[rel]
        if not (self.base / rel).is_dir():  # gone: it comes back, some time
            if roll < 0.3:
                self.make(rel)
        elif roll < 0.15:
            tids.append(self.new_task())
            self.write_list(rel)
        elif roll < 0.25 and tids:  # exits and leaves the list
            gone = tids.pop(rng.randrange(len(tids)))
            shutil.rmtree(self.proc / str(gone), ignore_errors=True)
            self.write_list(rel)
        elif roll < 0.35 and tids:  # exits between the list and its read
            shutil.rmtree(self.proc / str(rng.choice(tids)), ignore_errors=True)
        elif roll < 0.45 and tids:  # the id taken by a new task: its counter starts over
            tid = rng.choice(tids)
            shutil.rmtree(self.proc / str(tid), ignore_errors=True)
            self.new_task(tid)
        elif roll < 0.5 and tids:  # a new file at the same path (another inode)
            tid = rng.choice(tids)
            path = self.proc / str(tid) / "schedstat"
            if path.exists():
                (path.parent / "new").write_text(f"999 {rng.randrange(10**9)} 3\n")
                os.replace(path.parent / "new", path)
        elif roll < 0.55 and tids:
            self.schedstat(rng.choice(tids), 0, text="garbage\n")
        elif roll < 0.6:  # the cgroup goes (its pod restarted)
            for d in self.tree.dirs(rel):
                shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("version", [1, 2])
def test_held_reads_give_the_same_figures_and_logs_as_fresh_opens(tmp_path: Path, version: int) -> None:
    rng = random.Random(32 + version)
    tasks = Tasks(tmp_path, version, cgroups=4)
    clock = Clock()
    held_log, fresh_log = ListLogger(), ListLogger()
    held = TaskWaitReader(str(tasks.base), version, str(tasks.proc), clock=clock, log=OnceLog(held_log),
                          budget=FileBudget(10_000))  # fmt: skip
    fresh = TaskWaitReader(str(tasks.base), version, str(tasks.proc), clock=clock, log=OnceLog(fresh_log),
                           budget=FileBudget(0))  # fmt: skip
    pods = {f"pod{i}": [rel] for i, rel in enumerate(tasks.rels)}
    seen = set()
    for _ in range(300):
        for key, rels in pods.items():
            a, b = held.wait_ratio(key, rels), fresh.wait_ratio(key, rels)
            assert a == b
            seen.add(a is not None)
        held.end_tick()
        fresh.end_tick()
        assert held_log.events == fresh_log.events
        assert fresh.open_files == 0
        # the files of the tasks read this tick, and no more
        assert held.open_files <= sum(len(t) for t in tasks.members.values()) + len(tasks.rels)
        tasks.step(rng)
        clock.t += 1.0
    assert seen == {True, False}  # figures and first samples both came
    assert any(e == "schedstat unreadable" for e, _ in held_log.events)  # the garbage was read
    assert held.open_files > 0
    lists = [p for p in _held_under(tmp_path) if p.endswith(("/tasks", "/cgroup.threads"))]
    assert bool(lists) == (version == 2)  # v1's tasks: opened each tick, never held
    held.close()
    assert _held_under(tmp_path) == []


def test_a_file_not_read_in_a_tick_is_closed_at_its_end(tmp_path: Path) -> None:
    tasks = Tasks(tmp_path, 2, cgroups=2)
    reader = TaskWaitReader(str(tasks.base), 2, str(tasks.proc), clock=Clock(), budget=FileBudget(100))
    for rels in (tasks.rels, tasks.rels[:1], []):
        for i, rel in enumerate(rels):
            reader.wait_ratio(f"pod{i}", [rel])
        reader.end_tick()
        # one list and three schedstat files a cgroup read this tick
        assert reader.open_files == 4 * len(rels)
        assert len(_held_under(tmp_path)) == 4 * len(rels)


def test_the_budget_bounds_what_is_held_and_never_a_figure(tmp_path: Path) -> None:
    tasks = Tasks(tmp_path, 2, cgroups=3)
    clock = Clock()
    small = TaskWaitReader(str(tasks.base), 2, str(tasks.proc), clock=clock, budget=FileBudget(5))
    fresh = TaskWaitReader(str(tasks.base), 2, str(tasks.proc), clock=clock, budget=FileBudget(0))
    rng = random.Random(1)
    counts = []
    for _ in range(20):
        for i, rel in enumerate(tasks.rels):
            assert small.wait_ratio(f"pod{i}", [rel]) == fresh.wait_ratio(f"pod{i}", [rel])
        small.end_tick()
        counts.append(small.open_files)
        assert small.open_files == small.files.budget.held <= 5
        tasks.step(rng)
        clock.t += 1.0
    assert counts[0] == 5  # 12 files read: the first 5 held


def _lc_pod(i: int) -> Pod:
    return make_pod(f"web{i}", f"lc{i}", GUARANTEED, {"main": f"containerd://lc{i}c"})


@pytest.mark.parametrize("version", [1, 2])
def test_the_pod_collector_and_the_lc_reader_share_one_bound(tmp_path: Path, version: int) -> None:
    """Three latency-critical pods: 2 cgroups a pod, 3 tasks a container. With room for
    all, both hold all their files; with less, the two together hold no more than the
    bound (first come, first served: the pod collector a cgroup's files at a time, the
    reader a file at a time, so the bound is full or the reader has all it reads)."""
    tree = FakeTree(tmp_path / "cg", version)
    driver = CGROUPFS if version == 1 else SYSTEMD
    base = tree.root / "cpu" if version == 1 else tree.root
    proc = tmp_path / "proc"
    pods = [_lc_pod(i) for i in range(3)]
    tid = 100
    for pod in pods:
        rel = pod_path(driver, pod.qos_class, pod.uid)
        crel = f"{rel}/{container_names(driver, pod.containers[0].container_id)[0]}"
        for r in (rel, crel):
            tree.add(r)
            tree.set(r, 1.0, psi=(1.0, 0.0) if version == 2 else None)
        (base / rel / ("tasks" if version == 1 else "cgroup.threads")).write_text("")
        (base / crel / ("tasks" if version == 1 else "cgroup.threads")).write_text(
            "".join(f"{tid + k}\n" for k in range(3)))  # fmt: skip
        for k in range(3):
            (proc / str(tid + k)).mkdir(parents=True)
            (proc / str(tid + k) / "schedstat").write_text("1 2 3\n")
        tid += 3
    (proc / "stat").write_text("cpu  1 0 1 100 0 0 0 0 0 0\n")
    per_cgroup = 4 if version == 1 else 5
    pod_files = 2 * 3 * per_cgroup
    lc_files = 3 * 3 + (3 if version == 2 else 0)
    node = Node(name="n", allocatable={"cpu": 2.0})
    for limit in (1000, pod_files + 4, 7, 0):
        budget = FileBudget(limit)
        clock = Clock()
        pod_log, node_log = CountingLog(ListLogger()), CountingLog(ListLogger())
        pod_stats = PodStatsCollector(tree.mounts, clock=clock, log=pod_log, budget=budget)
        node_stats = NodeStatsCollector(str(proc), clock=clock, log=node_log, cpu_count=lambda: 2)
        collector = HostCollector(pod_stats, node_stats, pod_log, node_log)
        for _ in range(3):
            collector.collect(node, pods)
            clock.t += 1.0
        waits = collector.interference.waits
        assert budget.held == pod_stats.open_files + waits.open_files <= limit
        assert pod_stats.open_files % per_cgroup == 0
        if limit >= pod_files + lc_files:
            assert (pod_stats.open_files, waits.open_files) == (pod_files, lc_files)
        else:
            assert waits.open_files == lc_files or budget.held == limit
        collector.hold_files(0)  # maxOpenFiles edited to 0: nothing held from now on
        assert (pod_stats.open_files, waits.open_files, budget.held) == (0, 0, 0)
        collector.collect(node, pods)
        assert budget.held == 0
        pod_stats.close()
        waits.close()


@pytest.mark.parametrize("size", [0, 10, 4095, 4096, 4097, 70_000, 200_000])
def test_a_file_is_read_whole_up_to_its_bound_as_one_read_would(tmp_path: Path, size: int) -> None:
    """A task list is read by a small first read and the rest only when it is longer:
    the same bytes as one read of the whole bound (1 MiB), which cost an allocation of
    that size every read; cut at the bound as that read was."""
    path = tmp_path / "tasks"
    path.write_bytes(bytes(48 + i % 10 for i in range(size)))
    fd = os.open(path, os.O_RDONLY)
    try:
        for limit in (256, 100_000, 1 << 20):
            assert read_whole(fd, limit) == os.pread(fd, limit, 0)
            assert read_whole(fd, limit) == os.pread(fd, limit, 0)  # again, from offset 0
    finally:
        os.close(fd)


def test_a_long_task_list_gives_every_task(tmp_path: Path) -> None:
    tasks = Tasks(tmp_path, 2, cgroups=1)
    rel = tasks.rels[0]
    tasks.members[rel] = [tasks.new_task() for _ in range(3000)]  # ~12 KiB of ids
    tasks.write_list(rel)
    for budget in (0, 10_000):
        reader = TaskWaitReader(str(tasks.base), 2, str(tasks.proc), clock=Clock(), budget=FileBudget(budget))
        assert reader._tids([rel]) == tasks.members[rel]
        assert reader._tids([rel]) == tasks.members[rel]  # held, read again
        reader.close()
