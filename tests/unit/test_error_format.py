"""Every refusal of a policy, an action or an object reads
``<Kind> <name>: <field path> <problem>, got <value>``: an operator finds the line and sees
what was written there, whichever parser refused it. A value no parser expects (a NaN, a
list where a name goes) is refused the same way, never a crash."""

import copy
import math
import re

import pytest

from agent.errors import InvalidObject
from agent.model.objects import parse_node, parse_pdb, parse_pod
from agent.model.policy import load_policies, parse_action, parse_policy
from agent.model.priorityclass import parse_priority_class
from agent.model.queue import parse_queue

FORMAT = re.compile(r"^\S+(?: \S+)?: \S+ .+, got .+$", re.S)
WRONG = ["x", -1, 1.5, True, [], {}, ["a"], {"a": 1}, math.nan, math.inf, ""]

ACTION = {
    "metadata": {"name": "a"},
    "spec": {
        "coolDownSeconds": 300,
        "throttle": {"cpuThrottle": {"minCPURatio": 10, "stepCPURatio": 10}},
        "eviction": {"terminationGracePeriodSeconds": 30, "maxPodsPerRound": 3},
        "scope": {"qosClasses": ["BestEffort"], "maxPriority": 10, "podSelector": {}},
        "disableScheduling": False,
    },
}
POLICY = {
    "metadata": {"name": "p"},
    "spec": {
        "nodeSelector": {"matchLabels": {"pool": "batch"}},
        "objectiveEnsurances": [{
            "name": "r", "metricRule": {"name": "cpu_total_usage", "value": "6"},
            "avoidanceThreshold": 2, "restoreThreshold": 3, "actionName": "a", "strategy": "None",
        }],
    },
}  # fmt: skip
ISOLATED = {
    "metadata": {"name": "p"},
    "spec": {
        "nodeSelector": {"matchLabels": {"pool": "colocated"}},
        "cpuIsolation": {
            "idle": {"scope": {"qosClasses": ["BestEffort"], "maxPriority": 10,
                               "namespaceSelector": {}, "podSelector": {}}},
            "burst": {"quotaPercent": 50, "scope": {"qosClasses": ["Guaranteed"], "podSelector": {}}},
        },
    },
}  # fmt: skip
ISO = "spec.cpuIsolation"
ISOLATION_FIELDS = [
    "spec", ISO, f"{ISO}.idle", f"{ISO}.idle.scope", f"{ISO}.idle.scope.qosClasses",
    f"{ISO}.idle.scope.maxPriority", f"{ISO}.idle.scope.namespaceSelector",
    f"{ISO}.idle.scope.podSelector", f"{ISO}.burst", f"{ISO}.burst.quotaPercent",
    f"{ISO}.burst.scope", f"{ISO}.burst.scope.qosClasses", f"{ISO}.burst.scope.podSelector",
]  # fmt: skip
POD = {
    "metadata": {"name": "p", "namespace": "d", "uid": "u"},
    "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
    "status": {"phase": "Running"},
}
ACTION_FIELDS = [
    "metadata.name", "spec", "spec.coolDownSeconds", "spec.throttle",
    "spec.throttle.cpuThrottle", "spec.throttle.cpuThrottle.minCPURatio",
    "spec.throttle.cpuThrottle.stepCPURatio", "spec.eviction",
    "spec.eviction.terminationGracePeriodSeconds", "spec.eviction.maxPodsPerRound",
    "spec.scope", "spec.scope.qosClasses", "spec.scope.maxPriority", "spec.scope.podSelector",
    "spec.disableScheduling",
]  # fmt: skip
RULE = "spec.objectiveEnsurances.0"
POLICY_FIELDS = [
    "metadata.name", "spec", "spec.nodeSelector", "spec.objectiveEnsurances", RULE,
    f"{RULE}.name", f"{RULE}.metricRule", f"{RULE}.metricRule.name", f"{RULE}.metricRule.value",
    f"{RULE}.avoidanceThreshold", f"{RULE}.restoreThreshold", f"{RULE}.actionName",
    f"{RULE}.strategy",
]  # fmt: skip
POD_FIELDS = [
    "metadata.name", "spec", "status", "spec.containers", "spec.containers.0",
    "spec.containers.0.name", "spec.containers.0.resources",
    "spec.containers.0.resources.requests", "spec.containers.0.resources.requests.cpu",
]  # fmt: skip


def _with(raw: dict, path: str, value: object) -> dict:
    out = copy.deepcopy(raw)
    *parents, last = [int(k) if k.isdigit() else k for k in path.split(".")]
    node = out
    for key in parents:
        node = node[key]
    node[last] = value
    return out


def _refusal(parse, raw) -> str | None:
    """The message of the refusal, or None when the value is accepted."""
    try:
        parse(raw)
    except InvalidObject as err:
        return str(err)
    return None


def _cases(base, fields):
    return [(base, f, v) for f in fields for v in WRONG]


@pytest.mark.parametrize(
    ("parse", "base", "path", "value"),
    [(parse_action, *c) for c in _cases(ACTION, ACTION_FIELDS)]
    + [(lambda r: parse_policy(r, {"a": None}), *c) for c in _cases(POLICY, POLICY_FIELDS)]
    + [(parse_policy, *c) for c in _cases(ISOLATED, ISOLATION_FIELDS)]
    + [(parse_pod, *c) for c in _cases(POD, POD_FIELDS)],
)
def test_every_refusal_has_the_one_format(parse, base, path, value):
    message = _refusal(parse, _with(base, path, value))
    assert message is None or FORMAT.match(message), message


@pytest.mark.parametrize(
    ("parse", "raw", "message"),
    [
        (parse_action, _with(ACTION, "metadata.name", ""),
         "AvoidanceAction: metadata.name must be set, got ''"),
        (parse_action, {"metadata": {"name": "a"}, "spec": {"coolDownSeconds": 5}},
         "AvoidanceAction a: spec must set throttle or eviction (or both), got {'coolDownSeconds': 5}"),
        (parse_action, _with(ACTION, "spec.scope.qosClasses", "BestEffort"),
         "AvoidanceAction a: spec.scope.qosClasses must be a list of BestEffort, Burstable, "
         "Guaranteed, got 'BestEffort'"),
        (parse_action, _with(ACTION, "spec.coolDownSeconds", math.inf),
         "AvoidanceAction a: spec.coolDownSeconds must be an integer, got .inf"),
        (parse_action, _with(ACTION, "spec.scope.podSelector", {"matchLabel": {"a": "b"}}),
         "AvoidanceAction a: spec.scope.podSelector.matchLabel is not a known field "
         "(known: matchLabels, matchExpressions), got {'a': 'b'}"),
        (parse_action, _with(ACTION, "spec.throttle.cpuThrottle.minCPURatio", 101),
         "AvoidanceAction a: spec.throttle.cpuThrottle.minCPURatio must be between 0 and 100, got 101"),
        (parse_policy, _with(POLICY, "spec.objectiveEnsurances", []),
         "NodeQOSEnsurancePolicy p: spec.objectiveEnsurances must be a non-empty list, got []"),
        (parse_policy, _with(POLICY, f"{RULE}.metricRule.name", ["cpu_total_usage"]),
         "NodeQOSEnsurancePolicy p: spec.objectiveEnsurances[0].metricRule.name must be a known "
         "metric (cpu_total_usage, cpu_total_utilization, memory_total_usage, "
         "memory_total_utilization, cpu_pressure, memory_pressure, lc_cpu_wait_ratio, "
         "lc_cpu_throttled_ratio, lc_cpu_pressure), got ['cpu_total_usage']"),
        (parse_policy, {"metadata": {"name": "p"}, "spec": {}},
         "NodeQOSEnsurancePolicy p: spec.objectiveEnsurances must be a non-empty list (or "
         "spec.cpuIsolation or spec.batchCapacity set), got null"),
        (parse_policy, _with(ISOLATED, ISO, {}),
         "NodeQOSEnsurancePolicy p: spec.cpuIsolation must set idle or burst (or both), got {}"),
        (parse_policy, _with(ISOLATED, f"{ISO}.idle.scope.qosClasses", ["Batch"]),
         "NodeQOSEnsurancePolicy p: spec.cpuIsolation.idle.scope.qosClasses[0] must be one of "
         "BestEffort, Burstable, Guaranteed, got 'Batch'"),
        (parse_policy, _with(ISOLATED, f"{ISO}.burst.quotaPercent", 150),
         "NodeQOSEnsurancePolicy p: spec.cpuIsolation.burst.quotaPercent must be between 1 and "
         "100 (the kernel refuses a burst above the quota), got 150"),
        (parse_policy, _with(ISOLATED, f"{ISO}.burst.quotaPercent", "50%"),
         "NodeQOSEnsurancePolicy p: spec.cpuIsolation.burst.quotaPercent must be a number "
         "(percent of the quota), got '50%'"),
        (parse_policy, _with(ISOLATED, f"{ISO}.idle.scop", {}),
         "NodeQOSEnsurancePolicy p: spec.cpuIsolation.idle.scop is not a known field (known: "
         "scope), got {}"),
        (parse_policy, _with(ISOLATED, f"{ISO}.burst.scope.podSelector", {"matchLabel": {}}),
         "NodeQOSEnsurancePolicy p: spec.cpuIsolation.burst.scope.podSelector.matchLabel is not "
         "a known field (known: matchLabels, matchExpressions), got {}"),
        (parse_policy, _with(POLICY, f"{RULE}.metricRule.value", None),
         "NodeQOSEnsurancePolicy p: spec.objectiveEnsurances[0].metricRule.value must be set, got null"),
        (parse_policy, _with(POLICY, f"{RULE}.metricRule.value", "6 cores"),
         "NodeQOSEnsurancePolicy p: spec.objectiveEnsurances[0].metricRule.value must be a "
         "quantity like \"6\", \"500m\", \"28Gi\" or a number, got '6 cores'"),
        (parse_policy, _with(POLICY, f"{RULE}.metricRule.value", math.nan),
         "NodeQOSEnsurancePolicy p: spec.objectiveEnsurances[0].metricRule.value must be finite, got .nan"),
        (parse_policy, _with(POLICY, f"{RULE}.avoidanceThreshold", math.nan),
         "NodeQOSEnsurancePolicy p: spec.objectiveEnsurances[0].avoidanceThreshold must be an integer, got .nan"),
        (parse_policy, _with(POLICY, f"{RULE}.actionName", "gone"),
         "NodeQOSEnsurancePolicy p: spec.objectiveEnsurances[0].actionName must name an "
         "AvoidanceAction that exists and is valid, got 'gone'"),
        (parse_pod, _with(POD, "spec.containers.0.resources.requests.cpu", "1 core"),
         "Pod d/p: spec.containers[0].resources.requests.cpu must be a quantity like \"500m\", "
         "\"2Gi\" or a number, got '1 core'"),
        (parse_pod, _with(POD, "spec.containers.0.resources.requests", "1"),
         "Pod d/p: spec.containers[0].resources.requests must be a mapping of resources, got '1'"),
        (parse_node, {"metadata": {"name": "n"}, "status": {"allocatable": {"cpu": "4Q"}}},
         "Node n: status.allocatable.cpu must be a quantity like \"500m\", \"2Gi\" or a number "
         "(unknown suffix 'Q'), got '4Q'"),
        (parse_pdb, {"metadata": {"name": "b"}, "spec": {"minAvailable": "x%"}},
         "PodDisruptionBudget default/b: spec.minAvailable must be an integer or a percentage, got 'x%'"),
        (parse_queue, {"metadata": {}}, "Queue: metadata.name must be set, got null"),
        (parse_priority_class, {"metadata": {"name": ""}}, "PriorityClass: metadata.name must be set, got ''"),
    ],
)  # fmt: skip
def test_refusals_name_field_problem_and_value(parse, raw, message):
    if parse is parse_policy:  # with its action "a"
        parse = lambda r: parse_policy(r, {"a": None})  # noqa: E731
    assert _refusal(parse, raw) == message


def test_a_twice_defined_name_is_refused_in_the_format_and_the_first_is_kept():
    loaded = load_policies([POLICY, POLICY], [ACTION, ACTION])
    assert [str(e) for e in loaded.errors] == [
        "AvoidanceAction a: metadata.name is defined twice, got 'a'",
        "NodeQOSEnsurancePolicy p: metadata.name is defined twice, got 'p'",
    ]
    assert [p.name for p in loaded.policies] == ["p"] and list(loaded.actions) == ["a"]


def test_a_duplicate_rule_name_names_the_second_rule():
    rules = POLICY["spec"]["objectiveEnsurances"] * 2  # type: ignore[index]
    message = _refusal(
        lambda r: parse_policy(r, {"a": None}), _with(POLICY, "spec.objectiveEnsurances", rules)
    )
    assert message == (
        "NodeQOSEnsurancePolicy p: spec.objectiveEnsurances[1].name must be unique among the "
        "policy's rules, got 'r'"
    )


def test_a_refusal_quotes_the_value_as_the_yaml_it_was_written_in():
    """An operator wrote ``true``, ``null``, ``.nan``: the error says so, not Python's
    ``True``, ``None``, ``nan`` (every parser, through the one value format)."""
    import yaml

    def refusal(parse, text):
        return _refusal(parse, yaml.safe_load(text))

    action = "metadata: {name: a}\nspec: {coolDownSeconds: true}\n"
    assert refusal(parse_action, action) == "AvoidanceAction a: spec.coolDownSeconds must be an integer, got true"
    pod = "metadata: {name: p, namespace: d}\nspec: {priority: true, containers: []}\nstatus: {}\n"
    assert refusal(parse_pod, pod) == "Pod d/p: spec.priority must be an integer, got true"
    assert refusal(parse_node, "metadata: {name: null}\n") == "Node: metadata.name must be set, got null"
    rule = "{name: r, metricRule: {name: cpu_total_usage, value: .nan}, actionName: a}"
    policy = f"metadata: {{name: p}}\nspec: {{objectiveEnsurances: [{rule}]}}\n"
    assert refusal(lambda r: parse_policy(r, {"a": None}), policy) == (
        "NodeQOSEnsurancePolicy p: spec.objectiveEnsurances[0].metricRule.value must be finite, got .nan"
    )
    bad_list = "metadata: {name: b, namespace: d}\nspec: {minAvailable: [false, null, 'x']}\n"
    assert refusal(parse_pdb, bad_list) == (
        "PodDisruptionBudget d/b: spec.minAvailable must be an integer or a percentage, got [false, null, 'x']"
    )
