"""The scheduling-avoidance taint: on while a disableScheduling rule is triggered, off once
it has been restored for the action's cool-down, and off after a restart."""

from __future__ import annotations

from agent.model.analysis import NORMAL, RESTORED, TRIGGERED
from agent.model.objects import Taint
from agent.model.policy import Action, CpuThrottle, Rule
from agent.node.taint import (
    ADD,
    KEEP,
    REMOVE,
    TAINT_EFFECT,
    TAINT_KEY,
    decide_taint,
    has_taint,
    note_restored,
    taints_with,
)

RULE = Rule("guard", "cpu", 0, "cpu_total_usage", 2.0, action_name="avoid")
OTHER = Rule("guard", "mem", 1, "memory_total_usage", 1e9, action_name="plain")
ACTIONS = {
    "avoid": Action("avoid", cool_down_seconds=60, throttle=CpuThrottle(), disable_scheduling=True),
    "plain": Action("plain", cool_down_seconds=60, throttle=CpuThrottle()),
}


def decide(
    states: dict[str, str],
    restored_at: dict[str, float],
    now: float,
    tainted: bool,
    rules: tuple[Rule, ...] = (RULE, OTHER),
) -> str:
    return decide_taint(rules, states, ACTIONS, restored_at, now, tainted).change


def test_triggered_rule_with_disable_scheduling_adds_the_taint() -> None:
    assert decide({RULE.key: TRIGGERED}, {}, 100.0, tainted=False) == ADD
    assert decide({RULE.key: TRIGGERED}, {}, 100.0, tainted=True) == KEEP


def test_rule_without_disable_scheduling_never_taints() -> None:
    assert decide({OTHER.key: TRIGGERED, RULE.key: NORMAL}, {}, 100.0, tainted=False) == KEEP


def test_taint_stays_through_the_cool_down_then_goes() -> None:
    restored = note_restored({RULE.key: TRIGGERED}, {RULE.key: RESTORED}, {}, now=100.0)
    assert restored == {RULE.key: 100.0}
    assert decide({RULE.key: RESTORED}, restored, 159.0, tainted=True) == KEEP
    assert decide({RULE.key: RESTORED}, restored, 160.0, tainted=True) == REMOVE


def test_restore_time_is_kept_until_the_rule_triggers_again() -> None:
    first = note_restored({RULE.key: TRIGGERED}, {RULE.key: RESTORED}, {}, now=100.0)
    later = note_restored({RULE.key: RESTORED}, {RULE.key: RESTORED}, first, now=130.0)
    assert later == {RULE.key: 100.0}
    again = note_restored({RULE.key: RESTORED}, {RULE.key: TRIGGERED}, later, now=140.0)
    assert again == {}
    assert decide({RULE.key: TRIGGERED}, again, 500.0, tainted=True) == KEEP


def test_zero_cool_down_removes_on_the_restoring_tick() -> None:
    actions = {"avoid": Action("avoid", cool_down_seconds=0, throttle=CpuThrottle(),
                               disable_scheduling=True)}  # fmt: skip
    restored = note_restored({RULE.key: TRIGGERED}, {RULE.key: RESTORED}, {}, now=100.0)
    got = decide_taint((RULE,), {RULE.key: RESTORED}, actions, restored, 100.0, True)
    assert got.change == REMOVE


def test_fresh_agent_removes_a_taint_left_by_a_previous_run() -> None:
    # A restart forgets rule states and restore times: the leftover taint goes.
    assert decide({RULE.key: NORMAL}, {}, 100.0, tainted=True) == REMOVE
    # ...and a restored rule whose restore time this run never saw does not hold it.
    assert decide({RULE.key: RESTORED}, {}, 100.0, tainted=True) == REMOVE


def test_deleted_policy_or_preview_rule_does_not_hold_the_taint() -> None:
    assert decide({RULE.key: TRIGGERED}, {}, 100.0, tainted=True, rules=()) == REMOVE
    preview = Rule("guard", "cpu", 0, "cpu_total_usage", 2.0, action_name="avoid", preview=True)
    assert decide({preview.key: TRIGGERED}, {}, 100.0, tainted=False, rules=(preview,)) == KEEP


def test_taint_list_edits_keep_other_taints() -> None:
    other = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
    stale = {"key": TAINT_KEY, "value": "x", "effect": "NoSchedule"}
    added = taints_with([other, stale], wanted=True)
    assert added == [other, {"key": TAINT_KEY, "value": "true", "effect": TAINT_EFFECT}]
    assert taints_with(added, wanted=False) == [other]
    assert has_taint([Taint(TAINT_KEY, "true", TAINT_EFFECT)])
    assert not has_taint([Taint(TAINT_KEY, "x", "NoSchedule")])
