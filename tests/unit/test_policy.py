import pytest

from agent.errors import InvalidObject
from agent.model.objects import parse_pod
from agent.model.policy import (
    load_policies,
    never_candidate_reason,
    never_evicted_reason,
    parse_action,
    parse_policy,
)
from tests.builders import action, pod, policy, rule


def test_action_defaults():
    parsed = parse_action(action("a", throttle={}))
    assert parsed.cool_down_seconds == 300
    assert parsed.throttle is not None and parsed.throttle.min_cpu_ratio == 0
    assert parsed.throttle.step_cpu_ratio == 10
    assert parsed.eviction is None
    assert parsed.scope.qos_classes == {"BestEffort", "Burstable"}
    assert parsed.scope.max_priority == 999999


def test_policy_defaults_and_quantity_values():
    parsed = parse_policy(policy("p", [rule("mem", "memory_total_usage", "28Gi", "a")]))
    only = parsed.rules[0]
    assert only.value == 28 * 2**30
    assert (only.avoidance_threshold, only.restore_threshold, only.preview) == (1, 1, False)
    assert only.key == "p/mem"
    assert parsed.selects({"any": "labels"})


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (action("a"), "spec"),  # neither throttle nor eviction
        (action("a", throttle={"minCPURatio": 101}), "spec.throttle.cpuThrottle.minCPURatio"),
        (action("a", throttle={"minCPURatio": -1}), "spec.throttle.cpuThrottle.minCPURatio"),
        (action("a", throttle={"stepCPURatio": 0}), "spec.throttle.cpuThrottle.stepCPURatio"),
        (action("a", throttle={"stepCPURatio": "ten"}), "spec.throttle.cpuThrottle.stepCPURatio"),
        (action("a", throttle={}, cool_down=-5), "spec.coolDownSeconds"),
        (action("a", throttle={}, scope={"qosClasses": ["Gold"]}), "spec.scope.qosClasses[0]"),
        (action("a", throttle={}, scope={"podSelector": {"matchExpressions": [{"key": "x", "operator": "Near"}]}}),
         "spec.scope.podSelector.matchExpressions[0].operator"),
        (action("a", eviction={"terminationGracePeriodSeconds": -1}),
         "spec.eviction.terminationGracePeriodSeconds"),
        (action("a", eviction={}, scope={"maxPriority": 2147483647}), "spec.scope.maxPriority"),
    ],
)
def test_bad_actions_name_the_field(raw, field):
    with pytest.raises(InvalidObject) as err:
        parse_action(raw)
    assert err.value.kind == "AvoidanceAction"
    assert err.value.name == "a"
    assert err.value.field == field
    assert "AvoidanceAction a" in str(err.value)


@pytest.mark.parametrize(
    ("rule_raw", "field"),
    [
        (rule("r", "cpu_total_usag", "6", "a"), "spec.objectiveEnsurances[0].metricRule.name"),
        (rule("r", "cpu_total_usage", "six", "a"), "spec.objectiveEnsurances[0].metricRule.value"),
        (rule("r", "cpu_total_usage", "6", "a", avoidanceThreshold=0),
         "spec.objectiveEnsurances[0].avoidanceThreshold"),
        (rule("r", "cpu_total_usage", "6", "a", restoreThreshold=0),
         "spec.objectiveEnsurances[0].restoreThreshold"),
        (rule("r", "cpu_total_usage", "6", "a", strategy="Maybe"), "spec.objectiveEnsurances[0].strategy"),
        (rule("r", "cpu_total_usage", "6", "missing"), "spec.objectiveEnsurances[0].actionName"),
    ],
)
def test_bad_rules_name_the_policy_and_field(rule_raw, field):
    with pytest.raises(InvalidObject) as err:
        parse_policy(policy("cpu-guard", [rule_raw]), {"a": parse_action(action("a", throttle={}))})
    assert err.value.name == "cpu-guard"
    assert err.value.field == field


def test_max_priority_is_at_most_the_highest_user_priority():
    """DESIGN "Validation" and the CRD: maxPriority <= 1000000000. Issue 10's policy with
    maxPriority 2147483647 was refused by the API server but accepted by the parser
    (`simulate`, --local objects)."""
    assert parse_action(action("a", eviction={}, scope={"maxPriority": 1000000000})).scope.max_priority == 1000000000
    with pytest.raises(InvalidObject) as err:
        parse_action(action("a", eviction={}, scope={"maxPriority": 1000000001}))
    assert str(err.value) == "AvoidanceAction a: spec.scope.maxPriority must be <= 1000000000, got 1000000001"


def test_load_policies_keeps_the_valid_ones():
    loaded = load_policies(
        [
            policy("good", [rule("r", "cpu_total_usage", "6", "t")]),
            policy("bad", [rule("r", "cpu_total_usage", "6", "broken")]),
            policy("typo", [rule("r", "cpu_total_usag", "6", "t")]),
        ],
        [action("t", throttle={}), action("broken")],
    )
    assert [p.name for p in loaded.policies] == ["good"]
    assert set(loaded.actions) == {"t"}
    fields = sorted((e.kind, e.name, e.field) for e in loaded.errors)
    assert fields == [
        ("AvoidanceAction", "broken", "spec"),
        ("NodeQOSEnsurancePolicy", "bad", "spec.objectiveEnsurances[0].actionName"),
        ("NodeQOSEnsurancePolicy", "typo", "spec.objectiveEnsurances[0].metricRule.name"),
    ]


def test_node_pools_by_selector():
    loaded = load_policies(
        [
            policy("batch", [rule("r", "cpu_total_usage", "6", "t")],
                   {"matchLabels": {"pool": "batch"}}),
            policy("not-gpu", [rule("r", "cpu_total_usage", "7", "t")],
                   {"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}]}),
        ],
        [action("t", throttle={})],
    )
    assert [p.name for p in loaded.for_node({"pool": "batch"})] == ["batch", "not-gpu"]
    assert [p.name for p in loaded.for_node({"pool": "web", "gpu": "a100"})] == []


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"annotations": {"kubernetes.io/config.mirror": "abc"}}, "mirror or static pod"),
        ({"annotations": {"kubernetes.io/config.source": "file"}}, "mirror or static pod"),
        ({"owner_kind": "DaemonSet"}, "DaemonSet pod"),
        ({"deleting": True}, "being deleted"),
        ({"annotations": {"qos.waterline.io/protected": "true"}}, "annotated qos.waterline.io/protected"),
        ({"priority": 2_000_000_000}, "system-critical priority"),
        ({}, None),
        ({"annotations": {"qos.waterline.io/protected": "false"}}, None),
    ],
)
def test_never_candidates(kwargs, reason):
    assert never_candidate_reason(parse_pod(pod("p", **kwargs))) == reason


def test_scope_filters():
    scope = parse_action(action("a", throttle={}, scope={
        "qosClasses": ["BestEffort"], "maxPriority": 100,
        "namespaceSelector": {"matchLabels": {"team": "batch"}},
        "podSelector": {"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["critical"]}]},
    })).scope
    be = parse_pod(pod("p", priority=100))
    assert scope.admits(be, {"team": "batch"})
    assert not scope.admits(be, {"team": "web"})
    assert not scope.admits(parse_pod(pod("p", priority=101)), {"team": "batch"})
    assert not scope.admits(parse_pod(pod("p", labels={"tier": "critical"})), {"team": "batch"})
    assert not scope.admits(parse_pod(pod("p", requests={"cpu": "1"})), {"team": "batch"})  # Burstable


def test_eviction_limits_and_grace_period():
    parsed = parse_action(action("a", eviction={"maxPodsPerRound": 3, "terminationGracePeriodSeconds": 1}))
    assert parsed.eviction is not None
    assert (parsed.eviction.max_pods_per_round, parsed.eviction.termination_grace_period_seconds) == (3, 1)
    unset = parse_action(action("a", eviction={})).eviction
    assert unset is not None and (unset.max_pods_per_round, unset.termination_grace_period_seconds) == (None, None)
    for bad, message in [
        ({"maxPodsPerRound": 0}, "spec.eviction.maxPodsPerRound must be >= 1, got 0"),
        ({"maxPodsPerRound": 1001}, "spec.eviction.maxPodsPerRound must be <= 1000, got 1001"),
        ({"maxPodsPerRound": "2"}, "spec.eviction.maxPodsPerRound must be an integer, got '2'"),
        ({"terminationGracePeriodSeconds": 0}, "spec.eviction.terminationGracePeriodSeconds must be >= 1, got 0"),
        ([], "spec.eviction must be a mapping, got []"),
    ]:
        with pytest.raises(InvalidObject) as err:
            parse_action(action("a", eviction=bad))  # type: ignore[arg-type]
        assert str(err.value) == f"AvoidanceAction a: {message}"


def test_ownerless_pods_are_throttled_but_never_evicted_unless_annotated():
    bare = pod("bare")
    bare["metadata"]["ownerReferences"] = []
    assert never_candidate_reason(parse_pod(bare)) is None
    assert "no controller owner" in (never_evicted_reason(parse_pod(bare)) or "")
    not_controller = pod("nc")
    not_controller["metadata"]["ownerReferences"][0]["controller"] = False
    assert never_evicted_reason(parse_pod(not_controller)) is not None
    assert never_evicted_reason(parse_pod(pod("owned"))) is None
    assert never_evicted_reason(parse_pod(
        {**bare, "metadata": {**bare["metadata"], "annotations": {"qos.waterline.io/evictable": "true"}}}
    )) is None
