"""What the controller writes into policies' and actions' status (pure)."""

from __future__ import annotations

from typing import Any

from agent.cluster.policystatus import statuses
from agent.model.objects import Node
from tests import builders

NOW = 1_800_000_000.0
NODES = [Node(name="a", labels={"pool": "batch"}), Node(name="b", labels={"pool": "batch"}),
         Node(name="c", labels={"pool": "web"})]  # fmt: skip


def action(name: str) -> dict[str, Any]:
    return builders.action(name, throttle={"minCPURatio": 10}, meta={"generation": 1, "resourceVersion": "5"})


def policy(name: str, value: Any = "6", action_name: str = "t", pool: str = "batch") -> dict[str, Any]:
    return builders.policy(name, [builders.rule("r", "cpu_total_usage", value, action_name)], pool=pool,
                           meta={"generation": 4, "resourceVersion": "9"})  # fmt: skip


def test_valid_and_invalid_objects_with_matched_nodes() -> None:
    updates = {u.name: u for u in statuses(
        [policy("p"), policy("bad", value="-1"), policy("orphan", action_name="gone", pool="web")],
        [action("t"), action("unused")], NODES, NOW)}  # fmt: skip
    assert updates["p"].status == {
        "conditions": [{"type": "Valid", "status": "True", "reason": "Valid",
                        "message": "NodeQOSEnsurancePolicy is valid",
                        "lastTransitionTime": "2027-01-15T08:00:00Z", "observedGeneration": 4}],
        "matchedNodes": 2,
        "observedGeneration": 4,
    }  # fmt: skip
    assert updates["p"].resource_version == "9" and not updates["p"].validity_changed
    bad = updates["bad"]
    assert not bad.valid and bad.validity_changed  # first seen invalid: one Event
    assert bad.message == (
        "NodeQOSEnsurancePolicy bad: spec.objectiveEnsurances[0].metricRule.value must be >= 0, got -1.0"
    )
    assert updates["orphan"].status["matchedNodes"] == 1  # what it would select once fixed
    assert updates["orphan"].message.endswith(
        "actionName must name an AvoidanceAction that exists and is valid, got 'gone'"
    )
    assert updates["t"].status["matchedNodes"] == 2  # through the valid policy p
    assert updates["unused"].status["matchedNodes"] == 0


def test_unchanged_status_is_not_written_and_a_fix_is_one_change() -> None:
    (first,) = statuses([policy("p", value="-1")], [action("t")], NODES, NOW)[1:]
    stored = {**policy("p", value="-1"), "status": first.status}
    assert [u.name for u in statuses([stored], [action("t")], NODES, NOW + 60)] == ["t"]
    fixed = {**policy("p"), "status": first.status}
    (update,) = [u for u in statuses([fixed], [action("t")], NODES, NOW + 120) if u.name == "p"]
    assert update.valid and update.was_valid is False and update.validity_changed
    assert update.status["conditions"][0]["lastTransitionTime"] == "2027-01-15T08:02:00Z"
