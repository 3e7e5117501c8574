"""The strategies the co-location benchmark compares, as node brains for the real loop.

All of them run the product's own loop, collectors, analyzer, engine and CFS-quota
throttler; they differ only in the rule they watch and in how much they act:

* ``none``: no policy (the agent measures, and does nothing);
* ``waterline-cpu``: Waterline on a node CPU waterline (``cpu_total_usage``);
* ``waterline-lc``: Waterline on what the victim suffers (``lc_cpu_wait_ratio``);
* ``floor-all``: the same CPU rule, but every candidate is throttled to its floor as soon
  as it triggers (crane-agent before its precise-execution proposal);
* ``one-per-tick``: the same CPU rule, one more pod throttled to its floor a tick (the
  kubelet's pace: one pod at a time, then measure again);
* ``idle``: no rule at all: the batch pods in the idle class (``cpu.idle`` on their pod
  cgroups, ``spec.cpuIsolation.idle``): who runs first rather than how much;
* ``idle-burst``: the same, and CPU burst (100% of the quota) for the latency-critical
  pod, so that a pod near its own limit borrows what it left unused instead of waiting
  for the next period.

The two reference strategies reuse the analyzer and the engine: the throttle-down gap is
made bigger than any pod (the engine then caps each candidate at its floor), and for one
pod a tick the engine sees only the pods already throttled plus the next candidate.
Throttle-up is Waterline's for all.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from agent.model.analysis import THROTTLE_DOWN
from agent.model.numbers import EPSILON
from agent.model.objects import Node, Pod
from agent.model.policy import Action, PolicySet
from agent.model.registry import derive_utilization
from agent.model.usage import PodUsage
from agent.node.analyzer import ACTION_TYPES, analyze
from agent.node.tick import NodeBrain, TickReport
from executors.actuators import CpuIsolator, CpuThrottler, Evictor
from executors.caps import throttle_floor
from executors.drive import Hands, drive
from executors.engine import plan_actions
from executors.sorters import SORTERS, Candidate
from executors.work import TickContext

QOS = "qos.waterline.io/v1alpha1"
LC_LABEL = "qos.waterline.io/latency-critical"
#: A gap no pod can close: the engine throttles every candidate down to its floor.
WHOLE = 1e9


def rules(metric: str, value: float, min_ratio: int, step_ratio: int) -> list[dict[str, Any]]:
    """One rule on ``metric`` and the throttle action every strategy shares (the
    latency-critical pod is never a candidate, even when it is Burstable)."""
    policy = {
        "apiVersion": QOS, "kind": "NodeQOSEnsurancePolicy", "metadata": {"name": "bench"},
        "spec": {"objectiveEnsurances": [{
            "name": metric, "metricRule": {"name": metric, "value": f"{value:g}"},
            "avoidanceThreshold": 1, "restoreThreshold": 3, "actionName": "throttle-batch",
        }]},
    }  # fmt: skip
    action = {
        "apiVersion": QOS, "kind": "AvoidanceAction", "metadata": {"name": "throttle-batch"},
        "spec": {
            "throttle": {"cpuThrottle": {"minCPURatio": min_ratio, "stepCPURatio": step_ratio}},
            "scope": {"qosClasses": ["BestEffort", "Burstable"], "podSelector": {
                "matchExpressions": [{"key": LC_LABEL, "operator": "NotIn", "values": ["true"]}]}},
        },
    }  # fmt: skip
    return [policy, action]


class ReferenceBrain(NodeBrain):
    """NodeBrain's tick with the throttle-down gap made whole; ``one_at_a_time`` shows
    the engine one unthrottled candidate a tick."""

    def __init__(self, one_at_a_time: bool) -> None:
        super().__init__()
        self.one_at_a_time = one_at_a_time

    def _visible(self, pods: Sequence[Pod], usage: Mapping[str, PodUsage], action: Action | None,
                 labels: Callable[[str], Mapping[str, str]], node: Node, now: float) -> list[Pod]:  # fmt: skip
        """The pods already throttled, and the first candidate a throttle would lower."""
        if not self.one_at_a_time or action is None or action.throttle is None:
            return list(pods)
        throttle = action.throttle
        free = [Candidate(p, usage.get(p.key, PodUsage()), now) for p in pods
                if p.key not in self.state.throttled and action.scope.admits(p, labels(p.namespace))]  # fmt: skip
        lowerable = [c for c in free if c.usage.cpu is not None
                     and c.usage.cpu > throttle_floor(c.pod, throttle, node) + EPSILON]  # fmt: skip
        first = SORTERS["cpu"].sort(lowerable)[:1]
        keep = {c.key for c in first} | set(self.state.throttled)
        return [p for p in pods if p.key in keep]

    def tick(self, *, now: float, node: Node, pods: Sequence[Pod], metrics: Mapping[str, float],
             usage: Mapping[str, PodUsage], policies: PolicySet,
             namespace_labels: Callable[[str], Mapping[str, str]], evictor: Evictor,
             throttler: CpuThrottler, isolator: CpuIsolator | None = None, brake: bool = False,
             evictions_take_effect: bool = True) -> TickReport:  # fmt: skip
        """NodeBrain's tick for throttling only (these strategies evict nothing, so the
        cluster brake has nothing to stop, and set no CPU isolation class: ``isolator``
        is never used)."""
        rules_ = policies.rules_for_node(node.labels)
        actions = {r.action_name: policies.actions[r.action_name] for r in rules_
                   if r.action_name in policies.actions}  # fmt: skip
        full = derive_utilization(metrics, node.allocatable)
        analysis = analyze(rules_, actions, self.state.trackers, full)
        self.state.observe(analysis.trackers)
        down = analysis.gaps[THROTTLE_DOWN]
        if down:
            gaps = {**analysis.gaps, THROTTLE_DOWN: {m: WHOLE for m in down}}
            analysis = replace(analysis, gaps=gaps)
        action = next(iter(actions.values()), None)
        visible = self._visible(pods, usage, action, namespace_labels, node, now) if down else pods
        ctx = TickContext(now=now, node=node, pods={p.key: p for p in visible}, usage=usage,
                          analysis=analysis, actions=actions, namespace_labels=namespace_labels,
                          settings=self.settings)  # fmt: skip
        execution = drive(plan_actions(ctx, self.state), Hands(evictor, throttler))
        self.state = execution.state
        records = execution.records
        return TickReport(
            at=now, rules=dict(analysis.rules),
            waterlines={t: {m: w.value for m, w in analysis.waterlines[t].items()}
                        for t in ACTION_TYPES},
            gaps={t: dict(analysis.gaps[t]) for t in ACTION_TYPES},
            actions=records, usage=dict(full), missing=list(analysis.missing),
        )  # fmt: skip


@dataclass(frozen=True)
class Strategy:
    key: str
    label: str
    #: (node CPU waterline, wait line) -> the policy manifests
    rules: Callable[[float, float], list[dict[str, Any]]]
    brain: Callable[[], NodeBrain]


MIN_RATIO, STEP_RATIO = 5, 10


def _cpu(line: float, _wait: float) -> list[dict[str, Any]]:
    return rules("cpu_total_usage", line, MIN_RATIO, STEP_RATIO)


def _wait(_line: float, wait: float) -> list[dict[str, Any]]:
    return rules("lc_cpu_wait_ratio", wait, MIN_RATIO, STEP_RATIO)


#: The batch pods of the benchmark: every pod not labelled latency-critical.
BATCH_SCOPE = {"qosClasses": ["BestEffort", "Burstable"], "podSelector": {
    "matchExpressions": [{"key": LC_LABEL, "operator": "NotIn", "values": ["true"]}]}}  # fmt: skip


def isolation(burst: bool) -> list[dict[str, Any]]:
    """A policy with no rule: the batch pods in the idle class, and with ``burst`` the
    latency-critical pod given burst of 100% of its quota (the default scope: the pods
    labelled latency-critical)."""
    section: dict[str, Any] = {"idle": {"scope": BATCH_SCOPE}}
    if burst:
        section["burst"] = {"quotaPercent": 100}
    return [{"apiVersion": QOS, "kind": "NodeQOSEnsurancePolicy", "metadata": {"name": "bench"},
             "spec": {"cpuIsolation": section}}]  # fmt: skip


STRATEGIES: tuple[Strategy, ...] = (
    Strategy("none", "no agent", lambda _l, _w: [], NodeBrain),
    Strategy("waterline-cpu", "Waterline, node CPU line", _cpu, NodeBrain),
    Strategy("waterline-lc", "Waterline, lc_cpu_wait_ratio", _wait, NodeBrain),
    Strategy("floor-all", "every candidate to its floor", _cpu, lambda: ReferenceBrain(False)),
    Strategy("one-per-tick", "one pod per tick (to floor)", _cpu, lambda: ReferenceBrain(True)),
    Strategy("idle", "batch idle", lambda _l, _w: isolation(burst=False), NodeBrain),
    Strategy("idle-burst", "batch idle + burst for web", lambda _l, _w: isolation(burst=True), NodeBrain),
)
