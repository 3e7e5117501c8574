"""What a tick tells the cluster as Kubernetes Events (pure: no API here).

* on the pod: ``Throttled``, ``Restored``, ``Evicted`` and ``EvictionBlocked`` (a budget
  refused), each with its reason (rule, action, metric, value, waterline, gap); an
  eviction answered after its tick gets its ``Evicted`` when the watch shows the pod
  terminating (the cluster brake counts these Events, so none may be missing);
* on the node: ``RuleTriggered`` / ``RuleRestored`` when a rule changes state.

Invalid policies and actions are only logged by the agents (``agent.node.incluster``):
their Events (``InvalidPolicy`` / ``InvalidAction``) are the controller's, which owns the
objects' status.

Decisions where the issue is silent:

* Preview actions make no pod events: nothing happened to the pod (the log and the
  metrics show them); evictions that failed or found the pod gone make none either;
* rule events compare the states with the ones last *reported*, not last seen: when the
  API server was unreachable the events were dropped, and once it is back the difference
  is reported from the current state (one RuleTriggered for a rule still triggered, none
  for a rule that triggered and restored meanwhile);

Flooding is the recorder's job (``agent.kube.events``: per-object token bucket, similar
messages combined), so a hot node costs a bounded number of writes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from agent.kube.events import (
    EVICTED,
    EVICTION_BLOCKED,
    NORMAL,
    RESTORED,
    RULE_RESTORED,
    RULE_TRIGGERED,
    THROTTLED,
    WARNING,
    ObjectRef,
    node_ref,
    pod_ref,
)
from agent.model import analysis
from agent.model.eviction import EvictionResult
from agent.model.objects import Pod
from agent.model.policy import Rule
from agent.node.tick import TickReport
from engine.records import ActionRecord


@dataclass(frozen=True, slots=True)
class EventIntent:
    ref: ObjectRef
    type: str  # Normal | Warning
    reason: str
    message: str


def _num(value: float | None) -> str:
    return "?" if value is None else f"{value:.4g}"


def _why(record: ActionRecord) -> str:
    return (
        f"rule {record.rule} (action {record.action_name}): {record.metric} "
        f"{_num(record.value)} above waterline {_num(record.waterline)}, "
        f"gap {_num(record.gap_before)} -> {_num(record.gap_after)}"
    )


def _pod(key: str, pods: Mapping[str, Pod]) -> ObjectRef:
    pod = pods.get(key)
    if pod is not None:
        return pod_ref(pod)
    namespace, _, name = key.partition("/")
    return ObjectRef("Pod", name, namespace)


def action_event(record: ActionRecord, pods: Mapping[str, Pod]) -> EventIntent | None:
    """The pod event of one action, or None when nothing happened to the pod."""
    if record.preview:
        return None
    ref = _pod(record.pod, pods)
    if record.action == "throttle":
        return EventIntent(
            ref, WARNING, THROTTLED, f"CPU capped at {_num(record.cpu_cap)} cores by {_why(record)}"
        )
    if record.action == "restore":
        if record.reason == "action removed":
            text = f"CPU cap lifted: action {record.action_name} no longer applies to this node"
        elif record.cpu_cap is None:
            text = f"CPU cap lifted (back to its limit) by rule {record.rule}"
        else:
            text = f"CPU cap raised to {_num(record.cpu_cap)} cores by rule {record.rule}"
        return EventIntent(ref, NORMAL, RESTORED, text)
    if record.action == "evict":
        if record.result == EvictionResult.EVICTED.value:
            return EventIntent(ref, WARNING, EVICTED, f"Evicted by {_why(record)}")
        if record.result == EvictionResult.BLOCKED_BY_PDB.value:
            return EventIntent(
                ref, WARNING, EVICTION_BLOCKED,
                f"Eviction refused by a PodDisruptionBudget; wanted by {_why(record)}",
            )  # fmt: skip
    return None


def rule_events(
    node_name: str,
    rules: Iterable[Rule],
    states: Mapping[str, str],
    reported: Mapping[str, str],
    usage: Mapping[str, float],
) -> list[EventIntent]:
    """RuleTriggered / RuleRestored on the node for rules whose state moved since the
    states last reported."""
    out: list[EventIntent] = []
    ref = node_ref(node_name)
    for rule in sorted(rules, key=lambda r: r.key):
        now, before = states.get(rule.key), reported.get(rule.key)
        value = _num(usage.get(rule.metric))
        if now == analysis.TRIGGERED and before != analysis.TRIGGERED:
            out.append(EventIntent(
                ref, WARNING, RULE_TRIGGERED,
                f"rule {rule.key} triggered: {rule.metric} {value} above {_num(rule.value)} "
                f"(action {rule.action_name}{', Preview' if rule.preview else ''})",
            ))  # fmt: skip
        elif before == analysis.TRIGGERED and now == analysis.RESTORED:
            out.append(EventIntent(
                ref, NORMAL, RULE_RESTORED,
                f"rule {rule.key} restored: {rule.metric} {value} at or below {_num(rule.value)}",
            ))  # fmt: skip
    return out


def tick_events(
    node_name: str,
    report: TickReport,
    rules: Iterable[Rule],
    reported: Mapping[str, str],
    pods: Mapping[str, Pod],
) -> list[EventIntent]:
    """Every event of one tick: the node's rule changes first, then the pods' actions in
    the order they were taken."""
    out = rule_events(node_name, rules, report.rules, reported, report.usage)
    for late in report.late_evictions:
        out.append(EventIntent(
            _pod(late.pod, pods), WARNING, EVICTED,
            f"Evicted by action {late.action}: the eviction was answered after its tick "
            "stopped waiting, and the pod now terminates",
        ))  # fmt: skip
    for record in report.actions:
        intent = action_event(record, pods)
        if intent is not None:
            out.append(intent)
    return out
