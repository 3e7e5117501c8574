"""What the engine decides, as plain values: an action with its reason, a cap it holds.

``ActionRecord`` is what a tick reports, logs, counts and turns into an Event; it is
built with keywords only, so a record reads as what it says. ``ThrottleRecord`` is one
cap the node holds across ticks (``engine.state``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

EVICT = "evict"
THROTTLE = "throttle"
RESTORE = "restore"
#: The label of a restore that raised a cap without handing the original back (metrics
#: and logs tell it from the return to the original; the report keeps ``restore``).
RESTORE_STEP = "restore-step"
#: ``result`` of a throttle or restore the actuator could not write (retried next tick).
FAILED = "failed"


@dataclass(frozen=True, slots=True)
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


@dataclass(frozen=True, slots=True, kw_only=True)
class ActionRecord:
    """One decision, with its reason."""

    action: str  # evict | throttle | restore
    pod: str
    rule: str
    action_name: str
    metric: str = ""
    waterline: float | None = None
    gap_before: float | None = None
    gap_after: float | None = None
    value: float | None = None  # the metric's usage when decided
    cpu_cap: float | None = None
    released: Mapping[str, float] = field(default_factory=dict)
    result: str | None = None
    preview: bool = False
    reason: str = "gap"
    #: An eviction's grace period as asked (None: the pod's own).
    grace_seconds: int | None = None

    @property
    def label(self) -> str:
        """The action as metrics and logs name it: a restore that leaves a cap in force
        (a step up, a floor raised) is ``restore-step``; ``restore`` is the return to the
        original quota. The report keeps ``action`` (SIMULATE.md: every raise is a
        ``restore``)."""
        if self.action == RESTORE and self.cpu_cap is not None:
            return RESTORE_STEP
        return self.action

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
        if self.action != EVICT:
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


@dataclass(frozen=True, slots=True)
class LateEviction:
    """A pod an eviction answered after its tick evicted: it now terminates."""

    pod: str
    action: str


#: The CPU isolation classes (``agent.model.isolation``), as reports and metrics name them.
IDLE = "idle"
BURST = "burst"
#: The CFS quota raised above the CPU limit while the node is under its lines.
QUOTA_BURST = "quotaBurst"
#: What happened to a pod's place in a class this tick.
MARKED = "marked"  # joined: the mark is written (or found in force)
RELEASED = "released"  # left: what was there before is written back
LIFTED = "lifted"  # left for an in-place resize; it comes back when the resize is done


@dataclass(frozen=True, slots=True)
class IsolationMark:
    """A pod this node holds in a CPU isolation class: the policy that put it there and,
    for burst, the percent of the quota it may borrow; for the quota burst, the percent
    above its limit its quota holds."""

    policy: str
    uid: str = ""
    percent: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class IsolationChange:
    """A pod joining or leaving a class, with why; ``result`` ``failed`` when the write
    (or the write-back) did not happen: it is tried again next tick."""

    kind: str  # idle | burst
    change: str  # marked | released | lifted
    pod: str
    policy: str
    reason: str
    result: str | None = None

    def to_report(self) -> dict[str, Any]:
        out = {"class": self.kind, "change": self.change, "pod": self.pod,
               "policy": self.policy, "reason": self.reason}
        if self.result is not None:
            out["result"] = self.result
        return out


#: What a held thing is counted under when found undone (``waterline_caps_reverted_total``'s
#: ``control``): the CFS quota of a cap, the idle mark, the CFS burst, a batch pod's CPU
#: and memory limits.
CPU_QUOTA, CPU_IDLE, CPU_BURST = "cpu_quota", "cpu_idle", "cpu_burst"
#: A quota raised above the limit, found back at the limit (or elsewhere).
CPU_QUOTA_BURST = "cpu_quota_burst"

BATCH_CPU_LIMIT, BATCH_MEMORY_LIMIT = "batch_cpu_limit", "batch_memory_limit"

#: The owner (``ThrottleRecord.action``) of a cap that holds a batch pod within the
#: node's published batch capacity (``engine.phases.batch_squeeze``): no AvoidanceAction
#: can have this name (object names are lowercase), so it never collides with one.
BATCH_CAPACITY_OWNER = "batchCapacity"


@dataclass(frozen=True, slots=True)
class HeldLimits:
    """A batch pod whose limits this node enforces (``engine.phases.batch_limits``): its
    uid and its pod-level limits (cores, bytes; None: none on that resource)."""

    uid: str
    cpu: float | None = None
    memory: float | None = None


@dataclass(frozen=True, slots=True)
class Reverted:
    """Something the agent holds (a cap, an idle or burst mark) found undone in the kernel
    by someone else (``systemctl daemon-reload``, a resize), and what its actuator did:
    what the actuators report and the node's memory applies (``NodeState.found_reverted``);
    the agent counts it and says it once (``agent.node.holding``)."""

    control: str  # CPU_QUOTA, CPU_IDLE, CPU_BURST, BATCH_CPU_LIMIT or BATCH_MEMORY_LIMIT
    uid: str
    pod: str  # namespace/name
    cgroup: str
    container: str = ""
    found: str = ""  # the file's content found
    wanted: str = ""  # what was written back
    #: A cap found at another value than the saved original: that is the new original.
    new_original: bool = False
    #: False: a cap could not be written back (the kernel does not hold it: forgotten).
    #: A mark's answer is the tick's (the intent that found it).
    rewritten: bool = True
    error: str = ""
    #: The pod's cap now (cores), where the kernel holds a tighter one than the cap
    #: recorded (a new original below it); None: the cap is as recorded.
    cap: float | None = None
