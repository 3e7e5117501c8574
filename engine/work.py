"""One tick's working set, shared by the phases of the engine (``engine.phases``).

``TickInput`` is what a tick is given, built once by whoever ticks and passed whole;
``TickContext`` is what the phases decide on: that input and what the decision derived
from it (plain data); ``TickWork`` adds what the tick changes as it goes: a copy of the node's memory, the open gaps, the records so far and
the eviction limits. A phase is a generator over a ``TickWork`` (``Steps``): it yields
intents and is sent their answers.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent.model.analysis import Analysis
from agent.model.isolation import CpuIsolation, IsolationSupport
from agent.model.objects import Node, Pod
from agent.model.policy import Action, PolicySet, never_candidate_reason, never_evicted_reason
from agent.model.registry import MetricSpec
from agent.model.settings import AgentSettings
from agent.model.usage import PodUsage
from engine.gaps import Gaps
from engine.intents import Intent
from engine.limits import RoundLimits
from engine.records import ActionRecord, IsolationChange
from engine.sorters import SORTERS, Candidate
from engine.state import NodeState

#: The work of one phase: yields intents, is sent their answers.
Steps = Generator[Intent, Any, None]


def _default_labels(namespace: str) -> Mapping[str, str]:
    return {"kubernetes.io/metadata.name": namespace}


@dataclass(frozen=True, slots=True, kw_only=True)
class TickInput:
    """Everything one tick decides on: built once by whoever ticks (the live loop, simulate,
    a benchmark) and passed whole."""

    now: float
    node: Node
    pods: Sequence[Pod]
    metrics: Mapping[str, float]
    usage: Mapping[str, PodUsage]
    policies: PolicySet
    namespace_labels: Callable[[str], Mapping[str, str]] = _default_labels
    settings: AgentSettings = field(default_factory=AgentSettings)
    #: The cluster brake is set: no eviction this tick (throttling goes on).
    brake: bool = False
    #: False where an eviction is reported and not performed (local mode, --dry-run):
    #: the pod still runs, so nothing of it is released and it stays a candidate.
    evictions_take_effect: bool = True
    #: The CPU isolation classes this host offers (what the actuators carry).
    support: IsolationSupport = field(default_factory=IsolationSupport)
    #: The objects are the copy an earlier run saved (the API server has not answered
    #: since the start). It can be older than the policies held caps and marks come from,
    #: so nothing held is handed back for an action, class or scope missing from it.
    provisional: bool = False


@dataclass(frozen=True, slots=True)
class TickContext:
    """What the phases decide on: the tick's input, whole, and what the decision derived
    from it (``engine.decide``)."""

    tick: TickInput
    pods: Mapping[str, Pod]  # the node's pods by namespace/name
    #: The pods' figures, each CPU figure within its pod's CPU limit.
    usage: Mapping[str, PodUsage]
    analysis: Analysis
    #: The actions named by the rules that select this node.
    actions: Mapping[str, Action]
    #: The CPU isolation sections of the policies selecting this node, by policy name.
    isolation: tuple[tuple[str, CpuIsolation], ...] = ()

    @property
    def now(self) -> float:
        return self.tick.now

    @property
    def node(self) -> Node:
        return self.tick.node

    @property
    def settings(self) -> AgentSettings:
        return self.tick.settings

    @property
    def namespace_labels(self) -> Callable[[str], Mapping[str, str]]:
        return self.tick.namespace_labels

    @property
    def brake(self) -> bool:
        return self.tick.brake

    @property
    def support(self) -> IsolationSupport:
        return self.tick.support

    @property
    def provisional(self) -> bool:
        return self.tick.provisional


class TickWork:
    """One tick's working set: the context, the memory being changed, the open gaps,
    the records so far (actions, and changes of the CPU isolation classes) and the
    eviction limits."""

    def __init__(self, ctx: TickContext, state: NodeState) -> None:
        self.ctx = ctx
        self.state = state
        self.gaps = Gaps(ctx.analysis, ctx.node.allocatable)
        self.records: list[ActionRecord] = []
        self.changes: list[IsolationChange] = []
        self.evicted_now: set[str] = set()
        #: Actions whose eviction round this tick evicted something.
        self.rounds: set[str] = set()
        #: Sorted candidates by (scope, sorter, evict): the pods, their figures and the
        #: time do not change within a tick, so each list is built and sorted once.
        self._ranked: dict[tuple[Any, str, bool], list[Candidate]] = {}
        rate = ctx.settings.eviction_rate_limit
        bucket = state.refill(rate, ctx.now)
        self.limits = RoundLimits(ctx.node.name, ctx.now, ctx.brake or ctx.settings.cluster_brake,
                                  rate, bucket, state.backoff)

    def candidates(self, action: Action, sorter: str, evict: bool = False) -> list[Candidate]:
        ranked = self._ranked.get((action.scope, sorter, evict))
        if ranked is None:
            ranked = self._ranked[(action.scope, sorter, evict)] = self._rank(action, sorter, evict)
        gone, now_gone = self.state.evicting, self.evicted_now  # these change as the tick goes
        return [c for c in ranked if c.pod.key not in gone and c.pod.key not in now_gone]

    def _rank(self, action: Action, sorter: str, evict: bool) -> list[Candidate]:
        ctx = self.ctx
        now, ext_cpu, labels = ctx.now, ctx.settings.ext_cpu_resource, ctx.namespace_labels
        out = []
        for key, pod in ctx.pods.items():
            if never_candidate_reason(pod) is not None:
                continue
            if evict and never_evicted_reason(pod) is not None:
                continue
            if not action.scope.admits(pod, labels(pod.namespace)):
                continue
            out.append(Candidate(pod, ctx.usage.get(key, PodUsage()), now, ext_cpu))
        return SORTERS[sorter].sort(out)

    def candidate(self, key: str) -> Candidate:
        ctx = self.ctx
        return Candidate(ctx.pods[key], ctx.usage.get(key, PodUsage()), ctx.now,
                         ctx.settings.ext_cpu_resource)

    def usage_of(self, spec: MetricSpec) -> float | None:
        return self.ctx.analysis.usage.get(spec.name)

    def cores(self, spec: MetricSpec, amount: float) -> float:
        """A gap in the metric's unit, in cores (CPU metrics only)."""
        scale = spec.per_resource_unit(self.ctx.node.allocatable)
        return amount / scale if scale > 0 else 0.0
