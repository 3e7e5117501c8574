"""The quota that breathes (koordinator's CPU burst by quota), decided and written: an LC
pod's CFS quota raised above its limit while the node is under its lines
(engine.phases.isolation, engine.cpu_classes), taken back first when a line comes into
force with what it lent credited to the gap, lifted around a resize, never on a capped pod;
the policy field and its errors (agent.model.isolation); the writer on fake v1 and v2
trees (executors.cgroup_quota_burst: what it records before it writes, the order, the
exact undo); adoption after a restart. tests/integration/test_quota_burst_v1.py checks the
kernel's side."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from agent.errors import InvalidObject
from agent.model.objects import GUARANTEED, Container, Pod, parse_pod
from agent.model.policy import load_policies
from agent.model.usage import PodUsage
from agent.node.tick import NodeBrain
from agent.scenario import load_scenario
from agent.simulate.actuators import SimulatedEvictionAPI, SimulatedIsolator, SimulatedThrottler
from agent.simulate.html import render_html
from agent.simulate.sections import build_report
from devtools.harness.fake_cgroups import FakeTree
from engine.decide import TickInput, decide, figures_within_limits
from engine.intents import Evict, RaiseQuota, TakeBackQuota, WriteCap
from engine.state import NodeState
from executors.adoption import adopt_marks
from executors.cgroup_isolation import CgroupIsolator
from executors.drive import assume_done
from executors.isolation_state import IsolationState
from tests.builders import action, pod, rule
from tests.conftest import SCENARIOS
from tests.unit.test_isolation_phases import GUARANTEED as GUARANTEED_RESOURCES
from tests.unit.test_isolation_phases import LC, NODE, isolation_policy

ABOVE = {"quotaAboveLimitPercent": 50}


def raw_pods(**overrides: dict) -> list[dict]:
    """web (Guaranteed, LC, limit 1), lc-nolimit (LC, no limit), batch (Burstable)."""
    base = {
        "web": pod("web", qos="Guaranteed", labels=LC, **GUARANTEED_RESOURCES),
        "lc-nolimit": pod("lc-nolimit", qos="Burstable", labels=LC, requests={"cpu": "100m"}),
        "batch": pod("batch", qos="Burstable", requests={"cpu": "100m"}),
    }
    base.update(overrides)
    return list(base.values())


def throttle_policy(value: str = "3", **extra: Any) -> dict[str, Any]:
    return isolation_policy(burst=ABOVE, rules=[rule("cpu-high", "cpu_total_usage", value, "t", **extra)])


THROTTLE = action("t", throttle={"minCPURatio": 10, "stepCPURatio": 10})


def tick(raw: list[dict], *policies: dict, metrics: dict | None = None, usage: dict | None = None,
         actions: list[dict] | None = None) -> TickInput:
    return TickInput(now=0.0, node=NODE, pods=[parse_pod(p) for p in raw],
                     metrics={"cpu_total_usage": 1.0} if metrics is None else metrics,
                     usage=usage or {}, policies=load_policies(list(policies), actions or [THROTTLE]))


def intents_of(t: TickInput, state: NodeState) -> tuple[list[Any], Any]:
    seen: list[Any] = []
    plan = decide(t, state)
    try:
        intent = next(plan)
        while True:
            seen.append(intent)
            intent = plan.send(intent.DONE)
    except StopIteration as stop:
        return seen, stop.value


# -- the decision -----------------------------------------------------------------------------


def test_under_the_lines_an_lc_pod_with_a_limit_gets_its_quota_raised_by_the_percent():
    seen, decision = intents_of(tick(raw_pods(), throttle_policy()), NodeState())
    raises = [i for i in seen if isinstance(i, RaiseQuota)]
    assert [(i.pod.key, i.percent, i.owner) for i in raises] == [("default/web", 50.0, "iso")]
    assert decision.state.isolated()["quotaBurst"] == ["default/web"]  # not the pod without a limit
    assert ("quotaBurst", "marked", "default/web", "scope") in [
        (c.kind, c.change, c.pod, c.reason) for c in decision.report.isolation]


def test_without_the_field_or_without_a_cpu_figure_nothing_is_lent():
    _, plain = intents_of(tick(raw_pods(), isolation_policy(burst={})), NodeState())
    assert "quotaBurst" not in plain.state.isolated() and plain.state.isolated()["burst"] == ["default/web"]
    seen, blind = intents_of(tick(raw_pods(), throttle_policy(), metrics={}), NodeState())
    assert not [i for i in seen if isinstance(i, RaiseQuota)] and not blind.state.quota
    # held, then the figure goes: taken back (fail safe), said why
    held = assume_done(decide(tick(raw_pods(), throttle_policy()), NodeState())).state
    seen, after = intents_of(tick(raw_pods(), throttle_policy(), metrics={}), held)
    assert [type(i) for i in seen if isinstance(i, (RaiseQuota, TakeBackQuota))] == [TakeBackQuota]
    assert [(c.change, c.reason) for c in after.report.isolation if c.kind == "quotaBurst"] == [
        ("released", "no cpu figure")]


def test_over_a_line_the_raise_is_taken_back_first_and_what_it_lent_is_credited():
    """web used 1.4 (limit 1, raised to 1.5); the node is 0.6 over its line: the take-back
    comes before any cap and releases 0.4, so batch is capped for the 0.2 left only."""
    held = assume_done(decide(tick(raw_pods(), throttle_policy()), NodeState())).state
    hot = tick(raw_pods(), throttle_policy(), metrics={"cpu_total_usage": 3.6},
               usage={"default/web": PodUsage(cpu=1.4), "default/batch": PodUsage(cpu=1.7)})
    seen, decision = intents_of(hot, held)
    kinds = [type(i).__name__ for i in seen]
    assert kinds.index("TakeBackQuota") < kinds.index("WriteCap"), kinds
    (cap,) = [i for i in seen if isinstance(i, WriteCap)]
    assert cap.pod.key == "default/batch"
    assert decision.state.caps() == {"default/batch": pytest.approx(1.5)}
    assert "quotaBurst" not in decision.state.isolated()
    assert [(c.change, c.reason) for c in decision.report.isolation if c.kind == "quotaBurst"] == [
        ("released", "over a line")]
    # while the rule stays triggered (restoreThreshold 2) nothing is lent again
    cooler = tick(raw_pods(), throttle_policy(restoreThreshold=2), metrics={"cpu_total_usage": 2.0})
    seen, _ = intents_of(cooler, decision.state)
    assert not [i for i in seen if isinstance(i, RaiseQuota)]


def test_a_take_back_that_covers_the_gap_spares_batch_and_an_evict_line_takes_back_too():
    held = assume_done(decide(tick(raw_pods(), throttle_policy()), NodeState())).state
    hot = tick(raw_pods(), throttle_policy(), metrics={"cpu_total_usage": 3.3},
               usage={"default/web": PodUsage(cpu=1.5), "default/batch": PodUsage(cpu=1.0)})
    seen, decision = intents_of(hot, held)
    assert not [i for i in seen if isinstance(i, WriteCap)] and decision.state.caps() == {}
    evicting = isolation_policy(burst=ABOVE, rules=[rule("mem", "memory_total_usage", "1", "e")])
    seen, _ = intents_of(tick(raw_pods(), evicting, metrics={"cpu_total_usage": 1.0, "memory_total_usage": 5.0},
                              actions=[action("e", eviction={}, scope={"podSelector": {"matchLabels": {"x": "y"}}})]),
                         held)  # fmt: skip
    assert [type(i) for i in seen][:1] == [TakeBackQuota] and not [i for i in seen if isinstance(i, Evict)]


def test_a_preview_line_takes_nothing_back():
    held = assume_done(decide(tick(raw_pods(), throttle_policy()), NodeState())).state
    preview = throttle_policy(strategy="Preview")
    seen, decision = intents_of(tick(raw_pods(), preview, metrics={"cpu_total_usage": 3.5}), held)
    assert not [i for i in seen if isinstance(i, TakeBackQuota)]
    assert decision.state.isolated()["quotaBurst"] == ["default/web"]


def test_a_resize_lifts_the_raise_until_the_kubelet_is_done_and_a_capped_pod_gets_none():
    brain, iso = NodeBrain(), SimulatedIsolator()

    def run(raw: list[dict], *policies: dict) -> Any:
        t = tick(raw, *policies)
        return brain.tick(now=t.now, node=t.node, pods=t.pods, metrics=t.metrics, usage=t.usage,
                          policies=t.policies, namespace_labels=t.namespace_labels,
                          evictor=SimulatedEvictionAPI(t.pods, []), throttler=SimulatedThrottler(),
                          isolator=iso)  # fmt: skip

    run(raw_pods(), throttle_policy())
    assert iso.quota == {"default/web": 50.0}
    resizing = pod("web", qos="Guaranteed", labels=LC, **GUARANTEED_RESOURCES)
    resizing["status"]["conditions"] = [{"type": "PodResizeInProgress", "status": "True"}]
    report = run(raw_pods(web=resizing), throttle_policy())
    assert ("quotaBurst", "lifted", "default/web", "resize") in [
        (c.kind, c.change, c.pod, c.reason) for c in report.isolation]
    assert iso.quota == {}
    run(raw_pods(), throttle_policy())
    assert iso.quota == {"default/web": 50.0}


def test_a_pod_capped_by_waterline_has_its_raise_taken_back_first_and_gets_none_while_capped():
    """A policy whose throttle scope takes the LC pod (the docs advise against it): the
    raise goes before the cap (the throttler records the quota it finds as the original,
    so it must be the limit), and no raise is asked while the cap holds."""
    lc = {"lc": pod("lc", qos="Burstable", labels=LC, requests={"cpu": "200m"}, limits={"cpu": "1"})}
    takes_lc = action("t", throttle={"minCPURatio": 0}, scope={"qosClasses": ["Burstable"]})
    held = assume_done(decide(tick(raw_pods(**lc), throttle_policy(), actions=[takes_lc]), NodeState())).state
    assert held.isolated()["quotaBurst"] == ["default/lc", "default/web"]
    hot = tick(raw_pods(**lc), throttle_policy(), actions=[takes_lc], metrics={"cpu_total_usage": 3.5},
               usage={"default/lc": PodUsage(cpu=1.2), "default/batch": PodUsage(cpu=0.1)})
    seen, decision = intents_of(hot, held)
    kinds = [(type(i).__name__, i.pod.key) for i in seen if isinstance(i, (TakeBackQuota, WriteCap))]
    assert kinds[:2] == [("TakeBackQuota", "default/lc"), ("TakeBackQuota", "default/web")], kinds
    assert ("WriteCap", "default/lc") in kinds
    cool = tick(raw_pods(**lc), throttle_policy(restoreThreshold=5), actions=[takes_lc],
                metrics={"cpu_total_usage": 1.0})
    state = decision.state
    state.trackers.clear()  # the rule forgotten: no line in force, the cap stays
    seen, _ = intents_of(cool, state)
    assert [i.pod.key for i in seen if isinstance(i, RaiseQuota)] == ["default/web"]


def test_figures_are_read_within_the_raised_quota():
    web = parse_pod(pod("web", qos="Guaranteed", labels=LC, **GUARANTEED_RESOURCES))
    usage = {"default/web": PodUsage(cpu=1.7)}
    assert figures_within_limits({web.key: web}, usage)["default/web"].cpu == 1.0
    assert figures_within_limits({web.key: web}, usage, {"default/web": 50.0})["default/web"].cpu == 1.5


# -- the policy field -------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, 401, "50", float("nan")], ids=repr)
def test_a_bad_percent_makes_the_policy_invalid_naming_the_field(value: Any):
    policies = load_policies([isolation_policy("breathe", burst={"quotaAboveLimitPercent": value})], [])
    (error,) = policies.errors
    assert isinstance(error, InvalidObject)
    assert "breathe" in str(error) and "cpuIsolation.burst.quotaAboveLimitPercent" in str(error)


def test_the_percent_is_optional_and_other_policies_keep_working():
    policies = load_policies([isolation_policy("ok", burst={}),
                              isolation_policy("bad", burst={"quotaAboveLimitPercent": -1})], [])
    sections = policies.isolation_for_node(NODE.labels)
    assert [(name, s.burst.above_limit_percent if s.burst else "-") for name, s in sections] == [("ok", None)]


# -- the writer on fake trees -----------------------------------------------------------------

POD_REL = "kubepods/podweb"
WEB = Pod("default", "web", "web", qos_class=GUARANTEED, requests={"cpu": 0.5}, limits={"cpu": 0.5},
          containers=(Container("main", {"cpu": 0.5}, {"cpu": 0.5}, "containerd://c-web"),))  # fmt: skip


def _tree(tmp_path: Path, version: int) -> FakeTree:
    tree = FakeTree(tmp_path / "cg", version)
    tree.add("kubepods")
    tree.add(POD_REL, quota="50000")
    tree.add(f"{POD_REL}/c-web", quota="50000")
    base = tree.root / "cpu" if version == 1 else tree.root
    burst = "cpu.cfs_burst_us" if version == 1 else "cpu.max.burst"
    for rel in ("kubepods", POD_REL, f"{POD_REL}/c-web"):
        (base / rel / burst).write_text("0\n")
    return tree


def _read(tree: FakeTree, rel: str, name: str) -> str:
    base = tree.root / "cpu" if tree.version == 1 else tree.root
    return (base / rel / name).read_text().strip()


@pytest.mark.parametrize(("version", "file", "before", "raised"),
                         [(1, "cpu.cfs_quota_us", "50000", "75000"),
                          (2, "cpu.max", "50000 100000", "75000 100000")])
def test_the_writer_records_first_raises_both_cgroups_and_gives_back_exactly(
    tmp_path: Path, version: int, file: str, before: str, raised: str
) -> None:
    tree = _tree(tmp_path, version)
    iso = CgroupIsolator(tree.mounts, IsolationState(str(tmp_path / "state")))
    assert iso.support.quota and RaiseQuota in iso.intents and TakeBackQuota in iso.intents
    assert iso.raise_quota(WEB, 50.0, "pool")
    assert _read(tree, POD_REL, file) == raised and _read(tree, f"{POD_REL}/c-web", file) == raised
    record = json.loads((tmp_path / "state" / "cpu-isolation.json").read_text())["pods"]["web"]
    assert record["quotaOwner"] == "pool" and record["quotaPercent"] == 50.0
    assert {n: s["original"] for n, s in record["quota"].items()} == {"": before, "main": before}
    assert iso.raise_quota(WEB, 50.0, "pool")  # held: nothing rewritten, still True
    # a raise with its CFS burst above the original: brought within before the take-back
    burst = "cpu.cfs_burst_us" if version == 1 else "cpu.max.burst"
    (tree.root / ("cpu" if version == 1 else "") / POD_REL / burst).write_text("75000\n")
    assert iso.take_back_quota(WEB)
    assert _read(tree, POD_REL, file) == before and _read(tree, f"{POD_REL}/c-web", file) == before
    assert _read(tree, POD_REL, burst) == "50000"
    assert iso.state.get("web") is None  # nothing left: forgotten


def test_a_quota_changed_by_someone_else_is_the_new_original(tmp_path: Path) -> None:
    tree = _tree(tmp_path, 2)
    iso = CgroupIsolator(tree.mounts, IsolationState(str(tmp_path / "state")))
    assert iso.raise_quota(WEB, 100.0)
    (tree.root / POD_REL / "cpu.max").write_text("80000 100000\n")  # a resize to 0.8
    assert iso.raise_quota(WEB, 100.0)
    assert _read(tree, POD_REL, "cpu.max") == "160000 100000"
    assert iso.take_back_quota(WEB)
    assert _read(tree, POD_REL, "cpu.max") == "80000 100000"


def test_nothing_is_written_when_the_record_cannot_be_saved_and_no_quota_is_not_raised(tmp_path: Path) -> None:
    tree = _tree(tmp_path, 2)
    (tmp_path / "state").write_text("a file where the directory should be")
    blocked = CgroupIsolator(tree.mounts, IsolationState(str(tmp_path / "state")))
    assert not blocked.raise_quota(WEB, 50.0)
    assert _read(tree, POD_REL, "cpu.max") == "50000 100000"
    iso = CgroupIsolator(tree.mounts, IsolationState(str(tmp_path / "state2")))
    (tree.root / POD_REL / "cpu.max").write_text("max 100000\n")
    (tree.root / POD_REL / "c-web" / "cpu.max").write_text("max 100000\n")
    assert not iso.raise_quota(WEB, 50.0)  # no quota: nothing to raise
    assert iso.state.get("web") is None


def test_a_raise_recorded_before_a_restart_is_adopted_with_its_percent(tmp_path: Path) -> None:
    tree = _tree(tmp_path, 2)
    first = CgroupIsolator(tree.mounts, IsolationState(str(tmp_path / "state")))
    assert first.raise_quota(WEB, 50.0, "pool")
    again = CgroupIsolator(tree.mounts, IsolationState(str(tmp_path / "state")))
    state = NodeState()
    result = adopt_marks(state, again.held(), [WEB])
    assert result.adopted == ["default/web"]
    assert (state.quota["default/web"].policy, state.quota["default/web"].percent) == ("pool", 50.0)
    assert again.release_all() == ["web"]
    assert _read(tree, POD_REL, "cpu.max") == "50000 100000"


def test_the_html_report_lists_the_raised_pods_and_each_take_back():
    html = render_html(build_report(load_scenario(SCENARIOS / "node-quota-burst.yaml")), "t")
    section = html[html.index('id="cpu-isolation"'):]
    assert ("<td>quota burst (the CFS quota raised above the limit while under the lines)</td>"
            "<td>default/web</td>") in section
    assert "<td>quotaBurst</td><td>released</td><td>default/web</td><td>colocated</td><td>over a line</td>" in section


def test_a_policy_edit_of_the_percent_raises_from_the_original_and_gives_it_back(tmp_path: Path) -> None:
    """The percent changed while the quota is raised (the policy edited): the raised quota
    is the agent's own, not a limit someone else set, so the new raise is from the original
    and the take-back gives the original (it gave the old raise back before). Also when the
    agent stopped between recording the new percent and writing it."""
    tree = _tree(tmp_path, 2)
    iso = CgroupIsolator(tree.mounts, IsolationState(str(tmp_path / "state")))
    assert iso.raise_quota(WEB, 50.0)
    assert _read(tree, POD_REL, "cpu.max") == "75000 100000"
    assert iso.raise_quota(WEB, 100.0)  # the policy's percent edited
    assert _read(tree, POD_REL, "cpu.max") == "100000 100000"
    # recorded 20%, then stopped before the write: the quotas still hold the 100% raise
    record = iso.state.get("web")
    assert record is not None
    iso.state.put(replace(record, quota_percent=20.0, quota_percent_before=100.0))
    again = CgroupIsolator(tree.mounts, IsolationState(str(tmp_path / "state")))
    assert again.raise_quota(WEB, 20.0)
    assert _read(tree, POD_REL, "cpu.max") == "60000 100000"
    assert again.take_back_quota(WEB)
    assert _read(tree, POD_REL, "cpu.max") == "50000 100000"
    assert _read(tree, f"{POD_REL}/c-web", "cpu.max") == "50000 100000"
