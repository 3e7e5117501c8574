"""One node's decision loop body: sample -> analysis -> execution, with memory.

``NodeBrain`` is what the live agent, `waterline simulate` and the tests all drive. It is
pure but for the two actuators it is handed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent.model.objects import Node, Pod
from agent.model.policy import Action, PolicySet
from agent.model.registry import CPU, MEMORY, METRICS, derive_utilization
from agent.model.settings import AgentSettings
from agent.model.usage import PodUsage
from agent.node.analyzer import ACTION_TYPES, analyze
from executors.actuators import CpuThrottler, Evictor
from executors.engine import (
    ActionRecord,
    Executor,
    LateEviction,
    NodeState,
    TickContext,
    count_late_evictions,
)


@dataclass
class TickReport:
    at: float
    rules: dict[str, str]
    waterlines: dict[str, dict[str, float]]
    gaps: dict[str, dict[str, float]]
    actions: list[ActionRecord]
    usage: dict[str, float] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    #: The safety limit that stopped an eviction round this tick (executors.limits).
    limited: str | None = None
    #: Seconds the node's eviction rounds now wait after an API fault this tick.
    eviction_backoff: float | None = None
    #: Pods that evictions answered after their tick evicted, seen terminating this tick
    #: (live agents only: ``simulate`` answers every eviction in its tick).
    late_evictions: list[LateEviction] = field(default_factory=list)

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
        return out


def _released_by_terminating(state: NodeState, usage: Mapping[str, PodUsage],
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


class NodeBrain:
    def __init__(self, settings: AgentSettings | None = None, state: NodeState | None = None) -> None:
        self.settings = settings or AgentSettings()
        self.state = state or NodeState()

    def tick(
        self,
        *,
        now: float,
        node: Node,
        pods: Sequence[Pod],
        metrics: Mapping[str, float],
        usage: Mapping[str, PodUsage],
        policies: PolicySet,
        namespace_labels: Callable[[str], Mapping[str, str]],
        evictor: Evictor,
        throttler: CpuThrottler,
        brake: bool = False,
    ) -> TickReport:
        """One sample: analyze it and act. ``brake``: the cluster brake is set (no
        eviction this tick; throttling goes on)."""
        rules = policies.rules_for_node(node.labels)
        actions: dict[str, Action] = {
            r.action_name: policies.actions[r.action_name] for r in rules if r.action_name in policies.actions
        }
        by_key = {p.key: p for p in pods}
        late = count_late_evictions(self.state, by_key, usage, now)
        full = derive_utilization(metrics, node.allocatable)
        analysis = analyze(
            rules,
            actions,
            self.state.trackers,
            full,
            _released_by_terminating(self.state, usage, node.allocatable),
            self.settings.execute_excess_percent,
        )
        self.state.trackers = dict(analysis.trackers)
        ctx = TickContext(
            now=now,
            node=node,
            pods=by_key,
            usage=usage,
            analysis=analysis,
            actions=actions,
            namespace_labels=namespace_labels,
            settings=self.settings,
            brake=brake,
        )
        executor = Executor(ctx, self.state, evictor, throttler)
        records = executor.run()
        return TickReport(
            at=now,
            rules=dict(analysis.rules),
            waterlines={t: {m: w.value for m, w in analysis.waterlines[t].items()} for t in ACTION_TYPES},
            gaps={t: dict(analysis.gaps[t]) for t in ACTION_TYPES},
            actions=records,
            usage=dict(full),
            missing=list(analysis.missing),
            limited=executor.limits.limited,
            eviction_backoff=executor.limits.backoff_delay,
            late_evictions=late,
        )

    def caps(self) -> dict[str, float]:
        """The caps in force, by pod (an evicted pod's, on its way out, is not one)."""
        evicting = self.state.evicting
        return {k: r.cap for k, r in self.state.throttled.items() if k not in evicting}
