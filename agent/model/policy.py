"""NodeQOSEnsurancePolicy and AvoidanceAction: parsing, defaults, validation, scope.

Parsed once into frozen records. Every error names the object and the field. A policy
that is invalid (or names an action that does not exist or is invalid) is rejected as a
whole; every other policy keeps working (``load_policies`` returns the errors beside the
valid objects, the live agent reports them, `simulate` exits 2 on the first).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agent.errors import InvalidObject
from agent.model.batch import BatchCapacity, parse_batch_capacity
from agent.model.fields import Fields, bad, is_number, problem
from agent.model.isolation import BATCH_IDLE, CpuIsolation, parse_cpu_isolation
from agent.model.objects import EVICTABLE_ANNOTATION, Pod
from agent.model.quantity import parse_quantity
from agent.model.registry import BY_NAME
from agent.model.schema import check_known_fields
from agent.model.scope import Scope, parse_scope, selector, whole
from agent.model.selectors import EVERYTHING, LabelSelector

POLICY_KIND = "NodeQOSEnsurancePolicy"
ACTION_KIND = "AvoidanceAction"
STRATEGIES = ("None", "Preview")
DEFAULT_COOL_DOWN = 300
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
    #: The policy's CPU isolation classes for its nodes (``agent.model.isolation``).
    cpu_isolation: CpuIsolation | None = None
    #: The batch capacity its nodes publish (``agent.model.batch``).
    batch_capacity: BatchCapacity | None = None

    def selects(self, node_labels: Mapping[str, str]) -> bool:
        return self.node_selector.matches(node_labels)


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


def _name(raw: Mapping[str, Any], kind: str) -> str:
    meta = raw.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    if not name:
        raise InvalidObject(kind, "", "metadata.name", problem("must be set", name))
    return str(name)


def _ratio(fields: Fields, value: object, key: str, default: float, minimum: float) -> float:
    """A percent field between ``minimum`` and 100; None is the default."""
    if value is None:
        return default
    if not is_number(value) or not math.isfinite(value):
        raise fields.bad(key, "must be a number (percent)", value)
    if not minimum <= value <= 100:
        raise fields.bad(key, f"must be between {minimum:g} and 100", value)
    return float(value)


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


def _throttle(raw: object, fields: Fields) -> CpuThrottle:
    cpu = fields.child("cpuThrottle")
    section = cpu.mapping(fields.mapping(raw).get("cpuThrottle"))
    return CpuThrottle(
        min_cpu_ratio=_ratio(cpu, section.get("minCPURatio"), "minCPURatio", 0.0, 0),
        step_cpu_ratio=_ratio(cpu, section.get("stepCPURatio"), "stepCPURatio", 10.0, 1),
    )


def parse_action(raw: Mapping[str, Any]) -> Action:
    kind = ACTION_KIND
    name = _name(raw, kind)
    fields = Fields(kind, name)
    spec = fields.mapping(raw.get("spec"), "spec")
    at = fields.child("spec")
    cool_down = whole(at, spec.get("coolDownSeconds"), "coolDownSeconds", DEFAULT_COOL_DOWN, 0)
    throttle = None
    if spec.get("throttle") is not None:
        throttle = _throttle(spec.get("throttle"), at.child("throttle"))
    eviction = None
    if spec.get("eviction") is not None:
        eviction = _eviction(spec.get("eviction"), at.child("eviction"))
    if throttle is None and eviction is None:
        raise fields.bad("spec", "must set throttle or eviction (or both)", dict(spec))
    scope = parse_scope(spec.get("scope"), at.child("scope"))
    disable = at.boolean(spec.get("disableScheduling", False), "disableScheduling")
    return Action(name, float(cool_down), throttle, eviction, scope, disable)


def _rule(raw: object, fields: Fields, index: int, policy: str,
          actions: Mapping[str, Action] | None) -> Rule:
    rule = fields.mapping(raw)
    rule_name = fields.string(rule.get("name"), "name", required=True)
    metric_fields = fields.child("metricRule")
    metric_rule = fields.mapping(rule.get("metricRule"), "metricRule")
    metric = metric_rule.get("name")
    if not isinstance(metric, str) or metric not in BY_NAME:
        raise metric_fields.bad("name", f"must be a known metric ({', '.join(BY_NAME)})", metric)
    value = _waterline(metric_fields, metric_rule.get("value"))
    action_name = fields.string(rule.get("actionName"), "actionName", required=True)
    if actions is not None and action_name not in actions:
        raise fields.bad("actionName", "must name an AvoidanceAction that exists and is valid",
                         action_name)
    strategy = rule.get("strategy", "None")
    strategy = fields.choice("None" if strategy is None else strategy, "strategy", STRATEGIES)
    return Rule(
        policy=policy,
        name=rule_name,
        index=index,
        metric=metric,
        value=value,
        avoidance_threshold=whole(fields, rule.get("avoidanceThreshold"), "avoidanceThreshold", 1, 1),
        restore_threshold=whole(fields, rule.get("restoreThreshold"), "restoreThreshold", 1, 1),
        action_name=action_name,
        preview=strategy == "Preview",
    )


def _waterline(fields: Fields, raw: object) -> float:
    """``metricRule.value``: a quantity (``"6"``, ``"28Gi"``, ``80``), finite and >= 0."""
    if raw is None:
        raise fields.bad("value", "must be set", raw)
    try:
        value = parse_quantity(raw)
    except ValueError:
        raise fields.bad("value", 'must be a quantity like "6", "500m", "28Gi" or a number',
                         raw) from None
    if not math.isfinite(value):
        raise fields.bad("value", "must be finite", raw)
    if value < 0:
        raise fields.bad("value", "must be >= 0", value)
    return value


def parse_policy(raw: Mapping[str, Any], actions: Mapping[str, Action] | None = None) -> Policy:
    """Parse a policy. With ``actions`` given, every rule must name one of them. A policy
    with a ``cpuIsolation`` or ``batchCapacity`` section may have no rules."""
    kind = POLICY_KIND
    name = _name(raw, kind)
    fields = Fields(kind, name)
    spec = fields.mapping(raw.get("spec"), "spec")
    node_selector = selector(spec.get("nodeSelector"), kind, name, "spec.nodeSelector")
    isolation = None
    if spec.get("cpuIsolation") is not None:
        isolation = parse_cpu_isolation(spec["cpuIsolation"], fields.child("spec"))
    batch = None
    if spec.get("batchCapacity") is not None:
        batch = parse_batch_capacity(spec["batchCapacity"], fields.child("spec"))
    rules_raw = spec.get("objectiveEnsurances")
    if rules_raw is None and (isolation is not None or batch is not None):
        rules_raw = []
    elif not isinstance(rules_raw, list) or not rules_raw:
        need = "must be a non-empty list" + (
            " (or spec.cpuIsolation or spec.batchCapacity set)" if rules_raw is None else "")
        raise fields.bad("spec.objectiveEnsurances", need, rules_raw)
    rules: list[Rule] = []
    for i, rule_raw in enumerate(rules_raw):
        rule_fields = Fields(kind, name, f"spec.objectiveEnsurances[{i}].")
        rule = _rule(rule_raw, rule_fields, i, name, actions)
        if any(r.name == rule.name for r in rules):
            raise rule_fields.bad("name", "must be unique among the policy's rules", rule.name)
        rules.append(rule)
    return Policy(name, node_selector, tuple(rules), isolation, batch)


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

    def isolation_for_node(self, node_labels: Mapping[str, str]) -> tuple[tuple[str, CpuIsolation], ...]:
        """The CPU isolation sections of the policies selecting the node, by policy name;
        the batch capacity section that decides for the node adds the idle class of its
        batch pods when its ``idle`` is true (the default)."""
        out = [(p.name, p.cpu_isolation) for p in self.for_node(node_labels)
               if p.cpu_isolation is not None]
        batch = self.batch_capacity_for_node(node_labels)
        if batch is not None and batch[1].idle:
            out.append((batch[0], BATCH_IDLE))
        return tuple(out)

    def batch_capacity_for_node(self, node_labels: Mapping[str, str]) -> tuple[str, BatchCapacity] | None:
        """The batch capacity section the node follows, with its policy's name: the first
        policy by name that selects the node and has one (None: the node publishes none)."""
        for p in self.for_node(node_labels):
            if p.batch_capacity is not None:
                return p.name, p.batch_capacity
        return None


def load_policies(raw_policies: Iterable[Mapping[str, Any]],
                  raw_actions: Iterable[Mapping[str, Any]], *, strict: bool = False) -> PolicySet:
    """Parse everything; keep what is valid, collect what is not (never raise).

    ``strict``: a field the CRD does not know makes its object invalid, as the API server
    would refuse it (agent.model.schema); for objects read from files, never for what the
    API server sent."""
    errors: list[InvalidObject] = []
    actions: dict[str, Action] = {}
    for raw in raw_actions:
        try:
            if strict:
                check_known_fields({"kind": ACTION_KIND, **raw})
            action = parse_action(raw)
        except InvalidObject as err:
            errors.append(err)
            continue
        if action.name in actions:
            errors.append(bad(ACTION_KIND, action.name, "metadata.name", "is defined twice", action.name))
            continue
        actions[action.name] = action
    policies: list[Policy] = []
    names: set[str] = set()
    for raw in raw_policies:
        try:
            if strict:
                check_known_fields({"kind": POLICY_KIND, **raw})
            policy = parse_policy(raw, actions)
        except InvalidObject as err:
            errors.append(err)
            continue
        if policy.name in names:
            errors.append(bad(POLICY_KIND, policy.name, "metadata.name", "is defined twice", policy.name))
            continue
        names.add(policy.name)
        policies.append(policy)
    policies.sort(key=lambda p: p.name)
    return PolicySet(tuple(policies), actions, tuple(errors))
