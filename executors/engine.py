"""Precise execution: act on just enough pods to close each gap, and no more.

Per tick: evict first, then throttle down, then throttle up (DESIGN.md "Executor: precise
execution"). For a *quantified* metric the candidates are sorted by the metric's sorter
and acted on in order; what each action releases is subtracted from the gap of every
metric it relieves, and the loop stops as soon as the gap is closed. A metric that is not
quantified (pressure) is handled in closed loop: one step a tick, re-measured next tick.

The engine makes every decision itself; the only effects go through the two actuator
interfaces (``Evictor``, ``CpuThrottler``), so the same code runs live, in `simulate` and
in tests. Its memory across ticks lives in ``NodeState``.

Decisions taken where DESIGN.md is silent:

* A pod with no usage figure for a quantified metric is neither throttled nor credited.
  For eviction, once every pod with a figure has been tried and the gap is still open,
  the first pod without a figure is evicted and the round stops there (closed loop, like
  pressure): evicting every pod of unknown size on one sample would be reckless.
* Throttle-up does not run in a tick in which any throttle-down waterline is in force, so
  two rules never fight over the same caps.
* An eviction releases CPU and memory from both the evict and the throttle-down gaps.
* A Preview eviction never calls the Eviction API: it is reported as ``evicted`` with
  ``preview: true``, credited so the report shows the exact set that would go, and
  starts no cool-down.
* A cap whose action changed is checked against the action's floor every tick: a cap
  below the new floor (minCPURatio raised) is raised to it; an action that no longer
  throttles hands its caps back at once, like a deleted one.
* An evicted pod keeps its cap record (it is not a candidate while it terminates, and is
  forgotten once gone), so a pod that was not evicted after all (local mode) stays managed.

The safety limits on evictions (maxPodsPerRound, the node's token bucket, the cluster
brake, the backoff after an API fault) are ``executors.limits``; an eviction the API did
not answer in its tick is settled by ``executors.unanswered``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent.model.analysis import (
    EVICT,
    THROTTLE_DOWN,
    THROTTLE_UP,
    Analysis,
    RuleTracker,
    Waterline,
)
from agent.model.eviction import EvictionResult
from agent.model.objects import Node, Pod
from agent.model.policy import Action, CpuThrottle, never_candidate_reason, never_evicted_reason
from agent.model.registry import CPU, MEMORY, METRICS, MetricSpec, SorterName
from agent.model.settings import AgentSettings
from agent.model.usage import PodUsage
from executors.actuators import CpuThrottler, Evictor, answer_of
from executors.limits import FaultBackoff, RoundLimits, TokenBucket
from executors.sorters import SORTERS, Candidate
from executors.unanswered import Unanswered, settle

EPSILON = 1e-9
#: ``result`` of a throttle or restore the actuator could not write (retried next tick).
FAILED = "failed"


@dataclass(slots=True)
class ThrottleRecord:
    """A pod this node has throttled: its cap now and the cap it returns to."""

    cap: float
    ceiling: float  # the pod's CPU limit, or the node's cores when it has none
    action: str
    rule: str
    uid: str = ""


def owner_tag(action: str, rule: str) -> str:
    """What the throttler persists beside a cap: the action and rule holding it."""
    return f"{action} {rule}"


def parse_owner_tag(tag: str) -> tuple[str, str]:
    action, _, rule = tag.partition(" ")
    return action, rule


@dataclass
class NodeState:
    """What the agent remembers about one node between ticks."""

    trackers: dict[str, RuleTracker] = field(default_factory=dict)
    throttled: dict[str, ThrottleRecord] = field(default_factory=dict)
    #: Pods evicted and still terminating, with their usage when evicted.
    evicting: dict[str, PodUsage] = field(default_factory=dict)
    #: Action name -> time of its last eviction round on this node.
    last_eviction_round: dict[str, float] = field(default_factory=dict)
    #: The node's eviction token bucket (None until its first sample).
    bucket: TokenBucket | None = None
    #: The backoff of the node's eviction rounds after API faults.
    backoff: FaultBackoff = field(default_factory=FaultBackoff)
    #: Pods whose eviction was not answered in its tick and may still take effect
    #: (``executors.unanswered``).
    unanswered: dict[str, Unanswered] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ActionRecord:
    """One decision, with its reason."""

    action: str  # evict | throttle | restore
    pod: str
    rule: str
    action_name: str
    metric: str
    waterline: float | None
    gap_before: float | None
    gap_after: float | None
    value: float | None = None  # the metric's usage when decided
    cpu_cap: float | None = None
    released: Mapping[str, float] = field(default_factory=dict)
    result: str | None = None
    preview: bool = False
    reason: str = "gap"
    #: An eviction's grace period as asked (None: the pod's own).
    grace_seconds: int | None = None

    def to_report(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "action": self.action,
            "pod": self.pod,
            "rule": self.rule,
            "actionName": self.action_name,
            "metric": self.metric,
            "value": _round(self.value),
            "waterline": _round(self.waterline),
            "gapBefore": _round(self.gap_before),
            "gapAfter": _round(self.gap_after),
            "reason": self.reason,
        }
        if self.action != "evict":
            out["cpuCap"] = _round(self.cpu_cap)
        else:
            out["gracePeriodSeconds"] = self.grace_seconds
        out["released"] = {k: _round(v) for k, v in self.released.items()}
        if self.result is not None:
            out["result"] = self.result
        out["preview"] = self.preview
        return out


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


@dataclass(frozen=True)
class TickContext:
    """Everything one tick decides on (plain data)."""

    now: float
    node: Node
    pods: Mapping[str, Pod]  # the node's pods by namespace/name
    usage: Mapping[str, PodUsage]
    analysis: Analysis
    #: The actions named by the rules that select this node.
    actions: Mapping[str, Action]
    namespace_labels: Callable[[str], Mapping[str, str]]
    settings: AgentSettings = field(default_factory=AgentSettings)
    #: The cluster brake is set: no eviction this tick (throttling goes on).
    brake: bool = False


class _Gaps:
    """The open gaps of a tick, per action type and metric, with cross-metric credit."""

    def __init__(self, analysis: Analysis, allocatable: Mapping[str, float]) -> None:
        self.tables = {t: dict(g) for t, g in analysis.gaps.items()}
        self.allocatable = allocatable

    def get(self, action_type: str, metric: str) -> float | None:
        return self.tables[action_type].get(metric)

    def credit(self, action_types: Sequence[str], released: Mapping[str, float]) -> dict[str, float]:
        """Subtract released resources (cores, bytes) from every metric they relieve.
        Returns what was credited per metric, in the metric's unit."""
        credited: dict[str, float] = {}
        for spec in METRICS:
            if spec.resource is None or spec.resource not in released:
                continue
            amount = released[spec.resource] * spec.per_resource_unit(self.allocatable)
            for action_type in action_types:
                table = self.tables[action_type]
                if spec.name not in table:
                    continue
                credited[spec.name] = amount
                table[spec.name] -= amount
                if table[spec.name] <= EPSILON:
                    del table[spec.name]
        return credited

    def close(self, action_type: str, metric: str) -> None:
        self.tables[action_type].pop(metric, None)

    def charge(self, action_type: str, metric: str, amount: float) -> None:
        table = self.tables[action_type]
        if metric in table:
            table[metric] -= amount
            if table[metric] <= EPSILON:
                del table[metric]


#: The smallest cap the kernel enforces: a CFS quota of 1 ms per the kubelet's 100 ms
#: period (the kernel refuses less). A lower cap would be credited but never hold.
MIN_CPU_CAP = 0.01


def throttle_floor(pod: Pod, throttle: CpuThrottle, node: Node) -> float:
    """The lowest cap a pod may get: its CPU request, and minCPURatio% of its CPU limit
    (of the node's cores when it has no limit), whichever is higher; never below the
    kernel's smallest quota (MIN_CPU_CAP)."""
    base = pod.limits.get(CPU) or node.cpu_cores
    return max(pod.request(CPU), throttle.min_cpu_ratio / 100.0 * base, MIN_CPU_CAP)


def throttle_step(pod: Pod, throttle: CpuThrottle, node: Node) -> float:
    base = pod.limits.get(CPU) or node.cpu_cores
    return throttle.step_cpu_ratio / 100.0 * base


def split_cap(pod: Pod, usage: PodUsage, cap: float) -> dict[str, float]:
    """Split a pod cap across its containers by their usage (equally when unknown)."""
    names = [c.name for c in pod.containers] or list(usage.containers)
    if not names:
        return {}
    shares = [usage.containers[n].cpu if n in usage.containers else None for n in names]
    known = [s for s in shares if s is not None and s > 0]
    if len(known) == len(names):
        total = sum(known)
        return {n: cap * (s or 0.0) / total for n, s in zip(names, shares, strict=True)}
    return {n: cap / len(names) for n in names}


class Executor:
    """Runs one tick's decisions against the actuators and updates the node state."""

    def __init__(self, ctx: TickContext, state: NodeState, evictor: Evictor,
                 throttler: CpuThrottler) -> None:
        self.ctx = ctx
        self.state = state
        self.evictor = evictor
        self.throttler = throttler
        self.gaps = _Gaps(ctx.analysis, ctx.node.allocatable)
        self.records: list[ActionRecord] = []
        self.evicted_now: set[str] = set()
        #: Actions whose eviction round this tick evicted something.
        self.rounds: set[str] = set()
        rate = ctx.settings.eviction_rate_limit
        if state.bucket is None:
            state.bucket = TokenBucket.full(rate, ctx.now)  # full at the node's first sample
        else:
            state.bucket.refill(rate, ctx.now)
        self.limits = RoundLimits(ctx.node.name, ctx.now, ctx.brake or ctx.settings.cluster_brake,
                                  rate, state.bucket, state.backoff)

    # -- helpers -------------------------------------------------------------------------
    def _candidates(self, action: Action, sorter: SorterName, evict: bool = False) -> list[Candidate]:
        ctx = self.ctx
        out = []
        for key, pod in ctx.pods.items():
            if key in self.state.evicting or key in self.evicted_now:
                continue
            if never_candidate_reason(pod) is not None:
                continue
            if evict and never_evicted_reason(pod) is not None:
                continue
            if not action.scope.admits(pod, ctx.namespace_labels(pod.namespace)):
                continue
            out.append(Candidate(pod, ctx.usage.get(key, PodUsage()), ctx.now,
                                 ctx.settings.ext_cpu_resource))
        return SORTERS[sorter].sort(out)

    def _usage_of(self, spec: MetricSpec) -> float | None:
        return self.ctx.analysis.usage.get(spec.name)

    def _cores(self, spec: MetricSpec, amount: float) -> float:
        """A gap in the metric's unit, in cores (CPU metrics only)."""
        scale = spec.per_resource_unit(self.ctx.node.allocatable)
        return amount / scale if scale > 0 else 0.0

    # -- the three phases ------------------------------------------------------------------
    def run(self) -> list[ActionRecord]:
        self._reconcile_caps()
        self._evict()
        self._throttle_down()
        self._throttle_up()
        return self.records

    def _reconcile_caps(self) -> None:
        """Forget pods that are gone; hand back the caps of an action that no longer
        applies to this node or no longer throttles; raise caps below their action's
        floor (the action changed)."""
        ctx = self.ctx
        for key in [k for k in self.state.evicting if k not in ctx.pods]:
            del self.state.evicting[key]
        for key in list(self.state.throttled):
            record = self.state.throttled[key]
            pod = ctx.pods.get(key)
            if pod is None:
                del self.state.throttled[key]
                if record.uid:  # its cgroup went with it: just forget the original
                    namespace, _, name = key.partition("/")
                    self.throttler.restore(Pod(namespace, name, record.uid))
                continue
            if key in self.state.evicting:
                continue
            action = ctx.actions.get(record.action)
            if action is None or action.throttle is None:
                done = self.throttler.restore(pod)
                if done:
                    del self.state.throttled[key]
                self.records.append(ActionRecord(
                    "restore", key, record.rule, record.action, "", None, None, None,
                    cpu_cap=None, result=None if done else FAILED, reason="action removed"))
                continue
            floor = throttle_floor(pod, action.throttle, ctx.node)
            if record.cap < floor - EPSILON:
                self._raise_to_floor(key, pod, record, floor)

    def _raise_to_floor(self, key: str, pod: Pod, record: ThrottleRecord, floor: float) -> None:
        new_cap: float | None = None if floor >= record.ceiling - EPSILON else floor
        if new_cap is None:
            written = self.throttler.restore(pod)
            if written:
                del self.state.throttled[key]
        else:
            usage = self.ctx.usage.get(key, PodUsage())
            written = self.throttler.apply(pod, split_cap(pod, usage, new_cap),
                                           owner_tag(record.action, record.rule))
            if written:
                record.cap = new_cap
        self.records.append(ActionRecord(
            "restore", key, record.rule, record.action, "", None, None, None,
            cpu_cap=new_cap, result=None if written else FAILED, reason="floor raised"))

    def _evict(self) -> None:
        ctx, state = self.ctx, self.state
        waterlines = ctx.analysis.waterlines[EVICT]
        cooling = {
            name for name, last in state.last_eviction_round.items()
            if name in ctx.actions and ctx.now - last < ctx.actions[name].cool_down_seconds
        }
        for spec in METRICS:
            line = waterlines.get(spec.name)
            if line is None or self.gaps.get(EVICT, spec.name) is None:
                continue
            if line.action.name in cooling:
                continue
            candidates = self._candidates(line.action, spec.sorter, evict=True)
            if spec.evict_quantified:
                self._evict_quantified(spec, line, candidates)
            else:
                self._evict_one(spec, line, candidates)
        for name in self.rounds:
            state.last_eviction_round[name] = ctx.now

    def _may_attempt(self, line: Waterline) -> bool:
        eviction = line.action.eviction
        most = eviction.max_pods_per_round if eviction is not None else None
        return self.limits.allow(line.action.name, most, line.rule.preview)

    def _evict_quantified(self, spec: MetricSpec, line: Waterline, candidates: list[Candidate]) -> None:
        resource = spec.resource or CPU
        for cand in candidates:
            if self.gaps.get(EVICT, spec.name) is None or not self._may_attempt(line):
                return
            known = getattr(cand.usage, resource) is not None
            if self._evict_pod(spec, line, cand, credit=known).releases and not known:
                return  # unknown release: re-measure before the next one

    def _evict_one(self, spec: MetricSpec, line: Waterline, candidates: list[Candidate]) -> None:
        for cand in candidates:
            if not self._may_attempt(line):
                return
            if self._evict_pod(spec, line, cand, credit=True).releases:
                return

    def _evict_pod(self, spec: MetricSpec, line: Waterline, cand: Candidate,
                   credit: bool) -> EvictionResult:
        gap_before = self.gaps.get(EVICT, spec.name)
        preview = line.rule.preview
        retry_after = None
        eviction = line.action.eviction
        grace = eviction.termination_grace_period_seconds if eviction else None
        if preview:
            result = EvictionResult.EVICTED
        else:
            answer = answer_of(self.evictor.evict(cand.pod, grace))
            result, retry_after = answer.result, answer.retry_after
            self._remember_unanswered(cand, line.action.name, answer.unanswered, result)
        self.limits.note(line.action.name, preview, result, retry_after)
        released: dict[str, float] = {}
        if result.releases:
            self.evicted_now.add(cand.key)
            if not preview:
                self.rounds.add(line.action.name)  # a round that evicted: cool-down starts
            if not preview and result is EvictionResult.EVICTED:
                self.state.evicting[cand.key] = cand.usage
            resources = {}
            if cand.usage.cpu is not None:
                resources[CPU] = cand.usage.cpu
            if cand.usage.memory is not None:
                resources[MEMORY] = cand.usage.memory
            if credit:
                released = self.gaps.credit((EVICT, THROTTLE_DOWN), resources)
            if not spec.evict_quantified:
                self.gaps.close(EVICT, spec.name)  # closed loop: re-measure next tick
        self.records.append(ActionRecord(
            "evict", cand.key, line.rule.key, line.action.name, spec.name, line.value,
            gap_before, self.gaps.get(EVICT, spec.name) or 0.0, value=self._usage_of(spec),
            released=released, result=result.value, preview=preview,
            reason="gap" if spec.evict_quantified else "pressure", grace_seconds=grace))
        return result

    def _remember_unanswered(self, cand: Candidate, action: str, unanswered: bool,
                             result: EvictionResult) -> None:
        """An eviction with no answer yet may still take effect: remember it until the
        watch settles it; an answer settles it; a failure to send changes nothing."""
        if unanswered:
            uid = cand.pod.uid if cand.pod.uid != cand.key else ""
            self.state.unanswered[cand.key] = Unanswered(action, uid)
        elif result is not EvictionResult.FAILED:
            self.state.unanswered.pop(cand.key, None)

    def _throttle_down(self) -> None:
        waterlines = self.ctx.analysis.waterlines[THROTTLE_DOWN]
        for spec in METRICS:
            line = waterlines.get(spec.name)
            if line is None or line.action.throttle is None:
                continue
            if self.gaps.get(THROTTLE_DOWN, spec.name) is None:
                continue
            candidates = self._candidates(line.action, spec.sorter)
            for cand in candidates:
                gap = self.gaps.get(THROTTLE_DOWN, spec.name)
                if gap is None:
                    break
                if cand.usage.cpu is None:
                    continue  # no figure: never throttled, never credited
                if self._throttle_pod(spec, line, cand, gap) and not spec.throttle_quantified:
                    break  # closed loop: one step a tick

    def _throttle_pod(self, spec: MetricSpec, line: Waterline, cand: Candidate, gap: float) -> bool:
        ctx = self.ctx
        throttle = line.action.throttle
        assert throttle is not None and cand.usage.cpu is not None
        pod = cand.pod
        record = self.state.throttled.get(cand.key)
        ceiling = pod.limits.get(CPU) or ctx.node.cpu_cores
        current = record.cap if record else ceiling
        used = min(cand.usage.cpu, current)
        floor = throttle_floor(pod, throttle, ctx.node)
        if spec.throttle_quantified:
            new_cap = max(floor, used - self._cores(spec, gap))
        else:
            new_cap = max(floor, used - throttle_step(pod, throttle, ctx.node))
        if new_cap >= used - EPSILON or new_cap >= current - EPSILON:
            return False
        released_cores = used - new_cap
        preview = line.rule.preview
        if not preview:
            tag = owner_tag(line.action.name, line.rule.key)
            if not self.throttler.apply(pod, split_cap(pod, cand.usage, new_cap), tag):
                self.records.append(ActionRecord(
                    "throttle", cand.key, line.rule.key, line.action.name, spec.name, line.value,
                    gap, gap, value=self._usage_of(spec), cpu_cap=new_cap, result=FAILED))
                return False  # nothing written: no cap recorded, nothing credited
            self.state.throttled[cand.key] = ThrottleRecord(
                new_cap, ceiling, line.action.name, line.rule.key, pod.uid)
        if spec.throttle_quantified:
            released = self.gaps.credit((THROTTLE_DOWN,), {CPU: released_cores})
        else:
            released = {}
            self.gaps.close(THROTTLE_DOWN, spec.name)
        self.records.append(ActionRecord(
            "throttle", cand.key, line.rule.key, line.action.name, spec.name, line.value,
            gap, self.gaps.get(THROTTLE_DOWN, spec.name) or 0.0, value=self._usage_of(spec),
            cpu_cap=new_cap, released=released, preview=preview,
            reason="gap" if spec.throttle_quantified else "pressure"))
        return True

    def _throttle_up(self) -> None:
        ctx = self.ctx
        if ctx.analysis.waterlines[THROTTLE_DOWN]:
            return  # a throttle-down rule is in force: do not fight it
        waterlines = ctx.analysis.waterlines[THROTTLE_UP]
        raised: set[str] = set()
        for spec in METRICS:
            line = waterlines.get(spec.name)
            if line is None or line.action.throttle is None:
                continue
            if self.gaps.get(THROTTLE_UP, spec.name) is None or not self.state.throttled:
                continue
            throttled = [
                Candidate(ctx.pods[k], ctx.usage.get(k, PodUsage()), ctx.now, ctx.settings.ext_cpu_resource)
                for k in self.state.throttled if k in ctx.pods and k not in self.state.evicting
            ]
            for cand in reversed(SORTERS[spec.sorter].sort(throttled)):
                gap = self.gaps.get(THROTTLE_UP, spec.name)
                if gap is None:
                    break
                if cand.key in raised or cand.key not in self.state.throttled:
                    continue
                raised.add(cand.key)
                self._raise_pod(spec, line, cand, gap)
                if not spec.throttle_quantified:
                    self.gaps.close(THROTTLE_UP, spec.name)

    def _raise_pod(self, spec: MetricSpec, line: Waterline, cand: Candidate, gap: float) -> None:
        throttle = line.action.throttle
        assert throttle is not None
        record = self.state.throttled[cand.key]
        step = throttle_step(cand.pod, throttle, self.ctx.node)
        if spec.throttle_quantified:
            step = min(step, self._cores(spec, gap))
        new_cap: float | None = record.cap + step
        assert new_cap is not None
        if new_cap >= record.ceiling - EPSILON:
            new_cap = None
        increase = (record.ceiling if new_cap is None else new_cap) - record.cap
        preview = line.rule.preview
        if not preview:
            if new_cap is None:
                written = self.throttler.restore(cand.pod)
                if written:
                    del self.state.throttled[cand.key]
            else:
                written = self.throttler.apply(cand.pod, split_cap(cand.pod, cand.usage, new_cap),
                                               owner_tag(record.action, record.rule))
                if written:
                    record.cap = new_cap
            if not written:
                self.records.append(ActionRecord(
                    "restore", cand.key, line.rule.key, line.action.name, spec.name, line.value,
                    gap, gap, value=self._usage_of(spec), cpu_cap=new_cap, result=FAILED))
                return
        if spec.throttle_quantified:
            self.gaps.charge(THROTTLE_UP, spec.name,
                             increase * spec.per_resource_unit(self.ctx.node.allocatable))
        self.records.append(ActionRecord(
            "restore", cand.key, line.rule.key, line.action.name, spec.name, line.value,
            gap, self.gaps.get(THROTTLE_UP, spec.name) or 0.0, value=self._usage_of(spec),
            cpu_cap=new_cap, preview=preview,
            reason="gap" if spec.throttle_quantified else "pressure"))


@dataclass(frozen=True, slots=True)
class LateEviction:
    """A pod an eviction answered after its tick evicted: it now terminates."""

    pod: str
    action: str


def count_late_evictions(state: NodeState, pods: Mapping[str, Pod],
                         usage: Mapping[str, PodUsage], now: float) -> list[LateEviction]:
    """Count the pods that late eviction answers evicted (they now terminate) as this
    node's evictions: released, a token taken, the action's cool-down started. Called
    before the tick's analysis, so their usage is released from this tick's gaps, once.
    Returns them, for the Event and the metric their own tick could not give."""
    late = []
    for key, entry in settle(state.unanswered, pods):
        late.append(LateEviction(key, entry.action))
        pod = pods.get(key)
        if pod is not None and pod.is_terminating and (not entry.uid or pod.uid == entry.uid):
            state.evicting[key] = usage.get(key, PodUsage())  # on its way out: released once
        if state.bucket is not None:
            state.bucket.take()
        state.last_eviction_round[entry.action] = max(
            now, state.last_eviction_round.get(entry.action, now))
    return late


def execute(ctx: TickContext, state: NodeState, evictor: Evictor,
            throttler: CpuThrottler) -> list[ActionRecord]:
    """Decide and act for one tick; returns every decision with its reason."""
    return Executor(ctx, state, evictor, throttler).run()
