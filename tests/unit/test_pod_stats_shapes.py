"""The pod collector's figures do not depend on how a cgroup file is laid out.

A cgroup read before is read by a fast path that expects the kernel's layout (issue 32);
anything else is read again by the careful path. These tests write the same figures in
the kernel's layout and in other valid ones (lines reordered, a line the kernel adds on
some builds, no final newline), on the ticks where the fast path reads, and ask for the
same records; and garbage after good ticks is logged once and leaves that field empty.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from agent.model.objects import BURSTABLE
from collectors.files import OnceLog
from collectors.pod_stats import PodStatsCollector, PodStatsSample
from devtools.harness.fake_cgroups import Clock, FakeTree, ListLogger, make_pod

V1_POD = "kubepods/burstable/podu-1"
V2_POD = "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podu_1.slice"
POD = make_pod("web", "u-1", BURSTABLE, {"a": "containerd://c1", "b": "containerd://c2"})


def _tree(tmp: Path, version: int) -> tuple[FakeTree, str, list[str]]:
    tree = FakeTree(tmp / "cg", version)
    pod = V1_POD if version == 1 else V2_POD
    names = ["c1", "c2"] if version == 1 else ["cri-containerd-c1.scope", "cri-containerd-c2.scope"]
    cgroups = [pod, *(f"{pod}/{n}" for n in names)]
    for rel in cgroups:
        tree.add(rel)
    return tree, pod, cgroups


def _v1_odd(tree: FakeTree, rel: str) -> None:
    """The figures FakeTree.set wrote, in another valid layout."""
    cpu, acct, mem = (tree.root / c / rel for c in ("cpu", "cpuacct", "memory"))
    lines = (cpu / "cpu.stat").read_text().splitlines()
    (cpu / "cpu.stat").write_text("\n".join([lines[1], lines[0], *lines[2:]]) + "\n")
    (acct / "cpuacct.usage").write_text((acct / "cpuacct.usage").read_text().strip())
    stat = (mem / "memory.stat").read_text().splitlines()
    first = [line for line in stat if line.startswith("total_inactive_file ")]
    (mem / "memory.stat").write_text("\n".join(first + [s for s in stat if s not in first]) + "\n")


def _v2_odd(tree: FakeTree, rel: str) -> None:
    d = tree.root / rel
    lines = (d / "cpu.stat").read_text().splitlines()
    (d / "cpu.stat").write_text("\n".join([*lines[:3], "core_sched.force_idle_usec 0", *lines[3:]]) + "\n")
    stat = (d / "memory.stat").read_text().splitlines()
    last = [line for line in stat if line.startswith("inactive_file ")]
    (d / "memory.stat").write_text("\n".join([s for s in stat if s not in last] + last))
    for name in ("cpu.pressure", "memory.pressure"):
        psi = (d / name).read_text().splitlines()
        (d / name).write_text("\n".join(reversed(psi)) + "\n")


def _run(tmp: Path, version: int, reshape: Callable[[FakeTree, str], None] | None) -> list[PodStatsSample]:
    tree, _, cgroups = _tree(tmp, version)
    clock = Clock()
    collector = PodStatsCollector(tree.mounts, clock=clock, log=OnceLog(ListLogger()))
    samples = []
    for tick in range(4):
        for i, rel in enumerate(cgroups):
            tree.set(rel, 1.0 + tick * (0.3 + i / 10), periods=100 * tick, throttled=7 * tick * i,
                     usage=5000 + 100 * tick, inactive=1000 + 10 * i, psi=(1.5 + tick, 0.25 * i))  # fmt: skip
            if reshape is not None and tick >= 2:
                reshape(tree, rel)
        samples.append(collector.collect([POD]))
        clock.t += 2
    return samples


@pytest.mark.parametrize(("version", "reshape"), [(1, _v1_odd), (2, _v2_odd)])
def test_the_same_figures_in_any_valid_layout(tmp_path: Path, version: int,
                                              reshape: Callable[[FakeTree, str], None]) -> None:  # fmt: skip
    kernel = _run(tmp_path / "kernel", version, None)
    odd = _run(tmp_path / "odd", version, reshape)
    assert [s.usage for s in odd] == [s.usage for s in kernel]
    assert [s.stats["default/web"].pod for s in odd] == [s.stats["default/web"].pod for s in kernel]
    assert [s.stats["default/web"].containers for s in odd] == [s.stats["default/web"].containers for s in kernel]
    last = kernel[-1].stats["default/web"]
    assert last.pod.cpu == pytest.approx(0.15) and last.containers["b"].cpu == pytest.approx(0.25)
    assert last.pod.memory_working_set == 5300 - 1000
    assert last.containers["b"].throttling is not None
    assert last.containers["b"].throttling.throttled_ratio == pytest.approx(0.14)
    if version == 2:
        assert (last.pod.cpu_pressure, last.containers["b"].memory_pressure) == (4.5, 0.5)


@pytest.mark.parametrize("version", [1, 2])
def test_garbage_after_good_ticks_empties_that_field_once_logged(tmp_path: Path, version: int) -> None:
    tree, pod_rel, _ = _tree(tmp_path, version)
    clock, logger = Clock(), ListLogger()
    collector = PodStatsCollector(tree.mounts, clock=clock, log=OnceLog(logger))
    stat = (tree.root / "memory" / pod_rel / "memory.stat") if version == 1 else (tree.root / pod_rel / "memory.stat")
    figures = []
    for tick in range(5):
        tree.set(pod_rel, 1.0 + tick, usage=4000, inactive=1000)
        if tick in (2, 3):
            stat.write_text("total_inactive_file many\ninactive_file many\n")
        figures.append(collector.collect([POD]).usage["default/web"])
        clock.t += 1
    assert [u.memory for u in figures] == [3000, 3000, None, None, 3000]
    assert [u.cpu for u in figures] == [None, 1.0, 1.0, 1.0, 1.0]  # the other figures stay
    garbage = [f for e, f in logger.events if e == "garbage in cgroup file"]
    assert [str(f["path"]) for f in garbage] == [str(stat)]


def test_a_container_cgroup_that_appears_later_is_found_for_the_same_pod(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path / "cg", 2)
    tree.add(V2_POD)
    tree.add(f"{V2_POD}/cri-containerd-c1.scope")
    collector = PodStatsCollector(tree.mounts, clock=Clock())
    assert set(collector.collect([POD]).stats["default/web"].containers) == {"a"}
    assert set(collector.collect([POD]).stats["default/web"].containers) == {"a"}
    tree.add(f"{V2_POD}/cri-containerd-c2.scope")
    assert set(collector.collect([POD]).stats["default/web"].containers) == {"a", "b"}
