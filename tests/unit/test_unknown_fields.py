"""A field the CRD does not know: refused in files, as the API server refuses it; kept
quiet in what the API server sends (it has pruned it already, and an agent older than the
CRDs must keep acting on the fields it knows).

``waterline simulate`` refuses it with exit 2 (tests/scenarios/invalid-*-unknown-field);
these tests cover the local mode, the in-cluster path, and the schema walk's edges.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import structlog
from structlog.testing import capture_logs

from agent.errors import InvalidObject
from agent.model.fields import SHOWN_CHARS, Fields
from agent.model.policy import load_policies
from agent.model.schema import check_known_fields
from agent.node.local import FileObjectSource
from tests.unit.test_loop import node_manifest, pod_manifest, policy_manifests, write_yaml

POLICY, ACTION = policy_manifests(avoid=1)


def misspelt() -> dict[str, Any]:
    """The policy with ``stratgy`` beside its rule's fields, renamed so both can load."""
    policy = copy.deepcopy(POLICY)
    policy["metadata"]["name"] = "typo"
    policy["spec"]["objectiveEnsurances"][0]["stratgy"] = "Preview"
    return policy


def test_local_mode_skips_the_misspelt_policy_names_the_field_and_acts_on_the_good_one(tmp_path: Path) -> None:
    write_yaml(tmp_path / "objects.yaml", [node_manifest(), pod_manifest("be-1", "u1"), POLICY, ACTION, misspelt()])
    structlog.reset_defaults()
    with capture_logs() as logs:
        objects = FileObjectSource([str(tmp_path)])()
    assert [p.name for p in objects.policies.policies] == ["guard"]
    errors = [e["error"] for e in logs if e.get("code") == "invalid-object"]
    assert errors == [
        "NodeQOSEnsurancePolicy typo: spec.objectiveEnsurances[0].stratgy is not a known field "
        "(known: name, metricRule, avoidanceThreshold, restoreThreshold, actionName, strategy), "
        "got 'Preview'"
    ]


def test_from_the_api_server_a_field_newer_than_the_agent_does_not_cost_the_policy() -> None:
    newer = copy.deepcopy(POLICY)
    newer["spec"]["objectiveEnsurances"][0]["addedInANewerRelease"] = {"x": 1}
    loaded = load_policies([newer], [ACTION])
    assert not loaded.errors and [p.name for p in loaded.policies] == ["guard"]
    strict = load_policies([newer], [ACTION], strict=True)
    assert not strict.policies and "addedInANewerRelease" in str(strict.errors[0])


def test_label_maps_metadata_and_preserved_templates_take_any_key() -> None:
    policy = copy.deepcopy(POLICY)
    policy["metadata"]["labels"] = {"team": "a"}
    policy["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    policy["spec"]["nodeSelector"] = {"matchLabels": {"any/key": "v"}}
    check_known_fields(policy)
    reservation = {
        "apiVersion": "qos.waterline.io/v1alpha1", "kind": "Reservation", "metadata": {"name": "r"},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "anything": True}]}}},
    }  # fmt: skip
    check_known_fields(reservation)
    check_known_fields({"apiVersion": "v1", "kind": "Pod", "spec": {"notAPodField": 1}})  # not ours


def test_an_unknown_key_of_a_list_item_is_named_by_its_index() -> None:
    policy = copy.deepcopy(POLICY)
    policy["spec"]["objectiveEnsurances"].append({"name": "b", "metricRule": {"name": "x", "value": 1, "unit": "%"}})
    with pytest.raises(InvalidObject) as err:
        check_known_fields(policy)
    assert err.value.field == "spec.objectiveEnsurances[1].metricRule.unit"


def test_a_long_value_is_abbreviated_so_the_error_stays_one_short_line() -> None:
    value = [{"at": i, "metrics": {"cpu_total_usage": 1.0, "memory_total_usage": 2e10}} for i in range(50)]
    message = str(Fields("Scenario").bad("sampels", "is not a known key", value))
    assert message.startswith("Scenario: sampels is not a known key, got [{")
    assert len(message) < len("Scenario: sampels is not a known key, got ") + SHOWN_CHARS + 1
    short = str(Fields("Scenario").bad("now", "must be a time", "soon"))
    assert short == "Scenario: now must be a time, got 'soon'"
