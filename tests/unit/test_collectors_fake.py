"""Pod and node collectors on fake cgroup and /proc trees (tmp directories)."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from agent.model.objects import BEST_EFFORT, BURSTABLE, GUARANTEED
from collectors.files import OnceLog, stat_field
from collectors.node_stats import NodeStatsCollector, meminfo_field
from collectors.pod_stats import PodStatsCollector
from collectors.psi import parse_psi, some_avg10
from devtools.harness.fake_cgroups import Clock, FakeTree, ListLogger, make_pod

V2_POD = "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podu_1.slice"
V1_POD = "kubepods/burstable/podu-1"


def _v2(tmp_path: Path) -> tuple[FakeTree, Clock, ListLogger, PodStatsCollector]:
    tree = FakeTree(tmp_path / "cg", 2)
    tree.add(V2_POD)
    tree.add(f"{V2_POD}/cri-containerd-c1.scope")
    tree.add(f"{V2_POD}/cri-containerd-c2.scope")
    clock, logger = Clock(), ListLogger()
    return tree, clock, logger, PodStatsCollector(tree.mounts, clock=clock, log=OnceLog(logger))


POD = make_pod("web", "u-1", BURSTABLE, {"a": "containerd://c1", "b": "containerd://c2"})


def test_v2_first_sample_has_no_rate_then_rates_working_set_throttling_psi(tmp_path: Path) -> None:
    tree, clock, _, collector = _v2(tmp_path)
    tree.set(V2_POD, 10.0, periods=100, throttled=10, usage=500, inactive=100, psi=(1.5, 0.5))
    tree.set(f"{V2_POD}/cri-containerd-c1.scope", 6.0, usage=300, inactive=50)
    first = collector.collect([POD])
    assert first.usage["default/web"].cpu is None  # no rate yet: not zero
    assert first.usage["default/web"].memory == 400
    assert first.stats["default/web"].pod.throttling is not None
    assert first.stats["default/web"].pod.throttling.throttled_ratio is None

    clock.t += 10
    tree.set(V2_POD, 15.0, periods=200, throttled=60, usage=900, inactive=100, psi=(2.5, 0.5))
    tree.set(f"{V2_POD}/cri-containerd-c1.scope", 9.0, usage=300, inactive=400)
    tree.set(f"{V2_POD}/cri-containerd-c2.scope", 2.0)
    second = collector.collect([POD])
    usage = second.usage["default/web"]
    assert usage.cpu == pytest.approx(0.5)
    assert usage.memory == 800
    assert usage.containers["a"].cpu == pytest.approx(0.3)
    assert usage.containers["a"].memory == 0  # inactive file above usage: floored
    assert usage.containers["b"].cpu == pytest.approx(0.2)
    pod = second.stats["default/web"].pod
    assert pod.throttling is not None and pod.throttling.throttled_ratio == pytest.approx(0.5)
    assert pod.throttling.nr_throttled == 60
    assert pod.cpu_pressure == 2.5 and pod.memory_pressure == 0.5
    assert usage.ext_cpu == 0.0  # the pod does not use the extended resource


def test_v1_separate_hierarchies(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path / "cg", 1)
    tree.add(V1_POD)
    tree.add(f"{V1_POD}/c1")
    clock = Clock()
    logger = ListLogger()
    collector = PodStatsCollector(tree.mounts, clock=clock, log=OnceLog(logger))
    pod = make_pod("web", "u-1", BURSTABLE, {"a": "containerd://c1"})
    tree.set(V1_POD, 1.0, periods=10, throttled=0, usage=2000, inactive=500)
    collector.collect([pod])
    clock.t += 2
    tree.set(V1_POD, 2.0, periods=30, throttled=5, usage=2000, inactive=500)
    tree.set(f"{V1_POD}/c1", 0.5)
    sample = collector.collect([pod])
    assert sample.usage["default/web"].cpu == pytest.approx(0.5)
    assert sample.usage["default/web"].containers["a"].cpu == pytest.approx(0.25)
    assert sample.usage["default/web"].memory == 1500
    stats = sample.stats["default/web"].pod
    assert stats.throttling is not None and stats.throttling.throttled_ratio == pytest.approx(0.25)
    assert stats.throttling.throttled_seconds == pytest.approx(5e-6)
    assert stats.cpu_pressure is None  # v1 has no per-cgroup PSI here
    # said once, what it means, the memory file (which feeds nothing) not at all
    assert [e for e, _ in logger.events if "PSI" in e] == [
        "no per-cgroup PSI here (cgroup v1, or a kernel without it): lc_cpu_pressure has no "
        "figure, and rules on it do not act"]


def test_guaranteed_crio_pod_under_systemd(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path / "cg", 2)
    rel = "kubepods.slice/kubepods-podg_1.slice"
    tree.add(rel)
    tree.add(f"{rel}/crio-x.scope")
    clock = Clock()
    collector = PodStatsCollector(tree.mounts, clock=clock)
    pod = make_pod("db", "g-1", GUARANTEED, {"db": "cri-o://x"}, namespace="prod")
    collector.collect([pod])
    clock.t += 1
    tree.set(f"{rel}/crio-x.scope", 0.75)
    tree.set(rel, 0.8)
    usage = collector.collect([pod]).usage["prod/db"]
    assert usage.cpu == pytest.approx(0.8)
    assert usage.containers["db"].cpu == pytest.approx(0.75)


def test_ext_cpu_is_the_cpu_of_pods_using_the_extended_resource(tmp_path: Path) -> None:
    tree, clock, _, collector = _v2(tmp_path)
    pod = make_pod("ext", "u-1", BEST_EFFORT, requests={"qos.waterline.io/ext-cpu": 2.0})
    collector.collect([pod])
    clock.t += 1
    tree.set(V2_POD, 1.5)
    assert collector.collect([pod]).usage["default/ext"].ext_cpu == pytest.approx(1.5)


def test_pod_without_a_cgroup_has_no_figure(tmp_path: Path) -> None:
    _, _, _, collector = _v2(tmp_path)
    sample = collector.collect([make_pod("ghost", "nope")])
    assert "default/ghost" not in sample.usage
    assert sample.missing == ("default/ghost",)


def test_missing_files_are_none_and_logged_once(tmp_path: Path) -> None:
    tree, clock, logger, collector = _v2(tmp_path)
    (tree.root / V2_POD / "memory.stat").unlink()
    (tree.root / V2_POD / "memory.current").write_text("lots\n")
    for _ in range(3):
        sample = collector.collect([POD])
        clock.t += 1
    assert sample.usage["default/web"].memory is None
    assert sample.usage["default/web"].cpu == pytest.approx(0.0)
    garbage = [e for e in logger.events if e[0] == "garbage in cgroup file"]
    assert len(garbage) == 1 and str(garbage[0][1]["path"]).endswith("memory.current")
    missing = [e for e in logger.events if e[0] == "cgroup file missing"]
    assert len(missing) == 1 and str(missing[0][1]["path"]).endswith("memory.stat")


def test_garbage_cpu_counter_gives_no_rate_but_keeps_other_figures(tmp_path: Path) -> None:
    tree, clock, logger, collector = _v2(tmp_path)
    tree.set(V2_POD, 1.0, usage=100)
    collector.collect([POD])
    clock.t += 1
    (tree.root / V2_POD / "cpu.stat").write_bytes(b"\x00\xffusage_usec twelve\n")
    sample = collector.collect([POD])
    assert sample.usage["default/web"].cpu is None
    assert sample.usage["default/web"].memory == 100
    assert any(e[0] == "garbage in cgroup file" for e in logger.events)


def test_counter_going_backwards_gives_no_rate_then_recovers(tmp_path: Path) -> None:
    tree, clock, _, collector = _v2(tmp_path)
    tree.set(V2_POD, 100.0)
    collector.collect([POD])
    clock.t += 1
    tree.set(V2_POD, 5.0)
    assert collector.collect([POD]).usage["default/web"].cpu is None
    clock.t += 1
    tree.set(V2_POD, 6.0)
    assert collector.collect([POD]).usage["default/web"].cpu == pytest.approx(1.0)


def test_restarted_container_starts_over_without_a_rate(tmp_path: Path) -> None:
    tree, clock, _, collector = _v2(tmp_path)
    collector.collect([POD])
    clock.t += 1
    tree.add(f"{V2_POD}/cri-containerd-c3.scope")
    tree.set(f"{V2_POD}/cri-containerd-c3.scope", 50.0)
    restarted = make_pod("web", "u-1", BURSTABLE, {"a": "containerd://c3", "b": "containerd://c2"})
    usage = collector.collect([restarted]).usage["default/web"]
    assert usage.containers["a"].cpu is None
    assert usage.containers["b"].cpu == pytest.approx(0.0)


def test_vanished_pod_cgroup_is_missing_not_a_crash(tmp_path: Path) -> None:
    tree, _, _, collector = _v2(tmp_path)
    collector.collect([POD])
    for d in sorted((tree.root / V2_POD).rglob("*"), reverse=True):
        d.unlink() if d.is_file() else d.rmdir()
    (tree.root / V2_POD).rmdir()
    assert collector.collect([POD]).missing == ("default/web",)


def test_psi_parsing() -> None:
    psi = parse_psi("some avg10=3.72 avg60=0.93 avg300=0.36 total=2690513\n")
    assert psi.some.avg10 == 3.72 and psi.full is None
    with pytest.raises(ValueError):
        parse_psi("full avg10=1 avg60=1 avg300=1 total=1\n")
    with pytest.raises(ValueError):
        parse_psi("some avg10=x\n")


@pytest.mark.parametrize(
    "text",
    [
        "some avg10=3.72 avg60=0.93 avg300=0.36 total=2690513\nfull avg10=1.00 avg60=0 avg300=0 total=5\n",
        "full avg10=1.00 avg60=0 avg300=0 total=5\nsome avg10=0.00 avg60=0 avg300=0 total=0\n",
        "some avg10=12.50 avg60=0.00 avg300=0.00 total=1\n",
    ],
)
def test_the_per_pod_psi_reader_agrees_with_the_full_parser(text: str) -> None:
    assert some_avg10(text.encode()) == parse_psi(text).some.avg10


@pytest.mark.parametrize("data", [b"", b"full avg10=1 avg60=1 avg300=1 total=1\n", b"some avg10=x avg60=0",
                                  b"xsome avg10=1.0 avg60=0", b"garbage"])  # fmt: skip
def test_the_per_pod_psi_reader_refuses_what_is_not_psi(data: bytes) -> None:
    with pytest.raises(ValueError):
        some_avg10(data)


STAT = "cpu  {busy} 0 0 {idle} 0 0 0 0 0 0\ncpu0 0 0 0 0 0 0 0 0 0 0\ncpu1 0 0 0 0 0 0 0 0 0 0\n"
MEMINFO = "MemTotal: 1000 kB\nMemFree: 200 kB\nMemAvailable: 500 kB\nInactive(file): 300 kB\n"


def _proc(tmp_path: Path, busy: int, idle: int, pressure: bool = True) -> Path:
    proc = tmp_path / "proc"
    (proc / "pressure").mkdir(parents=True, exist_ok=True)
    (proc / "stat").write_text(STAT.format(busy=busy, idle=idle))
    (proc / "meminfo").write_text(MEMINFO)
    (proc / "loadavg").write_text("1.50 0.50 0.25 2/100 42\n")
    if pressure:
        (proc / "pressure" / "cpu").write_text("some avg10=12.5 avg60=0 avg300=0 total=1\n")
        (proc / "pressure" / "memory").write_text(
            "some avg10=0.25 avg60=0 avg300=0 total=1\nfull avg10=0 avg60=0 avg300=0 total=0\n"
        )
    return proc


def test_node_first_sample_has_no_cpu_then_cores_and_utilization(tmp_path: Path) -> None:
    proc = _proc(tmp_path, busy=100, idle=100)
    collector = NodeStatsCollector(str(proc), clock=Clock(), cpu_count=lambda: 2)
    first = collector.collect()
    assert "cpu_total_usage" not in first.metrics
    assert first.metrics["memory_total_usage"] == 500 * 1024
    assert first.metrics["memory_total_utilization"] == pytest.approx(50.0)
    assert first.metrics["cpu_pressure"] == 12.5 and first.metrics["memory_pressure"] == 0.25
    assert first.load == (1.5, 0.5, 0.25) and first.cpus == 2
    _proc(tmp_path, busy=250, idle=150)  # 150 busy of 200 jiffies on 2 cpus
    second = collector.collect(allocatable_cpu=1.5, allocatable_memory=1000 * 1024)
    assert second.metrics["cpu_total_usage"] == pytest.approx(1.5)
    assert second.metrics["cpu_total_utilization"] == pytest.approx(100.0)
    assert second.metrics["memory_total_utilization"] == pytest.approx(50.0)


def test_node_without_psi_or_with_garbage_leaves_those_metrics_out(tmp_path: Path) -> None:
    proc = _proc(tmp_path, busy=1, idle=1, pressure=False)
    (proc / "stat").write_text("intr 1 2 3\n")
    logger = ListLogger()
    stats = NodeStatsCollector(str(proc), clock=Clock(), log=OnceLog(logger)).collect()
    assert set(stats.metrics) == {"memory_total_usage", "memory_total_utilization"}
    assert stats.cpus is None
    events = {e[0] for e in logger.events}
    assert {"no PSI file", "garbage in proc file"} <= events


def test_node_with_no_proc_at_all_has_no_metrics(tmp_path: Path) -> None:
    stats = NodeStatsCollector(str(tmp_path / "none"), clock=Clock()).collect()
    assert stats.metrics == {} and stats.load is None


def test_stat_field_matches_whole_keys_only() -> None:
    data = b"total_inactive_file 7\ninactive_file 3\nnr_periods_x 1\nnr_periods 9"
    assert stat_field(data, b"inactive_file") == 3
    assert stat_field(data, b"total_inactive_file") == 7
    assert stat_field(data, b"nr_periods") == 9
    with pytest.raises(ValueError):
        stat_field(data, b"active_file")


def test_meminfo_field_reads_one_line_in_bytes() -> None:
    data = b"MemTotal:  1000 kB\nMemFree: 200 kB\nInactive(file): 7\nHugePages_Total: x\n"
    assert meminfo_field(data, b"MemTotal") == 1000 * 1024
    assert meminfo_field(data, b"MemFree") == 200 * 1024
    assert meminfo_field(data, b"Inactive(file)") == 7  # no unit: bytes
    assert meminfo_field(data, b"Free") is None  # whole keys only
    assert meminfo_field(data, b"HugePages_Total") is None  # garbled value
    assert meminfo_field(data, b"MemAvailable") is None


def test_node_meminfo_without_memfree_gives_no_memory_figure(tmp_path: Path) -> None:
    proc = _proc(tmp_path, busy=1, idle=1)
    (proc / "meminfo").write_text("MemTotal: 1000 kB\nInactive(file): 300 kB\n")
    logger = ListLogger()
    collector = NodeStatsCollector(str(proc), clock=Clock(), log=OnceLog(logger),
                                   cpu_count=lambda: 2)
    stats = collector.collect()
    assert "memory_total_usage" not in stats.metrics and stats.memory_total is None
    assert ("meminfo without a field", str(proc / "meminfo")) in {
        (e[0], e[1]["path"]) for e in logger.events}
    assert str(proc) == psutil.PROCFS_PATH  # CPU times come from the same /proc
