"""A tick's Kubernetes Events: pod actions and rule changes on the node (invalid objects are
only logged by the agent: their Events are the controller's)."""

from __future__ import annotations

from agent.kube.events import node_ref
from agent.model.analysis import NORMAL, RESTORED, TRIGGERED
from agent.model.eviction import EvictionResult
from agent.model.objects import Node, Pod
from agent.model.policy import (
    Action,
    CpuThrottle,
    Policy,
    PolicySet,
    Rule,
)
from agent.node.events import tick_events
from agent.node.incluster import ClusterEffects, ReachableEvictor
from agent.node.loop import TickOutcome
from agent.node.taint import TAINT
from agent.node.tick import TickReport
from engine.intents import Evict
from engine.records import ActionRecord
from executors.actuators import Evictor

RULE = Rule("guard", "cpu", 0, "cpu_total_usage", 2.0, action_name="throttle")
POD = Pod(namespace="web", name="a", uid="uid-a")


def record(action: str, pod: str = "web/a", **kw: object) -> ActionRecord:
    base: dict[str, object] = dict(
        action=action, pod=pod, rule=RULE.key, action_name="throttle",
        metric="cpu_total_usage", waterline=2.0, gap_before=1.5, gap_after=0.0, value=3.5,
    )  # fmt: skip
    base.update(kw)
    return ActionRecord(**base)  # type: ignore[arg-type]


def report(states: dict[str, str], *actions: ActionRecord) -> TickReport:
    return TickReport(at=0.0, rules=states, waterlines={}, gaps={}, actions=list(actions),
                      usage={"cpu_total_usage": 3.5})  # fmt: skip


def summary(states: dict[str, str], reported: dict[str, str], *actions: ActionRecord) -> list:
    got = tick_events("node-1", report(states, *actions), [RULE], reported, {POD.key: POD})
    return [(e.ref.kind, e.ref.name, e.type, e.reason) for e in got]


def test_pod_actions_map_to_pod_events_with_their_reason() -> None:
    got = tick_events(
        "node-1",
        report({RULE.key: TRIGGERED},
               record("throttle", cpu_cap=0.5),
               record("evict", result="evicted"),
               record("evict", pod="web/b", result="blocked-by-pdb")),
        [RULE], {RULE.key: TRIGGERED}, {POD.key: POD},
    )  # fmt: skip
    assert [(e.ref.name, e.ref.namespace, e.type, e.reason) for e in got] == [
        ("a", "web", "Warning", "Throttled"),
        ("a", "web", "Warning", "Evicted"),
        ("b", "web", "Warning", "EvictionBlocked"),
    ]
    assert got[0].ref.uid == "uid-a"
    assert "guard/cpu" in got[0].message and "0.5 cores" in got[0].message
    assert "cpu_total_usage 3.5 above waterline 2" in got[1].message


def test_restores_are_normal_events() -> None:
    got = tick_events("node-1", report({RULE.key: RESTORED},
                                       record("restore", cpu_cap=1.0),
                                       record("restore", cpu_cap=None),
                                       record("restore", reason="action removed")),
                      [RULE], {RULE.key: RESTORED}, {})  # fmt: skip
    assert [(e.type, e.reason) for e in got] == [("Normal", "Restored")] * 3
    assert "raised to 1 cores" in got[0].message
    assert "lifted" in got[1].message and "no longer applies" in got[2].message


def test_preview_failed_and_gone_make_no_pod_event() -> None:
    assert summary({RULE.key: TRIGGERED}, {RULE.key: TRIGGERED},
                   record("evict", result="evicted", preview=True),
                   record("evict", result="failed"),
                   record("evict", result="gone"),
                   record("throttle", preview=True)) == []  # fmt: skip


def test_rule_changes_are_node_events_against_the_last_reported_states() -> None:
    assert summary({RULE.key: TRIGGERED}, {RULE.key: NORMAL}) == [
        ("Node", "node-1", "Warning", "RuleTriggered")
    ]
    assert summary({RULE.key: TRIGGERED}, {RULE.key: TRIGGERED}) == []
    assert summary({RULE.key: RESTORED}, {RULE.key: TRIGGERED}) == [
        ("Node", "node-1", "Normal", "RuleRestored")
    ]
    # Reported nothing yet (API away when it triggered): reported once it is back.
    assert summary({RULE.key: TRIGGERED}, {}) == [("Node", "node-1", "Warning", "RuleTriggered")]
    # Triggered and restored while nothing was reported: no event for what is over.
    assert summary({RULE.key: RESTORED}, {}) == []
    got = tick_events("node-1", report({RULE.key: TRIGGERED}), [RULE], {}, {})
    assert got[0].ref == node_ref("node-1")
    assert got[0].message == (
        "rule guard/cpu triggered: cpu_total_usage 3.5 above 2 (action throttle)"
    )


# -- the shell: applied per tick, dropped (not queued) while the API is away ------------


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.fail = False

    def record(self, ref: object, type_: str, reason: str, message: str) -> str:
        if self.fail:
            return "failed"
        self.events.append((getattr(ref, "name", ""), reason))
        return "created"


def outcome(states: dict[str, str], tainted: bool, *records: ActionRecord) -> TickOutcome:
    action = Action(
        "throttle", cool_down_seconds=0, throttle=CpuThrottle(), disable_scheduling=True
    )
    policies = PolicySet((Policy("guard", rules=(RULE,)),), {"throttle": action})
    node = Node("node-1", taints=(TAINT,) if tainted else ())
    return TickOutcome(seq=1, at=0.0, duration=0.0, node="node-1", report=report(states, *records),
                       pods=(POD,), node_record=node, policies=policies)  # fmt: skip


def test_cluster_effects_drop_while_unreachable_and_catch_up_from_the_current_state() -> None:
    recorder, taints, up = Recorder(), list[bool](), [False]

    def set_taint(wanted: bool) -> bool:
        taints.append(wanted)
        return True

    effects = ClusterEffects("node-1", recorder, set_taint, lambda: up[0])
    effects(outcome({RULE.key: TRIGGERED}, False, record("throttle", cpu_cap=0.5)))
    assert (recorder.events, taints, effects.dropped) == ([], [], 3)  # 2 events + the taint
    up[0] = True
    effects(outcome({RULE.key: TRIGGERED}, False))
    assert recorder.events == [("node-1", "RuleTriggered")] and taints == [True]
    effects(outcome({RULE.key: TRIGGERED}, True))  # nothing new
    assert len(recorder.events) == 1 and taints == [True]
    recorder.fail = True  # a write fails: the rule change is reported again next tick
    effects(outcome({RULE.key: RESTORED}, True))
    assert taints == [True, False]
    recorder.fail = False
    effects(outcome({RULE.key: RESTORED}, False))
    assert recorder.events[-1] == ("node-1", "RuleRestored")


def test_reachable_evictor_fails_fast_while_the_api_is_away() -> None:
    calls: list[str] = []

    class Api(Evictor):
        def evict(self, pod: Pod, grace_seconds: int | None) -> EvictionResult:
            calls.append(pod.key)
            return EvictionResult.EVICTED

    up = [False]
    evictor = ReachableEvictor(Api(), lambda: up[0])
    assert evictor.carry(Evict(POD, 0)).result is EvictionResult.FAILED and calls == []
    up[0] = True
    assert evictor.carry(Evict(POD, 0)).result is EvictionResult.EVICTED and calls == ["web/a"]
