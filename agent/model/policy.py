"""NodeQOSEnsurancePolicy and AvoidanceAction: parsing, defaults, validation, scope.

Parsed once into frozen records. Every error names the object and the field. A policy
that is invalid (or names an action that does not exist or is invalid) is rejected as a
whole; every other policy keeps working (``load_policies`` returns the errors beside the
valid objects, the live agent reports them, `simulate` exits 2 on the first).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agent.errors import InvalidObject
from agent.model.fields import Fields
from agent.model.objects import (
    BEST_EFFORT,
    BURSTABLE,
    EVICTABLE_ANNOTATION,
    QOS_CLASSES,
    Pod,
)
from agent.model.quantity import parse_quantity
from agent.model.registry import BY_NAME
from agent.model.selectors import EVERYTHING, LabelSelector, parse_label_selector

POLICY_KIND = "NodeQOSEnsurancePolicy"
ACTION_KIND = "AvoidanceAction"
STRATEGIES = ("None", "Preview")
DEFAULT_COOL_DOWN = 300
DEFAULT_MAX_PRIORITY = 999_999
#: The highest user priority (DESIGN "Validation"; the CRD's maximum): above it lie only
#: the system-critical classes, which are never candidates.
MAX_PRIORITY = 1_000_000_000
MAX_PODS_PER_ROUND = 1000


@dataclass(frozen=True, slots=True)
class Rule:
    """One objectiveEnsurance of a policy."""

    policy: str
    name: str
    index: int
    metric: str
    value: float
    avoidance_threshold: int = 1
    restore_threshold: int = 1
    action_name: str = ""
    preview: bool = False

    @property
    def key(self) -> str:
        return f"{self.policy}/{self.name}"

    @property
    def precedence(self) -> tuple[float, str, int]:
        """The governing order of rules merged into one waterline: lowest value, then
        policy name, then rule order."""
        return (self.value, self.policy, self.index)


@dataclass(frozen=True, slots=True)
class Policy:
    name: str
    node_selector: LabelSelector = EVERYTHING
    rules: tuple[Rule, ...] = ()

    def selects(self, node_labels: Mapping[str, str]) -> bool:
        return self.node_selector.matches(node_labels)


@dataclass(frozen=True, slots=True)
class Scope:
    qos_classes: frozenset[str] = frozenset({BEST_EFFORT, BURSTABLE})
    max_priority: int = DEFAULT_MAX_PRIORITY
    namespace_selector: LabelSelector = EVERYTHING
    pod_selector: LabelSelector = EVERYTHING

    def admits(self, pod: Pod, namespace_labels: Mapping[str, str]) -> bool:
        return (
            pod.qos_class in self.qos_classes
            and pod.priority <= self.max_priority
            and self.pod_selector.matches(pod.labels)
            and self.namespace_selector.matches(namespace_labels)
        )


@dataclass(frozen=True, slots=True)
class CpuThrottle:
    min_cpu_ratio: float = 0.0  # percent of the limit (or node cores): the floor
    step_cpu_ratio: float = 10.0  # percent of the limit (or node cores): one restore step


@dataclass(frozen=True, slots=True)
class Eviction:
    #: None: the pod's own grace period (the request sends none).
    termination_grace_period_seconds: int | None = None
    #: At most this many evictions per round on a node (None: no per-round cap).
    max_pods_per_round: int | None = None


@dataclass(frozen=True, slots=True)
class Action:
    name: str
    cool_down_seconds: float = DEFAULT_COOL_DOWN
    throttle: CpuThrottle | None = None
    eviction: Eviction | None = None
    scope: Scope = field(default_factory=Scope)
    disable_scheduling: bool = False


def never_candidate_reason(pod: Pod) -> str | None:
    """Why a pod may never be throttled or evicted, whatever an action's scope says."""
    if pod.is_mirror:
        return "mirror or static pod"
    if pod.is_daemonset:
        return "DaemonSet pod"
    if pod.is_terminating:
        return "being deleted"
    if pod.is_protected:
        return "annotated qos.waterline.io/protected"
    if pod.is_system_critical:
        return "system-critical priority"
    if pod.phase != "Running":
        return f"phase {pod.phase}"
    return None


def never_evicted_reason(pod: Pod) -> str | None:
    """Why a candidate may be throttled (reversible) but never evicted: nothing would
    recreate a pod with no controller owner, unless it is annotated evictable."""
    if pod.controller is None and not pod.marked_evictable:
        return f"no controller owner (annotate {EVICTABLE_ANNOTATION}: \"true\" to allow)"
    return None


# -- parsing -------------------------------------------------------------------------


def _name(raw: Mapping[str, Any]) -> str:
    meta = raw.get("metadata")
    return str(meta.get("name") or "") if isinstance(meta, dict) else ""


def _int(value: object, kind: str, name: str, path: str, default: int, minimum: int,
         maximum: int | None = None) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
        raise InvalidObject(kind, name, path, f"must be an integer, got {value!r}")
    value = int(value)
    if value < minimum:
        raise InvalidObject(kind, name, path, f"must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise InvalidObject(kind, name, path, f"must be <= {maximum}, got {value}")
    return value


def _number(value: object, kind: str, name: str, path: str, default: float, minimum: float,
            maximum: float) -> float:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidObject(kind, name, path, f"must be a number, got {value!r}")
    if not minimum <= value <= maximum:
        raise InvalidObject(kind, name, path, f"must be between {minimum:g} and {maximum:g}, got {value}")
    return float(value)


def _mapping(value: object, kind: str, name: str, path: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidObject(kind, name, path, f"must be a mapping, got {type(value).__name__}")
    return value


def _selector(value: object, kind: str, name: str, path: str) -> LabelSelector:
    try:
        return parse_label_selector(value, path)
    except ValueError as err:
        text = str(err)
        field_path, _, message = text.partition(": ")
        raise InvalidObject(kind, name, field_path, message or text) from None


def _eviction(raw: object, fields: Fields) -> Eviction:
    section = fields.mapping(raw)
    grace = section.get("terminationGracePeriodSeconds")
    most = section.get("maxPodsPerRound")
    return Eviction(
        termination_grace_period_seconds=None
        if grace is None
        else fields.integer(grace, "terminationGracePeriodSeconds", minimum=1),
        max_pods_per_round=None
        if most is None
        else fields.integer(most, "maxPodsPerRound", minimum=1, maximum=MAX_PODS_PER_ROUND),
    )


def parse_action(raw: Mapping[str, Any]) -> Action:
    kind, name = ACTION_KIND, _name(raw)
    if not name:
        raise InvalidObject(kind, "", "metadata.name", "must be set")
    spec = _mapping(raw.get("spec"), kind, name, "spec")
    cool_down = _int(spec.get("coolDownSeconds"), kind, name, "spec.coolDownSeconds",
                     DEFAULT_COOL_DOWN, 0)
    throttle = None
    throttle_raw = _mapping(spec.get("throttle"), kind, name, "spec.throttle")
    if spec.get("throttle") is not None:
        cpu = _mapping(throttle_raw.get("cpuThrottle"), kind, name, "spec.throttle.cpuThrottle")
        throttle = CpuThrottle(
            min_cpu_ratio=_number(cpu.get("minCPURatio"), kind, name,
                                  "spec.throttle.cpuThrottle.minCPURatio", 0.0, 0, 100),
            step_cpu_ratio=_number(cpu.get("stepCPURatio"), kind, name,
                                   "spec.throttle.cpuThrottle.stepCPURatio", 10.0, 1, 100),
        )
    eviction = None
    if spec.get("eviction") is not None:
        eviction = _eviction(spec.get("eviction"), Fields(kind, name, "spec.eviction."))
    if throttle is None and eviction is None:
        raise InvalidObject(kind, name, "spec", "must set throttle or eviction (or both)")
    scope_raw = _mapping(spec.get("scope"), kind, name, "spec.scope")
    qos_raw = scope_raw.get("qosClasses")
    if qos_raw is None:
        qos = Scope().qos_classes
    else:
        if not isinstance(qos_raw, list):
            raise InvalidObject(kind, name, "spec.scope.qosClasses", "must be a list")
        for i, q in enumerate(qos_raw):
            if q not in QOS_CLASSES:
                raise InvalidObject(kind, name, f"spec.scope.qosClasses[{i}]",
                                    f"must be one of {list(QOS_CLASSES)}, got {q!r}")
        qos = frozenset(qos_raw)
    scope = Scope(
        qos_classes=qos,
        max_priority=_int(scope_raw.get("maxPriority"), kind, name, "spec.scope.maxPriority",
                          DEFAULT_MAX_PRIORITY, -(2**31), MAX_PRIORITY),
        namespace_selector=_selector(scope_raw.get("namespaceSelector"), kind, name,
                                     "spec.scope.namespaceSelector"),
        pod_selector=_selector(scope_raw.get("podSelector"), kind, name, "spec.scope.podSelector"),
    )
    disable = spec.get("disableScheduling", False)
    if not isinstance(disable, bool):
        raise InvalidObject(kind, name, "spec.disableScheduling", f"must be a boolean, got {disable!r}")
    return Action(name, float(cool_down), throttle, eviction, scope, disable)


def parse_policy(raw: Mapping[str, Any], actions: Mapping[str, Action] | None = None) -> Policy:
    """Parse a policy. With ``actions`` given, every rule must name one of them."""
    kind, name = POLICY_KIND, _name(raw)
    if not name:
        raise InvalidObject(kind, "", "metadata.name", "must be set")
    spec = _mapping(raw.get("spec"), kind, name, "spec")
    selector = _selector(spec.get("nodeSelector"), kind, name, "spec.nodeSelector")
    rules_raw = spec.get("objectiveEnsurances")
    if not isinstance(rules_raw, list) or not rules_raw:
        raise InvalidObject(kind, name, "spec.objectiveEnsurances", "must be a non-empty list")
    rules: list[Rule] = []
    seen: set[str] = set()
    for i, rule_raw in enumerate(rules_raw):
        path = f"spec.objectiveEnsurances[{i}]"
        rule = _mapping(rule_raw, kind, name, path)
        rule_name = rule.get("name")
        if not isinstance(rule_name, str) or not rule_name:
            raise InvalidObject(kind, name, f"{path}.name", "must be a non-empty string")
        if rule_name in seen:
            raise InvalidObject(kind, name, f"{path}.name", f"duplicate rule name {rule_name!r}")
        seen.add(rule_name)
        metric_rule = _mapping(rule.get("metricRule"), kind, name, f"{path}.metricRule")
        metric = metric_rule.get("name")
        if metric not in BY_NAME:
            raise InvalidObject(kind, name, f"{path}.metricRule.name",
                                f"unknown metric {metric!r} (known: {', '.join(BY_NAME)})")
        if metric_rule.get("value") is None:
            raise InvalidObject(kind, name, f"{path}.metricRule.value", "must be set")
        try:
            value = parse_quantity(metric_rule.get("value"))
        except ValueError as err:
            raise InvalidObject(kind, name, f"{path}.metricRule.value", str(err)) from None
        if value < 0:
            raise InvalidObject(kind, name, f"{path}.metricRule.value", f"must be >= 0, got {value}")
        action_name = rule.get("actionName")
        if not isinstance(action_name, str) or not action_name:
            raise InvalidObject(kind, name, f"{path}.actionName", "must name an AvoidanceAction")
        if actions is not None and action_name not in actions:
            raise InvalidObject(kind, name, f"{path}.actionName",
                                f"AvoidanceAction {action_name!r} does not exist or is invalid")
        strategy = rule.get("strategy", "None")
        if strategy is None:
            strategy = "None"
        if strategy not in STRATEGIES:
            raise InvalidObject(kind, name, f"{path}.strategy",
                                f"must be one of {list(STRATEGIES)}, got {strategy!r}")
        rules.append(Rule(
            policy=name,
            name=rule_name,
            index=i,
            metric=str(metric),
            value=value,
            avoidance_threshold=_int(rule.get("avoidanceThreshold"), kind, name,
                                     f"{path}.avoidanceThreshold", 1, 1),
            restore_threshold=_int(rule.get("restoreThreshold"), kind, name,
                                   f"{path}.restoreThreshold", 1, 1),
            action_name=action_name,
            preview=strategy == "Preview",
        ))
    return Policy(name, selector, tuple(rules))


@dataclass(frozen=True)
class PolicySet:
    """The valid policies and actions, and what was rejected (errors name object and field)."""

    policies: tuple[Policy, ...] = ()
    actions: Mapping[str, Action] = field(default_factory=dict)
    errors: tuple[InvalidObject, ...] = ()

    def for_node(self, node_labels: Mapping[str, str]) -> tuple[Policy, ...]:
        return tuple(p for p in self.policies if p.selects(node_labels))

    def rules_for_node(self, node_labels: Mapping[str, str]) -> tuple[Rule, ...]:
        return tuple(r for p in self.for_node(node_labels) for r in p.rules)


def load_policies(raw_policies: Iterable[Mapping[str, Any]],
                  raw_actions: Iterable[Mapping[str, Any]]) -> PolicySet:
    """Parse everything; keep what is valid, collect what is not (never raise)."""
    errors: list[InvalidObject] = []
    actions: dict[str, Action] = {}
    for raw in raw_actions:
        try:
            action = parse_action(raw)
        except InvalidObject as err:
            errors.append(err)
            continue
        if action.name in actions:
            errors.append(InvalidObject(ACTION_KIND, action.name, "metadata.name", "is defined twice"))
            continue
        actions[action.name] = action
    policies: list[Policy] = []
    names: set[str] = set()
    for raw in raw_policies:
        try:
            policy = parse_policy(raw, actions)
        except InvalidObject as err:
            errors.append(err)
            continue
        if policy.name in names:
            errors.append(InvalidObject(POLICY_KIND, policy.name, "metadata.name", "is defined twice"))
            continue
        names.add(policy.name)
        policies.append(policy)
    policies.sort(key=lambda p: p.name)
    return PolicySet(tuple(policies), actions, tuple(errors))
