"""The windows the co-location benchmark compares: the strategies, as policies and node
brains for the real loop, and the baselines they are judged against.

All of them run the product's own loop, collectors, decision (``agent.node.decide``),
quota throttler and CPU isolator; they differ only in the policy and in a small *hook*
that reshapes what the decision is given (never a copy of the decision):

* ``none``: no policy (the agent measures, and does nothing);
* ``waterline-cpu``: Waterline on a node CPU waterline (``cpu_total_usage``);
* ``waterline-lc``: Waterline on what the victim suffers (``lc_cpu_wait_ratio``);
* ``floor-all``: the same CPU rule, but every candidate is throttled to its floor as soon
  as it triggers (crane-agent before its precise-execution proposal): the hook shows
  ``decide`` a metric above its line as a gap no pod can close;
* ``one-per-tick``: the same CPU rule, one more pod throttled to its floor a tick (the
  kubelet's pace): the hook also shows ``decide`` only the pods already throttled and the
  next candidate;
* ``idle``: no rule at all: the batch pods in the idle class (``cpu.idle`` on their pod
  cgroups, ``spec.cpuIsolation.idle``): who runs first rather than how much;
* ``idle-burst``: the same, and CPU burst (100% of the quota) for the latency-critical
  pod.

The baselines (``BASELINES``): web alone; web alone with burst (the baseline of
``idle-burst``: a strategy that changes web's own settings is judged against web alone
with the same settings, and what burst does for web alone is reported apart); web beside
one idle-class spinner (``busy-alone``, a control: what a busy CPU's wake-ups cost web).
Throttle-up is Waterline's for all.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from agent.model.numbers import EPSILON
from agent.model.objects import Node, Pod
from agent.model.policy import PolicySet
from agent.model.usage import PodUsage
from agent.node.decide import Decision, TickInput, TickReport, decide
from agent.node.tick import NodeBrain
from executors.actuators import CpuIsolator, CpuThrottler, Evictor, NoIsolation
from executors.caps import throttle_floor
from executors.drive import Hands, drive
from executors.sorters import SORTERS, Candidate
from executors.state import NodeState

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


#: What a strategy changes in a tick's input before ``decide`` sees it.
Hook = Callable[[TickInput, NodeState], TickInput]


def unchanged(tick: TickInput, _state: NodeState) -> TickInput:
    return tick


def _above(tick: TickInput) -> list[str]:
    """The metrics above a rule's line this tick (the rules of these strategies trigger at
    the first sample above: avoidanceThreshold 1)."""
    return [r.metric for r in tick.policies.rules_for_node(tick.node.labels)
            if tick.metrics.get(r.metric, 0.0) > r.value]  # fmt: skip


def floor_all(tick: TickInput, _state: NodeState) -> TickInput:
    """A metric above its line shown as a gap no pod can close: the engine then caps
    every candidate at its floor at once."""
    above = _above(tick)
    if not above:
        return tick
    return replace(tick, metrics={**tick.metrics, **dict.fromkeys(above, WHOLE)})


def one_per_tick(tick: TickInput, state: NodeState) -> TickInput:
    """``floor_all``, with only the pods already throttled and the first candidate a cap
    would lower shown to the decision."""
    if not _above(tick):
        return tick
    rules_ = tick.policies.rules_for_node(tick.node.labels)
    action = next((tick.policies.actions[r.action_name] for r in rules_
                   if r.action_name in tick.policies.actions), None)  # fmt: skip
    if action is None or action.throttle is None:
        return floor_all(tick, state)
    throttle = action.throttle
    free = [Candidate(p, tick.usage.get(p.key, PodUsage()), tick.now) for p in tick.pods
            if p.key not in state.throttled and action.scope.admits(p, tick.namespace_labels(p.namespace))]  # fmt: skip
    lowerable = [c for c in free if c.usage.cpu is not None
                 and c.usage.cpu > throttle_floor(c.pod, throttle, tick.node) + EPSILON]  # fmt: skip
    keep = {c.key for c in SORTERS["cpu"].sort(lowerable)[:1]} | set(state.throttled)
    return floor_all(replace(tick, pods=[p for p in tick.pods if p.key in keep]), state)


class HookedBrain(NodeBrain):
    """The product's NodeBrain, with the tick's input passed through a strategy's hook
    before ``agent.node.decide.decide`` (the one decision, not a copy of it)."""

    def __init__(self, hook: Hook = unchanged) -> None:
        super().__init__()
        self.hook = hook

    def tick(self, *, now: float, node: Node, pods: Sequence[Pod], metrics: Mapping[str, float],
             usage: Mapping[str, PodUsage], policies: PolicySet,
             namespace_labels: Callable[[str], Mapping[str, str]], evictor: Evictor,
             throttler: CpuThrottler, isolator: CpuIsolator | None = None, brake: bool = False,
             evictions_take_effect: bool = True, provisional: bool = False) -> TickReport:  # fmt: skip
        hands = Hands(evictor, throttler, isolator or NoIsolation())
        tick = TickInput(now=now, node=node, pods=pods, metrics=metrics, usage=usage,
                         policies=policies, namespace_labels=namespace_labels,
                         settings=self.settings, brake=brake,
                         evictions_take_effect=evictions_take_effect,
                         support=hands.isolator.support, provisional=provisional)  # fmt: skip
        decision: Decision = drive(decide(self.hook(tick, self.state), self.state), hands)
        self.state = decision.state
        return decision.report


#: The batch pods' steady demand in a contended window (batch-1, batch-2, batch-3), cores:
#: 1.5 together, above the protocol's one core; and the busy-alone control's one spinner.
CONTENDED = (0.6, 0.5, 0.4)
SPINNER = (0.0, 0.0, 1.0)
ALONE = (0.0, 0.0, 0.0)


@dataclass(frozen=True)
class Strategy:
    """One window kind: its policy, its hook, the batch demand beside web, and the window
    it is judged against (None: it is a baseline)."""

    key: str
    label: str
    #: (node CPU waterline, wait line) -> the policy manifests
    rules: Callable[[float, float], list[dict[str, Any]]]
    hook: Hook = unchanged
    demand: tuple[float, float, float] = CONTENDED
    baseline: str | None = "alone"

    def brain(self) -> NodeBrain:
        return HookedBrain(self.hook)


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


def _burst_only(_line: float, _wait: float) -> list[dict[str, Any]]:
    return [{"apiVersion": QOS, "kind": "NodeQOSEnsurancePolicy", "metadata": {"name": "bench"},
             "spec": {"cpuIsolation": {"burst": {"quotaPercent": 100}}}}]  # fmt: skip


def _nothing(_line: float, _wait: float) -> list[dict[str, Any]]:
    return []


STRATEGIES: tuple[Strategy, ...] = (
    Strategy("none", "no agent", _nothing),
    Strategy("waterline-cpu", "Waterline, node CPU line", _cpu),
    Strategy("waterline-lc", "Waterline, lc_cpu_wait_ratio", _wait),
    Strategy("floor-all", "every candidate to its floor", _cpu, floor_all),
    Strategy("one-per-tick", "one pod per tick (to floor)", _cpu, one_per_tick),
    Strategy("idle", "batch idle", lambda _l, _w: isolation(burst=False)),
    Strategy("idle-burst", "batch idle + burst for web", lambda _l, _w: isolation(burst=True),
             baseline="alone-burst"),
)
#: The strategies of a full run (the ones the goal is about, and the no-agent run every
#: batch figure is measured against): a full run must fit about two hours.
FULL_STRATEGIES = ("none", "idle", "idle-burst")
BASELINES: tuple[Strategy, ...] = (
    Strategy("alone", "web alone", _nothing, demand=ALONE, baseline=None),
    Strategy("alone-burst", "web alone, burst", _burst_only, demand=ALONE, baseline=None),
    Strategy("busy-alone", "web beside an idle spinner", lambda _l, _w: isolation(burst=False),
             demand=SPINNER, baseline="alone"),
)
WINDOWS = {s.key: s for s in (*BASELINES, *STRATEGIES)}
