"""The live node loop: collect -> decide -> act -> publish, every ``interval`` seconds.

Everything the loop touches is handed in: where the objects come from (the API caches in
a cluster, files in local mode), the collector, the decision core (``NodeBrain``, which
keeps the rule hysteresis, caps, cool-downs and CPU isolation marks across ticks), the
actuators (a list of one shape: ``executors.actuators``), the clocks and the sleep. So tests drive it tick by tick with fakes, and the same loop runs in the
DaemonSet, in ``--local`` mode and in the demo.

Fail-safe rules (DESIGN.md "Cross-cutting rules"):

* a failure in any stage (objects, collection, decision) fails that tick only: it is
  logged, counted, and the next tick starts on time. The loop itself never raises;
* unreadable files and bad pods are skipped by the collectors (counted here as collector
  errors); an actuator that raises on one pod is caught around that pod, so the other pods
  of the tick are still acted on;
* no node object, no metrics -> no action (the analyzer neither triggers nor restores on a
  missing metric).

The schedule is fixed-rate on the monotonic clock: a tick that overruns its interval makes
the loop skip the missed slots rather than run ticks back to back.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

from agent.model.objects import Node, Pod
from agent.model.policy import PolicySet
from agent.model.usage import PodUsage
from agent.node.tick import NodeBrain, TickReport
from engine.decide import TickInput
from engine.records import ActionRecord
from executors.actuators import Actuator, Guarded, Hands


@dataclass(frozen=True)
class Objects:
    """One snapshot of what the loop decides on (from the API caches, or from files)."""

    node: Node | None
    pods: Sequence[Pod]
    policies: PolicySet
    namespace_labels: Callable[[str], Mapping[str, str]] = lambda ns: {
        "kubernetes.io/metadata.name": ns
    }
    #: kind -> number of objects rejected as invalid (policies' errors are counted apart)
    invalid: Mapping[str, int] = field(default_factory=dict)
    #: The cluster brake's reason while it is set (evictions paused), else None.
    eviction_brake: str | None = None
    #: Where the objects come from when it is not the live source ("saved": the state
    #: directory's copy, while the API server has not answered since the start).
    origin: str = "live"


@dataclass(frozen=True, slots=True)
class Collection:
    """One tick's measurements."""

    metrics: Mapping[str, float]
    usage: Mapping[str, PodUsage]
    #: Pods whose cgroup was not found this tick (not started yet, already gone).
    missing: tuple[str, ...] = ()
    #: source -> problems met this tick (unreadable or garbage files)
    errors: Mapping[str, int] = field(default_factory=dict)


class Collector(Protocol):
    def collect(self, node: Node, pods: Sequence[Pod]) -> Collection: ...


@dataclass(frozen=True)
class TickOutcome:
    """What one tick saw, decided and did: what the console, the metrics and logs show."""

    seq: int
    at: float  # wall clock, end of the tick
    duration: float  # seconds
    node: str
    report: TickReport | None = None
    pods: Sequence[Pod] = ()
    usage: Mapping[str, PodUsage] = field(default_factory=dict)
    #: pod key -> CPU cap in force after the tick (cores)
    caps: Mapping[str, float] = field(default_factory=dict)
    #: The pods in each CPU isolation class after the tick (``idle``, ``burst``).
    isolated: Mapping[str, Sequence[str]] = field(default_factory=dict)
    missing: tuple[str, ...] = ()
    #: source -> errors this tick (collector files, actuators, failed stages)
    errors: Mapping[str, int] = field(default_factory=dict)
    invalid: Mapping[str, int] = field(default_factory=dict)
    policy_errors: tuple[str, ...] = ()
    #: why the tick failed; None when it completed
    error: str | None = None
    #: "applied", or "dry-run" when nothing is written
    mode: str = "applied"
    #: False in local mode, where evictions are reported and not performed
    evictions_performed: bool = True
    #: The metrics the node's rules watch.
    watched: tuple[str, ...] = ()
    #: The node and the policies the tick decided on (None when the source failed), for
    #: publishers that need the rules behind the report (events, the taint).
    node_record: Node | None = None
    policies: PolicySet | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


#: Called with every tick's outcome: publishers show it (metrics, Events, the console),
#: after-tick hooks keep house (the eviction limits' file, the config file's reload).
Publisher = Callable[[TickOutcome], None]
AfterTick = Callable[[TickOutcome], None]


class _Trouble:
    """What went wrong in a tick: errors counted by source, and why it stopped."""

    def __init__(self) -> None:
        self.errors: dict[str, int] = {}
        self.error: str | None = None

    def add(self, counts: Mapping[str, int]) -> None:
        for source, n in counts.items():
            self.errors[source] = self.errors.get(source, 0) + n

    def fail(self, why: str, source: str | None = None) -> None:
        self.error = why
        if source is not None:
            self.add({source: 1})


class NodeLoop:
    def __init__(
        self,
        *,
        node_name: str,
        source: Callable[[], Objects],
        collector: Collector,
        brain: NodeBrain,
        actuators: Sequence[Actuator] = (),
        evictor: Actuator | None = None,
        throttler: Actuator | None = None,
        interval: float = 1.0,
        publishers: Sequence[Publisher] = (),
        after_tick: Sequence[AfterTick] = (),
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Any] | None = None,
        evictions_performed: bool = True,
        dry_run: bool = False,
        prepare: Callable[[Objects], bool | None] | None = None,
        before_tick: Sequence[Callable[[], None]] = (),
        isolator: Actuator | None = None,
    ) -> None:
        if interval <= 0:
            raise ValueError(f"interval must be > 0 seconds, got {interval}")
        self.node_name = node_name
        self.source = source
        self.collector = collector
        self.brain = brain
        #: What carries the decisions out, one shape whatever they write (``evictor``,
        #: ``throttler`` and ``isolator`` are three of them, named; no isolator: no CPU
        #: isolation class is ever planned).
        self.actuators: list[Actuator] = [
            *actuators, *(a for a in (evictor, throttler, isolator) if a is not None)]
        self.interval = interval
        self.publishers = list(publishers)
        self.after_tick = list(after_tick)
        self.clock = clock
        self.monotonic = monotonic
        self._stop = threading.Event()
        self.sleep = sleep if sleep is not None else self._stop.wait
        #: False in local mode: nothing is terminating, so nothing stays "released".
        self.evictions_performed = evictions_performed
        self.dry_run = dry_run
        #: Run with the first objects that have the node, before the first decision (a
        #: restarted agent adopts the caps it left: agent.node.resume), and again with the
        #: next ones for as long as it returns False (not done yet).
        self.prepare = prepare
        #: Called as each tick starts (the tick's API time budget starts then).
        self.before_tick = list(before_tick)
        self.seq = 0
        self.log = structlog.get_logger().bind(node=node_name)
        self._failing: tuple[str, int] | None = None  # (error, ticks) of a failing streak

    # -- one tick ------------------------------------------------------------------------
    def tick(self) -> TickOutcome:
        """Run one iteration: objects -> collection -> decision -> outcome; never raises.
        A stage that fails ends the tick there (said in ``error``, counted in ``errors``)."""
        self.seq += 1
        started = self.monotonic()
        trouble = _Trouble()
        errors: dict[str, int] = {}  # by actuator, one pod's failure each
        hands = Hands(*(Guarded(a, errors, self.log) for a in self.actuators))
        for hook in self.before_tick:
            hook()
        objects = self._objects(trouble)
        node = objects.node if objects is not None else None
        collection = self._collect(node, objects, trouble) if node is not None and objects else None
        report = None
        if node is not None and objects is not None and collection is not None:
            report = self._decide(node, objects, collection, hands, trouble)
        trouble.add(errors)
        outcome = self._outcome(started, objects, collection, report, trouble)
        self._log_outcome(outcome)
        self._hand_on(outcome)
        return outcome

    def _objects(self, trouble: _Trouble) -> Objects | None:
        try:
            objects = self.source()
        except Exception as err:  # noqa: BLE001 - the loop never dies
            trouble.fail(f"objects: {err!r}", "objects")
            return None
        if objects.node is None:
            trouble.fail(f"node {self.node_name!r} not found: no decision this tick")
        return objects

    def _collect(self, node: Node, objects: Objects, trouble: _Trouble) -> Collection | None:
        self._prepare(objects)
        try:
            collection = self.collector.collect(node, objects.pods)
        except Exception as err:  # noqa: BLE001
            trouble.fail(f"collect: {err!r}", "collector")
            return None
        trouble.add(collection.errors)
        return collection

    def _decide(self, node: Node, objects: Objects, collection: Collection, hands: Hands,
                trouble: _Trouble) -> TickReport | None:
        try:
            tick = TickInput(
                now=self.clock(),
                node=node,
                pods=objects.pods,
                metrics=collection.metrics,
                usage=collection.usage,
                policies=objects.policies,
                namespace_labels=objects.namespace_labels,
                settings=self.brain.settings,
                brake=objects.eviction_brake is not None,
                evictions_take_effect=self.evictions_performed,
                support=hands.support,
                provisional=objects.origin != "live",
            )
            return self.brain.decide(tick, hands)
        except Exception as err:  # noqa: BLE001
            trouble.fail(f"decide: {err!r}", "decision")
            return None

    def _outcome(self, started: float, objects: Objects | None, collection: Collection | None,
                 report: TickReport | None, trouble: _Trouble) -> TickOutcome:
        node = objects.node if objects is not None else None
        watched = tuple(sorted({r.metric for r in objects.policies.rules_for_node(node.labels)})) \
            if objects is not None and node is not None else ()  # fmt: skip
        return TickOutcome(
            seq=self.seq,
            at=self.clock(),
            duration=self.monotonic() - started,
            node=self.node_name,
            report=report,
            pods=tuple(objects.pods) if objects is not None else (),
            usage=collection.usage if collection is not None else {},
            caps=self.brain.caps(),
            isolated=self.brain.isolated(),
            missing=collection.missing if collection is not None else (),
            errors=trouble.errors,
            invalid=dict(objects.invalid) if objects is not None else {},
            policy_errors=tuple(str(e) for e in objects.policies.errors) if objects else (),
            error=trouble.error,
            mode="dry-run" if self.dry_run else "applied",
            evictions_performed=self.evictions_performed,
            watched=watched,
            node_record=node,
            policies=objects.policies if objects is not None else None,
        )

    def _hand_on(self, outcome: TickOutcome) -> None:
        """To the publishers, then the after-tick hooks; one failing never stops another."""
        for publish in self.publishers:
            try:
                publish(outcome)
            except Exception as err:  # noqa: BLE001
                self.log.error("publishing a tick failed", publisher=repr(publish), error=repr(err))
        for keep in self.after_tick:
            try:
                keep(outcome)
            except Exception as err:  # noqa: BLE001
                self.log.error("an after-tick hook failed", hook=repr(keep), error=repr(err))

    def _prepare(self, objects: Objects) -> None:
        prepare = self.prepare
        if prepare is None:
            return
        done: bool | None = True
        try:
            done = prepare(objects)
        except Exception as err:  # noqa: BLE001 - the loop never dies
            self.log.error("resuming from the earlier run failed", error=repr(err))
        if done is not False:
            self.prepare = None

    def _log_outcome(self, outcome: TickOutcome) -> None:
        """Actions one event each; a failure streak (API away at start, no node object)
        logged when it starts, once a minute-ish (every 60 ticks) and when it ends."""
        if outcome.error is not None:
            same = self._failing is not None and self._failing[0] == outcome.error
            ticks = self._failing[1] + 1 if same and self._failing is not None else 1
            self._failing = (outcome.error, ticks)
            if ticks == 1 or ticks % 60 == 0:
                self.log.warning("tick failed", code="tick-failed", tick=outcome.seq, error=outcome.error, streak=ticks)
        elif self._failing is not None:
            self.log.info("ticks succeed again", code="ticks-succeed-again", tick=outcome.seq, failed_ticks=self._failing[1])
            self._failing = None
        if outcome.report is None:
            return
        failed: list[str] = []
        for record in outcome.report.actions:
            result = action_result(record, outcome)
            if record.action == "evict" and result == "failed":
                failed.append(record.pod)  # one line for all: an API outage fails them all
                continue
            self.log.info(record.label, code=record.label, tick=outcome.seq, outcome=result, **action_fields(record))
        if failed:
            self.log.warning(
                "evictions failed; the pods stay candidates",
                tick=outcome.seq,
                count=len(failed),
                pods=failed[:10],
            )
        report = outcome.report
        if report.eviction_backoff is not None:
            self.log.warning(
                "eviction API fault: this node's eviction rounds back off",
                tick=outcome.seq,
                seconds=round(report.eviction_backoff, 1),
            )
        if report.limited is not None:
            self.log.warning(
                "eviction round stopped by a safety limit; the gap stays open",
                tick=outcome.seq,
                limit=report.limited,
                evict_gaps=report.gaps.get("evict", {}),
            )

    # -- the loop ------------------------------------------------------------------------
    def run(self, ticks: int | None = None) -> int:
        """Tick every ``interval`` until ``ticks`` ran or :meth:`stop`; returns the count."""
        done = 0
        next_at = self.monotonic()
        while not self._stop.is_set():
            self.tick()
            done += 1
            if ticks is not None and done >= ticks:
                break
            next_at += self.interval
            now = self.monotonic()
            if next_at < now:  # overran: skip the missed slots, keep the phase
                missed = int((now - next_at) // self.interval) + 1
                next_at += missed * self.interval
                self.log.warning("tick overran its interval", code="tick-overran", skipped=missed)
            self.sleep(max(0.0, next_at - now))
        return done

    def stop(self) -> None:
        """Ask :meth:`run` to return after the current tick (from any thread; not from a
        signal handler, where the Event's lock may be held: agent.signal_stop)."""
        self._stop.set()


def action_fields(record: ActionRecord) -> dict[str, Any]:
    """An action's reason as log fields: rule, metric, value, waterline, gap before/after."""
    fields: dict[str, Any] = {
        "pod": record.pod,
        "rule": record.rule,
        "action_name": record.action_name,
        "metric": record.metric,
        "value": record.value,
        "waterline": record.waterline,
        "gap_before": record.gap_before,
        "gap_after": record.gap_after,
        "reason": record.reason,
    }
    if record.action != "evict":
        fields["cpu_cap"] = record.cpu_cap
    if record.released:
        fields["released"] = dict(record.released)
    if record.result is not None:
        fields["result"] = record.result
    if record.preview:
        fields["preview"] = True
    return fields


def action_result(record: ActionRecord, outcome: TickOutcome) -> str:
    """How an action ended: ``preview`` (the rule's strategy), ``dry-run`` (nothing
    written), ``not-performed`` (a local-mode eviction), the Eviction API's answer, or
    ``applied``."""
    if record.preview:
        return "preview"
    if outcome.mode == "dry-run":
        return "dry-run"
    if record.action == "evict":
        if not outcome.evictions_performed:
            return "not-performed"
        return record.result or "failed"
    return record.result or "applied"  # a write that failed says so
