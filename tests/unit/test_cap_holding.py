"""Caps that survive systemd, on fake trees: ``CgroupThrottler.hold`` and the agent's
``HeldKeeper`` (count, log once per pod, never claim a cap the kernel lost). The same on a
real systemd host, where ``systemctl daemon-reload`` lifts the caps: tests/vm/."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from agent.node.holding import HeldKeeper
from agent.node.tick import NodeBrain
from devtools.harness.fake_cgroups import FakeTree, ListLogger
from engine.records import (
    BATCH_CPU_LIMIT,
    BURST,
    CPU_BURST,
    CPU_IDLE,
    IDLE,
    HeldLimits,
    IsolationMark,
    Reverted,
    ThrottleRecord,
)
from executors.cgroup_throttle import CgroupThrottler
from executors.quota_state import QuotaState
from tests.unit.test_quota_state import POD, _tree


def _capped(tmp_path: Path, version: int) -> tuple[FakeTree, str, CgroupThrottler]:
    tree, container = _tree(tmp_path, version)
    throttler = CgroupThrottler(tree.mounts, QuotaState(str(tmp_path / "state")))
    assert throttler.apply(POD, {"a": 0.2, "b": 0.5}, owner="throttle cpu")
    return tree, container, throttler


def _lift(tree: FakeTree, rel: str, text: str) -> None:
    name = "cpu.cfs_quota_us" if tree.version == 1 else "cpu.max"
    (tree.root / ("cpu/" if tree.version == 1 else "") / rel / name).write_text(text + "\n")


@pytest.mark.parametrize("version", [1, 2])
def test_a_held_cap_is_left_alone(tmp_path: Path, version: int) -> None:
    _tree_, _c, throttler = _capped(tmp_path, version)
    assert throttler.hold() == []


def test_a_cap_put_back_to_the_original_is_written_again(tmp_path: Path) -> None:
    tree, container, throttler = _capped(tmp_path, 2)
    c1 = container.format("c1")
    _lift(tree, c1, "max 100000")  # what daemon-reload does to a unit without CPUQuota=
    [found] = throttler.hold()
    assert (found.pod, found.container, found.found, found.wanted) == (
        "default/web", "a", "max 100000", "20000 100000")
    assert found.rewritten and not found.new_original
    assert tree.quota(c1) == "20000 100000"
    assert throttler.hold() == []  # held again
    throttler.restore(POD)
    assert tree.quota(c1) == "max 100000"  # the original, exactly


def test_a_limit_changed_under_the_cap_becomes_the_original(tmp_path: Path) -> None:
    tree, container, throttler = _capped(tmp_path, 2)
    c2 = container.format("c2")
    _lift(tree, c2, "250000 100000")  # a resize, or set-property CPUQuota=250%
    [found] = throttler.hold()
    assert found.new_original and found.rewritten
    assert tree.quota(c2) == "50000 100000"
    throttler.restore(POD)
    assert tree.quota(c2) == "250000 100000"  # release gives back the new limit


def test_a_new_limit_below_the_cap_is_the_cap_now(tmp_path: Path) -> None:
    tree, container, throttler = _capped(tmp_path, 1)
    c2 = container.format("c2")
    _lift(tree, c2, "30000")  # tighter than our 0.5-core cap
    [found] = throttler.hold()
    assert found.new_original and tree.quota(c2) == "30000"
    assert found.cap == pytest.approx(0.5)  # the pod's cap now: 0.2 + 0.3, not 0.2 + 0.5
    record = throttler.state.get("u-1")
    assert record is not None and record.containers["b"].cap == pytest.approx(0.3)
    assert throttler.hold() == []


def test_a_cap_that_cannot_be_written_back_is_forgotten(tmp_path: Path) -> None:
    tree, container, throttler = _capped(tmp_path, 2)
    c1 = container.format("c1")
    _lift(tree, c1, "max 100000")
    path = tree.root / c1 / "cpu.max"
    path.chmod(0o444)
    real_write = throttler._write

    def refuse(cgroup: str, version: int, text: str) -> None:
        if cgroup == c1:
            raise PermissionError(13, "Permission denied")
        real_write(cgroup, version, text)

    throttler._write = refuse  # type: ignore[method-assign]
    [found] = throttler.hold()
    assert not found.rewritten and "Permission denied" in found.error
    record = throttler.state.get("u-1")
    assert record is not None and record.containers["a"].cap is None
    assert throttler.hold() == []  # not claimed, so not retried


def test_an_agent_stopped_between_recording_a_cap_and_writing_it_finds_its_own_cap(
    tmp_path: Path,
) -> None:
    """A real-node run: the agent tightened a cap and was killed (SIGKILL after its grace)
    before the write. The kernel holds its previous cap; the restarted agent must see its
    own value there, not a limit someone else set, or a release gives back its cap as the
    container's original (that run gave back 93143 for 100000)."""
    tree, container, throttler = _capped(tmp_path, 2)
    c1 = container.format("c1")
    record = throttler.state.get("u-1")
    assert record is not None
    a = record.containers["a"]  # what apply records before it writes; the process dies here
    throttler.state.put(replace(record, containers={**record.containers, "a": replace(a, cap=0.1, previous=a.cap)}))
    assert tree.quota(c1) == "20000 100000"  # still the previous cap
    restarted = CgroupThrottler(tree.mounts, QuotaState(str(tmp_path / "state")))
    [found] = restarted.hold()
    assert (found.found, found.wanted) == ("20000 100000", "10000 100000")
    assert found.rewritten and not found.new_original
    restarted.restore(POD)
    assert tree.quota(c1) == "max 100000"  # the original, not a cap of ours


def test_a_cap_whose_write_failed_is_recorded_as_the_cap_the_kernel_kept(tmp_path: Path) -> None:
    tree, container, throttler = _capped(tmp_path, 2)
    throttler._write = _refuse  # type: ignore[method-assign]
    throttler.apply(POD, {"a": 0.1, "b": 0.5})  # b already holds 0.5: only a is written
    record = throttler.state.get("u-1")
    assert record is not None and record.containers["a"].cap == pytest.approx(0.2)
    assert tree.quota(container.format("c1")) == "20000 100000"
    assert throttler.hold() == []  # what the file names is what the kernel holds


def test_a_gone_container_is_left_to_the_usual_paths(tmp_path: Path) -> None:
    tree, container, throttler = _capped(tmp_path, 2)
    for name in ("cpu.max", "cpu.stat", "memory.current", "memory.stat"):
        (tree.root / container.format("c1") / name).unlink()
    (tree.root / container.format("c1")).rmdir()
    assert throttler.hold() == []


class _Holder:
    def __init__(self, throttler: CgroupThrottler) -> None:
        self.throttler = throttler

    def hold(self):  # type: ignore[no-untyped-def]
        return self.throttler.hold()


def test_the_keeper_counts_every_revert_logs_once_per_pod_and_forgets_lost_caps(
    tmp_path: Path,
) -> None:
    tree, container, throttler = _capped(tmp_path, 2)
    brain = NodeBrain()
    brain.state.throttled["default/web"] = ThrottleRecord(0.7, 3.3, "throttle", "cpu", "u-1")
    counted: list[tuple[str, int]] = []
    log = _Log()
    keeper = HeldKeeper(brain, lambda c, n: counted.append((c, n)), log, caps=_Holder(throttler))
    for _reload in range(2):  # two daemon-reloads: both containers lifted each time
        _lift(tree, container.format("c1"), "max 100000")
        _lift(tree, container.format("c2"), "300000 100000")
        keeper()
    keeper()  # nothing lifted: nothing counted
    assert counted == [("cpu_quota", 2), ("cpu_quota", 2)]
    assert keeper.reverted == 4
    assert [f["code"] for _e, f in log.events if str(f.get("code", "")).startswith("cap-lifted")] == ["cap-lifted"]
    assert "default/web" in brain.state.throttled

    _lift(tree, container.format("c1"), "max 100000")
    throttler._write = _refuse  # type: ignore[method-assign]
    keeper()
    assert "default/web" not in brain.state.throttled  # the kernel does not hold it


def _refuse(_cgroup: str, _version: int, _text: str) -> None:
    raise OSError(5, "Input/output error")


class _Log(ListLogger):
    def error(self, event: str, **fields: object) -> None:
        self.events.append((event, fields))


def test_a_cap_the_kernel_holds_tighter_is_the_cap_in_the_nodes_memory(tmp_path: Path) -> None:
    tree, container, throttler = _capped(tmp_path, 1)
    brain = NodeBrain()
    brain.state.throttled["default/web"] = ThrottleRecord(0.7, 3.3, "throttle", "cpu", "u-1")
    keeper = HeldKeeper(brain, log=_Log(), caps=throttler)
    _lift(tree, container.format("c2"), "30000")  # a new limit of 0.3 core under our 0.5
    keeper()
    assert brain.caps() == {"default/web": pytest.approx(0.5)}  # 0.2 + 0.3, as the kernel holds


def test_what_was_said_of_a_pod_is_forgotten_once_the_node_holds_nothing_of_it() -> None:
    """Issue 32: a mark or limit found reverted is said once per pod; the pod gone (or the
    mark handed back), the keeper keeps nothing of it: its ``said`` follows the node's
    memory, before each tick; a mark still held stays said."""
    brain = NodeBrain()
    state = brain.state
    for i in range(50):  # 50 pods in the idle class, 50 given burst, 50 batch pods limited
        state.hold_mark(IDLE, f"ns/be-{i}", IsolationMark("pol", f"u-be-{i}"))
        state.hold_mark(BURST, f"ns/web-{i}", IsolationMark("pol", f"u-web-{i}", 50.0))
        state.hold_limits(f"ns/batch-{i}", HeldLimits(f"u-batch-{i}", 1.0))
    log = _Log()
    keeper = HeldKeeper(brain, log=log)
    found = [Reverted(control, uid, f"ns/{name}-{i}", f"kubepods/pod{uid}")
             for i in range(50)
             for control, name, uid in ((CPU_IDLE, "be", f"u-be-{i}"), (CPU_BURST, "web", f"u-web-{i}"),
                                        (BATCH_CPU_LIMIT, "batch", f"u-batch-{i}"))]  # fmt: skip
    keeper.found(found)
    keeper.found(found)  # a second daemon-reload: counted, not said again
    assert len(keeper.said) == 150 and len(log.events) == 150
    for i in range(1, 50):  # every pod but the first of each kind is gone
        state.drop_mark(IDLE, f"ns/be-{i}")
        state.drop_mark(BURST, f"ns/web-{i}")
        state.drop_limits(f"ns/batch-{i}")
    keeper()  # before the next tick
    assert keeper.said == {(CPU_IDLE, "u-be-0"), (CPU_BURST, "u-web-0"), (BATCH_CPU_LIMIT, "u-batch-0")}
    keeper.found(found[:3])  # the ones still held, lifted again: still said once
    assert len(log.events) == 150


def test_a_new_cap_is_recorded_with_the_one_before_it(tmp_path: Path) -> None:
    """What lets a restarted agent know its own cap (above): apply records the new cap and
    keeps the one so far as ``previous``; a cap already in force is recorded as it is."""
    _tree_, _c, throttler = _capped(tmp_path, 2)
    assert throttler.apply(POD, {"a": 0.1, "b": 0.5})
    record = QuotaState(str(tmp_path / "state")).get("u-1")
    assert record is not None
    a, b = record.containers["a"], record.containers["b"]
    assert (a.cap, a.previous) == (pytest.approx(0.1), pytest.approx(0.2))
    assert (b.cap, b.previous) == (pytest.approx(0.5), None)
