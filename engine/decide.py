"""One node's decision for one sample, as a pure function of plain data.

``decide`` takes what a tick knows (the sample, the node's pods, the policies, the
settings) and the node's memory, and returns a plan (``engine.intents.Plan``): it
yields what it wants done and ends with the tick's report and the node's memory after
it. It settles the evictions answered late, analyzes the sample (rules -> waterlines ->
gaps) and plans the actions (``engine.plan``), all on a copy of the memory: nothing
it is handed changes, and it calls no actuator. The live loop and `simulate` drive it
with actuators (``agent.node.tick.NodeBrain``); ``executors.drive.assume_done`` reads it
with none.

The extension point (``Strategy``): a function that is given the context the engine is
about to plan on (after the analysis) and the node's memory, and returns the context to
plan on instead. The benchmarks' reference strategies are written so (every candidate to
its floor: the throttle-down gaps made whole; one pod a tick: the pods narrowed), and so
run this decision, not a copy of it. The report shows the gaps the engine planned on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agent.model.analysis import Analysis
from agent.model.batch import cpu_limit
from agent.model.isolation import IsolationSupport
from agent.model.objects import Pod
from agent.model.policy import Action
from agent.model.registry import CPU, MEMORY, METRICS, derive_utilization
from agent.model.usage import PodUsage, within_cpu_limit
from engine.analyzer import ACTION_TYPES, analyze
from engine.batch_capacity import Published
from engine.intents import Plan
from engine.plan import plan_actions
from engine.records import ActionRecord, IsolationChange, LateEviction
from engine.state import NodeState
from engine.work import TickContext, TickInput

__all__ = ["Decision", "Strategy", "TickInput", "TickReport", "decide"]


@dataclass
class TickReport:
    at: float
    rules: dict[str, str]
    waterlines: dict[str, dict[str, float]]
    gaps: dict[str, dict[str, float]]
    actions: list[ActionRecord]
    usage: dict[str, float] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    #: The safety limit that stopped an eviction round this tick (engine.limits).
    limited: str | None = None
    #: Seconds the node's eviction rounds now wait after an API fault this tick.
    eviction_backoff: float | None = None
    #: Pods that evictions answered after their tick evicted, seen terminating this tick
    #: (live agents only: ``simulate`` answers every eviction in its tick).
    late_evictions: list[LateEviction] = field(default_factory=list)
    #: Pods that joined or left a CPU isolation class this tick.
    isolation: list[IsolationChange] = field(default_factory=list)
    #: The classes the kernel offered this tick.
    support: IsolationSupport = field(default_factory=IsolationSupport)
    #: The batch capacity the node publishes after the tick (None: none).
    batch_capacity: Published | None = None

    def to_report(self, origin: float = 0.0) -> dict[str, Any]:
        at = self.at - origin
        out: dict[str, Any] = {
            "at": int(at) if float(at).is_integer() else round(at, 6),
            "rules": dict(self.rules),
            "waterlines": self.waterlines,
            "gaps": {t: {m: round(v, 6) for m, v in g.items()} for t, g in self.gaps.items()},
            "actions": [a.to_report() for a in self.actions],
            "usage": {m: round(v, 6) for m, v in self.usage.items()},
            "missing": list(self.missing),
        }
        if self.limited is not None:
            out["limited"] = {"evict": self.limited}
        if self.eviction_backoff is not None:
            out["evictionBackoff"] = round(self.eviction_backoff, 6)
        if self.isolation:
            out["isolation"] = [c.to_report() for c in self.isolation]
        if self.batch_capacity is not None:
            out["batchCapacity"] = self.batch_capacity.to_report()
        return out


@dataclass(frozen=True, slots=True)
class Decision:
    report: TickReport
    #: The node's memory after the tick (its holder keeps it).
    state: NodeState


def released_by_terminating(state: NodeState, usage: Mapping[str, PodUsage],
                            allocatable: Mapping[str, float]) -> dict[str, float]:
    """Usage of pods already evicted and still running out their grace period: it is on
    its way out, so it does not count towards evict and throttle-down gaps."""
    totals = {CPU: 0.0, MEMORY: 0.0}
    for key in state.evicting:
        measured = usage.get(key)
        if measured is None:
            continue
        totals[CPU] += measured.cpu or 0.0
        totals[MEMORY] += measured.memory or 0.0
    out: dict[str, float] = {}
    for spec in METRICS:
        if spec.resource in totals and totals[spec.resource]:
            out[spec.name] = totals[spec.resource] * spec.per_resource_unit(allocatable)
    return out


def figures_within_limits(pods: Mapping[str, Pod], usage: Mapping[str, PodUsage],
                          raised: Mapping[str, float] | None = None) -> Mapping[str, PodUsage]:
    """The tick's pod figures, each CPU figure above its pod's CPU limit read as the limit:
    applied here, where the figures enter the decision, so the sorters, the credits and
    the caps all see the same figure (``within_cpu_limit``). A pod whose quota is raised
    (``raised``: pod -> percent above the limit, the node's quota burst marks) is held to
    the raised quota instead: what it used above its limit is real."""
    out: dict[str, PodUsage] | None = None
    for key, measured in usage.items():
        pod = pods.get(key)
        if pod is None or measured.cpu is None:
            continue
        limit = cpu_limit(pod)
        if limit is not None and raised and key in raised:
            limit *= 1.0 + raised[key] / 100.0
        if limit is not None and measured.cpu > limit:
            if out is None:
                out = dict(usage)
            out[key] = within_cpu_limit(measured, limit)
    return usage if out is None else out


#: Given the context the engine would plan on and the node's memory (the working copy),
#: the context to plan on: a benchmark's strategy (``decide``'s docstring).
Strategy = Callable[[TickContext, NodeState], TickContext]


def context(tick: TickInput, pods: Mapping[str, Pod], usage: Mapping[str, PodUsage],
            analysis: Analysis, actions: Mapping[str, Action]) -> TickContext:
    """What the engine plans on: the tick's input with what the decision derived from it
    (the pods by key, the figures within their limits, the analysis, the actions named)."""
    return TickContext(tick, pods, usage, analysis, actions,
                       tick.policies.isolation_for_node(tick.node.labels))


def decide(tick: TickInput, state: NodeState, strategy: Strategy | None = None) -> Plan[Decision]:
    """Decide one tick: yields the intents, returns the report and the memory after it.
    ``strategy``: what the engine plans on is changed so (benchmarks only)."""
    node, usage = tick.node, tick.usage
    rules = tick.policies.rules_for_node(node.labels)
    actions: dict[str, Action] = {
        r.action_name: tick.policies.actions[r.action_name]
        for r in rules if r.action_name in tick.policies.actions
    }
    by_key = {p.key: p for p in tick.pods}
    usage = figures_within_limits(by_key, usage, {k: m.percent or 0.0 for k, m in state.quota.items()})
    working = state.copy()
    late = working.settle_late_evictions(by_key, usage, tick.now)
    full = derive_utilization(tick.metrics, node.allocatable)
    analysis = analyze(
        rules,
        actions,
        working.trackers,
        full,
        released_by_terminating(working, usage, node.allocatable),
        tick.settings.execute_excess_percent,
    )
    working.observe(analysis.trackers)
    ctx = context(tick, by_key, usage, analysis, actions)
    if strategy is not None:
        ctx = strategy(ctx, working)
        analysis = ctx.analysis
    execution = yield from plan_actions(ctx, working)
    after = execution.state
    if not tick.evictions_take_effect:
        after.forget_evictions()
    report = TickReport(
        at=tick.now,
        rules=dict(analysis.rules),
        waterlines={t: {m: w.value for m, w in analysis.waterlines[t].items()} for t in ACTION_TYPES},
        gaps={t: dict(analysis.gaps[t]) for t in ACTION_TYPES},
        actions=execution.records,
        usage=dict(full),
        missing=list(analysis.missing),
        limited=execution.limited,
        eviction_backoff=execution.backoff_delay,
        late_evictions=late,
        isolation=execution.changes,
        support=tick.support,
        batch_capacity=after.batch_capacity(),
    )
    return Decision(report, after)
