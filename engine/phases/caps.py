"""The CPU cap phases: reconcile the caps held with the actions in force, throttle down
just enough to close each throttle-down gap, and raise caps back step by step when the
node is cool (DESIGN.md "Executor" 5-6)."""

from __future__ import annotations

from collections.abc import Generator, Mapping
from typing import Any

from agent.model.analysis import THROTTLE_DOWN, THROTTLE_UP, Waterline
from agent.model.numbers import EPSILON
from agent.model.objects import Pod
from agent.model.registry import CPU, METRICS, MetricSpec
from agent.model.usage import PodUsage
from engine.caps import ceiling, split_cap, throttle_floor, throttle_step
from engine.intents import Intent, RestoreCap, WriteCap
from engine.phases.isolation import clear_burst
from engine.records import (
    BATCH_CAPACITY_OWNER,
    FAILED,
    RESTORE,
    THROTTLE,
    ActionRecord,
    ThrottleRecord,
    owner_tag,
)
from engine.sorters import SORTERS, Candidate
from engine.work import Steps, TickWork


# -- reconcile: the caps of pods gone and of actions changed -----------------------------------
def reconcile_caps(tick: TickWork) -> Steps:
    """Forget pods that are gone; hand back the caps of an action that no longer applies
    to this node or no longer throttles; raise caps below their action's floor (the
    action changed). On a saved copy of the objects (``ctx.provisional``) the actions
    are not checked: the copy can predate them, and a cap handed back for an action it
    does not show would let the node run hot until the watches sync (``throttle_up``
    waits for them too)."""
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
        if ctx.provisional:
            continue  # a saved copy can be older than the cap's action: kept as it is
        if record.action == BATCH_CAPACITY_OWNER:
            continue  # the batch capacity's own (engine.phases.batch_squeeze)
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


def _raise_to_floor(tick: TickWork, key: str, pod: Pod, record: ThrottleRecord, floor: float) -> Steps:
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


# -- throttle down ----------------------------------------------------------------------------
def throttle_down(tick: TickWork) -> Steps:
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


def _throttle_pod(tick: TickWork, spec: MetricSpec, line: Waterline, cand: Candidate,
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
        yield from clear_burst(tick, pod)
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
def throttle_up(tick: TickWork) -> Steps:
    ctx, state = tick.ctx, tick.state
    if ctx.analysis.waterlines[THROTTLE_DOWN]:
        return  # a throttle-down rule is in force: do not fight it
    if ctx.provisional:
        return  # a saved copy's lines can be older than the live ones: no cap is raised on them
    waterlines = ctx.analysis.waterlines[THROTTLE_UP]
    raised: set[str] = set()
    for spec in METRICS:
        line = waterlines.get(spec.name)
        if line is None or line.action.throttle is None:
            continue
        if tick.gaps.get(THROTTLE_UP, spec.name) is None or not state.throttled:
            continue
        throttled = [tick.candidate(k) for k, r in state.throttled.items()
                     if k in ctx.pods and k not in state.evicting
                     and r.action != BATCH_CAPACITY_OWNER]  # raised by engine.phases.batch_squeeze
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


def _raise_pod(tick: TickWork, spec: MetricSpec, line: Waterline, cand: Candidate, gap: float) -> Steps:
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


def _cap_record(kind: str, tick: TickWork, spec: MetricSpec, line: Waterline, cand: Candidate,
                gap: float, cap: float | None, *, gap_after: float,
                released: Mapping[str, float] | None = None, result: str | None = None,
                preview: bool = False, reason: str = "gap") -> ActionRecord:
    """A throttle or restore with its reason (the rule, metric, waterline and gaps)."""
    return ActionRecord(
        action=kind, pod=cand.key, rule=line.rule.key, action_name=line.action.name,
        metric=spec.name, waterline=line.value, gap_before=gap, gap_after=gap_after,
        value=tick.usage_of(spec), cpu_cap=cap, released=released or {}, result=result,
        preview=preview, reason=reason)

