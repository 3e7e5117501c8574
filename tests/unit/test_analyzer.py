import pytest

from agent.model.analysis import NORMAL, RESTORED, TRIGGERED, RuleTracker
from agent.model.policy import parse_action, parse_policy
from engine.analyzer import analyze
from tests.builders import action, policy, rule


def _setup(*rules, actions=None):
    actions = actions or {"t": parse_action(action("t", throttle={})),
                          "e": parse_action(action("e", eviction={})),
                          "both": parse_action(action("both", throttle={}, eviction={}))}
    parsed = parse_policy(policy("p", list(rules)), actions)
    return parsed.rules, actions


def test_hysteresis_needs_consecutive_samples():
    rules, _ = _setup(rule("r", "cpu_total_usage", "6", "t", avoidanceThreshold=2, restoreThreshold=3))
    tracker = RuleTracker()
    r = rules[0]
    seen = []
    for v in (7, 5, 7, 7, 6, 6, 7, 6, 6, 6):
        tracker = tracker.observe(r, v)
        seen.append(tracker.status)
    assert seen == [NORMAL, NORMAL, NORMAL, TRIGGERED, TRIGGERED, TRIGGERED, TRIGGERED,
                    TRIGGERED, TRIGGERED, RESTORED]


def test_equal_is_not_above_and_missing_changes_nothing():
    rules, _ = _setup(rule("r", "cpu_total_usage", "6", "t", avoidanceThreshold=2))
    tracker = RuleTracker().observe(rules[0], 6.0)
    assert tracker.status == NORMAL
    tracker = tracker.observe(rules[0], 6.5)
    assert tracker.status == NORMAL
    tracker = tracker.observe(rules[0], None)
    assert tracker.status == NORMAL  # counters kept: 1 above
    assert (tracker.above, tracker.below) == (1, 0)
    assert tracker.observe(rules[0], 6.5).status == TRIGGERED


def test_lowest_rule_governs_and_gaps_are_positive_only():
    rules, actions = _setup(
        rule("high", "cpu_total_usage", "7", "t"),
        rule("low", "cpu_total_usage", "6", "t"),
        rule("mem", "memory_total_usage", "10", "e"),
    )
    result = analyze(rules, actions, {}, {"cpu_total_usage": 8.0, "memory_total_usage": 9.0})
    line = result.waterlines["throttleDown"]["cpu_total_usage"]
    assert (line.value, line.rule.name) == (6.0, "low")
    assert result.gaps["throttleDown"] == {"cpu_total_usage": pytest.approx(2.0)}
    assert result.gaps["evict"] == {}
    assert result.rules == {"p/high": TRIGGERED, "p/low": TRIGGERED, "p/mem": NORMAL}


def test_both_action_feeds_evict_and_throttle_and_memory_is_never_throttled():
    rules, actions = _setup(rule("cpu", "cpu_total_usage", "6", "both"),
                            rule("mem", "memory_total_usage", "10", "both"))
    result = analyze(rules, actions, {}, {"cpu_total_usage": 7.0, "memory_total_usage": 12.0})
    assert set(result.waterlines["evict"]) == {"cpu_total_usage", "memory_total_usage"}
    assert set(result.waterlines["throttleDown"]) == {"cpu_total_usage"}


def test_restored_throttle_rule_feeds_throttle_up():
    rules, actions = _setup(rule("cpu", "cpu_total_usage", "6", "t"))
    first = analyze(rules, actions, {}, {"cpu_total_usage": 7.0})
    result = analyze(rules, actions, first.trackers, {"cpu_total_usage": 4.5})
    assert result.rules["p/cpu"] == RESTORED
    assert result.gaps["throttleUp"] == {"cpu_total_usage": pytest.approx(1.5)}


def test_excess_percent_and_terminating_release():
    rules, actions = _setup(rule("cpu", "cpu_total_usage", "6", "e"))
    result = analyze(rules, actions, {}, {"cpu_total_usage": 8.0}, released={"cpu_total_usage": 1.0},
                     execute_excess_percent=50)
    assert result.gaps["evict"]["cpu_total_usage"] == pytest.approx(1.5)  # (8 - 1 - 6) * 1.5


def test_missing_metric_is_reported_and_does_not_act():
    rules, actions = _setup(rule("cpu", "cpu_total_usage", "6", "e"))
    result = analyze(rules, actions, {}, {})
    assert result.missing == ("cpu_total_usage",)
    assert result.gaps["evict"] == {}
    assert result.rules["p/cpu"] == NORMAL


def test_trackers_of_deleted_rules_are_dropped():
    rules, actions = _setup(rule("cpu", "cpu_total_usage", "6", "e"))
    trackers = {"gone/rule": RuleTracker(TRIGGERED, 3, 0)}
    result = analyze(rules, actions, trackers, {"cpu_total_usage": 1.0})
    assert set(result.trackers) == {"p/cpu"}


def test_analyze_leaves_the_trackers_it_is_given_unchanged():
    rules, actions = _setup(rule("cpu", "cpu_total_usage", "6", "t", avoidanceThreshold=2),
                            rule("mem", "memory_total_usage", "10", "e"))
    trackers = {"p/cpu": RuleTracker(NORMAL, 1, 0), "gone/rule": RuleTracker(TRIGGERED, 3, 0)}
    before = dict(trackers)
    result = analyze(rules, actions, trackers, {"cpu_total_usage": 7.0, "memory_total_usage": 12.0})
    assert trackers == before
    assert result.trackers == {"p/cpu": RuleTracker(TRIGGERED, 2, 0),
                               "p/mem": RuleTracker(TRIGGERED, 1, 0)}
    again = analyze(rules, actions, trackers, {"cpu_total_usage": 7.0, "memory_total_usage": 12.0})
    assert again == result  # same input, same answer
