"""What the agent remembers about one node between ticks, and every way it changes.

``NodeState`` is the one owner of that memory: rule hysteresis, the caps it holds, the
pods evicted and still terminating, the eviction rounds' cool-downs, the token bucket,
the fault backoff and the evictions not answered in their tick. Nothing outside writes
its fields; every change is a named method below, so what can happen to a node's memory
reads in one place:

* a tick: the decision (``engine.plan``) works on a ``copy`` and returns it, and the
  node's holder (``agent.node.tick.NodeBrain``) keeps the result;
* ``settle_late_evictions``: evictions answered after their tick (``engine.unanswered``);
* ``adopt``: a restarted agent takes over the caps its state file names
  (``executors.adoption``); ``adopt_isolation``: the idle and burst marks its isolation
  file names (``agent.node.resume``);
* ``resume_limits``: the bucket and cool-downs saved across a restart
  (``agent.node.eviction_memory``);
* ``forget_caps``: every cap was handed back at once (uninstall, local-mode exit);
  ``forget_isolation``: every mark likewise;
* ``found_reverted``: what the actuators found undone in the kernel (``engine.records.
  Reverted``): a cap not written back is forgotten, one the kernel holds tighter is the cap;
* ``hold_limits`` / ``drop_limits``: the batch pods whose limits the node enforces
  (``engine.phases.batch_limits``); ``adopt_limits``: those a restarted agent finds
  recorded; ``forget_limits``: every limit handed back at once;
* ``keep_batch``: the window of non-batch use and the batch capacity published after a
  tick (``engine.phases.batch``);
* ``forget_evictions``: local mode, where an eviction is reported and not performed, so
  nothing terminates and nothing stays released.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from agent.model.analysis import NORMAL, TRIGGERED, RuleTracker
from agent.model.objects import Pod
from agent.model.settings import EvictionRateLimit
from agent.model.usage import PodUsage
from engine.batch_capacity import BatchMemory, Published
from engine.limits import FaultBackoff, TokenBucket
from engine.records import (
    BATCH_CAPACITY_OWNER,
    BURST,
    CPU_QUOTA,
    IDLE,
    QUOTA_BURST,
    HeldLimits,
    IsolationMark,
    LateEviction,
    Reverted,
    ThrottleRecord,
)
from engine.unanswered import Unanswered, settle


@dataclass(slots=True)
class NodeState:
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
    #: Pods whose eviction was not answered in its tick and may still take effect.
    unanswered: dict[str, Unanswered] = field(default_factory=dict)
    #: Pods held in the idle class, and pods given CPU burst (``engine.phases.isolation``).
    idle: dict[str, IsolationMark] = field(default_factory=dict)
    burst: dict[str, IsolationMark] = field(default_factory=dict)
    #: Pods whose CFS quota is raised above their limit, by the percent in the mark.
    quota: dict[str, IsolationMark] = field(default_factory=dict)
    #: The window of non-batch use and the batch capacity published (``engine.phases.batch``).
    batch: BatchMemory = field(default_factory=BatchMemory)
    #: Batch pods whose limits from their batch resources are in force (``engine.phases.batch_limits``).
    limited: dict[str, HeldLimits] = field(default_factory=dict)

    def copy(self) -> NodeState:
        """A working copy a decision may change without touching this one."""
        return NodeState(
            trackers=dict(self.trackers),
            throttled=dict(self.throttled),
            evicting=dict(self.evicting),
            last_eviction_round=dict(self.last_eviction_round),
            bucket=None if self.bucket is None else self.bucket.copy(),
            backoff=FaultBackoff(self.backoff.attempts, self.backoff.until),
            unanswered=dict(self.unanswered),
            idle=dict(self.idle),
            burst=dict(self.burst),
            quota=dict(self.quota),
            batch=self.batch,
            limited=dict(self.limited),
        )

    # -- what the node's memory says (for reports, logs and tests) ------------------------------
    def caps(self) -> dict[str, float]:
        """The caps in force, by pod (an evicted pod's, on its way out, is not one)."""
        evicting = self.evicting
        return {k: r.cap for k, r in self.throttled.items() if k not in evicting}

    def caps_and_limits(self) -> dict[str, float]:
        """``caps`` and, for a batch pod not capped lower, the CPU limit from its
        ``batch-cpu`` (SIMULATE.md: a batch pod's limits appear in ``throttled`` "like any
        cap"). The metrics and the console count caps only: a limit is the pod's own."""
        evicting = self.evicting
        out = self.caps()
        for key, held in self.limited.items():
            if held.cpu is not None and key not in out and key not in evicting:
                out[key] = held.cpu
        return out

    def batch_limits(self) -> dict[str, HeldLimits]:
        """The batch pods whose limits are in force, by pod."""
        return dict(self.limited)

    def terminating(self) -> list[str]:
        """Pods evicted and still running out their grace period."""
        return sorted(self.evicting)

    def awaiting_answer(self) -> dict[str, str]:
        """Pods whose eviction was sent and not answered yet, with the action that sent it."""
        return {k: e.action for k, e in sorted(self.unanswered.items())}

    def last_rounds(self) -> dict[str, float]:
        """Each action's last eviction round on this node (its cool-down runs from it)."""
        return dict(self.last_eviction_round)

    def isolated(self) -> dict[str, list[str]]:
        """The pods in each CPU isolation class, sorted (``idle``, ``burst``; ``quotaBurst``
        only while some pod's quota is raised: an opt-in of the burst section)."""
        out = {IDLE: sorted(self.idle), BURST: sorted(self.burst)}
        if self.quota:
            out[QUOTA_BURST] = sorted(self.quota)
        return out

    def batch_capacity(self) -> Published | None:
        """The batch capacity the node publishes (None: none)."""
        return self.batch.published

    def tokens(self) -> float | None:
        """Eviction tokens in the node's bucket (None before its first sample)."""
        return None if self.bucket is None else self.bucket.tokens

    # -- a tick's transitions (on the decision's working copy) ------------------------------
    def observe(self, trackers: Mapping[str, RuleTracker]) -> None:
        """The rules' hysteresis after this tick's sample."""
        self.trackers = dict(trackers)

    def refill(self, rate: EvictionRateLimit, now: float) -> TokenBucket:
        """The bucket at ``now``: full at the node's first sample, else refilled."""
        if self.bucket is None:
            self.bucket = TokenBucket.full(rate, now)
        else:
            self.bucket.refill(rate, now)
        return self.bucket

    def forget_gone(self, pods: Mapping[str, Pod]) -> None:
        """Evicted pods that are gone have nothing left to release."""
        for key in [k for k in self.evicting if k not in pods]:
            del self.evicting[key]

    def hold_cap(self, key: str, record: ThrottleRecord) -> None:
        self.throttled[key] = record

    def move_cap(self, key: str, cap: float) -> None:
        self.throttled[key] = replace(self.throttled[key], cap=cap)

    def drop_cap(self, key: str) -> None:
        """The original quota is back (or the pod is gone): the cap is forgotten."""
        self.throttled.pop(key, None)

    def hold_mark(self, kind: str, key: str, mark: IsolationMark) -> None:
        """A pod is in the class ``kind`` (idle, burst): its mark is in force."""
        self._marks(kind)[key] = mark

    def drop_mark(self, kind: str, key: str) -> None:
        """What was there before the mark is back (or the pod is gone)."""
        self._marks(kind).pop(key, None)

    def _marks(self, kind: str) -> dict[str, IsolationMark]:
        return {IDLE: self.idle, BURST: self.burst, QUOTA_BURST: self.quota}[kind]

    def hold_limits(self, key: str, held: HeldLimits) -> None:
        """A batch pod's limits are in force."""
        self.limited[key] = held

    def drop_limits(self, key: str) -> None:
        """What the batch pod's cgroups held before is back (or the pod is gone)."""
        self.limited.pop(key, None)

    def keep_batch(self, memory: BatchMemory) -> None:
        """The batch capacity's window and figures after this tick."""
        self.batch = memory

    def evicted(self, key: str, usage: PodUsage) -> None:
        """An eviction took effect: the pod terminates, its usage is on its way out."""
        self.evicting[key] = usage

    def expect_answer(self, key: str, entry: Unanswered) -> None:
        """An eviction was sent and not answered in its tick: it may still take effect."""
        self.unanswered[key] = entry

    def answered(self, key: str) -> None:
        self.unanswered.pop(key, None)

    def rounds_ran(self, actions: Iterable[str], now: float) -> None:
        """Rounds that evicted: their cool-down starts now."""
        for name in actions:
            self.last_eviction_round[name] = now

    # -- transitions between ticks ------------------------------------------------------------
    def settle_late_evictions(self, pods: Mapping[str, Pod], usage: Mapping[str, PodUsage],
                              now: float) -> list[LateEviction]:
        """Count the pods that late eviction answers evicted (they now terminate) as this
        node's evictions: released, a token taken, the action's cool-down started. Called
        before the tick's analysis, so their usage is released from this tick's gaps,
        once. Returns them, for the Event and the metric their own tick could not give."""
        late = []
        for key, entry in settle(self.unanswered, pods):
            late.append(LateEviction(key, entry.action))
            pod = pods.get(key)
            if pod is not None and pod.is_terminating and (not entry.uid or pod.uid == entry.uid):
                self.evicting[key] = usage.get(key, PodUsage())  # on its way out: released once
            if self.bucket is not None:
                self.bucket.take()
            self.last_eviction_round[entry.action] = max(
                now, self.last_eviction_round.get(entry.action, now))
        return late

    def adopt(self, key: str, record: ThrottleRecord) -> None:
        """A cap a restarted agent finds in force. Its rule starts triggered (it was when
        it capped the pod), so a cool node restores it and throttle-up hands it back."""
        self.throttled[key] = record
        if record.action == BATCH_CAPACITY_OWNER:
            return  # held by the batch capacity, not by a rule's hysteresis
        tracker = self.trackers.get(record.rule)
        if record.rule and (tracker is None or tracker.status == NORMAL):
            self.trackers[record.rule] = RuleTracker(TRIGGERED)

    def resume_limits(self, bucket: TokenBucket | None, rounds: Mapping[str, float]) -> None:
        """The bucket and the cool-downs an earlier run saved."""
        if bucket is not None:
            self.bucket = bucket
        self.last_eviction_round.update(rounds)

    def forget_caps(self) -> None:
        """Every cap was handed back at once (the originals written by the throttler)."""
        self.throttled.clear()

    def adopt_isolation(self, kind: str, key: str, mark: IsolationMark) -> None:
        """A mark a restarted agent finds recorded: in force, so the class goes on (the
        tick checks it against the kernel) and a pod that left it meanwhile is released."""
        self._marks(kind)[key] = mark

    def adopt_limits(self, key: str, held: HeldLimits) -> None:
        """A batch pod's limits a restarted agent finds recorded: in force (the tick
        checks them against the kernel each time it asks for them)."""
        self.limited[key] = held

    def forget_limits(self) -> None:
        """Every batch pod's limits were handed back at once (uninstall, release)."""
        self.limited.clear()

    def forget_isolation(self) -> None:
        """Every mark was released at once (uninstall, local-mode exit)."""
        self.idle.clear()
        self.burst.clear()
        self.quota.clear()

    def found_reverted(self, found: Iterable[Reverted]) -> None:
        """What the actuators found undone in the kernel: a cap not written back is not
        held any more (the pod is an ordinary candidate again: the node's memory never
        claims a cap the kernel does not hold); a cap the kernel now holds tighter (a new
        limit below it) is the cap. A mark written again stays as it is; one that could
        not be was answered so to the tick that asked for it."""
        for item in found:
            if item.control != CPU_QUOTA:
                continue
            if not item.rewritten:
                self.drop_cap(item.pod)
            elif item.cap is not None and item.pod in self.throttled:
                self.move_cap(item.pod, item.cap)

    def forget_evictions(self) -> None:
        """Local mode: an eviction is reported, not performed, so the pod still runs and
        is still measured: nothing of it is released and it stays a candidate."""
        self.evicting.clear()
