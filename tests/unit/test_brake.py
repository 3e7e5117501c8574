"""The cluster brake's decision (pure): counting the agents' eviction Events in the last
60 s, the two budgets, 5 quiet minutes before lifting, and whose brake it is."""

from __future__ import annotations

import time
from typing import Any

import pytest

from agent.cluster.brake import (
    KEEP,
    LIFT,
    REFRESH,
    SET,
    BrakeBudget,
    BrakeState,
    brake_state,
    decide,
    window,
)
from agent.cluster.config import parse_config
from agent.errors import InvalidObject

NOW = 1_800_000_000.0


def stamp(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def event(node: str, first: float, last: float | None = None, count: int = 1) -> dict[str, Any]:
    return {"count": count, "firstTimestamp": stamp(first),
            "lastTimestamp": stamp(first if last is None else last), "source": {"host": node}}  # fmt: skip


def test_the_window_counts_only_evictions_inside_it() -> None:
    events = [
        event("n1", NOW - 30),
        event("n2", NOW - 90),  # before the window
        event("n3", NOW - 20, count=4),  # 4 evictions all inside
        event("n4", NOW - 300, NOW - 5, count=9),  # repeated inside: counts once
    ]
    seen = window(events, NOW - 60, NOW)
    assert seen.evictions == 6 and seen.nodes == {"n1", "n3", "n4"}


@pytest.mark.parametrize(
    ("evictions", "nodes", "ready", "action"),
    [
        (100, 1, 1000, KEEP),  # at the budget: not above it
        (101, 1, 1000, SET),
        (5, 100, 1000, KEEP),  # 10% of 1,000 nodes
        (5, 101, 1000, SET),
        (3, 1, 5, KEEP),  # one node of five: never below one node
        (3, 2, 5, SET),
    ],
)
def test_either_budget_sets_the_brake(evictions: int, nodes: int, ready: int, action: str) -> None:
    from agent.cluster.brake import Window

    seen = Window(evictions, frozenset(f"n{i}" for i in range(nodes)))
    assert decide(BrakeBudget(), seen, ready, BrakeState(), NOW).action == action


def ours(since: float, last: float) -> BrakeState:
    return BrakeState(True, True, True, "storm", since, last)


def test_lifted_after_five_quiet_minutes_only() -> None:
    from agent.cluster.brake import Window

    quiet, storm = Window(0, frozenset()), Window(500, frozenset({"n1"}))
    assert decide(BrakeBudget(), storm, 10, ours(NOW - 600, NOW - 60), NOW).action == REFRESH
    assert decide(BrakeBudget(), quiet, 10, ours(NOW - 600, NOW - 299), NOW).action == KEEP
    lifted = decide(BrakeBudget(), quiet, 10, ours(NOW - 600, NOW - 300), NOW)
    assert lifted.action == LIFT and lifted.reason == "no eviction storm for 300s"
    # A brake a person set is theirs to lift.
    theirs = BrakeState(True, True, False, "maintenance", None, None)
    assert decide(BrakeBudget(), quiet, 10, theirs, NOW + 10_000).action == KEEP


def test_the_configmap_reads_back_into_the_state() -> None:
    cm = {"metadata": {"labels": {"app.kubernetes.io/managed-by": "waterline-controller"},
                       "resourceVersion": "7"},
          "data": {"evictionsPaused": "true", "reason": "r", "since": stamp(NOW),
                   "lastExceeded": stamp(NOW + 60)}}  # fmt: skip
    assert brake_state(cm) == BrakeState(True, True, True, "r", NOW, NOW + 60, "7")
    assert brake_state(None) == BrakeState()


def test_the_budget_is_read_from_the_controller_config() -> None:
    config = parse_config({"clusterEvictionBudget": {"perMinute": 20, "nodesPercent": 5}})
    assert (config.brake.per_minute, config.brake.nodes_percent) == (20, 5.0)
    assert parse_config(None).brake == BrakeBudget()
    with pytest.raises(InvalidObject, match="config clusterEvictionBudget: perMinute must be >= 1, got 0"):
        parse_config({"clusterEvictionBudget": {"perMinute": 0}})
    with pytest.raises(InvalidObject, match="nodesPercent must be <= 100, got 150"):
        parse_config({"clusterEvictionBudget": {"nodesPercent": 150}})
    with pytest.raises(InvalidObject, match="perMinit is not a known field"):
        parse_config({"clusterEvictionBudget": {"perMinit": 3}})
