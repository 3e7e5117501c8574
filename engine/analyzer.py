"""Rules -> hysteresis states -> waterlines -> gaps (the types are in agent.model.analysis).

``analyze`` is pure: it returns the advanced trackers in its result, and the caller keeps
them for the next sample. Triggered rules feed the evict and throttle-down waterlines of
their action, restored throttle rules the throttle-up waterline; per (action type, metric)
the lowest rule value governs. A missing metric changes nothing (and is reported).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from agent.model.analysis import (
    ACTION_TYPES,
    EVICT,
    RESTORED,
    THROTTLE_DOWN,
    THROTTLE_UP,
    TRIGGERED,
    Analysis,
    RuleTracker,
    Waterline,
)
from agent.model.numbers import EPSILON
from agent.model.policy import Action, Rule
from agent.model.registry import BY_NAME, METRICS


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


def _waterlines(rules: Sequence[Rule], statuses: Mapping[str, str],
                actions: Mapping[str, Action]) -> dict[str, dict[str, Waterline]]:
    tables: dict[str, dict[str, Waterline]] = {t: {} for t in ACTION_TYPES}
    for rule in rules:
        action = actions.get(rule.action_name)
        if action is None:
            continue
        for action_type in _contributes(rule, statuses[rule.key], action):
            table = tables[action_type]
            current = table.get(rule.metric)
            if current is None or rule.precedence < current.rule.precedence:
                table[rule.metric] = Waterline(rule.value, rule, action)
    return tables


def _gaps(waterlines: Mapping[str, Mapping[str, Waterline]], usage: Mapping[str, float],
          released: Mapping[str, float], excess: float) -> dict[str, dict[str, float]]:
    gaps: dict[str, dict[str, float]] = {t: {} for t in ACTION_TYPES}
    for action_type in ACTION_TYPES:
        for metric, line in waterlines[action_type].items():
            value = usage.get(metric)
            if value is None:
                continue
            if action_type == THROTTLE_UP:
                gap = line.value - value
            else:
                gap = (value - released.get(metric, 0.0) - line.value) * excess
            if gap > EPSILON:
                gaps[action_type][metric] = gap
    return gaps


def analyze(
    rules: Iterable[Rule],
    actions: Mapping[str, Action],
    trackers: Mapping[str, RuleTracker],
    usage: Mapping[str, float],
    released: Mapping[str, float] | None = None,
    execute_excess_percent: float = 0.0,
) -> Analysis:
    """Advance every rule's hysteresis with ``usage`` and derive waterlines and gaps.

    ``released`` is usage already on its way out (pods evicted and still terminating), in
    each metric's unit; it is subtracted before the evict and throttle-down gaps.
    ``trackers`` is not changed: the result carries one advanced tracker per rule given
    (trackers of rules no longer present are dropped).
    """
    rules = list(rules)
    advanced = {r.key: trackers.get(r.key, RuleTracker()).observe(r, usage.get(r.metric))
                for r in rules}
    statuses = {key: tracker.status for key, tracker in advanced.items()}
    named = {r.metric for r in rules if usage.get(r.metric) is None}
    waterlines = _waterlines(rules, statuses, actions)
    excess = 1.0 + execute_excess_percent / 100.0
    return Analysis(
        rules=statuses,
        waterlines=waterlines,
        gaps=_gaps(waterlines, usage, released or {}, excess),
        missing=tuple(m.name for m in METRICS if m.name in named),
        usage=dict(usage),
        trackers=advanced,
    )
