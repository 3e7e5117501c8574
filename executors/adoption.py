"""Restarts resume, they do not reset: a starting agent adopts the caps its state file names.

The throttler's state file (``executors.quota_state``) holds, per throttled pod, the
original quotas, the cap last written and the action and rule that held it. At the first
tick with objects the engine's memory is rebuilt from it, so the caps stay in force (the
kernel still enforces them; nothing is written) and are handed back through throttle-up
when the node is cool, step by step: a rolling update causes no burst of interference.

Decision where DESIGN.md is silent: the rule hysteresis is not persisted. A rule that
holds an adopted cap starts *triggered* (it was triggered when it capped the pod); a hot
node keeps it so and the cap stays, a cool one restores it after ``restoreThreshold``
samples, and throttle-up raises the cap. Without this a restarted rule would be
``normal``, which never feeds throttle-up, and the cap would stay for ever.

Handed back at once instead (the caller restores them): pods no longer on the node
(their cgroup went with them), records without a cap or without an action, and caps at
or above the pod's ceiling.

The CPU isolation marks (``executors.isolation_state``) are adopted likewise
(``adopt_marks``): a class is a standing state, not a step, so nothing needs triggering;
the tick checks each mark against the kernel and releases the pods that left the class.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from agent.model.batch import batch_limits
from agent.model.numbers import EPSILON
from agent.model.objects import Node, Pod
from engine.caps import ceiling
from engine.records import (
    BURST,
    IDLE,
    QUOTA_BURST,
    HeldLimits,
    IsolationMark,
    ThrottleRecord,
    parse_owner_tag,
)
from engine.state import NodeState
from executors.batch_limits_state import LimitedPod
from executors.isolation_state import IsolatedPod
from executors.quota_state import ThrottledPod


@dataclass(frozen=True, slots=True)
class HeldCap:
    """A cap the state file says is in force."""

    uid: str
    namespace: str
    name: str
    cap: float | None  # cores, over the containers written; None: none recorded
    action: str
    rule: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def held_caps(pods: Mapping[str, ThrottledPod]) -> list[HeldCap]:
    out = []
    for uid, record in sorted(pods.items()):
        caps = [c.cap for c in record.containers.values() if c.cap is not None]
        action, rule = parse_owner_tag(record.tag)
        out.append(HeldCap(uid, record.namespace, record.name, sum(caps) if caps else None,
                           action, rule))
    return out


@dataclass
class Adoption:
    adopted: list[str] = field(default_factory=list)  # pod keys
    released: list[HeldCap] = field(default_factory=list)  # to restore now


def adopt(state: NodeState, held: Iterable[HeldCap], pods: Iterable[Pod], node: Node) -> Adoption:
    """Put the held caps of pods still on the node into the engine's memory; the rest
    are returned to be handed back."""
    by_uid = {p.uid: p for p in pods}
    result = Adoption()
    for cap in held:
        pod = by_uid.get(cap.uid)
        top = ceiling(pod, node) if pod is not None else 0.0
        if pod is None or cap.cap is None or not cap.action or cap.cap >= top - EPSILON:
            result.released.append(cap)
            continue
        state.adopt(pod.key, ThrottleRecord(cap.cap, top, cap.action, cap.rule, pod.uid))
        result.adopted.append(pod.key)
    return result


@dataclass
class MarksAdopted:
    adopted: list[str] = field(default_factory=list)  # pod keys
    gone: list[str] = field(default_factory=list)  # uids of pods no longer on the node


def adopt_marks(state: NodeState, held: Mapping[str, IsolatedPod], pods: Iterable[Pod]) -> MarksAdopted:
    """Put the idle, burst and quota burst marks the isolator's file names into the engine's memory,
    for the pods still on the node: they stay in force, and the next tick releases those
    whose pod left the class while no agent ran. The uids of pods gone are returned: their
    cgroups went with them, only the records are left to forget."""
    by_uid = {p.uid: p for p in pods}
    result = MarksAdopted()
    for uid, record in sorted(held.items()):
        pod = by_uid.get(uid)
        if pod is None:
            result.gone.append(uid)
            continue
        if record.idle is not None:
            state.adopt_isolation(IDLE, pod.key, IsolationMark(record.idle_owner, uid))
        if record.burst:
            state.adopt_isolation(BURST, pod.key, IsolationMark(record.burst_owner, uid))
        if record.quota:  # raised: the next tick takes it back if the node is over a line
            state.adopt_isolation(QUOTA_BURST, pod.key,
                                  IsolationMark(record.quota_owner, uid, record.quota_percent))
        result.adopted.append(pod.key)
    return result


def adopt_limits(state: NodeState, held: Mapping[str, LimitedPod], pods: Iterable[Pod]) -> MarksAdopted:
    """Put the batch limits the limiter's file names into the engine's memory, for the
    pods still on the node; the uids of pods gone are returned (only their records are
    left to forget). The tick asks for every batch pod's limits again, checked against
    the kernel."""
    by_uid = {p.uid: p for p in pods}
    result = MarksAdopted()
    for uid, _record in sorted(held.items()):
        pod = by_uid.get(uid)
        if pod is None:
            result.gone.append(uid)
            continue
        limits = batch_limits(pod)
        state.adopt_limits(pod.key, HeldLimits(uid, limits.cpu if limits else None,
                                               limits.memory if limits else None))
        result.adopted.append(pod.key)
    return result
