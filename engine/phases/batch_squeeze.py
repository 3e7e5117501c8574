"""Batch pods held within the batch capacity the node publishes: throttled first when it
falls below what they hold, handed back when it rises (DESIGN.md "Batch capacity": "when
non-batch use rises and the published capacity falls below what batch pods hold, batch
pods are throttled first and evicted by the waterlines as before").

The scheduler placed the node's batch pods by their ``batch-cpu`` requests (equal to
their limits) against the capacity the node published then. When non-batch use rises,
the capacity published falls (``engine.batch_capacity``, after its window, hysteresis and
interval), and the batch pods may hold more CPU than it says is spare. Then:

* **held** = the sum, over the node's batch pods, of the CPU each may use now: its cap
  where one is in force, else its ``batch-cpu`` limit (a pod with no CPU limit cannot be
  held to a figure and is left alone; a pod not Running, or being deleted, holds nothing);
* while held is above the published CPU capacity, batch pods are capped, **lowest value
  first** (the ``general`` order: QoS class and priority, then the shortest running
  time, whose work is the least to lose), each down to what closes the excess, at the
  least the kernel's smallest quota (``MIN_CPU_CAP``), until held is within the
  capacity; the caps are recorded like any cap, owned by ``batchCapacity`` (adopted
  after a restart, released on uninstall, never raised by a waterline's throttle-up);
* while held is below the capacity, those caps are raised again, **highest value first**,
  back to the pod's limit (the throttler's original: the limit) as far as the room goes;
* the node's waterlines are left to do what they do: evict (lowest value first, within
  the safety limits) when the node itself is too hot, whatever this phase capped.

Decisions where DESIGN.md is silent:

* The CPU capacity is the one this tick leaves published (the phase runs after the
  publication): the hysteresis and the interval that keep the Node's status quiet keep
  the caps quiet too. Memory is not squeezed: a memory limit cannot be lowered under
  what a pod holds without the kernel's OOM killer; the memory waterlines evict.
* A pod a waterline capped lower keeps that cap and its owner; it counts in held at it.
  A pod this phase must lower further is taken over (its cap is then this phase's).
* Never touched, as for the waterlines: mirror, static and DaemonSet pods, pods being
  deleted, protected and system-critical pods (they still count in held).
* No capacity published any more (the section removed, the node's figures withdrawn):
  every cap of this phase is handed back.
* Nothing is written on the saved copy of the objects (``TickContext.provisional``).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from agent.model.batch import cpu_limit, is_batch_pod
from agent.model.numbers import EPSILON
from agent.model.objects import Pod
from agent.model.policy import never_candidate_reason
from agent.model.usage import PodUsage
from engine.caps import MIN_CPU_CAP, ceiling, split_cap
from engine.intents import Intent, RestoreCap, WriteCap
from engine.records import (
    BATCH_CAPACITY_OWNER,
    FAILED,
    RESTORE,
    THROTTLE,
    ActionRecord,
    ThrottleRecord,
    owner_tag,
)
from engine.sorters import SORTERS
from engine.work import Steps, TickWork

ORDER = "general"
REASON = "batch capacity"


def batch_squeeze(tick: TickWork) -> Steps:
    ctx, state = tick.ctx, tick.state
    if ctx.provisional:
        return
    chosen = ctx.tick.policies.batch_capacity_for_node(ctx.node.labels)
    published = state.batch.published
    rule = f"{chosen[0]}/batchCapacity" if chosen is not None else ""
    if published is None:
        for key in sorted(k for k, r in state.throttled.items() if r.action == BATCH_CAPACITY_OWNER):
            pod = ctx.pods.get(key)
            if pod is not None and key not in state.evicting:
                yield from _raise(tick, pod, None, state.throttled[key].rule, None, 0.0)
        return
    capacity = published.cpu
    batch = [p for k, p in ctx.pods.items() if is_batch_pod(p) and cpu_limit(p) is not None
             and p.phase == "Running" and k not in state.evicting and not p.is_terminating]  # fmt: skip
    held = sum(_now(tick, p) for p in batch)
    ranked = SORTERS[ORDER].sort([tick.candidate(p.key) for p in batch])
    if held > capacity + EPSILON:
        excess = held - capacity
        for cand in ranked:
            if excess <= EPSILON:
                break
            if never_candidate_reason(cand.pod) is not None:
                continue
            excess -= yield from _lower(tick, cand.pod, rule, capacity, held, excess)
        return
    room = capacity - held
    for cand in reversed(ranked):
        record = state.throttled.get(cand.key)
        if room <= EPSILON:
            break
        if record is None or record.action != BATCH_CAPACITY_OWNER:
            continue
        room -= yield from _raise(tick, cand.pod, record.cap + room, record.rule or rule,
                                  capacity, room)


def _now(tick: TickWork, pod: Pod) -> float:
    """What a batch pod may use now: its cap, else its CPU limit."""
    record = tick.state.throttled.get(pod.key)
    return record.cap if record is not None else ceiling(pod, tick.ctx.node)


def _lower(tick: TickWork, pod: Pod, rule: str, capacity: float, held: float,
           excess: float) -> Generator[Intent, Any, float]:
    """Cap ``pod`` to close what it can of ``excess``; returns the cores taken back."""
    state = tick.state
    current = _now(tick, pod)
    new_cap = max(MIN_CPU_CAP, current - excess)
    if new_cap >= current - EPSILON:
        return 0.0
    usage = tick.ctx.usage.get(pod.key, PodUsage())
    written = yield WriteCap(pod, split_cap(pod, usage, new_cap), owner_tag(BATCH_CAPACITY_OWNER, rule))
    taken = current - new_cap if written else 0.0
    if written:
        state.hold_cap(pod.key, ThrottleRecord(new_cap, ceiling(pod, tick.ctx.node),
                                               BATCH_CAPACITY_OWNER, rule, pod.uid))  # fmt: skip
    tick.records.append(ActionRecord(
        action=THROTTLE, pod=pod.key, rule=rule, action_name=BATCH_CAPACITY_OWNER,
        waterline=capacity, gap_before=excess, gap_after=excess - taken, value=held,
        cpu_cap=new_cap, released={"cpu": taken} if taken else {},
        result=None if written else FAILED, reason=REASON))  # fmt: skip
    return taken


def _raise(tick: TickWork, pod: Pod, to: float | None, rule: str, capacity: float | None,
           room: float) -> Generator[Intent, Any, float]:
    """Raise ``pod``'s cap to ``to`` (None, or at its limit: hand it back); returns the
    cores given."""
    state = tick.state
    record = state.throttled[pod.key]
    top = ceiling(pod, tick.ctx.node)
    new_cap = None if to is None or to >= top - EPSILON else to
    if new_cap is None:
        written = yield RestoreCap(pod)
        if written:
            state.drop_cap(pod.key)
    else:
        usage = tick.ctx.usage.get(pod.key, PodUsage())
        written = yield WriteCap(pod, split_cap(pod, usage, new_cap),
                                 owner_tag(BATCH_CAPACITY_OWNER, rule))
        if written:
            state.move_cap(pod.key, new_cap)
    given = ((top if new_cap is None else new_cap) - record.cap) if written else 0.0
    tick.records.append(ActionRecord(
        action=RESTORE, pod=pod.key, rule=rule, action_name=BATCH_CAPACITY_OWNER,
        waterline=capacity, gap_before=room, gap_after=room - given, cpu_cap=new_cap,
        result=None if written else FAILED,
        reason=REASON if capacity is not None else "no batch capacity published"))  # fmt: skip
    return given
