"""Scheduling avoidance: whether this node should carry the interference taint.

An AvoidanceAction with ``spec.disableScheduling: true`` asks the scheduler to prefer other
nodes while a rule using it is triggered: the node gets
``qos.waterline.io/interference:PreferNoSchedule``. The taint stays until every such rule
has been restored for its action's ``coolDownSeconds`` (so a flapping rule does not make
the taint flap), and it is removed by a fresh agent too: a restarted agent has no rule
triggered, and a taint nobody remembers setting would never be lifted otherwise (as with
the CPU quotas, a rule that still holds taints again after its avoidanceThreshold).

Decisions where the issue is silent:

* PreferNoSchedule, not NoSchedule: a hint, so a busy cluster can still place pods here;
* a Preview rule never taints (Preview reports, it does not act);
* a restored rule whose restore time is unknown does not hold the taint;
* the taint is this agent's own key: other taints on the node are never touched, and a
  taint with our key but another value or effect is replaced by ours.

Pure: rule states, actions and times in, one of ADD / REMOVE / KEEP out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from agent.model.analysis import RESTORED, TRIGGERED
from agent.model.objects import Taint
from agent.model.policy import Action, Rule

TAINT_KEY = "qos.waterline.io/interference"
TAINT_VALUE = "true"
TAINT_EFFECT = "PreferNoSchedule"
TAINT = Taint(TAINT_KEY, TAINT_VALUE, TAINT_EFFECT)

ADD = "add"
REMOVE = "remove"
KEEP = "keep"


@dataclass(frozen=True, slots=True)
class TaintDecision:
    change: str  # ADD | REMOVE | KEEP
    #: The rules that want the taint now (triggered, or restored and still cooling down).
    holding: tuple[str, ...] = ()


def note_restored(
    previous: Mapping[str, str],
    current: Mapping[str, str],
    restored_at: Mapping[str, float],
    now: float,
) -> dict[str, float]:
    """When each rule last went from triggered to restored; rules gone or triggered
    again are forgotten."""
    out: dict[str, float] = {}
    for key, status in current.items():
        if status == TRIGGERED:
            continue
        if status == RESTORED and previous.get(key) == TRIGGERED:
            out[key] = now
        elif key in restored_at:
            out[key] = restored_at[key]
    return out


def holding_rules(
    rules: Iterable[Rule],
    states: Mapping[str, str],
    actions: Mapping[str, Action],
    restored_at: Mapping[str, float],
    now: float,
) -> tuple[str, ...]:
    """The keys of the rules that want the node tainted, sorted."""
    out: list[str] = []
    for rule in rules:
        action = actions.get(rule.action_name)
        if action is None or not action.disable_scheduling or rule.preview:
            continue
        status = states.get(rule.key)
        if status == TRIGGERED or (
            status == RESTORED
            and rule.key in restored_at
            and now - restored_at[rule.key] < action.cool_down_seconds
        ):
            out.append(rule.key)
    return tuple(sorted(out))


def has_taint(taints: Iterable[Taint]) -> bool:
    """The node carries our taint exactly (key, value and effect)."""
    return any(t == TAINT for t in taints)


def decide_taint(
    rules: Iterable[Rule],
    states: Mapping[str, str],
    actions: Mapping[str, Action],
    restored_at: Mapping[str, float],
    now: float,
    tainted: bool,
) -> TaintDecision:
    holding = holding_rules(rules, states, actions, restored_at, now)
    if holding and not tainted:
        return TaintDecision(ADD, holding)
    if not holding and tainted:
        return TaintDecision(REMOVE, holding)
    return TaintDecision(KEEP, holding)


def taints_with(
    raw_taints: Iterable[Mapping[str, object]], wanted: bool
) -> list[dict[str, object]]:
    """A node's ``spec.taints`` with ours added or removed; every other taint kept as is."""
    kept = [dict(t) for t in raw_taints if t.get("key") != TAINT_KEY]
    if wanted:
        kept.append({"key": TAINT_KEY, "value": TAINT_VALUE, "effect": TAINT_EFFECT})
    return kept
