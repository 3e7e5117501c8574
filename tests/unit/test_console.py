"""The console view is honest: a throttle or restore whose write failed shows as failed,
pods without a cgroup here say so, skipped files are counted; and a cap already in force
(within 1 millicore) is not written again."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from agent.model.objects import BURSTABLE, Pod
from agent.model.settings import AgentSettings
from agent.model.usage import PodUsage
from agent.node.console import render, result_of
from agent.node.loop import Collection
from devtools.harness.fake_cgroups import FakeTree, make_pod
from executors.actuators import CpuThrottler
from executors.cgroup_throttle import CgroupThrottler
from executors.quota_state import QuotaState
from tests.unit.test_loop import (
    Scripted,
    cpu,
    make_loop,
    node_manifest,
    objects_of,
    pod_manifest,
    policy_manifests,
)


class FailingThrottler(CpuThrottler):
    """Every quota write fails (a read-only cgroup, a gone container): returns False."""

    def apply(self, pod: Pod, container_caps: Mapping[str, float], owner: str = "") -> bool:
        return False

    def restore(self, pod: Pod) -> bool:
        return False


class RaiseThenFail(CpuThrottler):
    """The first write (the throttle) succeeds, every later one (raising the cap) fails."""

    def __init__(self) -> None:
        self.writes = 0

    def apply(self, pod: Pod, container_caps: Mapping[str, float], owner: str = "") -> bool:
        self.writes += 1
        return self.writes == 1

    def restore(self, pod: Pod) -> bool:
        return False


def test_a_throttle_whose_write_failed_shows_failed_never_applied() -> None:
    objs = objects_of([node_manifest(), pod_manifest("be-1", "u1"), *policy_manifests(avoid=1)])
    outcome = make_loop(objs, Scripted([cpu(3.0, be_1=3.0)]), FailingThrottler()).tick()
    assert outcome.report is not None
    [record] = outcome.report.actions
    assert record.action == "throttle" and result_of(record, outcome) == "failed"
    text = render(outcome)
    assert "[applied]" not in text
    assert "throttle default/be-1  cap 1.00 cores" in text
    assert text.count("[failed: nothing written, see the log]") == 1
    assert "default/be-1 3.00\n" in text + "\n"  # no cap in force: none shown


def test_a_restore_whose_write_failed_shows_failed() -> None:
    objs = objects_of([
        node_manifest(), pod_manifest("be-1", "u1"),
        *policy_manifests(avoid=1, restore=1, throttle={"minCPURatio": 0, "stepCPURatio": 100}),
    ])  # fmt: skip
    loop = make_loop(objs, Scripted([cpu(3.0, be_1=3.0), cpu(0.2, be_1=0.2)]), RaiseThenFail())
    first = loop.tick()
    assert "[applied]" in render(first)
    second = loop.tick()
    assert second.report is not None
    assert [a.action for a in second.report.actions] == ["restore"]
    text = render(second)
    assert "restore  default/be-1" in text and "[failed: nothing written, see the log]" in text
    assert "[applied]" not in text


def test_pods_without_a_cgroup_and_skipped_files_are_said_plainly() -> None:
    objs = objects_of([node_manifest(), pod_manifest("be-1", "u1"), *policy_manifests()])
    objs = type(objs)(objs.node, objs.pods, objs.policies, objs.namespace_labels, {"file": 2})
    outcome = make_loop(objs, Scripted([Collection({}, {}, missing=("default/be-1",))])).tick()
    text = render(outcome)
    assert "! skipped as invalid: file 2 (the log names each, with the reason)" in text
    assert "default/be-1 (no cgroup)" in text
    assert "1 of 1 pods have no cgroup on this host" in text
    assert "waterline local-objects DIR" in text


def test_a_cap_within_one_millicore_of_the_one_in_force_is_not_rewritten(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path / "cg", 1)
    tree.add("kubepods/burstable/podu-1")
    tree.add("kubepods/burstable/podu-1/c1")
    pod = make_pod("web", "u-1", BURSTABLE, {"a": "containerd://c1"})
    quota_file = tmp_path / "cg" / "cpu" / "kubepods/burstable/podu-1/c1" / "cpu.cfs_quota_us"
    throttler = CgroupThrottler(tree.mounts, QuotaState(str(tmp_path / "state")))
    assert throttler.apply(pod, {"a": 0.5})
    quota_file.write_text("50000\n")  # as the kernel shows it; a rewrite would drop the newline
    assert throttler.apply(pod, {"a": 0.5009})  # 50090 us: within 1 millicore (100 us)
    assert quota_file.read_text() == "50000\n"
    assert throttler.apply(pod, {"a": 0.4995})
    assert quota_file.read_text() == "50000\n"
    assert throttler.apply(pod, {"a": 0.502})  # 2 millicores: written
    assert quota_file.read_text() == "50200"
    assert throttler.throttled_pods()["u-1"].containers["a"].cap == 0.502


def test_a_round_stopped_by_a_safety_limit_shows_limited() -> None:
    manifests = [
        node_manifest(), pod_manifest("be-1", "u1"),
        *policy_manifests(value="1Gi", metric="memory_total_usage", avoid=1, eviction=True),
    ]  # fmt: skip
    usage = Collection({"memory_total_usage": 3.0 * 2**30},
                       {"default/be-1": PodUsage(cpu=0.1, memory=3.0 * 2**30)})  # fmt: skip
    loop = make_loop(objects_of(manifests), Scripted([usage]), evictions_performed=False)
    loop.brain.settings = AgentSettings(cluster_brake=True)
    text = render(loop.tick())
    assert "limited  evictions stopped by clusterBrake" in text
    # a memory gap in GiB, as its usage and waterline are shown, not in bytes
    assert "memory_total_usage           3.00 GiB  evict 1.00 GiB (gap +2.00)" in text


def test_an_action_on_a_small_gap_shows_the_gap_it_closed_not_zero() -> None:
    """Near the waterline the gap is a few millicores: shown as such, never ``gap 0.00 ->
    0.00`` (which reads as an action taken on nothing)."""
    objs = objects_of([node_manifest(), pod_manifest("be-1", "u1"), *policy_manifests(avoid=1)])
    text = render(make_loop(objs, Scripted([cpu(1.003, be_1=0.5)])).tick())
    assert "throttleDown 1.00 cores (gap +0.003)" in text
    assert "throttle default/be-1  cap 0.50 cores" in text
    assert "gap 0.003 -> 0.00  [applied]" in text
