"""The eviction phase: evict first, just enough pods to close each evict gap (DESIGN.md
"Executor" 2-4), within the safety limits (``engine.limits``)."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from agent.model.analysis import EVICT, THROTTLE_DOWN, Waterline
from agent.model.eviction import EvictionResult
from agent.model.registry import CPU, MEMORY, METRICS, MetricSpec
from engine.intents import Evict, EvictionAnswer, Intent
from engine.records import EVICT as EVICT_ACTION
from engine.records import ActionRecord
from engine.sorters import Candidate
from engine.unanswered import Unanswered
from engine.work import Steps, TickWork


def evict(tick: TickWork) -> Steps:
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


def _may_attempt(tick: TickWork, line: Waterline) -> bool:
    eviction = line.action.eviction
    most = eviction.max_pods_per_round if eviction is not None else None
    return tick.limits.allow(line.action.name, most, line.rule.preview)


def _evict_quantified(tick: TickWork, spec: MetricSpec, line: Waterline,
                      candidates: list[Candidate]) -> Steps:
    resource = spec.resource or CPU
    for cand in candidates:
        if tick.gaps.get(EVICT, spec.name) is None or not _may_attempt(tick, line):
            return
        known = getattr(cand.usage, resource) is not None
        result = yield from _evict_pod(tick, spec, line, cand, credit=known)
        if result.releases and not known:
            return  # unknown release: re-measure before the next one


def _evict_one(tick: TickWork, spec: MetricSpec, line: Waterline, candidates: list[Candidate]) -> Steps:
    for cand in candidates:
        if not _may_attempt(tick, line):
            return
        result = yield from _evict_pod(tick, spec, line, cand, credit=True)
        if result.releases:
            return


def _evict_pod(tick: TickWork, spec: MetricSpec, line: Waterline, cand: Candidate,
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


def _remember_unanswered(tick: TickWork, cand: Candidate, action: str, unanswered: bool,
                         result: EvictionResult) -> None:
    """An eviction with no answer yet may still take effect: remember it until the watch
    settles it; an answer settles it; a failure to send changes nothing."""
    if unanswered:
        uid = cand.pod.uid if cand.pod.uid != cand.key else ""
        tick.state.expect_answer(cand.key, Unanswered(action, uid))
    elif result is not EvictionResult.FAILED:
        tick.state.answered(cand.key)
