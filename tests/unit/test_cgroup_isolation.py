"""The CPU isolator on fake cgroup trees (executors.cgroup_isolation): which files it
writes on v1 and v2 (cpu.idle, cpu.shares / cpu.weight, cpu.cfs_burst_us / cpu.max.burst),
what it records before it writes and writes back, what it does without the kernel's
files, after a restart and with an unreadable state file; the in-place resize as the pod
object shows it (agent.model.objects.resize). A fake tree cannot refuse a write as the
kernel does; tests/integration/test_cpu_isolation_v1.py checks the kernel's facts."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from agent.model.objects import BEST_EFFORT, GUARANTEED, Container, Pod, parse_node, parse_pod
from agent.model.objects.resize import resize_under_way
from agent.model.policy import PolicySet
from agent.node.holding import HeldKeeper
from agent.node.loop import Objects
from agent.node.resume import Resume
from agent.node.tick import NodeBrain
from devtools.harness.fake_cgroups import FakeTree
from engine.state import NodeState
from executors.adoption import adopt_marks
from executors.cgroup_isolation import CgroupIsolator, spec_weight
from executors.isolation_state import IsolationState
from tests.builders import node, pod

KUBEPODS = "kubepods"
BE_REL = f"{KUBEPODS}/besteffort/podbe"
WEB_REL = f"{KUBEPODS}/podweb"


def tree_with_pods(tmp_path: Path, version: int, files: bool = True) -> FakeTree:
    """kubepods with a BestEffort pod (weight 2 / 1) and a Guaranteed web pod (quota 0.5)
    of one container each; the isolation files where ``files``."""
    tree = FakeTree(tmp_path / "cg", version)
    weight_file, burst_file = ("cpu.shares", "cpu.cfs_burst_us") if version == 1 else ("cpu.weight", "cpu.max.burst")
    cpu = tree.root / "cpu" if version == 1 else tree.root
    tree.add(KUBEPODS)
    tree.add(f"{KUBEPODS}/besteffort")
    tree.add(BE_REL)
    tree.add(f"{BE_REL}/c-be")
    tree.add(WEB_REL, quota="50000")
    tree.add(f"{WEB_REL}/c-web", quota="50000")
    for rel, weight in ((KUBEPODS, "1024" if version == 1 else "100"), (BE_REL, "2" if version == 1 else "1"),
                        (WEB_REL, "512" if version == 1 else "20")):  # fmt: skip
        (cpu / rel / weight_file).write_text(weight + "\n")
    if files:
        for rel in (KUBEPODS, f"{KUBEPODS}/besteffort", BE_REL, f"{BE_REL}/c-be", WEB_REL, f"{WEB_REL}/c-web"):
            (cpu / rel / "cpu.idle").write_text("0\n")
            (cpu / rel / burst_file).write_text("0\n")
    return tree


def cpu_file(tree: FakeTree, rel: str, name: str) -> str:
    base = tree.root / "cpu" if tree.version == 1 else tree.root
    return (base / rel / name).read_text().strip()


BE = Pod("default", "be", "be", qos_class=BEST_EFFORT,
         containers=(Container("main", container_id="containerd://c-be"),))  # fmt: skip
WEB = Pod("default", "web", "web", qos_class=GUARANTEED, requests={"cpu": 0.5}, limits={"cpu": 0.5},
          containers=(Container("main", {"cpu": 0.5}, {"cpu": 0.5}, "containerd://c-web"),))  # fmt: skip


def isolator(tree: FakeTree, state: Path) -> CgroupIsolator:
    return CgroupIsolator(tree.mounts, IsolationState(str(state)))


@pytest.mark.parametrize(("version", "weight", "original", "burst"),
                         [(1, "cpu.shares", "2", "cpu.cfs_burst_us"), (2, "cpu.weight", "1", "cpu.max.burst")])
def test_idle_and_burst_write_the_versions_files_and_write_back_what_was_there(
    tmp_path: Path, version: int, weight: str, original: str, burst: str
) -> None:
    tree = tree_with_pods(tmp_path, version)
    iso = isolator(tree, tmp_path / "state")
    assert iso.support.idle and iso.support.burst
    assert iso.mark_idle(BE, "pol")
    assert cpu_file(tree, BE_REL, "cpu.idle") == "1"
    saved = json.loads((tmp_path / "state" / "cpu-isolation.json").read_text())["pods"]["be"]
    assert saved["idle"] == {"cgroup": BE_REL, "original": original} and saved["idleOwner"] == "pol"
    assert cpu_file(tree, KUBEPODS, "cpu.idle") == "0"  # never the kubepods or QoS cgroups
    assert cpu_file(tree, f"{KUBEPODS}/besteffort", "cpu.idle") == "0"
    # the kernel leaves the default weight when cpu.idle goes back to 0
    (tree.root / ("cpu" if version == 1 else "") / BE_REL / weight).write_text("1024\n" if version == 1 else "100\n")
    assert iso.release_idle(BE)
    assert cpu_file(tree, BE_REL, "cpu.idle") == "0" and cpu_file(tree, BE_REL, weight) == original
    assert iso.held() == {}
    # burst: 40% of each quota, on the pod's cgroup and its container's
    assert iso.set_burst(WEB, 40.0, "pol")
    assert cpu_file(tree, WEB_REL, burst) == "20000" and cpu_file(tree, f"{WEB_REL}/c-web", burst) == "20000"
    assert iso.release_burst(WEB)
    assert cpu_file(tree, WEB_REL, burst) == "0" and cpu_file(tree, f"{WEB_REL}/c-web", burst) == "0"
    assert not (tmp_path / "state" / "cpu-isolation.json").exists() or iso.held() == {}


def test_a_restarted_isolator_takes_the_recorded_weight_never_the_one_it_reads(tmp_path: Path) -> None:
    """While cpu.idle is 1 the weight file reads the idle weight (3 on v1): a restarted
    agent must write back what it recorded before its mark."""
    tree = tree_with_pods(tmp_path, 1)
    assert isolator(tree, tmp_path / "state").mark_idle(BE)
    (tree.root / "cpu" / BE_REL / "cpu.shares").write_text("3\n")  # what the kernel shows now
    again = isolator(tree, tmp_path / "state")
    assert again.mark_idle(BE)  # in force: nothing re-read, nothing re-recorded
    assert again.held()["be"].idle is not None and again.held()["be"].idle.original == "2"
    assert again.release_all() == ["be"]
    assert cpu_file(tree, BE_REL, "cpu.shares") == "2" and cpu_file(tree, BE_REL, "cpu.idle") == "0"


def test_a_reverted_mark_is_written_again_with_the_weight_then_in_force(tmp_path: Path) -> None:
    tree = tree_with_pods(tmp_path, 2)
    iso = isolator(tree, tmp_path / "state")
    assert iso.mark_idle(BE)
    (tree.root / BE_REL / "cpu.idle").write_text("0\n")  # a daemon-reload put the unit back
    (tree.root / BE_REL / "cpu.weight").write_text("7\n")
    assert iso.mark_idle(BE)
    assert cpu_file(tree, BE_REL, "cpu.idle") == "1" and iso.held()["be"].idle.original == "7"


def test_reverted_marks_are_counted_each_time_and_logged_once_per_pod_and_class(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = tree_with_pods(tmp_path, 2)
    iso = isolator(tree, tmp_path / "state")
    counted: list[str] = []
    keeper = HeldKeeper(NodeBrain(), lambda control, n: counted.extend([control] * n))
    iso.on_reverted = keeper.reverted_mark  # the agent's one keeper counts and says
    assert iso.mark_idle(BE) and iso.set_burst(WEB, 50.0)
    assert iso.mark_idle(BE) and iso.set_burst(WEB, 50.0)  # held: nothing to count
    assert counted == []
    for _reload in range(2):  # two daemon-reloads put both units back
        (tree.root / BE_REL / "cpu.idle").write_text("0\n")
        for rel in (WEB_REL, f"{WEB_REL}/c-web"):
            (tree.root / rel / "cpu.max.burst").write_text("0\n")
        assert iso.mark_idle(BE) and iso.set_burst(WEB, 50.0)
    assert counted == ["cpu_idle", "cpu_burst", "cpu_burst"] * 2  # the pod's two cgroups
    assert cpu_file(tree, BE_REL, "cpu.idle") == "1" and cpu_file(tree, f"{WEB_REL}/c-web", "cpu.max.burst") == "25000"
    said = capsys.readouterr().out
    assert said.count("cpu_idle mark found reverted") == 1 and said.count("cpu_burst mark found reverted") == 1
    (tree.root / WEB_REL / "c-web" / "cpu.max").write_text("80000 100000\n")
    assert iso.set_burst(WEB, 50.0) and counted.count("cpu_burst") == 4  # a new quota: not a revert


def test_burst_follows_the_quota_and_a_new_container_gets_its_own_record(tmp_path: Path) -> None:
    tree = tree_with_pods(tmp_path, 1)
    iso = isolator(tree, tmp_path / "state")
    assert iso.set_burst(WEB, 100.0)
    (tree.root / "cpu" / WEB_REL / "c-web" / "cpu.cfs_quota_us").write_text("30000\n")  # a resize
    assert iso.set_burst(WEB, 100.0)
    assert cpu_file(tree, f"{WEB_REL}/c-web", "cpu.cfs_burst_us") == "30000"
    assert iso.held()["web"].burst["main"].original == "0"  # recorded once, before the first write


def test_no_quota_no_burst_and_no_cgroup_no_mark(tmp_path: Path) -> None:
    tree = tree_with_pods(tmp_path, 1)
    iso = isolator(tree, tmp_path / "state")
    assert not iso.set_burst(BE, 50.0)  # unlimited: nothing to borrow from
    assert not iso.mark_idle(Pod("default", "gone", "gone"))
    assert iso.held() == {}


def test_a_gone_cgroup_counts_as_released(tmp_path: Path) -> None:
    tree = tree_with_pods(tmp_path, 1)
    iso = isolator(tree, tmp_path / "state")
    assert iso.mark_idle(BE)
    for d in tree.dirs(f"{BE_REL}/c-be") + tree.dirs(BE_REL):
        for f in d.iterdir():
            f.unlink()
        d.rmdir()
    assert iso.release_uid("be") and iso.held() == {}


def test_persisting_first_nothing_written_when_the_state_cannot_be_saved(tmp_path: Path) -> None:
    tree = tree_with_pods(tmp_path, 1)
    (tmp_path / "state").write_text("a file where the directory should be")
    iso = isolator(tree, tmp_path / "state")
    assert not iso.mark_idle(BE) and not iso.set_burst(WEB, 50.0)
    assert cpu_file(tree, BE_REL, "cpu.idle") == "0"
    assert cpu_file(tree, WEB_REL, "cpu.cfs_burst_us") == "0"


def test_a_kernel_without_the_files_offers_no_class_and_says_so_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    iso = isolator(tree_with_pods(tmp_path, 2, files=False), tmp_path / "state")
    assert (iso.support.idle, iso.support.burst) == (False, False)
    assert iso.support is iso.support  # probed once
    said = capsys.readouterr().out
    assert said.count("this kernel has no idle class") == 1 and said.count("no burst class") == 1


def test_an_unreadable_state_file_rebuilds_the_weights_from_the_pod_specs(tmp_path: Path) -> None:
    tree = tree_with_pods(tmp_path, 1)
    assert isolator(tree, tmp_path / "state").mark_idle(BE) and isolator(tree, tmp_path / "state").set_burst(WEB, 50)
    (tmp_path / "state" / "cpu-isolation.json").write_text("{torn")
    iso = isolator(tree, tmp_path / "state")
    assert iso.state_unreadable
    Resume(NodeBrain(), None, iso)(Objects(parse_node(node("n1")), (BE, WEB), PolicySet()))
    assert cpu_file(tree, BE_REL, "cpu.idle") == "0" and cpu_file(tree, BE_REL, "cpu.shares") == "2"
    assert cpu_file(tree, WEB_REL, "cpu.cfs_burst_us") == "0"


def test_a_start_on_saved_objects_leaves_the_marks_of_pods_they_do_not_show(tmp_path: Path) -> None:
    """As for caps (agent.node.resume): the saved copy may be older than the pod, so its
    mark is neither adopted nor released until the API server's objects say."""
    tree = tree_with_pods(tmp_path, 1)
    assert isolator(tree, tmp_path / "state").mark_idle(BE, "colocated")
    brain = NodeBrain()
    resume = Resume(brain, None, isolator(tree, tmp_path / "state"))
    n1 = parse_node(node("n1"))
    assert resume(Objects(n1, (), PolicySet(), origin="saved")) is False  # call again
    assert cpu_file(tree, BE_REL, "cpu.idle") == "1" and brain.state.idle == {}
    assert resume(Objects(n1, (BE,), PolicySet())) is True
    assert brain.state.isolated()["idle"] == ["default/be"]
    assert cpu_file(tree, BE_REL, "cpu.idle") == "1"


def test_spec_weights_are_the_kubelets() -> None:
    assert spec_weight(1, BE) == "2" and spec_weight(2, BE) == "1"
    assert spec_weight(1, WEB) == "512" and spec_weight(2, WEB) == "20"


def test_marks_are_adopted_for_pods_on_the_node_and_forgotten_for_pods_gone(tmp_path: Path) -> None:
    tree = tree_with_pods(tmp_path, 1)
    iso = isolator(tree, tmp_path / "state")
    assert iso.mark_idle(BE, "colocated") and iso.set_burst(WEB, 50, "colocated")
    state = NodeState()
    result = adopt_marks(state, iso.held(), [BE])
    assert result.adopted == ["default/be"] and result.gone == ["web"]
    assert state.isolated() == {"idle": ["default/be"], "burst": []}
    assert state.idle["default/be"].policy == "colocated"


# -- the resize, as the pod object shows it -------------------------------------------

RESIZABLE = pod("p", requests={"cpu": "500m"}, limits={"cpu": "1"})
RESIZABLE["status"]["containerStatuses"] = [
    {"name": "main", "allocatedResources": {"cpu": "500m"}, "resources": {"limits": {"cpu": "1"}}}]


def _with(status: dict[str, Any] | None = None, request: str = "500m", limit: str = "1") -> dict[str, Any]:
    raw = copy.deepcopy(RESIZABLE)
    raw["spec"]["containers"][0]["resources"] = {"requests": {"cpu": request}, "limits": {"cpu": limit}}
    raw["status"].update(status or {})
    return raw


@pytest.mark.parametrize(("raw", "resizing"), [
    (_with(), False),
    (_with(request="700m"), True),  # the spec patched, the kubelet has not allocated it yet
    (_with(limit="2"), True),  # a limit not in force yet
    (_with({"conditions": [{"type": "PodResizeInProgress", "status": "True"}]}), True),  # 1.33+
    (_with({"conditions": [{"type": "PodResizeInProgress", "status": "True", "reason": "Error"}]}), True),
    (_with({"resize": "InProgress"}), True),  # 1.27-1.32
    (_with({"resize": "Proposed"}, request="700m"), True),
    (_with({"conditions": [{"type": "PodResizePending", "status": "True", "reason": "Deferred"}]},
           request="3"), False),  # the kubelet cannot admit it now: the mark stays
    (_with({"resize": "Infeasible"}, request="64"), False),
    (_with({"containerStatuses": ["garbage", {"name": "main", "allocatedResources": {"cpu": "lots"}}]},
           request="700m"), False),  # lenient: what cannot be read is no resize
], ids=["same", "request", "limit", "in-progress", "error", "status-resize", "proposed",
        "deferred", "infeasible", "garbage"])  # fmt: skip
def test_a_resize_under_way_is_read_from_the_pod(raw: dict[str, Any], resizing: bool) -> None:
    assert resize_under_way(raw["spec"], raw["status"]) is resizing
    assert parse_pod(raw).resizing is resizing
