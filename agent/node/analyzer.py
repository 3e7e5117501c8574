"""Rules -> hysteresis states -> waterlines -> gaps.

Per rule, a sample is *above* when its value is strictly greater than the rule's value.
``avoidanceThreshold`` consecutive above-samples trigger the rule; it stays triggered while
samples stay above and until ``restoreThreshold`` consecutive samples at or below restore
it. A missing metric changes nothing (and is reported). Triggered rules feed the evict
and throttle-down waterlines of their action, restored throttle rules the throttle-up
waterline; per (action type, metric) the lowest rule value governs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from agent.node.policy import Action, Rule
from agent.node.registry import BY_NAME, METRICS

NORMAL = "normal"
TRIGGERED = "triggered"
RESTORED = "restored"

EVICT = "evict"
THROTTLE_DOWN = "throttleDown"
THROTTLE_UP = "throttleUp"
ACTION_TYPES = (EVICT, THROTTLE_DOWN, THROTTLE_UP)


@dataclass(slots=True)
class RuleTracker:
    """The hysteresis counters of one rule (kept across ticks by the node state)."""

    status: str = NORMAL
    above: int = 0
    below: int = 0

    def observe(self, rule: Rule, value: float | None) -> str:
        if value is None:
            return self.status
        if value > rule.value:
            self.above += 1
            self.below = 0
            if self.status != TRIGGERED and self.above >= rule.avoidance_threshold:
                self.status = TRIGGERED
        else:
            self.below += 1
            self.above = 0
            if self.status == TRIGGERED and self.below >= rule.restore_threshold:
                self.status = RESTORED
        return self.status


@dataclass(frozen=True, slots=True)
class Waterline:
    """A merged waterline and the rule that governs it (its action's settings apply)."""

    value: float
    rule: Rule
    action: Action


@dataclass
class Analysis:
    rules: dict[str, str] = field(default_factory=dict)
    waterlines: dict[str, dict[str, Waterline]] = field(
        default_factory=lambda: {t: {} for t in ACTION_TYPES})
    #: Positive gaps only, in the metric's unit, already scaled by executeExcessPercent.
    gaps: dict[str, dict[str, float]] = field(default_factory=lambda: {t: {} for t in ACTION_TYPES})
    missing: list[str] = field(default_factory=list)
    usage: Mapping[str, float] = field(default_factory=dict)


def _contributes(rule: Rule, status: str, action: Action) -> tuple[str, ...]:
    spec = BY_NAME[rule.metric]
    types: list[str] = []
    if status == TRIGGERED:
        if action.eviction is not None and spec.evictable:
            types.append(EVICT)
        if action.throttle is not None and spec.throttleable:
            types.append(THROTTLE_DOWN)
    elif status == RESTORED and action.throttle is not None and spec.throttleable:
        types.append(THROTTLE_UP)
    return tuple(types)


def analyze(
    rules: Iterable[Rule],
    actions: Mapping[str, Action],
    trackers: dict[str, RuleTracker],
    usage: Mapping[str, float],
    released: Mapping[str, float] | None = None,
    execute_excess_percent: float = 0.0,
) -> Analysis:
    """Advance every rule's hysteresis with ``usage`` and derive waterlines and gaps.

    ``released`` is usage already on its way out (pods evicted and still terminating), in
    each metric's unit; it is subtracted before the evict and throttle-down gaps.
    Trackers of rules no longer present are dropped.
    """
    result = Analysis(usage=dict(usage))
    rules = list(rules)
    present = {r.key for r in rules}
    for key in list(trackers):
        if key not in present:
            del trackers[key]
    missing: set[str] = set()
    for rule in rules:
        tracker = trackers.setdefault(rule.key, RuleTracker())
        value = usage.get(rule.metric)
        if value is None:
            missing.add(rule.metric)
        status = tracker.observe(rule, value)
        result.rules[rule.key] = status
        action = actions.get(rule.action_name)
        if action is None:
            continue
        for action_type in _contributes(rule, status, action):
            table = result.waterlines[action_type]
            current = table.get(rule.metric)
            if current is None or rule.precedence < current.rule.precedence:
                table[rule.metric] = Waterline(rule.value, rule, action)
    result.missing = [m.name for m in METRICS if m.name in missing]
    excess = 1.0 + execute_excess_percent / 100.0
    released = released or {}
    for action_type in ACTION_TYPES:
        for metric, line in result.waterlines[action_type].items():
            value = usage.get(metric)
            if value is None:
                continue
            if action_type == THROTTLE_UP:
                gap = line.value - value
            else:
                gap = (value - released.get(metric, 0.0) - line.value) * excess
            if gap > 1e-9:
                result.gaps[action_type][metric] = gap
    return result
