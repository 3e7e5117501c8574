"""The agent's in-cluster side: objects from the API's watches, evictions through the
Eviction API, and each tick's effects on the cluster (Events, the interference taint).

The decisions are pure (``agent.node.events``, ``agent.node.taint``); this module only
applies them. When the API server is unreachable (the watches say so):

* the loop keeps collecting and enforcing the last known policies from the cache, with
  local actions only (throttle, restore); an agent started while it is down acts on the
  objects the previous run saved in the state directory (``agent.node.saved``);
* evictions are not attempted (a request per candidate against a dead server would stall
  the tick) and not queued: the next reachable tick decides again on fresh state;
* events and taint changes are dropped, not queued; rule states and the taint are
  recomputed from the current state once the server is back (a rule still triggered
  gets its RuleTriggered event then, the taint is set or lifted as things stand).

Writes are synchronous within the tick, every request bounded by the tick's API time
budget (``agent.kube.budget``), and stop at the first failure of a tick, so a slow or
dying server delays the next tick's throttling by the budget at most; an eviction, which
comes before the tick's throttling, is waited for evictionAnswerSeconds at most
(``executors.eviction``). The taint is
written by a fresh GET and a merge patch carrying that resourceVersion, so a concurrent
edit of the node's taints (another controller, kubectl) is never overwritten: the 409 is
retried on the next tick.

Invalid policies and actions are logged (once per distinct error); their Events are the
controller's. The cluster brake (the controller's ``waterline-brake`` ConfigMap) is read
from the watches and handed to every tick: evictions pause, throttling goes on.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import structlog

from agent.defaults import NAMESPACE
from agent.kube.budget import BudgetedApi, TickBudget
from agent.kube.client import KubeApi
from agent.kube.errors import KubeError, KubeNotFound
from agent.kube.events import EventRecorder, KubeEvents
from agent.kube.nodeview import NodeView, OwnDaemonSet, start_node_view
from agent.kube.resources import DAEMONSETS
from agent.kube.taints import read_taints, write_taints
from agent.kube.watching import WatchArgs
from agent.model.eviction import EvictionResult
from agent.model.objects import namespace_labels
from agent.model.policy import load_policies
from agent.model.settings import DEFAULT_API_TIME_BUDGET, DEFAULT_EVICTION_ANSWER_SECONDS
from agent.node.events import EventIntent, tick_events
from agent.node.loop import Objects, TickOutcome
from agent.node.saved import SavedObjects
from agent.node.taint import ADD, KEEP, TAINT, decide_taint, has_taint, note_restored, taints_with
from engine.intents import Evict, EvictionAnswer
from executors.actuators import Actuator

COMPONENT = "waterline-agent"


def set_taint(api: KubeApi, node_name: str, wanted: bool) -> bool:
    """Add or remove our taint on the node; True when the node was changed."""
    read = read_taints(api, node_name)
    current = read.taints
    present = any(
        t.get("key") == TAINT.key
        and t.get("value") == TAINT.value
        and t.get("effect") == TAINT.effect
        for t in current
    )
    if present == wanted and (wanted or not any(t.get("key") == TAINT.key for t in current)):
        return False
    write_taints(api, node_name, taints_with(current, wanted), read)
    return True


class ReachableEvictor:
    """The evictor (a wrapper around its ``carry``) while the API server is reachable;
    ``failed`` at once while it is not (nothing queued: the next reachable tick decides
    again)."""

    def __init__(self, evictor: Actuator, reachable: Callable[[], bool], logger: Any = None) -> None:
        self.evictor = evictor
        self.reachable = reachable
        self.log = logger or structlog.get_logger("waterline.node.cluster")
        self._skipping = False

    @property
    def name(self) -> str:
        return self.evictor.name

    @property
    def intents(self) -> tuple[type, ...]:
        return self.evictor.intents

    def carry(self, intent: Evict) -> EvictionAnswer:
        if not self.reachable():
            if not self._skipping:
                self.log.warning("API server unreachable: evictions skipped, not queued")
            self._skipping = True
            return EvictionAnswer(EvictionResult.FAILED)
        self._skipping = False
        answer: EvictionAnswer = self.evictor.carry(intent)
        return answer


class ClusterEffects:
    """A loop publisher writing each tick's events and taint change."""

    def __init__(
        self,
        node_name: str,
        recorder: Any,  # EventRecorder-shaped: record(ref, type, reason, message) -> str
        taint: Callable[[bool], bool],
        reachable: Callable[[], bool],
        dry_run: bool = False,
        logger: Any = None,
    ) -> None:
        self.node_name = node_name
        self.recorder = recorder
        self.taint = taint
        self.reachable = reachable
        self.dry_run = dry_run
        self.log = logger or structlog.get_logger("waterline.node.cluster")
        self.seen: dict[str, str] = {}  # rule states of the last tick
        self.reported: dict[str, str] = {}  # rule states last reported by events
        self.restored_at: dict[str, float] = {}
        self.dropped = 0
        self._offline = False

    def __call__(self, outcome: TickOutcome) -> None:
        report, node, policies = outcome.report, outcome.node_record, outcome.policies
        if report is None or node is None or policies is None:
            return
        rules = policies.rules_for_node(node.labels)
        now = report.at
        self.restored_at = note_restored(self.seen, report.rules, self.restored_at, now)
        self.seen = dict(report.rules)
        if self.dry_run:
            return
        decision = decide_taint(
            rules, report.rules, policies.actions, self.restored_at, now, has_taint(node.taints)
        )
        pods = {p.key: p for p in outcome.pods}
        intents = tick_events(self.node_name, report, rules, self.reported, pods)
        if not self.reachable():
            self.dropped += len(intents) + (decision.change != KEEP)
            if not self._offline:
                self.log.warning(
                    "not in sync with the API server (starting, or unreachable): events and taint "
                    "changes dropped until it is"
                )
            self._offline = True
            return
        if self._offline:
            self.log.info("in sync with the API server: events and taint from the current state")
            self._offline = False
        if decision.change != KEEP and not self._apply_taint(
            decision.change == ADD, decision.holding
        ):
            self.dropped += len(intents)
            return
        if self._write(intents):
            self.reported = dict(report.rules)

    def _apply_taint(self, wanted: bool, holding: tuple[str, ...]) -> bool:
        try:
            changed = self.taint(wanted)
        except KubeError as err:
            self.dropped += 1
            self.log.warning("could not update the node's taint", wanted=wanted, error=str(err))
            return False
        if changed:
            self.log.info(
                "node tainted" if wanted else "node taint removed",
                taint=f"{TAINT.key}:{TAINT.effect}",
                rules=list(holding),
            )
        return True

    def _write(self, intents: list[EventIntent]) -> bool:
        """Record the events in order; stop (and drop the rest) at the first failure."""
        for i, intent in enumerate(intents):
            result = self.recorder.record(intent.ref, intent.type, intent.reason, intent.message)
            if result == EventRecorder.FAILED:
                self.dropped += len(intents) - i
                return False
        return True


@dataclass
class ClusterParts:
    source: Callable[[], Objects]
    evictor: Actuator
    ready: Callable[[], bool]
    stop: Callable[[], None]
    effects: ClusterEffects
    view: NodeView
    api: KubeApi
    #: The tick's API time budget: start it as each tick starts.
    budget: TickBudget
    #: True when the agent's own DaemonSet is gone or being deleted (an uninstall), False
    #: when it is there, None when the API did not say.
    uninstalled: Callable[[], bool | None]


class _Reporter:
    """Logs what changed in the cluster-wide inputs: invalid policies (once per distinct
    error) and the brake being set or lifted."""

    def __init__(self, logger: Any) -> None:
        self.log = logger
        self.invalid: set[str] = set()
        self.brake: str | None = None

    def __call__(self, objects: Objects) -> None:
        errors = {str(e) for e in objects.policies.errors}
        for error in sorted(errors - self.invalid):
            self.log.error("invalid policy or action: ignored, the others keep working",
                           error=error)
        self.invalid = errors
        if objects.eviction_brake != self.brake:
            if objects.eviction_brake is not None:
                self.log.warning("evictions paused by the cluster brake, throttling goes on",
                                 reason=objects.eviction_brake)
            elif self.brake is not None:
                self.log.info("cluster brake lifted: evictions resume")
            self.brake = objects.eviction_brake


def view_source(
    view: NodeView, saved: SavedObjects | None = None, logger: Any = None
) -> Callable[[], Objects]:
    """The cache's snapshot, rebuilt (and policies re-parsed) only when it changed: new
    or edited policies and actions, node label changes and the brake apply on the next
    tick. Before the watches are in sync, the objects saved by an earlier run."""
    cached: list[tuple[int, Objects]] = []
    saved_version: list[int] = []
    report = _Reporter(logger or structlog.get_logger("waterline.node.cluster"))

    def source() -> Objects:
        if not view.synced:
            earlier = saved.objects() if saved is not None else None
            if earlier is None:
                raise RuntimeError("watches not in sync yet")
            return earlier
        version = view.version
        if cached and cached[0][0] == version:
            objects = cached[0][1]
        else:
            objects = Objects(
                node=view.node(),
                pods=view.pods(),
                policies=load_policies(view.policies(), view.actions()),
                namespace_labels=partial(namespace_labels, view.namespaces()),
                invalid={kind: len(bad) for kind, bad in view.invalid().items()},
                eviction_brake=view.brake(),
            )
            cached[:] = [(version, objects)]
            report(objects)
        # Every tick, not only when something changed: a change made within the interval
        # of the last save is saved once the interval is over (a restarted agent must not
        # find its pods missing from a copy older than they are).
        due = saved is not None and objects.node is not None and saved_version != [version]
        if due and saved is not None and saved.save_if_due(view.manifests):
            saved_version[:] = [version]
        return objects

    return source


def agent_uninstalled(
    api: KubeApi, namespace: str, daemonset: str, seen: OwnDaemonSet | None = None
) -> bool | None:
    """Is the agent's own DaemonSet gone or being deleted? Asked of the API first (its
    answer is the present); when it does not answer, what the DaemonSet's watch saw: an
    uninstall (kubectl delete -k, helm uninstall) removes the agent's ServiceAccount and
    RBAC in the same pass, so the question is refused (401/403) just when it matters.
    None: neither can say."""
    try:
        raw = api.request("GET", DAEMONSETS.path(namespace, daemonset), timeout=(3.0, 5.0))
    except KubeNotFound:
        return True
    except KubeError:
        return True if seen is not None and seen.deleted else None
    return bool((raw.get("metadata") or {}).get("deletionTimestamp"))


def start_cluster(
    api: KubeApi,
    node_name: str,
    dry_run: bool = False,
    watch_args: WatchArgs | None = None,
    clock: Callable[[], float] = time.time,
    namespace: str = NAMESPACE,
    daemonset: str = "waterline-agent",
    state_dir: str | None = None,
    budget_seconds: Callable[[], float] = lambda: DEFAULT_API_TIME_BUDGET,
    answer_seconds: Callable[[], float] = lambda: DEFAULT_EVICTION_ANSWER_SECONDS,
) -> ClusterParts:
    """Start the node's watches and build what the loop needs around them. ``namespace``
    and ``daemonset``: where the agent runs (the brake ConfigMap lives there; the
    DaemonSet tells an uninstall from a restart); ``state_dir``: where the last objects
    seen are kept for a start without the API server; ``budget_seconds`` and
    ``answer_seconds``: the live settings apiTimeBudgetSeconds, evictionAnswerSeconds."""
    from executors.eviction import ApiEvictor

    view, informers = start_node_view(api, node_name, watch_args, namespace=namespace, daemonset=daemonset)

    def reachable() -> bool:
        return bool(view.synced and view.api_reachable)

    budget = TickBudget(budget_seconds)
    writes = BudgetedApi(api, budget)
    recorder = EventRecorder(KubeEvents(writes), COMPONENT, host=node_name, clock=clock)
    effects = ClusterEffects(
        node_name,
        recorder,
        lambda wanted: set_taint(writes, node_name, wanted),
        reachable,
        dry_run=dry_run,
    )
    saved = SavedObjects(state_dir, node_name) if state_dir else None
    evictor = ApiEvictor(writes, answer_seconds=answer_seconds, budget_left=budget.remaining)

    def stop() -> None:
        # The freshest copy for the next agent; not after an outage that left the cache
        # stale (the copy would look fresh, and the periodic one is as good).
        if saved is not None and view.synced and view.api_reachable and view.node() is not None:
            saved.save(view.manifests)
        informers.stop()
        evictor.close()

    return ClusterParts(
        source=view_source(view, saved),
        evictor=ReachableEvictor(evictor, reachable),
        ready=lambda: bool(view.synced),
        stop=stop,
        effects=effects,
        view=view,
        api=api,
        budget=budget,
        uninstalled=lambda: agent_uninstalled(api, namespace, daemonset, view.own_daemonset),
    )
