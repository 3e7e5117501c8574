"""Interference seen by the victims: which pods are latency-critical, their tasks' run-queue
wait, and the three lc_* node metrics, on fake cgroup and /proc trees."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from agent.model.latency import LATENCY_CRITICAL_LABEL, latency_critical
from agent.model.objects import BEST_EFFORT, GUARANTEED, Node, Pod
from agent.node.sampling import CountingLog, HostCollector
from collectors.interference import (
    NO_TASKS_VISIBLE,
    InterferenceCollector,
    TaskWaitReader,
    parse_run_delay,
    parse_tids,
)
from collectors.node_stats import NodeStatsCollector
from collectors.pod_stats import PodStatsCollector
from devtools.harness.fake_cgroups import Clock, FakeTree, ListLogger, make_pod

V1_LC = "kubepods/podlc-1"
V1_BE = "kubepods/besteffort/podbe-1"
V2_LC = "kubepods.slice/kubepods-podlc_1.slice"
V2_BE = "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podbe_1.slice"
LC = make_pod("web", "lc-1", GUARANTEED, {"main": "containerd://c1"})
BE = make_pod("batch", "be-1", BEST_EFFORT, {"main": "containerd://c2"})


def _labelled(pod: Pod, value: str = "true") -> Pod:
    return replace(pod, labels={LATENCY_CRITICAL_LABEL: value})


def test_labelled_pods_are_latency_critical_else_guaranteed_ones() -> None:
    assert latency_critical([LC, BE]) == [LC]
    labelled = _labelled(BE)
    assert latency_critical([LC, labelled]) == [labelled]
    assert latency_critical([LC, _labelled(BE, "false")]) == [LC]
    assert latency_critical([BE]) == []


def test_parsers() -> None:
    assert parse_tids(b"12\n0\n13\nx\n") == [12, 13]  # 0: a task of another pid namespace
    assert parse_run_delay(b"1000 2500 7\n") == 2500
    with pytest.raises(ValueError):
        parse_run_delay(b"1000\n")


class Procs:
    """A fake /proc holding ``<tid>/schedstat``."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def set(self, tid: int, run_delay_ms: float) -> None:
        (self.root / str(tid)).mkdir(parents=True, exist_ok=True)
        (self.root / str(tid) / "schedstat").write_text(f"999 {round(run_delay_ms * 1e6)} 5\n")

    def gone(self, tid: int) -> None:
        (self.root / str(tid) / "schedstat").unlink()


def _tasks(tree: FakeTree, rel: str, *tids: int) -> None:
    base = tree.root / "cpu" / rel if tree.version == 1 else tree.root / rel
    name = "tasks" if tree.version == 1 else "cgroup.threads"
    (base / name).write_text("".join(f"{t}\n" for t in tids))


def test_wait_ratio_sums_the_tasks_run_delay_over_wall_time(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path / "cg", 1)
    tree.add(V1_LC)
    tree.add(f"{V1_LC}/c1")
    _tasks(tree, V1_LC)
    _tasks(tree, f"{V1_LC}/c1", 10, 11)
    procs = Procs(tmp_path / "proc")
    procs.set(10, 100)
    procs.set(11, 50)
    clock = Clock()
    reader = TaskWaitReader(str(tree.root / "cpu"), 1, str(procs.root), clock=clock)
    rels = [f"{V1_LC}/c1"]
    assert reader.wait_ratio("lc-1", rels) is None  # the first sample gives no figure
    clock.t += 2.0
    procs.set(10, 400)  # waited 300 ms
    procs.set(11, 150)  # waited 100 ms
    assert reader.wait_ratio("lc-1", rels) == pytest.approx(20.0)  # 0.4 s over 2 s
    clock.t += 1.0
    _tasks(tree, f"{V1_LC}/c1", 10, 12, 13)  # 11 exited, 12 started, 13 reused a tid...
    procs.set(10, 450)  # +50 ms
    procs.set(12, 30)  # new: all of it
    procs.set(13, 20)
    assert reader.wait_ratio("lc-1", rels) == pytest.approx(10.0)
    clock.t += 1.0
    procs.set(13, 5)  # ...its counter went back: a new task with that tid
    procs.gone(12)  # exited between the list and the read: nothing
    assert reader.wait_ratio("lc-1", rels) == pytest.approx(0.5)


def test_no_visible_task_gives_no_figure_and_is_logged_once_not_counted(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path / "cg", 2)
    tree.add(f"{V2_LC}/c1")
    _tasks(tree, f"{V2_LC}/c1", 0, 0)  # v2 shows tasks of another pid namespace as 0
    logger = ListLogger()
    log = CountingLog(logger)
    clock = Clock()
    reader = TaskWaitReader(str(tree.root), 2, str(tmp_path / "proc"), clock=clock, log=log)
    for _ in range(3):
        assert reader.wait_ratio("lc-1", [f"{V2_LC}/c1"]) is None
        clock.t += 1
    assert [e for e, _ in logger.events] == [NO_TASKS_VISIBLE]
    assert logger.events[0][1].get("pod") == "lc-1" and "path" not in logger.events[0][1]
    assert log.drain() == 0
    assert reader.wait_ratio("lc-1", ["kubepods.slice/gone"]) is None  # a cgroup gone


def _v2_collector(tmp_path: Path) -> tuple[FakeTree, Procs, Clock, HostCollector]:
    tree = FakeTree(tmp_path / "cg", 2)
    for rel in (V2_LC, f"{V2_LC}/cri-containerd-c1.scope", V2_BE,
                f"{V2_BE}/cri-containerd-c2.scope"):  # fmt: skip
        tree.add(rel)
        _tasks(tree, rel)
    _tasks(tree, f"{V2_LC}/cri-containerd-c1.scope", 10)
    _tasks(tree, f"{V2_BE}/cri-containerd-c2.scope", 20)
    procs = Procs(tmp_path / "proc")
    procs.set(10, 0)
    procs.set(20, 0)
    clock = Clock()
    pod_log, node_log = CountingLog(ListLogger()), CountingLog(ListLogger())
    pod_stats = PodStatsCollector(tree.mounts, clock=clock, log=pod_log)
    node_stats = NodeStatsCollector(str(procs.root), clock=clock, log=node_log,
                                    cpu_count=lambda: 2)  # fmt: skip
    return tree, procs, clock, HostCollector(pod_stats, node_stats, pod_log, node_log)


def _tick(tree: FakeTree, s: float, lc: tuple[int, int, float], be: tuple[int, int, float]) -> None:
    for rel, (periods, throttled, psi) in ((V2_LC, lc), (V2_BE, be)):
        tree.set(rel, s, periods=periods, throttled=throttled, psi=(psi, 0.0))


def test_the_node_metrics_are_the_worst_latency_critical_pods(tmp_path: Path) -> None:
    tree, procs, clock, collector = _v2_collector(tmp_path)
    node = Node(name="n1", allocatable={"cpu": 2.0})
    _tick(tree, 1.0, (100, 0, 1.0), (100, 0, 50.0))
    first = collector.collect(node, [LC, BE]).metrics
    assert first["lc_cpu_pressure"] == 1.0  # the BestEffort pod's 50% is not a victim's
    assert "lc_cpu_wait_ratio" not in first and "lc_cpu_throttled_ratio" not in first
    clock.t += 1.0
    procs.set(10, 250)
    procs.set(20, 900)
    _tick(tree, 2.0, (200, 25, 7.5), (200, 100, 60.0))
    second = collector.collect(node, [LC, BE]).metrics
    assert second["lc_cpu_wait_ratio"] == pytest.approx(25.0)
    assert second["lc_cpu_throttled_ratio"] == pytest.approx(25.0)
    assert second["lc_cpu_pressure"] == 7.5
    # label the BestEffort pod: now it is the one protected, the Guaranteed pod is not
    clock.t += 1.0
    procs.set(10, 500)
    procs.set(20, 1000)
    _tick(tree, 3.0, (300, 75, 7.5), (300, 110, 60.0))
    third = collector.collect(node, [LC, _labelled(BE)]).metrics
    assert "lc_cpu_wait_ratio" not in third  # the first sample of its tasks
    assert third["lc_cpu_throttled_ratio"] == pytest.approx(10.0)
    assert third["lc_cpu_pressure"] == 60.0
    clock.t += 2.0
    procs.set(20, 1300)
    assert collector.collect(node, [LC, _labelled(BE)]).metrics["lc_cpu_wait_ratio"] == (
        pytest.approx(15.0)
    )


def test_v1_has_no_per_cgroup_psi_so_no_lc_cpu_pressure(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path / "cg", 1)
    for rel in (V1_LC, f"{V1_LC}/c1"):
        tree.add(rel)
        _tasks(tree, rel)
    clock = Clock()
    pod_stats = PodStatsCollector(tree.mounts, clock=clock)
    collector = InterferenceCollector(
        TaskWaitReader(str(tree.root / "cpu"), 1, str(tmp_path / "proc"), clock=clock)
    )
    tree.set(V1_LC, 1.0, periods=10)
    collector.collect([LC], pod_stats.collect([LC]).stats)
    clock.t += 1
    tree.set(V1_LC, 2.0, periods=20, throttled=5)
    metrics = collector.collect([LC], pod_stats.collect([LC]).stats)
    assert metrics == {"lc_cpu_throttled_ratio": pytest.approx(50.0)}


def test_the_no_visible_task_warning_names_the_pod_by_namespace_and_name(tmp_path: Path) -> None:
    """A uid alone tells an operator nothing: the collector's warning reads
    ``namespace/name (uid)``."""
    tree = FakeTree(tmp_path / "cg", 1)
    for rel in (V1_LC, f"{V1_LC}/c1"):
        tree.add(rel)
        _tasks(tree, rel)  # no task: none started, or another pid namespace
    logger = ListLogger()
    pod_stats = PodStatsCollector(tree.mounts, clock=Clock())
    collector = InterferenceCollector(
        TaskWaitReader(str(tree.root / "cpu"), 1, str(tmp_path / "proc"), log=CountingLog(logger))
    )
    tree.set(V1_LC, 1.0, periods=10)
    assert "lc_cpu_wait_ratio" not in collector.collect([LC], pod_stats.collect([LC]).stats)
    assert [(e, f.get("pod")) for e, f in logger.events] == [(NO_TASKS_VISIBLE, "default/web (lc-1)")]


def test_what_was_said_of_a_pod_goes_with_it(tmp_path: Path) -> None:
    """Issue 32: a latency-critical pod with no visible task is said once; once it left,
    nothing of it is kept (the log's memory included), and one that comes back is said
    again."""
    tree = FakeTree(tmp_path / "cg", 1)
    pods = [make_pod(f"web-{i}", f"lc-{i}", GUARANTEED, {"main": f"containerd://c{i}"}) for i in range(20)]
    for i in range(20):
        for rel in (f"kubepods/podlc-{i}", f"kubepods/podlc-{i}/c{i}"):
            tree.add(rel)
            _tasks(tree, rel)  # no task visible
    logger = ListLogger()
    log = CountingLog(logger)
    pod_stats = PodStatsCollector(tree.mounts, clock=Clock())
    collector = InterferenceCollector(TaskWaitReader(str(tree.root / "cpu"), 1, str(tmp_path / "proc"), log=log))
    collector.collect(pods, pod_stats.collect(pods).stats)
    assert len(logger.events) == 20 and log.remembered == 20
    collector.collect(pods[:1], pod_stats.collect(pods[:1]).stats)  # 19 went
    assert log.remembered == 1 and len(logger.events) == 20
    collector.collect(pods[:2], pod_stats.collect(pods[:2]).stats)  # one came back: said again
    assert [f.get("pod") for _e, f in logger.events[20:]] == ["default/web-1 (lc-1)"]
