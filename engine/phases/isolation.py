"""The CPU isolation phases: keep the idle class and CPU burst as the policies say
(DESIGN.md "CPU isolation: who runs first, not only how much").

Both classes follow one reconcile (``_reconcile``), told apart by a row of ``CLASSES``:

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
classes change who runs first, not what anybody uses.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from agent.model.isolation import IsolationSupport
from agent.model.objects import Pod
from engine.cpu_classes import burst_members, classes_in_force, idle_members
from engine.intents import Intent, MarkIdle, ReleaseBurst, ReleaseIdle, SetBurst
from engine.records import (
    BURST,
    FAILED,
    IDLE,
    LIFTED,
    MARKED,
    RELEASED,
    IsolationChange,
    IsolationMark,
)
from engine.work import Steps, TickWork


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


def _set_burst(pod: Pod, mark: IsolationMark) -> Intent:
    return SetBurst(pod, mark.percent or 0.0, mark.policy)


def _mark_idle(pod: Pod, mark: IsolationMark) -> Intent:
    return MarkIdle(pod, mark.policy)


IDLE_CLASS = CpuClass(IDLE, _idle, lambda s: s.idle, _mark_idle, ReleaseIdle)
BURST_CLASS = CpuClass(BURST, _bursting, lambda s: s.burst, _set_burst, ReleaseBurst)


def idle_class(tick: TickWork) -> Steps:
    yield from _reconcile(tick, IDLE_CLASS)


def cpu_burst(tick: TickWork) -> Steps:
    yield from _reconcile(tick, BURST_CLASS)


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
    return tick.state.idle if cls.kind == IDLE else tick.state.burst


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
    if cls.kind == BURST and key in tick.state.throttled:
        return "capped"
    if cls.kind not in classes_in_force(tick.ctx.isolation):
        return "class removed"
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
    """Before a cap: take the pod's burst back (the kernel refuses a quota below it)."""
    mark = tick.state.burst.get(pod.key)
    if mark is not None:
        yield from _release(tick, BURST_CLASS, pod, mark, RELEASED, "capped")
