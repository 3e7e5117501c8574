"""Precise execution, decided: act on just enough pods to close each gap, and no more.

Per tick: evict first, then throttle down, then throttle up (DESIGN.md "Executor: precise
execution"). For a *quantified* metric the candidates are sorted by the metric's sorter
and acted on in order; what each action releases is subtracted from the gap of every
metric it relieves, and the loop stops as soon as the gap is closed. A metric that is not
quantified (pressure) is handled in closed loop: one step a tick, re-measured next tick.

``plan_actions`` is pure: it works on plain data and a copy of the node's memory, and it
never calls an actuator. It is a generator that yields what it wants done
(``executors.intents``) and is sent the answer, because the rest of the tick depends on
it (a 429 means "the next candidate", a 404 counts as released, a cap not written is
neither recorded nor credited); it returns the records and the node's memory after the
tick. The live agent, `simulate` and tests drive the same plan (``executors.drive``).
The phases are a table (``PHASES``): a new actuator (an idle class, CPU burst) is a new
phase and a new intent, not a branch in the ones here.

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
not answer in its tick is settled by ``NodeState.settle_late_evictions``.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any

from agent.model.analysis import EVICT, THROTTLE_DOWN, THROTTLE_UP, Analysis, Waterline
from agent.model.eviction import EvictionResult
from agent.model.numbers import EPSILON
from agent.model.objects import Node, Pod
from agent.model.policy import Action, never_candidate_reason, never_evicted_reason
from agent.model.registry import CPU, MEMORY, METRICS, MetricSpec
from agent.model.settings import AgentSettings
from agent.model.usage import PodUsage
from executors.actuators import EvictionAnswer
from executors.caps import ceiling, split_cap, throttle_floor, throttle_step
from executors.gaps import Gaps
from executors.intents import Evict, Intent, Plan, RestoreCap, WriteCap
from executors.limits import RoundLimits
from executors.records import EVICT as EVICT_ACTION
from executors.records import FAILED, RESTORE, THROTTLE, ActionRecord, ThrottleRecord, owner_tag
from executors.sorters import SORTERS, Candidate
from executors.state import NodeState
from executors.unanswered import Unanswered

#: The work of one phase: yields intents, is sent their answers.
Steps = Generator[Intent, Any, None]


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


@dataclass(frozen=True, slots=True, kw_only=True)
class Execution:
    """What a tick's plan decided: its records, the node's memory after it, and what the
    safety limits said."""

    records: list[ActionRecord]
    state: NodeState
    #: The safety limit that stopped an eviction round (executors.limits), if any.
    limited: str | None = None
    #: Seconds the node's eviction rounds now wait after an API fault this tick.
    backoff_delay: float | None = None


class _Tick:
    """One tick's working set: the context, the memory being changed, the open gaps,
    the records so far and the eviction limits."""

    def __init__(self, ctx: TickContext, state: NodeState) -> None:
        self.ctx = ctx
        self.state = state
        self.gaps = Gaps(ctx.analysis, ctx.node.allocatable)
        self.records: list[ActionRecord] = []
        self.evicted_now: set[str] = set()
        #: Actions whose eviction round this tick evicted something.
        self.rounds: set[str] = set()
        rate = ctx.settings.eviction_rate_limit
        bucket = state.refill(rate, ctx.now)
        self.limits = RoundLimits(ctx.node.name, ctx.now, ctx.brake or ctx.settings.cluster_brake,
                                  rate, bucket, state.backoff)

    def candidates(self, action: Action, sorter: str, evict: bool = False) -> list[Candidate]:
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


def plan_actions(ctx: TickContext, state: NodeState) -> Plan[Execution]:
    """Decide one tick on a copy of ``state``: yields the intents, returns the records and
    the node's memory after the tick. ``state`` itself is never changed."""
    tick = _Tick(ctx, state.copy())
    for phase in PHASES:
        yield from phase(tick)
    return Execution(records=tick.records, state=tick.state, limited=tick.limits.limited,
                     backoff_delay=tick.limits.backoff_delay)


# -- reconcile: the caps of pods gone and of actions changed -----------------------------------
def reconcile_caps(tick: _Tick) -> Steps:
    """Forget pods that are gone; hand back the caps of an action that no longer applies
    to this node or no longer throttles; raise caps below their action's floor (the
    action changed)."""
    ctx, state = tick.ctx, tick.state
    state.forget_gone(ctx.pods)
    for key in list(state.throttled):
        record = state.throttled[key]
        pod = ctx.pods.get(key)
        if pod is None:
            state.drop_cap(key)
            if record.uid:  # its cgroup went with it: just forget the original
                namespace, _, name = key.partition("/")
                yield RestoreCap(Pod(namespace, name, record.uid))
            continue
        if key in state.evicting:
            continue
        action = ctx.actions.get(record.action)
        if action is None or action.throttle is None:
            done = yield RestoreCap(pod)
            if done:
                state.drop_cap(key)
            tick.records.append(ActionRecord(
                action=RESTORE, pod=key, rule=record.rule, action_name=record.action,
                result=None if done else FAILED, reason="action removed"))
            continue
        floor = throttle_floor(pod, action.throttle, ctx.node)
        if record.cap < floor - EPSILON:
            yield from _raise_to_floor(tick, key, pod, record, floor)


def _raise_to_floor(tick: _Tick, key: str, pod: Pod, record: ThrottleRecord, floor: float) -> Steps:
    new_cap: float | None = None if floor >= record.ceiling - EPSILON else floor
    if new_cap is None:
        written = yield RestoreCap(pod)
        if written:
            tick.state.drop_cap(key)
    else:
        usage = tick.ctx.usage.get(key, PodUsage())
        written = yield WriteCap(pod, split_cap(pod, usage, new_cap),
                                 owner_tag(record.action, record.rule))
        if written:
            tick.state.move_cap(key, new_cap)
    tick.records.append(ActionRecord(
        action=RESTORE, pod=key, rule=record.rule, action_name=record.action, cpu_cap=new_cap,
        result=None if written else FAILED, reason="floor raised"))


# -- evict ------------------------------------------------------------------------------------
def evict(tick: _Tick) -> Steps:
    ctx = tick.ctx
    waterlines = ctx.analysis.waterlines[EVICT]
    cooling = {
        name for name, last in tick.state.last_eviction_round.items()
        if name in ctx.actions and ctx.now - last < ctx.actions[name].cool_down_seconds
    }
    for spec in METRICS:
        line = waterlines.get(spec.name)
        if line is None or tick.gaps.get(EVICT, spec.name) is None:
            continue
        if line.action.name in cooling:
            continue
        candidates = tick.candidates(line.action, spec.sorter, evict=True)
        if spec.evict_quantified:
            yield from _evict_quantified(tick, spec, line, candidates)
        else:
            yield from _evict_one(tick, spec, line, candidates)
    tick.state.rounds_ran(tick.rounds, ctx.now)


def _may_attempt(tick: _Tick, line: Waterline) -> bool:
    eviction = line.action.eviction
    most = eviction.max_pods_per_round if eviction is not None else None
    return tick.limits.allow(line.action.name, most, line.rule.preview)


def _evict_quantified(tick: _Tick, spec: MetricSpec, line: Waterline,
                      candidates: list[Candidate]) -> Steps:
    resource = spec.resource or CPU
    for cand in candidates:
        if tick.gaps.get(EVICT, spec.name) is None or not _may_attempt(tick, line):
            return
        known = getattr(cand.usage, resource) is not None
        result = yield from _evict_pod(tick, spec, line, cand, credit=known)
        if result.releases and not known:
            return  # unknown release: re-measure before the next one


def _evict_one(tick: _Tick, spec: MetricSpec, line: Waterline, candidates: list[Candidate]) -> Steps:
    for cand in candidates:
        if not _may_attempt(tick, line):
            return
        result = yield from _evict_pod(tick, spec, line, cand, credit=True)
        if result.releases:
            return


def _evict_pod(tick: _Tick, spec: MetricSpec, line: Waterline, cand: Candidate,
               credit: bool) -> Generator[Intent, Any, EvictionResult]:
    gap_before = tick.gaps.get(EVICT, spec.name)
    preview = line.rule.preview
    retry_after = None
    eviction = line.action.eviction
    grace = eviction.termination_grace_period_seconds if eviction else None
    if preview:
        result = EvictionResult.EVICTED
    else:
        answer: EvictionAnswer = yield Evict(cand.pod, grace)
        result, retry_after = answer.result, answer.retry_after
        _remember_unanswered(tick, cand, line.action.name, answer.unanswered, result)
    tick.limits.note(line.action.name, preview, result, retry_after)
    released: dict[str, float] = {}
    if result.releases:
        tick.evicted_now.add(cand.key)
        if not preview:
            tick.rounds.add(line.action.name)  # a round that evicted: cool-down starts
        if not preview and result is EvictionResult.EVICTED:
            tick.state.evicted(cand.key, cand.usage)
        resources = {}
        if cand.usage.cpu is not None:
            resources[CPU] = cand.usage.cpu
        if cand.usage.memory is not None:
            resources[MEMORY] = cand.usage.memory
        if credit:
            released = tick.gaps.credit((EVICT, THROTTLE_DOWN), resources)
        if not spec.evict_quantified:
            tick.gaps.close(EVICT, spec.name)  # closed loop: re-measure next tick
    tick.records.append(ActionRecord(
        action=EVICT_ACTION, pod=cand.key, rule=line.rule.key, action_name=line.action.name,
        metric=spec.name, waterline=line.value, gap_before=gap_before,
        gap_after=tick.gaps.get(EVICT, spec.name) or 0.0, value=tick.usage_of(spec),
        released=released, result=result.value, preview=preview,
        reason="gap" if spec.evict_quantified else "pressure", grace_seconds=grace))
    return result


def _remember_unanswered(tick: _Tick, cand: Candidate, action: str, unanswered: bool,
                         result: EvictionResult) -> None:
    """An eviction with no answer yet may still take effect: remember it until the watch
    settles it; an answer settles it; a failure to send changes nothing."""
    if unanswered:
        uid = cand.pod.uid if cand.pod.uid != cand.key else ""
        tick.state.expect_answer(cand.key, Unanswered(action, uid))
    elif result is not EvictionResult.FAILED:
        tick.state.answered(cand.key)


# -- throttle down ----------------------------------------------------------------------------
def throttle_down(tick: _Tick) -> Steps:
    waterlines = tick.ctx.analysis.waterlines[THROTTLE_DOWN]
    for spec in METRICS:
        line = waterlines.get(spec.name)
        if line is None or line.action.throttle is None:
            continue
        if tick.gaps.get(THROTTLE_DOWN, spec.name) is None:
            continue
        for cand in tick.candidates(line.action, spec.sorter):
            gap = tick.gaps.get(THROTTLE_DOWN, spec.name)
            if gap is None:
                break
            if cand.usage.cpu is None:
                continue  # no figure: never throttled, never credited
            stepped = yield from _throttle_pod(tick, spec, line, cand, gap)
            if stepped and not spec.throttle_quantified:
                break  # closed loop: one step a tick


def _throttle_pod(tick: _Tick, spec: MetricSpec, line: Waterline, cand: Candidate,
                  gap: float) -> Generator[Intent, Any, bool]:
    ctx = tick.ctx
    throttle = line.action.throttle
    assert throttle is not None and cand.usage.cpu is not None
    pod = cand.pod
    record = tick.state.throttled.get(cand.key)
    top = ceiling(pod, ctx.node)
    current = record.cap if record else top
    used = min(cand.usage.cpu, current)
    floor = throttle_floor(pod, throttle, ctx.node)
    if spec.throttle_quantified:
        new_cap = max(floor, used - tick.cores(spec, gap))
    else:
        new_cap = max(floor, used - throttle_step(pod, throttle, ctx.node))
    if new_cap >= used - EPSILON or new_cap >= current - EPSILON:
        return False
    released_cores = used - new_cap
    preview = line.rule.preview
    if not preview:
        tag = owner_tag(line.action.name, line.rule.key)
        if not (yield WriteCap(pod, split_cap(pod, cand.usage, new_cap), tag)):
            tick.records.append(_cap_record(THROTTLE, tick, spec, line, cand, gap, new_cap,
                                            gap_after=gap, result=FAILED))
            return False  # nothing written: no cap recorded, nothing credited
        tick.state.hold_cap(cand.key, ThrottleRecord(new_cap, top, line.action.name,
                                                     line.rule.key, pod.uid))
    if spec.throttle_quantified:
        released = tick.gaps.credit((THROTTLE_DOWN,), {CPU: released_cores})
    else:
        released = {}
        tick.gaps.close(THROTTLE_DOWN, spec.name)
    tick.records.append(_cap_record(
        THROTTLE, tick, spec, line, cand, gap, new_cap,
        gap_after=tick.gaps.get(THROTTLE_DOWN, spec.name) or 0.0, released=released,
        preview=preview, reason="gap" if spec.throttle_quantified else "pressure"))
    return True


# -- throttle up ------------------------------------------------------------------------------
def throttle_up(tick: _Tick) -> Steps:
    ctx, state = tick.ctx, tick.state
    if ctx.analysis.waterlines[THROTTLE_DOWN]:
        return  # a throttle-down rule is in force: do not fight it
    waterlines = ctx.analysis.waterlines[THROTTLE_UP]
    raised: set[str] = set()
    for spec in METRICS:
        line = waterlines.get(spec.name)
        if line is None or line.action.throttle is None:
            continue
        if tick.gaps.get(THROTTLE_UP, spec.name) is None or not state.throttled:
            continue
        throttled = [tick.candidate(k) for k in state.throttled
                     if k in ctx.pods and k not in state.evicting]
        for cand in reversed(SORTERS[spec.sorter].sort(throttled)):
            gap = tick.gaps.get(THROTTLE_UP, spec.name)
            if gap is None:
                break
            if cand.key in raised or cand.key not in state.throttled:
                continue
            raised.add(cand.key)
            yield from _raise_pod(tick, spec, line, cand, gap)
            if not spec.throttle_quantified:
                tick.gaps.close(THROTTLE_UP, spec.name)


def _raise_pod(tick: _Tick, spec: MetricSpec, line: Waterline, cand: Candidate, gap: float) -> Steps:
    throttle = line.action.throttle
    assert throttle is not None
    record = tick.state.throttled[cand.key]
    step = throttle_step(cand.pod, throttle, tick.ctx.node)
    if spec.throttle_quantified:
        step = min(step, tick.cores(spec, gap))
    raised_to = record.cap + step
    new_cap: float | None = None if raised_to >= record.ceiling - EPSILON else raised_to
    increase = (record.ceiling if new_cap is None else new_cap) - record.cap
    preview = line.rule.preview
    if not preview:
        if new_cap is None:
            written = yield RestoreCap(cand.pod)
            if written:
                tick.state.drop_cap(cand.key)
        else:
            written = yield WriteCap(cand.pod, split_cap(cand.pod, cand.usage, new_cap),
                                     owner_tag(record.action, record.rule))
            if written:
                tick.state.move_cap(cand.key, new_cap)
        if not written:
            tick.records.append(_cap_record(RESTORE, tick, spec, line, cand, gap, new_cap,
                                            gap_after=gap, result=FAILED))
            return
    if spec.throttle_quantified:
        tick.gaps.charge(THROTTLE_UP, spec.name,
                         increase * spec.per_resource_unit(tick.ctx.node.allocatable))
    tick.records.append(_cap_record(
        RESTORE, tick, spec, line, cand, gap, new_cap,
        gap_after=tick.gaps.get(THROTTLE_UP, spec.name) or 0.0, preview=preview,
        reason="gap" if spec.throttle_quantified else "pressure"))


def _cap_record(kind: str, tick: _Tick, spec: MetricSpec, line: Waterline, cand: Candidate,
                gap: float, cap: float | None, *, gap_after: float,
                released: Mapping[str, float] | None = None, result: str | None = None,
                preview: bool = False, reason: str = "gap") -> ActionRecord:
    """A throttle or restore with its reason (the rule, metric, waterline and gaps)."""
    return ActionRecord(
        action=kind, pod=cand.key, rule=line.rule.key, action_name=line.action.name,
        metric=spec.name, waterline=line.value, gap_before=gap, gap_after=gap_after,
        value=tick.usage_of(spec), cpu_cap=cap, released=released or {}, result=result,
        preview=preview, reason=reason)


#: The phases of a tick, in order (DESIGN.md: evict first, then throttle down, then up).
PHASES: tuple[Callable[[_Tick], Steps], ...] = (reconcile_caps, evict, throttle_down, throttle_up)
