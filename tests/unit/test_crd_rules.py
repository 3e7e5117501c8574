"""The CRD rules of issue 11 (offline: the schema as JSON Schema via test_deploy's strict
reading; CEL rules, which no offline validator evaluates, are checked for presence and
exact text), and the columns ``kubectl get`` shows."""

from __future__ import annotations

import copy
from typing import Any

import jsonschema
import pytest

from agent.model.registry import METRICS
from tests.unit.test_deploy import _crds, _samples, _schema, _validate, _walk


def _sample(kind: str) -> dict[str, Any]:
    return copy.deepcopy(next(o for _, o in _samples() if o["kind"] == kind))


def _set(obj: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    target: Any = obj
    for key in path[:-1]:
        target = target.setdefault(key, {}) if isinstance(target, dict) else target[key]
    target[path[-1]] = value
    return obj


RULE = ("spec", "objectiveEnsurances", 0)
ISOLATION = ("spec", "cpuIsolation")
BATCH = ("spec", "batchCapacity")
BAD = [
    ("NodeQOSEnsurancePolicy", (*ISOLATION, "burst", "quotaPercent"), 0),
    ("NodeQOSEnsurancePolicy", (*ISOLATION, "burst", "quotaPercent"), 101),
    ("NodeQOSEnsurancePolicy", (*ISOLATION, "burst", "quotaAboveLimitPercent"), 0),
    ("NodeQOSEnsurancePolicy", (*ISOLATION, "burst", "quotaAboveLimitPercent"), 401),
    ("NodeQOSEnsurancePolicy", (*ISOLATION, "burst", "quotaAboveLimitPercent"), "50"),
    ("NodeQOSEnsurancePolicy", (*ISOLATION, "idle", "scope", "qosClasses"), ["Batch"]),
    ("NodeQOSEnsurancePolicy", (*ISOLATION, "idle", "scope", "maxPriority"), 1_000_000_001),
    ("NodeQOSEnsurancePolicy", (*ISOLATION, "idel"), {}),
    ("NodeQOSEnsurancePolicy", (*BATCH, "marginPercent"), 101),
    ("NodeQOSEnsurancePolicy", (*BATCH, "windowSeconds"), 86401),
    ("NodeQOSEnsurancePolicy", (*BATCH, "minIntervalSeconds"), -1),
    ("NodeQOSEnsurancePolicy", (*BATCH, "max", "memory"), "lots"),
    ("NodeQOSEnsurancePolicy", (*BATCH, "min", "cpu"), "-1"),
    ("NodeQOSEnsurancePolicy", (*BATCH, "idle"), "yes"),
    ("NodeQOSEnsurancePolicy", (*RULE, "metricRule", "name"), "cpu_usage"),
    ("NodeQOSEnsurancePolicy", (*RULE, "metricRule", "value"), "-1"),
    ("NodeQOSEnsurancePolicy", (*RULE, "metricRule", "value"), "-0.5"),
    ("AvoidanceAction", ("spec", "scope", "maxPriority"), 1_000_000_001),
    ("AvoidanceAction", ("spec", "eviction", "terminationGracePeriodSeconds"), 0),
    ("AvoidanceAction", ("spec", "eviction", "maxPodsPerRound"), 0),
    ("AvoidanceAction", ("spec", "eviction", "maxPodsPerRound"), 1001),
]


@pytest.mark.parametrize(("kind", "path", "value"), BAD, ids=[f"{k}:{p[-1]}={v}" for k, p, v in BAD])
def test_schema_refuses(kind: str, path: tuple[Any, ...], value: Any) -> None:
    with pytest.raises(jsonschema.ValidationError):
        _validate(_set(_sample(kind), path, value))


GOOD = [
    ("NodeQOSEnsurancePolicy", (*RULE, "metricRule", "value"), "0"),
    ("NodeQOSEnsurancePolicy", (*RULE, "metricRule", "value"), "512Mi"),
    ("NodeQOSEnsurancePolicy", (*BATCH, "max", "memory"), "8Gi"),
    ("NodeQOSEnsurancePolicy", (*BATCH, "min", "cpu"), 2),
    ("NodeQOSEnsurancePolicy", (*ISOLATION, "burst", "quotaAboveLimitPercent"), 1),
    ("NodeQOSEnsurancePolicy", (*ISOLATION, "burst", "quotaAboveLimitPercent"), 400),
    ("AvoidanceAction", ("spec", "scope", "maxPriority"), 1_000_000_000),
    ("AvoidanceAction", ("spec", "eviction", "terminationGracePeriodSeconds"), 1),
    ("AvoidanceAction", ("spec", "eviction", "maxPodsPerRound"), 1000),
]


@pytest.mark.parametrize(("kind", "path", "value"), GOOD, ids=[f"{k}:{p[-1]}={v}" for k, p, v in GOOD])
def test_schema_accepts_the_bounds(kind: str, path: tuple[Any, ...], value: Any) -> None:
    _validate(_set(_sample(kind), path, value))


def test_the_metric_enum_is_the_registry() -> None:
    node = dict(_walk(_schema("NodeQOSEnsurancePolicy")))[".spec.objectiveEnsurances[].metricRule.name"]
    assert node["enum"] == [m.name for m in METRICS]


def _rules(kind: str) -> dict[str, list[str]]:
    return {path: [v["rule"] for v in node["x-kubernetes-validations"]]
            for path, node in _walk(_schema(kind)) if "x-kubernetes-validations" in node}  # fmt: skip


SELECTOR_RULE = (
    "self.operator in ['In', 'NotIn'] ? has(self.values) && size(self.values) > 0 "
    ": !has(self.values) || size(self.values) == 0"
)


@pytest.mark.parametrize(
    ("kind", "path"),
    [
        ("NodeQOSEnsurancePolicy", ".spec.nodeSelector.matchExpressions[]"),
        ("AvoidanceAction", ".spec.scope.namespaceSelector.matchExpressions[]"),
        ("AvoidanceAction", ".spec.scope.podSelector.matchExpressions[]"),
        ("Reservation", ".spec.owners[].labelSelector.matchExpressions[]"),
    ],
)
def test_in_and_notin_need_values(kind: str, path: str) -> None:
    assert _rules(kind)[path] == [SELECTOR_RULE]


def test_cel_rules() -> None:
    assert _rules("PodMigrationJob")[".spec.podRef"] == ["self == oldSelf"]
    value = ".spec.objectiveEnsurances[].metricRule.value"
    assert _rules("NodeQOSEnsurancePolicy")[value] == ["type(self) != int || self >= 0"]
    # a policy is rules, a CPU isolation class, batch capacity, or more; a class section names one
    assert _rules("NodeQOSEnsurancePolicy")[".spec"] == [
        "has(self.objectiveEnsurances) || has(self.cpuIsolation) || has(self.batchCapacity)"]
    assert _rules("NodeQOSEnsurancePolicy")[".spec.cpuIsolation"] == [
        "has(self.idle) || has(self.burst)"]


def test_cpu_isolation_defaults_are_the_parsers() -> None:
    """The schema's defaults and the parser's agree field by field: the idle class picks
    BestEffort pods, burst the pods labelled latency-critical at 100% of their quota."""
    from agent.model.fields import Fields
    from agent.model.isolation import BURST_SCOPE, IDLE_SCOPE
    from agent.model.scope import parse_scope

    policy = _validate({"apiVersion": "qos.waterline.io/v1alpha1", "kind": "NodeQOSEnsurancePolicy",
                        "metadata": {"name": "p"}, "spec": {"cpuIsolation": {"idle": {}, "burst": {}}}})  # fmt: skip
    iso = policy["spec"]["cpuIsolation"]
    assert iso["burst"]["quotaPercent"] == 100
    for section, default in (("idle", IDLE_SCOPE), ("burst", BURST_SCOPE)):
        assert parse_scope(iso[section]["scope"], Fields("NodeQOSEnsurancePolicy", "p")) == default


def test_policies_show_their_cpu_isolation_classes() -> None:
    (version,) = _crds()["NodeQOSEnsurancePolicy"]["spec"]["versions"]
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns["Idle"] == ".spec.cpuIsolation.idle.scope.qosClasses[*]"
    assert columns["Burst%"] == ".spec.cpuIsolation.burst.quotaPercent"


def test_batch_capacity_defaults_are_the_parsers() -> None:
    """The schema's defaults, applied as the API server applies them, parse to the
    parser's own defaults (agent.model.batch)."""
    from agent.model.batch import BatchCapacity
    from agent.model.policy import parse_policy

    policy = _validate({"apiVersion": "qos.waterline.io/v1alpha1", "kind": "NodeQOSEnsurancePolicy",
                        "metadata": {"name": "p"}, "spec": {"batchCapacity": {}}})  # fmt: skip
    assert parse_policy(policy).batch_capacity == BatchCapacity()
    (version,) = _crds()["NodeQOSEnsurancePolicy"]["spec"]["versions"]
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns["BatchMargin%"] == ".spec.batchCapacity.marginPercent"


def test_disable_scheduling_says_prefer_no_schedule() -> None:
    node = dict(_walk(_schema("AvoidanceAction")))[".spec.disableScheduling"]
    assert "PreferNoSchedule" in node["description"] and " NoSchedule" not in node["description"]


@pytest.mark.parametrize("kind", ["NodeQOSEnsurancePolicy", "AvoidanceAction"])
def test_policies_show_validity_and_matched_nodes(kind: str) -> None:
    (version,) = _crds()[kind]["spec"]["versions"]
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns["Valid"] == '.status.conditions[?(@.type=="Valid")].status'
    assert columns["Nodes"] == ".status.matchedNodes"
    assert version["subresources"] == {"status": {}}
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert {"observedGeneration", "matchedNodes", "conditions"} <= set(status)
