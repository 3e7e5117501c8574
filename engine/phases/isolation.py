"""The CPU isolation phases: keep the idle class, CPU burst and the quota burst as the
policies say (DESIGN.md "CPU isolation: who runs first, not only how much", "Batch
capacity": an LC pod's own quota may rise above its limit).

The classes follow one reconcile (``_reconcile``), told apart by a ``CpuClass`` row:

* a pod the class should hold is asked for every tick (``MarkIdle`` / ``SetBurst``): the
  actuator writes the mark the first time, the value that was there recorded before, and
  afterwards checks it against the kernel, writing it again where something reverted it
  (a ``systemctl daemon-reload`` rewrites a systemd unit's properties);
* a pod held that should not be any more is released (``ReleaseIdle`` / ``ReleaseBurst``:
  exactly what was there before): it left the scope, its policy (or the section) went,
  or, for burst, Waterline caps it (a cap below the burst would be refused);
* a pod whose kubelet is resizing it in place (``Pod.resizing``) has its mark lifted for
  the resize and put back, re-recorded, once the resize is done: while ``cpu.idle`` is 1
  the kernel refuses the kubelet's ``cpu.shares`` write, and a quota below the burst;
* a pod held and being deleted keeps its mark (it is on its way out); a pod gone has its
  record forgotten (its cgroup went with it);
* while the objects are the saved copy of an earlier run (``TickContext.provisional``: a
  start before the API server answered) the marks held stay as recorded and no other
  changes (``_keep_as_held``): the copy can be older than the policies and the labels.

A class the kernel lacks (``IsolationSupport``) is never asked for; the agent said so
once when it found out. Changes are reported (``TickWork.changes``), never credited: the
classes change who runs first, not what anybody uses; but for one.

The quota burst (koordinator's CPU burst by quota) lends CPU, so it is a matter of how
much: a latency-critical pod of a burst scope whose section sets
``quotaAboveLimitPercent`` has its CFS quota raised to its limit plus that percent while
the node is *under its lines*: no throttle-down or evict waterline in force (a Preview
rule's does not count: it changes nothing) and the node's CPU figure known (without it
nothing is lent: fail safe). When a line comes into force the raise is taken back first
(``take_back_quota``, before the evict and throttle phases), and what the pods used above
their limits is credited to the evict and throttle-down gaps of CPU, so batch work is
throttled or evicted only for what taking back did not close. The rule's hysteresis
(``restoreThreshold``) is the raise's: a line stays in force until its rule is restored.
A pod capped by Waterline has no raise (taken back before the cap: the throttler records
the limit as the original, never a raised quota).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from agent.model.analysis import EVICT, THROTTLE_DOWN
from agent.model.isolation import IsolationSupport
from agent.model.objects import Pod
from agent.model.registry import CPU
from engine.cpu_classes import burst_members, classes_in_force, idle_members, quota_members
from engine.intents import (
    Intent,
    MarkIdle,
    RaiseQuota,
    ReleaseBurst,
    ReleaseIdle,
    SetBurst,
    TakeBackQuota,
)
from engine.records import (
    BURST,
    FAILED,
    IDLE,
    LIFTED,
    MARKED,
    QUOTA_BURST,
    RELEASED,
    IsolationChange,
    IsolationMark,
)
from engine.work import Steps, TickContext, TickWork


@dataclass(frozen=True, slots=True)
class CpuClass:
    """How one class is reconciled: who belongs, whether the kernel offers it, and the
    intents that hold and release it."""

    kind: str
    members: Callable[[TickWork], dict[str, IsolationMark]]
    supported: Callable[[IsolationSupport], bool]
    hold: Callable[[Pod, IsolationMark], Intent]
    release: Callable[[Pod], Intent]


def _bursting(tick: TickWork) -> dict[str, IsolationMark]:
    ctx = tick.ctx
    if not ctx.support.burst:
        return {}
    members = burst_members(ctx.pods, ctx.isolation, ctx.namespace_labels)
    return {k: m for k, m in members.items() if k not in tick.state.throttled}


def _idle(tick: TickWork) -> dict[str, IsolationMark]:
    ctx = tick.ctx
    # A burst member is never idle, also where the kernel lacks burst.
    bursting = burst_members(ctx.pods, ctx.isolation, ctx.namespace_labels)
    return idle_members(ctx.pods, ctx.isolation, ctx.namespace_labels, bursting)


def over_a_line(ctx: TickContext) -> bool:
    """A throttle-down or evict waterline is in force (not a Preview rule's)."""
    return any(not line.rule.preview for kind in (EVICT, THROTTLE_DOWN)
               for line in ctx.analysis.waterlines[kind].values())


def _cpu_unknown(ctx: TickContext) -> bool:
    return ctx.analysis.usage.get("cpu_total_usage") is None


def _quota_raised(tick: TickWork) -> dict[str, IsolationMark]:
    ctx = tick.ctx
    if not ctx.support.quota or over_a_line(ctx) or _cpu_unknown(ctx):
        return {}
    members = quota_members(ctx.pods, ctx.isolation, ctx.namespace_labels)
    return {k: m for k, m in members.items() if k not in tick.state.throttled}


def _raise_quota(pod: Pod, mark: IsolationMark) -> Intent:
    return RaiseQuota(pod, mark.percent or 0.0, mark.policy)


def _set_burst(pod: Pod, mark: IsolationMark) -> Intent:
    return SetBurst(pod, mark.percent or 0.0, mark.policy)


def _mark_idle(pod: Pod, mark: IsolationMark) -> Intent:
    return MarkIdle(pod, mark.policy)


IDLE_CLASS = CpuClass(IDLE, _idle, lambda s: s.idle, _mark_idle, ReleaseIdle)
BURST_CLASS = CpuClass(BURST, _bursting, lambda s: s.burst, _set_burst, ReleaseBurst)
QUOTA_CLASS = CpuClass(QUOTA_BURST, _quota_raised, lambda s: s.quota, _raise_quota, TakeBackQuota)


def idle_class(tick: TickWork) -> Steps:
    yield from _reconcile(tick, IDLE_CLASS)


def cpu_burst(tick: TickWork) -> Steps:
    yield from _reconcile(tick, BURST_CLASS)


def quota_burst(tick: TickWork) -> Steps:
    yield from _reconcile(tick, QUOTA_CLASS)


def take_back_quota(tick: TickWork) -> Steps:
    """Over a line, before anything is evicted or throttled: every raised quota goes back
    to the limit, and the CPU the pod used above its limit is credited to the evict and
    throttle-down gaps (the figures were read within the raised quota,
    ``engine.decide.figures_within_limits``). Also on a saved copy of the objects: taking
    back only tightens."""
    ctx, state = tick.ctx, tick.state
    if not state.quota or not over_a_line(ctx):
        return
    for key, mark in sorted(state.quota.items()):
        pod = ctx.pods.get(key)
        if pod is None:
            continue  # gone: the reconcile drops the record
        done = yield TakeBackQuota(pod)
        if done:
            state.drop_mark(QUOTA_BURST, key)
            used = ctx.usage.get(key)
            limit = pod.limits.get(CPU)
            above = (used.cpu or 0.0) - limit if used is not None and limit is not None else 0.0
            if above > 0:
                tick.gaps.credit((EVICT, THROTTLE_DOWN), {CPU: above})
        tick.changes.append(IsolationChange(kind=QUOTA_BURST, change=RELEASED, pod=key,
                                            policy=mark.policy, reason="over a line",
                                            result=None if done else FAILED))


def _reconcile(tick: TickWork, cls: CpuClass) -> Steps:
    ctx, state = tick.ctx, tick.state
    if ctx.provisional:
        yield from _keep_as_held(tick, cls)
        return
    want = cls.members(tick) if cls.supported(ctx.support) else {}
    held = _held(tick, cls)
    for key, mark in sorted(held.items()):
        pod = ctx.pods.get(key)
        if pod is None:  # gone, and its cgroup with it: only the record is left to drop
            namespace, _, name = key.partition("/")
            yield cls.release(Pod(namespace, name, mark.uid))
            state.drop_mark(cls.kind, key)
            continue
        if pod.is_terminating or (key in want and not pod.resizing):
            continue
        lifted = key in want
        why = "resize" if lifted else _why_out(tick, cls, key)
        yield from _release(tick, cls, pod, mark, LIFTED if lifted else RELEASED, why)
    for key, mark in sorted(want.items()):
        pod = ctx.pods[key]
        if pod.resizing:
            continue  # lifted until the kubelet is done
        new = key not in held
        if (yield cls.hold(pod, mark)):
            state.hold_mark(cls.kind, key, mark)
            if new:
                tick.changes.append(IsolationChange(kind=cls.kind, change=MARKED, pod=key,
                                                    policy=mark.policy, reason="scope"))
        else:  # kept when held: a pod that leaves later is still released
            tick.changes.append(IsolationChange(kind=cls.kind, change=MARKED, pod=key,
                                                policy=mark.policy,
                                                reason="scope" if new else "check",
                                                result=FAILED))


def _held(tick: TickWork, cls: CpuClass) -> Mapping[str, IsolationMark]:
    """The marks of ``cls`` the node holds now, by pod."""
    state = tick.state
    return {IDLE: state.idle, BURST: state.burst, QUOTA_BURST: state.quota}[cls.kind]


def _keep_as_held(tick: TickWork, cls: CpuClass) -> Steps:
    """On a saved copy of the objects: every mark held stays as it was recorded (checked
    against the kernel, written again where reverted), and nothing else happens. The copy
    can be older than the policies and the pods' labels, so it can neither release a mark
    (the pod may still be in scope), nor grant one (burst loosens; an idle mark on a pod
    that is latency-critical by now hurts it; and a pod held in one class could be put in
    the other)."""
    if not cls.supported(tick.ctx.support):
        return
    for key, mark in sorted(_held(tick, cls).items()):
        pod = tick.ctx.pods.get(key)
        if pod is None or pod.is_terminating:
            continue
        if not (yield cls.hold(pod, mark)):
            tick.changes.append(IsolationChange(kind=cls.kind, change=MARKED, pod=key,
                                                policy=mark.policy, reason="check", result=FAILED))


def _why_out(tick: TickWork, cls: CpuClass, key: str) -> str:
    if not cls.supported(tick.ctx.support):
        return "not supported"
    if cls.kind in (BURST, QUOTA_BURST) and key in tick.state.throttled:
        return "capped"
    if cls.kind not in classes_in_force(tick.ctx.isolation):
        return "class removed"
    if cls.kind == QUOTA_BURST and over_a_line(tick.ctx):
        return "over a line"
    if cls.kind == QUOTA_BURST and _cpu_unknown(tick.ctx):
        return "no cpu figure"
    return "left the scope"


def _release(tick: TickWork, cls: CpuClass, pod: Pod, mark: IsolationMark, change: str,
             why: str) -> Steps:
    done = yield cls.release(pod)
    if done:
        tick.state.drop_mark(cls.kind, pod.key)
    tick.changes.append(IsolationChange(kind=cls.kind, change=change, pod=pod.key,
                                        policy=mark.policy, reason=why,
                                        result=None if done else FAILED))


def clear_burst(tick: TickWork, pod: Pod) -> Steps:
    """Before a cap: take the pod's burst back (the kernel refuses a quota below it), then
    its raised quota (the throttler records the quota it finds as the original)."""
    for cls in (BURST_CLASS, QUOTA_CLASS):
        mark = _held(tick, cls).get(pod.key)
        if mark is not None:
            yield from _release(tick, cls, pod, mark, RELEASED, "capped")
