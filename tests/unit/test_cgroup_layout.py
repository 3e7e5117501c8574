"""Mount detection (v1 / v2 / hybrid) and kubelet's pod -> cgroup naming."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.model.objects import BEST_EFFORT, BURSTABLE, GUARANTEED
from collectors.cgroups import detect_mounts, mounts_from, parse_mountinfo, probe_mounts
from collectors.layout import (
    CGROUPFS,
    SYSTEMD,
    PodCgroupLayout,
    container_names,
    kubepods_path,
    pod_path,
)
from devtools.harness.fake_cgroups import make_pod

HYBRID = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw,nsdelegate
this line is garbage
"""
V2 = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n"


def _dirs(root: Path, *names: str) -> None:
    for name in names:
        (root / name).mkdir(parents=True)


def test_mountinfo_parsing_keeps_cgroup_mounts_and_their_controllers() -> None:
    mounts = parse_mountinfo(HYBRID)
    assert [(m.fstype, m.mount_point) for m in mounts] == [
        ("cgroup", "/sys/fs/cgroup/cpu,cpuacct"),
        ("cgroup", "/sys/fs/cgroup/memory"),
        ("cgroup", "/sys/fs/cgroup/systemd"),
        ("cgroup2", "/sys/fs/cgroup/unified"),
    ]
    assert mounts[0].controllers == {"cpu", "cpuacct"}
    assert mounts[2].controllers == {"name=systemd"}


def test_mountinfo_octal_escapes_are_decoded() -> None:
    text = "1 2 0:1 / /host/my\\040cgroup rw - cgroup2 cgroup2 rw\n"
    assert parse_mountinfo(text)[0].mount_point == "/host/my cgroup"


def test_hybrid_host_rebased_onto_the_configured_root(tmp_path: Path) -> None:
    _dirs(tmp_path, "cpu,cpuacct", "memory", "systemd", "unified")
    (tmp_path / "unified" / "cgroup.controllers").write_text("\n")
    m = mounts_from(parse_mountinfo(HYBRID), str(tmp_path))
    assert m is not None
    assert m.mode == "hybrid" and m.version == 1
    assert m.controller_root("cpu") == str(tmp_path / "cpu,cpuacct")
    assert m.controller_root("cpuacct") == str(tmp_path / "cpu,cpuacct")
    assert m.controller_root("memory") == str(tmp_path / "memory")


def test_pure_v2_uses_the_unified_root_for_every_controller(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    m = mounts_from(parse_mountinfo(V2), str(tmp_path))
    assert m is not None
    assert (m.mode, m.version) == ("v2", 2)
    assert m.controller_root("cpu") == m.controller_root("memory") == str(tmp_path)
    assert m.controller_root("cpuacct") == str(tmp_path)


def test_v2_without_the_memory_controller_has_no_memory_root(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpu pids\n")
    m = mounts_from(parse_mountinfo(V2), str(tmp_path))
    assert m is not None and m.controller_root("memory") is None


def test_mount_points_already_under_the_root_win_over_rebasing(tmp_path: Path) -> None:
    host = tmp_path / "host"
    _dirs(host, "cpu", "cpuacct")
    _dirs(tmp_path / "own", "cpu")
    text = (
        f"1 0 0:1 / {tmp_path}/own/cpu rw - cgroup cgroup rw,cpu\n"
        f"2 0 0:2 / {host}/cpu rw - cgroup cgroup rw,cpu\n"
        f"3 0 0:3 / {host}/cpuacct rw - cgroup cgroup rw,cpuacct\n"
    )
    m = mounts_from(parse_mountinfo(text), str(host))
    assert m is not None and m.v1 == {"cpu": str(host / "cpu"), "cpuacct": str(host / "cpuacct")}


def test_namespaced_mounts_are_ignored(tmp_path: Path) -> None:
    _dirs(tmp_path, "cpu")
    text = "1 0 0:1 /kubepods/pod1 /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n"
    assert mounts_from(parse_mountinfo(text), str(tmp_path)) is None


def test_detect_reads_mountinfo_under_the_proc_root(tmp_path: Path) -> None:
    proc, cg = tmp_path / "proc", tmp_path / "cg"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "mountinfo").write_text(V2)
    cg.mkdir()
    (cg / "cgroup.controllers").write_text("cpu memory\n")
    m = detect_mounts(str(cg), str(proc))
    assert m.mode == "v2" and m.unified == str(cg)


def test_detect_falls_back_to_probing_the_tree(tmp_path: Path) -> None:
    cg = tmp_path / "cg"
    _dirs(cg, "cpu,cpuacct", "memory", "unified")
    (cg / "cpu").symlink_to(cg / "cpu,cpuacct")
    for d in ("cpu,cpuacct", "memory"):
        (cg / d / "cgroup.procs").write_text("")
    (cg / "unified" / "cgroup.controllers").write_text("")
    m = detect_mounts(str(cg), str(tmp_path / "no-proc"))
    assert m.mode == "hybrid"
    assert m.v1 == {"cpu": str(cg / "cpu,cpuacct"), "cpuacct": str(cg / "cpu,cpuacct"),
                    "memory": str(cg / "memory")}  # fmt: skip
    assert probe_mounts(str(tmp_path / "nothing")).mode == "none"


@pytest.mark.parametrize(
    ("driver", "qos", "expected"),
    [
        (CGROUPFS, GUARANTEED, "kubepods/pod1-2"),
        (CGROUPFS, BURSTABLE, "kubepods/burstable/pod1-2"),
        (CGROUPFS, BEST_EFFORT, "kubepods/besteffort/pod1-2"),
        (SYSTEMD, GUARANTEED, "kubepods.slice/kubepods-pod1_2.slice"),
        (
            SYSTEMD,
            BURSTABLE,
            "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1_2.slice",
        ),
        (
            SYSTEMD,
            BEST_EFFORT,
            "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1_2.slice",
        ),
    ],
)
def test_kubelet_pod_paths(driver: str, qos: str, expected: str) -> None:
    assert pod_path(driver, qos, "1-2") == expected


def test_custom_kubelet_cgroup_root() -> None:
    assert kubepods_path(CGROUPFS, "/kubelet") == "kubelet/kubepods"
    assert (
        pod_path(SYSTEMD, GUARANTEED, "u", "/kubelet.slice")
        == "kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-podu.slice"
    )


def test_container_names_by_runtime_and_driver() -> None:
    assert container_names(SYSTEMD, "containerd://abc")[0] == "cri-containerd-abc.scope"
    assert container_names(SYSTEMD, "cri-o://abc")[0] == "crio-abc.scope"
    assert container_names(CGROUPFS, "containerd://abc")[0] == "abc"
    assert container_names(CGROUPFS, "cri-o://abc")[0] == "crio-abc"
    assert container_names(SYSTEMD, "docker://abc")[0] == "docker-abc.scope"
    assert "crio-abc.scope" in container_names(SYSTEMD, "abc")  # no runtime prefix
    assert container_names(SYSTEMD, "") == ()


def test_systemd_crio_guaranteed_pod_is_located(tmp_path: Path) -> None:
    pod_dir = tmp_path / "kubepods.slice" / "kubepods-poda_b.slice"
    (pod_dir / "crio-c1.scope").mkdir(parents=True)
    (pod_dir / "crio-conmon-c1.scope").mkdir()
    pod = make_pod("g", "a-b", GUARANTEED, {"app": "cri-o://c1", "late": ""})
    layout = PodCgroupLayout(str(tmp_path))
    found = layout.locate(pod)
    assert layout.detect_driver() == SYSTEMD
    assert found is not None
    assert found.path == "kubepods.slice/kubepods-poda_b.slice"
    assert dict(found.containers) == {"app": f"{found.path}/crio-c1.scope"}


def test_cgroupfs_containerd_besteffort_pod_is_located(tmp_path: Path) -> None:
    (tmp_path / "kubepods" / "besteffort" / "podu1" / "c9").mkdir(parents=True)
    found = PodCgroupLayout(str(tmp_path)).locate(
        make_pod("be", "u1", BEST_EFFORT, {"app": "containerd://c9"})
    )
    assert found is not None and found.driver == CGROUPFS
    assert dict(found.containers) == {"app": "kubepods/besteffort/podu1/c9"}


def test_pod_in_another_qos_dir_than_declared_is_still_found(tmp_path: Path) -> None:
    (tmp_path / "kubepods" / "burstable" / "podu1").mkdir(parents=True)
    found = PodCgroupLayout(str(tmp_path)).locate(make_pod("p", "u1", GUARANTEED))
    assert found is not None and found.path == "kubepods/burstable/podu1"


def test_missing_pod_and_no_kubepods_tree_give_none(tmp_path: Path) -> None:
    layout = PodCgroupLayout(str(tmp_path))
    assert layout.locate(make_pod("p", "u1")) is None  # no kubepods tree yet
    (tmp_path / "kubepods").mkdir()
    assert layout.locate(make_pod("p", "u1")) is None
    assert layout.locate(make_pod("p", "")) is None


def test_restarted_container_gets_its_new_cgroup(tmp_path: Path) -> None:
    pod_dir = tmp_path / "kubepods" / "burstable" / "podu1"
    (pod_dir / "old").mkdir(parents=True)
    layout = PodCgroupLayout(str(tmp_path))
    first = layout.locate(make_pod("p", "u1", containers={"app": "containerd://old"}))
    assert first is not None and first.containers["app"].endswith("/old")
    (pod_dir / "new").mkdir()
    again = layout.locate(make_pod("p", "u1", containers={"app": "containerd://new"}))
    assert again is not None and again.containers["app"].endswith("/new")


def test_container_cgroup_appearing_later_is_picked_up(tmp_path: Path) -> None:
    pod_dir = tmp_path / "kubepods" / "burstable" / "podu1"
    pod_dir.mkdir(parents=True)
    layout = PodCgroupLayout(str(tmp_path))
    pod = make_pod("p", "u1", containers={"app": "containerd://c1"})
    first = layout.locate(pod)
    assert first is not None and dict(first.containers) == {}
    (pod_dir / "c1").mkdir()
    second = layout.locate(pod)
    assert second is not None and set(second.containers) == {"app"}


def test_bad_driver_name_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cgroup driver"):
        PodCgroupLayout(str(tmp_path), driver="cgroups")
