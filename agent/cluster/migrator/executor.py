"""The migration executor: performs a Step's actions through ``Writes``, in order, stopping
at the first that fails; writes the resulting status only when it changed; records an
Event on the job, its pod and the node of the step for each status it writes (the job's
phase changes are told by the writer itself); and after
each round lifts what nobody needs any more (``reconcile``: drain taints, orphaned
placeholders, unused PriorityClasses). Tests drive it with a recording writer."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import structlog

from agent.cluster.metrics import ControllerMetrics
from agent.cluster.migrator.args import DEFAULT_PLACEHOLDER_IMAGE
from agent.cluster.migrator.cleanup import (
    DRAIN_TAINT_EFFECT,
    DRAIN_TAINT_KEY,
    Cleanup,
    DrainEnd,
    Marks,
    has_drain_taint,
    plan_cleanup,
    plan_sources,
)
from agent.cluster.migrator.observe import (
    ClusterView,
    choose_target,
    observe,
    quantity,
    reservation_body,
    reservation_name,
)
from agent.cluster.migrator.placeholder import (
    placeholder_body,
    placeholder_priority,
    priority_class_body,
    priority_class_name,
)
from agent.cluster.migrator.steps import (
    COMPLETE_RESERVATION,
    CREATE_RESERVATION,
    DRAINING_REASONS,
    EVICT,
    MARK_AVAILABLE,
    PLACE_RESERVATION,
    RELEASE_RESERVATION,
    REMOVE_PLACEHOLDER,
    TAINT_SOURCE,
    TARGET_NODE_ANNOTATION,
    Step,
    Tracked,
    World,
    advance,
    after_eviction,
    tracked_from_pod,
)
from agent.defaults import CONTROLLER_LEASE_NAMESPACE
from agent.kube.events import NORMAL, WARNING, ObjectRef, node_ref, pod_ref
from agent.model import migration as m
from agent.model import reservation as r
from agent.model.eviction import EvictionResult
from agent.model.objects import Pod, parse_pod
from agent.model.timeutil import format_time


class Writes(Protocol):
    """Every write the migration makes. Each returns False when nothing was written
    (dry run, or the API refused); a lost leadership raises instead, ending the round."""

    def job_status(
        self, name: str, status: Mapping[str, Any], resource_version: str = "",
        *, transition: bool = True,
    ) -> bool:  # fmt: skip
        """``transition``: the phase changes (the writer's phase Event and count);
        ``resource_version``: write only over that version of the job (else refused)."""
        ...

    def job_annotations(self, name: str, annotations: Mapping[str, str]) -> bool: ...

    def create_reservation(self, body: Mapping[str, Any]) -> bool: ...

    def reservation_status(self, name: str, status: Mapping[str, Any]) -> bool: ...

    def delete_reservation(self, name: str) -> bool: ...

    def evict(self, pod: Pod) -> tuple[EvictionResult, str] | None: ...

    def create_priority_class(self, body: Mapping[str, Any]) -> bool: ...

    def delete_priority_class(self, name: str) -> bool: ...

    def create_placeholder(self, body: Mapping[str, Any]) -> bool: ...

    def delete_placeholder(self, namespace: str, name: str, uid: str) -> bool: ...

    def node_taint(self, name: str, key: str, effect: str, wanted: bool) -> bool: ...

    def event(self, ref: ObjectRef, type_: str, reason: str, message: str) -> None:
        """An Event (best effort; the leader's, never in a dry run)."""


@dataclass(frozen=True, slots=True)
class PlaceholderSettings:
    """Where placeholders live (the controller's namespace) and what they run."""

    namespace: str = CONTROLLER_LEASE_NAMESPACE
    image: str = DEFAULT_PLACEHOLDER_IMAGE


#: Reasons that tell of something that went wrong: their Events are Warnings.
WARNING_REASONS = frozenset(
    {
        m.REASON_TIMEOUT,
        m.REASON_RESERVATION_FAILED,
        m.REASON_RESERVATION_UNSCHEDULABLE,
        m.REASON_MISSING_RESERVATION,
        m.REASON_EVICTION_FAILED,
        m.REASON_EVICTION_BLOCKED,
        m.REASON_TAINT_FAILED,
        m.REASON_PLACEHOLDER_FAILED,
        m.REASON_FORBIDDEN_MIGRATE_POD,
    }
)
DRAINING = "Draining"
DRAIN_DONE = "DrainDone"
DRAIN_ENDED = "DrainEnded"


def _condition(step: Step, now: float) -> dict[str, str]:
    """LandedOnTarget: True when the replacement runs on the placeholder's node."""
    if not step.target_node:
        status, reason = "Unknown", m.REASON_NO_TARGET
        message = f"replacement runs on {step.landed_node}; the move had no target"
    elif step.landed_node == step.target_node:
        status, reason = "True", m.REASON_LANDED_ON_TARGET
        message = f"replacement runs on its target {step.target_node}"
    else:
        status, reason = "False", m.REASON_LANDED_ELSEWHERE
        message = f"replacement runs on {step.landed_node}, not on its target {step.target_node}"
    return {
        "type": m.CONDITION_LANDED,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": format_time(now),
    }


def status_of(step: Step, now: float | None = None) -> dict[str, Any]:
    """The status subresource patch of a step (None removes a field)."""
    status: dict[str, Any] = {
        "phase": step.phase,
        "reason": step.reason,
        "message": step.message,
        "nodeName": step.node_name or None,
        "targetNode": step.target_node or None,
        "landedNode": step.landed_node or None,
    }
    if step.landed_node and now is not None:
        status["conditions"] = [_condition(step, now)]
    return status


def changed(job: m.PodMigrationJob, step: Step) -> bool:
    before = (job.phase or m.PENDING, job.reason, job.message, job.node_name)
    after = (step.phase, step.reason, step.message, step.node_name)
    return (before, job.target_node, job.landed_node) != (
        after,
        step.target_node,
        step.landed_node,
    )


@dataclass(slots=True)
class _Marks:
    placeholders: set[str] = field(default_factory=set)
    priority_classes: set[str] = field(default_factory=set)
    tainted: set[str] = field(default_factory=set)

    def frozen(self) -> Marks:
        return Marks(
            frozenset(self.placeholders), frozenset(self.priority_classes), frozenset(self.tainted)
        )


@dataclass(frozen=True, slots=True)
class _Job:
    """One job's step in progress: what every action reads."""

    job: m.PodMigrationJob
    annotations: Mapping[str, str]
    view: ClusterView
    now: float
    world: World
    tracked: Tracked | None

    @property
    def source(self) -> str:
        pod = self.world.pod
        return (self.tracked.source_node if self.tracked else "") or (pod.node_name if pod else "")


Action = Callable[[_Job, Step], tuple[Step, bool]]


class MigrationExecutor:
    """Performs a Step's actions, then writes the resulting status (only when it changed)."""

    def __init__(
        self,
        writes: Writes,
        logger: Any = None,
        *,
        placeholders: PlaceholderSettings | None = None,
        metrics: ControllerMetrics | None = None,
    ) -> None:
        self.writes = writes
        self.log = logger or structlog.get_logger("waterline.cluster.migrator")
        self.placeholders = placeholders or PlaceholderSettings()
        self.metrics = metrics
        self._marks = _Marks()
        self._actions: dict[str, Action] = {
            CREATE_RESERVATION: self._create_reservation,
            PLACE_RESERVATION: self._place,
            MARK_AVAILABLE: self._mark_available,
            REMOVE_PLACEHOLDER: self._remove_placeholder,
            TAINT_SOURCE: self._taint_source,
            EVICT: self._evict,
            COMPLETE_RESERVATION: self._complete_reservation,
            RELEASE_RESERVATION: self._release_reservation,
        }

    def start(self, job: m.PodMigrationJob, pod: Pod, view: ClusterView, now: float) -> Step | None:
        """Start a job that arbitration passed: record what it moves, then take its first step."""
        owner = pod.controller
        siblings = view.by_owner.get(owner.uid, ()) if owner is not None else ()
        tracked = tracked_from_pod(pod, now, siblings)
        annotations = tracked.annotations()
        started = Step(m.RUNNING, "Started", f"passed arbitration; moving pod {pod.key}")
        # Record first, act second: a job whose pod was evicted must never stay Pending
        # (the next arbitration would fail it as MissingPod).
        if not self.writes.job_annotations(job.name, annotations):
            return None
        if not self.writes.job_status(job.name, status_of(started), transition=True):
            return None
        if self.metrics is not None:
            self.metrics.moves.labels("started").inc()
        running = replace(job, phase=m.RUNNING, reason=started.reason, message=started.message)
        world, _ = observe(running, annotations, view, now)
        world = replace(world, pod=pod)
        # Told as the job left Pending: the writer's MigrationStarted is the job's Event.
        self._tell(_Job(job, annotations, view, now, world, tracked), started)
        # The job changed since the snapshot (just above): its first step is written
        # without the snapshot's resourceVersion.
        return self.run(
            running, annotations, view, now, world=world, tracked=tracked, precondition=False
        )

    def run(
        self,
        job: m.PodMigrationJob,
        annotations: Mapping[str, str],
        view: ClusterView,
        now: float,
        *,
        world: World | None = None,
        tracked: Tracked | None = None,
        precondition: bool = True,
    ) -> Step | None:
        """One step of a non-terminal job; the Step written (None: nothing to do). With
        ``precondition`` its status is written only over the job's version in the
        snapshot: a snapshot that does not show the controller's own last write yet (its
        watch lags, as after an API server restart) decides nothing twice, its write is
        refused (409) and the next round decides again."""
        if world is None:
            world, tracked = observe(job, annotations, view, now)
        step = advance(job, world)
        if step is None:
            return None
        if tracked is None and world.pod is not None:
            tracked = tracked_from_pod(world.pod)
        c = _Job(job, annotations, view, now, world, tracked)
        queue, done = list(step.actions), set()
        while queue:
            action = queue.pop(0)
            done.add(action)
            step, ok = self._actions[action](c, step)
            queue += [a for a in step.actions if a not in done and a not in queue]
            if not ok:
                break
        self._write_status(c, step, job.resource_version if precondition else "")
        return step

    # -- the actions: each returns the step as it now stands and whether to go on ----------
    def _create_reservation(self, c: _Job, step: Step) -> tuple[Step, bool]:
        pod = c.world.pod
        if pod is None:
            return step, True
        if self.writes.create_reservation(
            reservation_body(c.job, pod, c.tracked or tracked_from_pod(pod))
        ):
            return step, True
        message = "could not create the reservation; retrying next round"
        return replace(step, reason=m.REASON_RESERVATION_FAILED, message=message), False

    def _place(self, c: _Job, step: Step) -> tuple[Step, bool]:
        """Choose the target (the defrag target when it still fits), then make the
        reservation real there: its PriorityClass, its placeholder pod, its status."""
        pod, res = c.world.pod, c.view.reservations.get(reservation_name(c.job.name))
        if pod is None or res is None:
            return step, False
        preferred = c.annotations.get(TARGET_NODE_ANNOTATION, "")
        target = choose_target(pod, c.view, c.now, preferred)
        if target is None:
            message = "no node fits the reservation yet; retrying next round"
            return replace(step, reason=m.REASON_RESERVATION_UNSCHEDULABLE, message=message), False
        value = placeholder_priority(pod.priority)
        body = placeholder_body(
            res, pod, target, namespace=self.placeholders.namespace, image=self.placeholders.image
        )
        if not (
            self.writes.create_priority_class(priority_class_body(value))
            and self.writes.create_placeholder(body)
        ):
            message = f"could not create the placeholder on {target}; retrying next round"
            return replace(step, reason=m.REASON_PLACEHOLDER_FAILED, message=message), False
        self._marks.priority_classes.add(priority_class_name(value))
        c.view.placement(c.now).place(parse_pod(body), target)  # later jobs see the room taken
        meta = body["metadata"]
        self.writes.reservation_status(
            res.name,
            {
                "phase": r.PENDING,
                "nodeName": target,
                "placeholder": {"namespace": meta["namespace"], "name": meta["name"]},
                "conditions": [
                    {"type": "Ready", "status": "False", "reason": "PlaceholderPending"}
                ],
            },
        )
        message = f"waiting for the placeholder on {target} to run"
        return replace(step, message=message, node_name=target), True

    def _mark_available(self, c: _Job, step: Step) -> tuple[Step, bool]:
        pod, holder = c.world.pod, c.world.placeholder
        if pod is None or holder is None:
            return step, False
        ok = self.writes.reservation_status(
            reservation_name(c.job.name),
            {
                "phase": r.AVAILABLE,
                "nodeName": holder.node_name,
                "allocatable": {k: quantity(k, v) for k, v in pod.requests.items()},
                "placeholder": {
                    "namespace": holder.namespace,
                    "name": holder.name,
                    "uid": holder.uid,
                },
                "conditions": [{"type": "Ready", "status": "True", "reason": r.AVAILABLE}],
            },
        )
        if ok:
            return step, True
        message = "could not mark the reservation Available; retrying next round"
        return replace(step, reason=m.REASON_WAIT_RESERVATION, message=message), False

    def _remove_placeholder(self, c: _Job, step: Step) -> tuple[Step, bool]:
        holder = c.world.placeholder
        if holder is None or holder.is_terminating or holder.key in self._marks.placeholders:
            return step, True
        if not self.writes.delete_placeholder(holder.namespace, holder.name, holder.uid):
            return step, False  # the status still reads right; the next round retries
        self._marks.placeholders.add(holder.key)
        return step, True

    def _taint_source(self, c: _Job, step: Step) -> tuple[Step, bool]:
        """The source's taint, and with the first of a plan every other source of it
        (``plan_sources``): only the source's own is needed to evict."""
        source = c.source
        if not self._needs_taint(c, source):
            return step, True
        for name in plan_sources(source, c.view.store.migration_jobs, c.view):
            if name != source and not self._needs_taint(c, name):
                continue
            if self._set_drain_taint(name):
                self._marks.tainted.add(name)
            elif name == source:
                message = f"could not set the drain taint on {source}; retrying next round"
                return replace(step, reason=m.REASON_TAINT_FAILED, message=message), False
        return step, True

    def _needs_taint(self, c: _Job, name: str) -> bool:
        node = c.view.store.nodes.get(name)
        return node is not None and not has_drain_taint(node) and name not in self._marks.tainted

    def _evict(self, c: _Job, step: Step) -> tuple[Step, bool]:
        pod = c.world.pod
        if pod is None:
            return step, False
        answer = self.writes.evict(pod)
        if answer is None:
            return step, False
        self.log.info(
            "migration eviction", job=c.job.name, pod=c.job.pod_key, result=answer[0].value
        )
        return after_eviction(c.job, step, *answer), True

    def _complete_reservation(self, c: _Job, step: Step) -> tuple[Step, bool]:
        if c.world.reservation_phase:
            self.writes.reservation_status(reservation_name(c.job.name), {"phase": r.SUCCEEDED})
        return step, True

    def _release_reservation(self, c: _Job, step: Step) -> tuple[Step, bool]:
        if c.world.reservation_phase:
            self.writes.delete_reservation(reservation_name(c.job.name))
        return step, True

    # -- status, events, metrics -------------------------------------------------------------
    def _write_status(self, c: _Job, step: Step, resource_version: str) -> None:
        job = c.job
        transition = step.phase != (job.phase or m.PENDING)
        if not changed(job, step) or not self.writes.job_status(
            job.name, status_of(step, c.now), resource_version, transition=transition
        ):
            return
        self._tell(c, step)
        if transition:
            self.log.info(
                "migration job",
                job=job.name,
                phase=step.phase,
                reason=step.reason,
                message=step.message,
                target=step.target_node,
                landed=step.landed_node,
            )

    def _tell(self, c: _Job, step: Step) -> None:
        """An Event on the job (its phase changes the writer tells itself), its pod (while
        it exists) and the node of the step; the landing counted."""
        failed = step.phase in (m.FAILED, m.ABORTED) or step.reason in WARNING_REASONS
        kind = WARNING if failed else NORMAL
        job = c.job
        if step.phase == (job.phase or m.PENDING):
            self._event(
                ObjectRef(m.KIND, job.name, uid=job.uid, api_version=m.API_VERSION),
                kind,
                step.reason,
                step.message,
            )
        if c.world.pod is not None:
            self._event(pod_ref(c.world.pod), kind, step.reason, step.message)
        node = _node_of(step, c.source)
        if node:
            self._event(node_ref(node), kind, step.reason, f"{job.pod_key}: {step.message}")
        if (
            self.metrics is not None
            and step.phase == m.SUCCEEDED
            and step.landed_node
            and step.target_node
        ):
            on_target = step.landed_node == step.target_node
            self.metrics.moves.labels("landed_on_target" if on_target else "landed_elsewhere").inc()

    def _event(self, ref: ObjectRef, kind: str, reason: str, message: str) -> None:
        self.writes.event(ref, kind, reason, message)

    # -- after the round ----------------------------------------------------------------------
    def reconcile(self, jobs: list[m.PodMigrationJob], view: ClusterView, now: float) -> Cleanup:
        """Set and lift drain taints, delete orphaned placeholders and unused
        PriorityClasses (``cleanup.plan_cleanup``) after a round's steps."""
        cleanup = plan_cleanup(jobs, view, now, self._marks.frozen())
        self._marks = _Marks()
        for name in cleanup.taint:
            self._set_drain_taint(name)
        for end in cleanup.untaint:
            if self.writes.node_taint(end.node, DRAIN_TAINT_KEY, DRAIN_TAINT_EFFECT, False):
                self._drain_ended(end)
        for pod in cleanup.placeholders:
            if self.writes.delete_placeholder(pod.namespace, pod.name, pod.uid):
                self.log.info(
                    "orphaned placeholder deleted", placeholder=pod.key, node=pod.node_name
                )
        for name in cleanup.priority_classes:
            if self.writes.delete_priority_class(name):
                self.log.info("unused PriorityClass deleted", priority_class=name)
        return cleanup

    def _set_drain_taint(self, node: str) -> bool:
        if not self.writes.node_taint(node, DRAIN_TAINT_KEY, DRAIN_TAINT_EFFECT, True):
            return False
        self._event(node_ref(node), NORMAL, DRAINING, f"drain taint set: moving pods off {node}")
        return True

    def _drain_ended(self, end: DrainEnd) -> None:
        if end.freed:
            if self.metrics is not None:
                self.metrics.nodes_freed.inc()
            self._event(node_ref(end.node), NORMAL, DRAIN_DONE, f"drain done: {end.node} is free")
            self.log.info("drain done: node freed", node=end.node)
            return
        left = ", ".join(end.remaining[:5]) + (" ..." if len(end.remaining) > 5 else "")
        message = f"drain ended with {len(end.remaining)} pods still to move: {left}"
        self._event(node_ref(end.node), WARNING, DRAIN_ENDED, message)
        self.log.info("drain ended: node not freed", node=end.node, remaining=len(end.remaining))


def _node_of(step: Step, source: str) -> str:
    """The node an Event of the step is about: where the replacement landed; the source
    while evicting or when the job ended otherwise; else the target."""
    if step.phase == m.SUCCEEDED:
        return step.landed_node or step.node_name or source
    if step.reason in DRAINING_REASONS or step.phase in m.TERMINAL_PHASES:
        return source
    return step.node_name or source
