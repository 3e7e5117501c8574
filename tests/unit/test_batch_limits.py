"""A batch pod's limits from its batch resources (DESIGN.md "Batch capacity"): read from
the pod spec (``agent.model.batch.batch_limits``), decided every tick
(``engine.phases.batch_limits``), written on fake v1 and v2 trees by the cgroup writer
(``executors.cgroup_batch_limits``: what it records first, writes, checks, gives back),
under the throttler's caps, adopted after a restart; and the batch pods held within the
published capacity (``engine.phases.batch_squeeze``). A fake tree cannot refuse a write as
the kernel does; tests/integration/test_batch_limits_v1.py reads the kernel's side."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent.model.batch import BATCH_CPU, BATCH_MEMORY, batch_limits, cpu_limit
from agent.model.objects import Pod, parse_node, parse_pod
from agent.model.policy import PolicySet, load_policies
from agent.model.usage import PodUsage
from agent.node.loop import Objects
from agent.node.resume import Resume
from agent.node.tick import NodeBrain
from agent.simulate.actuators import SimulatedBatchLimiter, SimulatedNodeStatus, SimulatedThrottler
from devtools.harness.fake_cgroups import FakeTree
from engine.records import BATCH_CAPACITY_OWNER, BATCH_CPU_LIMIT, Reverted, ThrottleRecord
from engine.state import NodeState
from executors.batch_limits_state import BatchLimitsState
from executors.cgroup_batch_limits import V1_UNLIMITED, CgroupBatchLimiter
from executors.cgroup_throttle import CgroupThrottler
from executors.quota_state import QuotaState
from tests.builders import NOW, node, pod

GI = 1024**3
POD_REL = "kubepods/besteffort/podb1"


def batch_pod(uid: str = "b1", name: str = "batch", init_cpu: str | None = None,
              side_memory: bool = True) -> Pod:  # fmt: skip
    """Two containers: main 1000m / 2Gi, side 500m / 1Gi (no memory where not ``side_memory``)."""
    side = {BATCH_CPU: "500", **({BATCH_MEMORY: "1Gi"} if side_memory else {})}
    containers: list[dict[str, Any]] = [
        {"name": "main", "resources": {"requests": {BATCH_CPU: "1000", BATCH_MEMORY: "2Gi"},
                                       "limits": {BATCH_CPU: "1000", BATCH_MEMORY: "2Gi"}}},
        {"name": "side", "resources": {"requests": side, "limits": side}},
    ]  # fmt: skip
    spec = {} if init_cpu is None else {"initContainers": [
        {"name": "init", "resources": {"limits": {BATCH_CPU: init_cpu, BATCH_MEMORY: "1Gi"}}}]}
    return parse_pod(pod(name, uid=uid, qos="BestEffort", containers=containers, spec=spec,
                         container_ids={"main": "containerd://c-main", "side": "containerd://c-side"}))


# -- the pod spec -----------------------------------------------------------------------------
def test_limits_per_container_and_for_the_pod_as_the_kubelet_sizes_a_pod() -> None:
    limits = batch_limits(batch_pod())
    assert limits is not None
    assert limits.containers["main"].cpu == 1.0 and limits.containers["main"].memory == 2 * GI
    assert limits.containers["side"].cpu == 0.5
    assert (limits.cpu, limits.memory) == (1.5, 3 * GI)
    assert cpu_limit(batch_pod()) == 1.5
    # the largest init container bounds the pod from below; one without a memory limit
    # leaves the pod without one (it may use anything)
    assert batch_limits(batch_pod(init_cpu="3000")).cpu == 3.0  # type: ignore[union-attr]
    assert batch_limits(batch_pod(side_memory=False)).memory is None  # type: ignore[union-attr]
    # not a batch pod: it requests cpu
    plain = parse_pod(pod("web", requests={"cpu": "1", BATCH_CPU: "1000"}))
    assert batch_limits(plain) is None and cpu_limit(plain) is None


# -- the writer on fake trees -------------------------------------------------------------------
def tree_with_batch_pod(tmp_path: Path, version: int) -> FakeTree:
    tree = FakeTree(tmp_path / "cg", version)
    for rel in ("kubepods", "kubepods/besteffort", POD_REL, f"{POD_REL}/c-main", f"{POD_REL}/c-side"):
        tree.add(rel)
        if version == 1:
            (tree.root / "memory" / rel / "memory.limit_in_bytes").write_text(V1_UNLIMITED + "\n")
        else:
            (tree.root / rel / "memory.max").write_text("max\n")
    return tree


def memory_limit(tree: FakeTree, rel: str) -> str:
    if tree.version == 1:
        return (tree.root / "memory" / rel / "memory.limit_in_bytes").read_text().strip()
    return (tree.root / rel / "memory.max").read_text().strip()


def limiter(tree: FakeTree, state: Path, found: list[Reverted] | None = None) -> CgroupBatchLimiter:
    made = CgroupBatchLimiter(tree.mounts, BatchLimitsState(str(state)))
    if found is not None:
        made.on_reverted = found.append
    return made


UNLIMITED = {1: ("-1", V1_UNLIMITED), 2: ("max 100000", "max")}
WRITTEN = {1: ("150000", "100000", "50000"), 2: ("150000 100000", "100000 100000", "50000 100000")}


@pytest.mark.parametrize("version", [1, 2])
def test_limits_are_recorded_written_checked_and_given_back_exactly(tmp_path: Path, version: int) -> None:
    tree = tree_with_batch_pod(tmp_path, version)
    found: list[Reverted] = []
    limits = limiter(tree, tmp_path / "state", found)
    pod_quota, main_quota, side_quota = WRITTEN[version]
    assert limits.set_limits(batch_pod(), batch_limits(batch_pod()))  # type: ignore[arg-type]
    assert tree.quota(POD_REL) == pod_quota
    assert tree.quota(f"{POD_REL}/c-main") == main_quota and tree.quota(f"{POD_REL}/c-side") == side_quota
    assert memory_limit(tree, POD_REL) == str(3 * GI)
    assert memory_limit(tree, f"{POD_REL}/c-main") == str(2 * GI)
    saved = json.loads((tmp_path / "state" / "batch-limits.json").read_text())["pods"]["b1"]["files"]
    assert saved["cpu:"]["original"] == UNLIMITED[version][0]
    assert saved["memory:main"]["original"] == UNLIMITED[version][1]
    assert found == []
    # a limit lifted (a daemon-reload put the unit's own cpu.max back) is written again, said
    if version == 1:
        (tree.root / "cpu" / POD_REL / "c-main" / "cpu.cfs_quota_us").write_text("-1\n")
    else:
        (tree.root / POD_REL / "c-main" / "cpu.max").write_text("max 100000\n")
    assert limits.set_limits(batch_pod(), batch_limits(batch_pod()))  # type: ignore[arg-type]
    assert tree.quota(f"{POD_REL}/c-main") == main_quota
    assert [(r.control, r.container, r.found) for r in found] == [
        (BATCH_CPU_LIMIT, "main", UNLIMITED[version][0])]
    # every file back as it was, and forgotten
    assert limits.release_all() == ["b1"]
    for rel in (POD_REL, f"{POD_REL}/c-main", f"{POD_REL}/c-side"):
        assert tree.quota(rel) == UNLIMITED[version][0]
        assert memory_limit(tree, rel) == UNLIMITED[version][1]
    assert limits.held() == {}


@pytest.mark.parametrize("version", [1, 2])
def test_a_cap_under_the_limit_is_in_force_and_the_caps_go_back_first(tmp_path: Path, version: int) -> None:
    """The throttler records the limit as the original it returns to; released in the
    holders' order (caps, then limits), both files end exactly as the kubelet left them."""
    tree = tree_with_batch_pod(tmp_path, version)
    found: list[Reverted] = []
    limits = limiter(tree, tmp_path / "state", found)
    throttler = CgroupThrottler(tree.mounts, QuotaState(str(tmp_path / "state")))
    batch = batch_pod()
    assert limits.set_limits(batch, batch_limits(batch))  # type: ignore[arg-type]
    assert throttler.apply(batch, {"main": 0.3}, "throttle guard/cpu")
    capped = "30000" if version == 1 else "30000 100000"
    assert tree.quota(f"{POD_REL}/c-main") == capped
    assert limits.set_limits(batch, batch_limits(batch))  # type: ignore[arg-type]
    assert tree.quota(f"{POD_REL}/c-main") == capped and found == []  # tighter: no revert
    assert throttler.release_all() == ["b1"]
    assert tree.quota(f"{POD_REL}/c-main") == WRITTEN[version][1]  # back to the limit
    assert limits.release_all() == ["b1"]
    assert tree.quota(f"{POD_REL}/c-main") == UNLIMITED[version][0]


def test_a_file_at_the_limit_with_no_record_gives_the_kubelets_value_back(tmp_path: Path) -> None:
    """The state file was lost after a write: the limit found is taken for the agent's own."""
    tree = tree_with_batch_pod(tmp_path, 2)
    batch = batch_pod()
    assert limiter(tree, tmp_path / "lost").set_limits(batch, batch_limits(batch))  # type: ignore[arg-type]
    fresh = limiter(tree, tmp_path / "fresh")
    assert fresh.set_limits(batch, batch_limits(batch))  # type: ignore[arg-type]
    assert fresh.release_all() == ["b1"]
    assert tree.quota(POD_REL) == "max 100000" and memory_limit(tree, POD_REL) == "max"


def test_a_restarted_agent_adopts_the_limits_and_forgets_those_of_pods_gone(tmp_path: Path) -> None:
    tree = tree_with_batch_pod(tmp_path, 1)
    batch = batch_pod()
    assert limiter(tree, tmp_path / "state").set_limits(batch, batch_limits(batch))  # type: ignore[arg-type]
    gone = batch_pod(uid="gone", name="gone")
    tree.add("kubepods/besteffort/podgone")
    (tree.root / "memory/kubepods/besteffort/podgone/memory.limit_in_bytes").write_text(V1_UNLIMITED)
    assert limiter(tree, tmp_path / "state").set_limits(gone, batch_limits(gone))  # type: ignore[arg-type]
    brain = NodeBrain()
    again = limiter(tree, tmp_path / "state")
    n1 = parse_node(node("n1"))
    assert Resume(brain, None, None, again)(Objects(n1, (batch,), PolicySet())) is True
    assert list(brain.state.limited) == ["default/batch"] and brain.state.limited["default/batch"].cpu == 1.5
    assert set(again.held()) == {"b1"}
    assert tree.quota(POD_REL) == "150000"  # in force, untouched


# -- the decision -----------------------------------------------------------------------------------
def _tick(brain: NodeBrain, pods: list[Pod], limiter: SimulatedBatchLimiter, at: float = NOW,
          policies: PolicySet | None = None, throttler: SimulatedThrottler | None = None,
          **extra: Any) -> Any:  # fmt: skip
    return brain.tick(now=at, node=parse_node(node("n1")), pods=pods, metrics={},
                      usage={p.key: PodUsage(cpu=0.5) for p in pods},
                      policies=policies or PolicySet(), throttler=throttler or SimulatedThrottler(),
                      actuators=(limiter,), **extra)  # fmt: skip


def test_every_batch_pod_is_limited_whatever_the_policies_and_a_pod_gone_is_forgotten() -> None:
    brain, limits = NodeBrain(), SimulatedBatchLimiter()
    web = parse_pod(pod("web", requests={"cpu": "1"}, limits={"cpu": "1"}))
    _tick(brain, [batch_pod(), web], limits)
    assert set(limits.limits) == {"default/batch"}
    assert brain.caps_and_limits() == {"default/batch": 1.5}  # SIMULATE.md: like any cap
    assert brain.caps() == {}  # the metrics and the console count caps, not limits
    _tick(brain, [batch_pod(uid="b2")], limits)  # recreated under the same name
    assert brain.state.limited["default/batch"].uid == "b2" and "default/batch" in limits.limits
    _tick(brain, [], limits, provisional=True)  # a saved copy may be older than the pod
    assert "default/batch" in brain.state.limited
    _tick(brain, [], limits)
    assert brain.state.limited == {} and limits.limits == {}


def _squeezed() -> NodeBrain:
    """A node whose batch pod the batch capacity holds at 0.4 core (adopted after a restart)."""
    state = NodeState()
    state.adopt("default/batch", ThrottleRecord(0.4, 1.5, BATCH_CAPACITY_OWNER, "colocated/batchCapacity", "b1"))
    assert state.trackers == {}  # no rule's hysteresis holds it
    return NodeBrain(state=state)


def _busy_tick(brain: NodeBrain, policies: PolicySet, cpu: float, at: float) -> None:
    brain.tick(now=at, node=parse_node(node("n1")), pods=[batch_pod()],
               metrics={"cpu_total_usage": 7.5, "memory_total_usage": 1e9},
               usage={"default/batch": PodUsage(cpu=cpu)}, policies=policies,
               throttler=SimulatedThrottler(),
               actuators=(SimulatedBatchLimiter(), SimulatedNodeStatus()))  # fmt: skip


def test_a_squeeze_cap_rises_with_the_room_and_goes_back_when_no_capacity_is_published() -> None:
    policies = load_policies([{"metadata": {"name": "colocated"}, "spec": {"batchCapacity": {
        "windowSeconds": 0, "hysteresisPercent": 0, "minIntervalSeconds": 0, "marginPercent": 0}}}], [])
    brain = _squeezed()
    # non-batch use 7.1 of 8 cores: 0.9 core is spare, the pod rises to it (not to its 1.5)
    _busy_tick(brain, policies, 0.4, NOW)
    assert brain.state.throttled["default/batch"].cap == pytest.approx(0.9)
    assert brain.state.throttled["default/batch"].action == BATCH_CAPACITY_OWNER
    # the section removed: no capacity published, the cap is handed back (no action names
    # it, and reconcile_caps leaves it to the batch capacity)
    _busy_tick(brain, PolicySet(), 0.9, NOW + 10)
    assert "default/batch" not in brain.state.throttled
    assert brain.caps_and_limits() == {"default/batch": 1.5}  # its limit stays


def test_a_lifted_cap_of_a_batch_pod_comes_back_over_its_limit_not_over_unlimited(tmp_path: Path) -> None:
    """A daemon-reload puts ``-1`` back under a cap of a batch pod: the limits are read back
    first (``InOrder``, as the agent wires them), so the throttler finds its recorded
    original (the limit), writes its cap again as a plain revert, and hands back the limit
    later, never ``-1``."""
    from agent.node.holding import InOrder

    tree = tree_with_batch_pod(tmp_path, 1)
    limits = limiter(tree, tmp_path / "state")
    throttler = CgroupThrottler(tree.mounts, QuotaState(str(tmp_path / "state")))
    batch = batch_pod()
    assert limits.set_limits(batch, batch_limits(batch))  # type: ignore[arg-type]
    assert throttler.apply(batch, {"main": 0.3}, "throttle guard/cpu")
    (tree.root / "cpu" / POD_REL / "c-main" / "cpu.cfs_quota_us").write_text("-1\n")
    found = InOrder(limits, throttler).hold()
    assert [(r.control, r.found, r.new_original) for r in found] == [
        (BATCH_CPU_LIMIT, "-1", False), ("cpu_quota", "100000", False)]
    assert tree.quota(f"{POD_REL}/c-main") == "30000"
    assert throttler.release_all() == ["b1"]
    assert tree.quota(f"{POD_REL}/c-main") == "100000"


def test_a_cool_node_s_throttle_up_leaves_a_batch_capacity_cap_to_the_capacity() -> None:
    """A throttle-up waterline in force (the node cool) raises the waterlines' caps only:
    a cap the batch capacity holds rises as far as the capacity goes (0.5 core, the
    section's max), not to the pod's limit."""
    from agent.model.analysis import RuleTracker

    policies = load_policies(
        [{"metadata": {"name": "colocated"}, "spec": {
            "batchCapacity": {"windowSeconds": 0, "hysteresisPercent": 0, "minIntervalSeconds": 0,
                              "marginPercent": 0, "max": {"cpu": "500m"}},
            "objectiveEnsurances": [{"name": "cpu-high", "metricRule": {"name": "cpu_total_usage", "value": "6"},
                                     "avoidanceThreshold": 1, "restoreThreshold": 1, "actionName": "throttle"}]}}],
        [{"metadata": {"name": "throttle"}, "spec": {"throttle": {"cpuThrottle": {"minCPURatio": 10,
                                                                                   "stepCPURatio": 10}}}}])  # fmt: skip
    assert not policies.errors
    brain = _squeezed()
    brain.state.trackers["colocated/cpu-high"] = RuleTracker("triggered")
    report = brain.tick(now=NOW, node=parse_node(node("n1")), pods=[batch_pod()],
                        metrics={"cpu_total_usage": 1.0, "memory_total_usage": 1e9},
                        usage={"default/batch": PodUsage(cpu=0.4)}, policies=policies,
                        throttler=SimulatedThrottler(),
                        actuators=(SimulatedBatchLimiter(), SimulatedNodeStatus()))  # fmt: skip
    assert report.waterlines["throttleUp"], "the node is cool: a throttle-up line is in force"
    record = brain.state.throttled["default/batch"]
    assert record.action == BATCH_CAPACITY_OWNER and record.cap == pytest.approx(0.5)
    assert [(a.action, a.action_name) for a in report.actions] == [("restore", BATCH_CAPACITY_OWNER)]
