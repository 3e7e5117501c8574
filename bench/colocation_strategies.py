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

The two reference strategies run the product's decision itself with a strategy
(``engine.decide.Strategy``, no copy of it): the throttle-down gap is made bigger than any
pod (the engine then caps each candidate at its floor), and for one pod a tick the engine
sees only the pods already throttled plus the next candidate.
Throttle-up is Waterline's for all.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from agent.model.analysis import THROTTLE_DOWN
from agent.model.numbers import EPSILON
from agent.model.usage import PodUsage
from agent.node.tick import NodeBrain
from engine.caps import throttle_floor
from engine.sorters import SORTERS, Candidate
from engine.state import NodeState
from engine.work import TickContext

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


def floor_all(ctx: TickContext, state: NodeState) -> TickContext:
    """The throttle-down gaps made whole: every candidate is capped at its floor
    (``engine.decide.Strategy``)."""
    down = ctx.analysis.gaps[THROTTLE_DOWN]
    if not down:
        return ctx
    gaps = {**ctx.analysis.gaps, THROTTLE_DOWN: {m: WHOLE for m in down}}
    return replace(ctx, analysis=replace(ctx.analysis, gaps=gaps))


def one_per_tick(ctx: TickContext, state: NodeState) -> TickContext:
    """As ``floor_all``, the engine shown only the pods already throttled and the first
    candidate a cap would lower."""
    whole = floor_all(ctx, state)
    action = next(iter(ctx.actions.values()), None)
    if whole is ctx or action is None or action.throttle is None:
        return whole
    throttle = action.throttle
    free = [Candidate(p, ctx.usage.get(k, PodUsage()), ctx.now) for k, p in ctx.pods.items()
            if k not in state.throttled and action.scope.admits(p, ctx.namespace_labels(p.namespace))]  # fmt: skip
    lowerable = [c for c in free if c.usage.cpu is not None
                 and c.usage.cpu > throttle_floor(c.pod, throttle, ctx.node) + EPSILON]  # fmt: skip
    keep = {c.key for c in SORTERS["cpu"].sort(lowerable)[:1]} | set(state.throttled)
    return replace(whole, pods={k: p for k, p in ctx.pods.items() if k in keep})


class ReferenceBrain(NodeBrain):
    """The product's decision with a reference strategy (``engine.decide.Strategy``):
    every candidate to its floor at once, or ``one_at_a_time``, one more a tick."""

    def __init__(self, one_at_a_time: bool) -> None:
        super().__init__(strategy=one_per_tick if one_at_a_time else floor_all)
        self.one_at_a_time = one_at_a_time


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
