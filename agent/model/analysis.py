"""What the analyzer makes of one sample: rule states, waterlines and gaps.

Per rule, a sample is *above* when its value is strictly greater than the rule's value.
``avoidanceThreshold`` consecutive above-samples trigger the rule; it stays triggered while
samples stay above and until ``restoreThreshold`` consecutive samples at or below restore
it. A missing metric changes nothing. The three action types are the three waterline
tables: triggered rules feed evict and throttle-down, restored throttle rules throttle-up.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from agent.model.policy import Action, Rule

NORMAL = "normal"
TRIGGERED = "triggered"
RESTORED = "restored"

EVICT = "evict"
THROTTLE_DOWN = "throttleDown"
THROTTLE_UP = "throttleUp"
ACTION_TYPES = (EVICT, THROTTLE_DOWN, THROTTLE_UP)


@dataclass(frozen=True, slots=True)
class RuleTracker:
    """The hysteresis counters of one rule (kept across ticks by the node state)."""

    status: str = NORMAL
    above: int = 0
    below: int = 0

    def observe(self, rule: Rule, value: float | None) -> RuleTracker:
        """The tracker after one more sample (itself when the sample has no figure)."""
        if value is None:
            return self
        if value > rule.value:
            above = self.above + 1
            trigger = self.status != TRIGGERED and above >= rule.avoidance_threshold
            return RuleTracker(TRIGGERED if trigger else self.status, above, 0)
        below = self.below + 1
        restore = self.status == TRIGGERED and below >= rule.restore_threshold
        return RuleTracker(RESTORED if restore else self.status, 0, below)


@dataclass(frozen=True, slots=True)
class Waterline:
    """A merged waterline and the rule that governs it (its action's settings apply)."""

    value: float
    rule: Rule
    action: Action


@dataclass(frozen=True)
class Analysis:
    #: Rule key -> NORMAL | TRIGGERED | RESTORED after this sample.
    rules: Mapping[str, str]
    #: Action type -> metric -> the governing waterline.
    waterlines: Mapping[str, Mapping[str, Waterline]]
    #: Positive gaps only, in the metric's unit, already scaled by executeExcessPercent.
    gaps: Mapping[str, Mapping[str, float]]
    #: Metrics a rule names that the sample had no figure for, in registry order.
    missing: tuple[str, ...]
    usage: Mapping[str, float]
    #: The trackers to keep for the next sample (one per rule present).
    trackers: Mapping[str, RuleTracker]
