"""The migration of one PodMigrationJob: pure transitions plus a thin executor.

``advance(job, world)`` is the whole state machine: from a job and what the controller
observes about its pod, its replacement and its reservation at ``world.now``, the next
status (phase, reason, message) and the actions that get it there. ``after_eviction``
turns an Eviction API answer into the next status. No I/O: the executor
(``MigrationExecutor``) performs the actions through a ``Writes`` object and writes the
status; tests drive both with a fake clock and a recording writer.

Modes:

* **EvictDirectly**: evict the pod through the Eviction API. 429 (a disruption budget, or
  API throttling) keeps the job Running and it is tried again next round; 404 (the pod is
  already gone, so nothing is disrupted by us) ends it Succeeded at once.
* **ReservationFirst**: create a Reservation (owners: the pod's controller, so that the
  replacement pod may use it) and wait until it is Available on another node, then evict,
  then wait for the replacement, then mark the Reservation Succeeded. In a real cluster a
  scheduler plugin binds reservations; this controller has none, so it acts as the
  scheduler for *its own* reservations: it marks one Available on the node that
  ``agent/cluster/placement.py`` chooses (the scheduler's filters on the cluster
  snapshot). A Reservation that a real scheduler binds to the pod's own node aborts the job
  (moving a pod onto the node it is on is no migration).

After the eviction the job is Succeeded when the pod is gone (or terminating) and, when its
controller still exists, a replacement pod of the same controller is Running.

Decisions where DESIGN.md is silent:

* TTL (``spec.ttl``, default 5m) counts from the job's creationTimestamp, as Koordinator
  does: a job that waited in arbitration that long is stale too. Past it: Failed/Timeout,
  and a reservation it made is deleted so its capacity is not held for nobody.
* ``spec.paused`` freezes a job where it is: a Pending one stays Pending, a Running one
  takes no further step; a paused job never times out (an operator paused it on purpose).
* Users abort a job with the annotation ``qos.waterline.io/abort: "true"``: it ends
  Aborted/AbortedByUser and its reservation is deleted (a pod already evicted stays
  evicted: its controller replaces it as usual).
* A failed reservation write or eviction (5xx, network) keeps the job Running with the
  reason, retried next round until the TTL.
* What the job moves (pod uid, controller, source node) is recorded in annotations when the
  job starts, so the controller still knows which replacement to wait for after the pod is
  gone, even after a fail-over to another replica.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

import structlog

from agent.cluster import migration as m
from agent.cluster import reservation as r
from agent.cluster.placement import Snapshot, why_not
from agent.cluster.reservation import holds_by_node, parse_reservation
from agent.errors import InvalidObject
from agent.model.objects import Pod
from agent.model.store import ObjectStore
from agent.model.timeutil import parse_time
from executors.actuators import EvictionResult

DEFAULT_TTL_SECONDS = 300.0

ABORT_ANNOTATION = "qos.waterline.io/abort"
POD_UID_ANNOTATION = "migration.qos.waterline.io/pod-uid"
OWNER_ANNOTATION = "migration.qos.waterline.io/owner"  # Kind/name/uid
STARTED_AT_ANNOTATION = "migration.qos.waterline.io/started-at"
#: creationTimestamp has whole seconds (compared with the start rounded down) and the API
#: server's clock is not ours: a pod of the owner created this much earlier still counts.
REPLACEMENT_SLACK_SECONDS = 1.0
#: Defrag writes its planned target here; the stand-in scheduler prefers it when it fits.
TARGET_NODE_ANNOTATION = "migration.qos.waterline.io/target-node"
CREATED_BY_LABEL = "qos.waterline.io/created-by"
JOB_LABEL = "qos.waterline.io/migration-job"

#: Kinds whose objects the controller watches: for these "the controller exists" is known.
WATCHED_CONTROLLER_KINDS = frozenset({"Deployment", "ReplicaSet", "StatefulSet", "Job"})

# -- actions ---------------------------------------------------------------------------
CREATE_RESERVATION = "CreateReservation"
SCHEDULE_RESERVATION = "ScheduleReservation"  # the stand-in for the scheduler plugin
EVICT = "Evict"
COMPLETE_RESERVATION = "CompleteReservation"  # mark it Succeeded
RELEASE_RESERVATION = "ReleaseReservation"  # delete it


@dataclass(frozen=True, slots=True)
class Tracked:
    """What the job moves, fixed when it starts."""

    pod_uid: str = ""
    owner_kind: str = ""
    owner_name: str = ""
    owner_uid: str = ""
    source_node: str = ""
    #: Wall-clock start: only pods of the owner created after it are replacements (the
    #: owner's other replicas were Running all along).
    started_at: float | None = None

    def annotations(self) -> dict[str, str]:
        started = "" if self.started_at is None else _rfc3339(self.started_at)
        return {
            STARTED_AT_ANNOTATION: started,
            POD_UID_ANNOTATION: self.pod_uid,
            OWNER_ANNOTATION: f"{self.owner_kind}/{self.owner_name}/{self.owner_uid}"
            if self.owner_uid
            else "",
            m.SOURCE_NODE_ANNOTATION: self.source_node,
        }


def _rfc3339(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def tracked_from_pod(pod: Pod, started_at: float | None = None) -> Tracked:
    ctl = pod.controller
    if ctl is None:
        return Tracked(pod.uid, source_node=pod.node_name, started_at=started_at)
    return Tracked(pod.uid, ctl.kind, ctl.name, ctl.uid, pod.node_name, started_at)


def tracked_from_annotations(annotations: Mapping[str, str]) -> Tracked | None:
    uid = annotations.get(POD_UID_ANNOTATION)
    if not uid:
        return None
    kind, name, owner_uid = ([*annotations.get(OWNER_ANNOTATION, "").split("/", 2), "", ""])[:3]
    try:
        started = parse_time(annotations.get(STARTED_AT_ANNOTATION) or None)
    except ValueError:
        started = None
    return Tracked(uid, kind, name, owner_uid, annotations.get(m.SOURCE_NODE_ANNOTATION, ""), started)


@dataclass(frozen=True, slots=True)
class World:
    """What the controller sees of one job at ``now``."""

    now: float
    #: The job's pod as it is now; None when it is gone or a pod of another uid took its name.
    pod: Pod | None
    #: The pod's controller object exists (or is of a kind we cannot check).
    controller_exists: bool = False
    #: Node of a Running replacement pod of the same controller; "" when there is none.
    replacement_node: str = ""
    #: The job's reservation: its phase at ``now`` ("" when there is none) and node.
    reservation_phase: str = ""
    reservation_node: str = ""
    abort_requested: bool = False


@dataclass(frozen=True, slots=True)
class Step:
    phase: str
    reason: str
    message: str = ""
    actions: tuple[str, ...] = ()
    #: status.nodeName: where the pod goes (the reservation's node, else the replacement's).
    node_name: str = ""


def ttl_seconds(job: m.PodMigrationJob) -> float:
    return DEFAULT_TTL_SECONDS if job.ttl_seconds is None else job.ttl_seconds


def expired(job: m.PodMigrationJob, now: float) -> bool:
    """Past creationTimestamp + ttl (a ttl of 0 never expires)."""
    ttl = ttl_seconds(job)
    return ttl > 0 and job.creation_time is not None and now >= job.creation_time + ttl


def _release(job: m.PodMigrationJob) -> tuple[str, ...]:
    return (RELEASE_RESERVATION,) if job.mode == m.RESERVATION_FIRST else ()


def advance(job: m.PodMigrationJob, world: World) -> Step | None:
    """The next status of ``job`` and the actions to take; None for a terminal job.

    A Pending job only leaves Pending here by abort or timeout: arbitration starts it
    (the executor then calls ``advance`` on it as Running)."""
    if job.phase in m.TERMINAL_PHASES:
        return None
    phase = job.phase or m.PENDING
    if world.abort_requested:
        return Step(
            m.ABORTED, m.REASON_ABORTED_BY_USER, f"annotation {ABORT_ANNOTATION}", _release(job)
        )
    if job.paused:
        return Step(phase, m.REASON_PAUSED, "spec.paused is true", node_name=job.node_name)
    if expired(job, world.now):
        return Step(
            m.FAILED,
            m.REASON_TIMEOUT,
            f"not done within its ttl of {ttl_seconds(job):g}s (in phase {phase})",
            _release(job),
        )
    if phase != m.RUNNING:
        return Step(phase, job.reason, job.message)
    rf = job.mode == m.RESERVATION_FIRST
    pod = world.pod
    if pod is None or pod.is_terminating:
        if world.controller_exists and not world.replacement_node:
            return Step(
                m.RUNNING,
                m.REASON_WAIT_REPLACEMENT,
                f"pod {job.pod_key} evicted; waiting for a Running replacement",
                node_name=job.node_name,
            )
        return Step(
            m.SUCCEEDED,
            m.REASON_COMPLETED,
            f"pod {job.pod_key} moved"
            + (f" to {world.replacement_node}" if world.replacement_node else ""),
            (COMPLETE_RESERVATION,) if rf else (),
            node_name=world.replacement_node or job.node_name,
        )
    if not rf:
        return Step(m.RUNNING, m.REASON_EVICTING, f"evicting pod {pod.key}", (EVICT,))
    res = world.reservation_phase
    if not res:
        return Step(
            m.RUNNING,
            m.REASON_WAIT_RESERVATION,
            "creating a reservation for the replacement",
            (CREATE_RESERVATION,),
        )
    if res == r.PENDING:
        return Step(
            m.RUNNING,
            m.REASON_WAIT_RESERVATION,
            "waiting for the reservation to be scheduled",
            (SCHEDULE_RESERVATION,),
        )
    if res == r.AVAILABLE:
        if world.reservation_node == pod.node_name:
            return Step(
                m.ABORTED,
                m.REASON_RESERVATION_UNSCHEDULABLE,
                f"the reservation was bound to the pod's own node {pod.node_name}",
                (RELEASE_RESERVATION,),
            )
        return Step(
            m.RUNNING,
            m.REASON_EVICTING,
            f"reservation Available on {world.reservation_node}; evicting pod {pod.key}",
            (EVICT,),
            node_name=world.reservation_node,
        )
    return Step(
        m.FAILED,
        m.REASON_MISSING_RESERVATION,
        f"the reservation is {res} before the pod was evicted",
        (RELEASE_RESERVATION,),
    )


def after_eviction(
    job: m.PodMigrationJob, step: Step, result: EvictionResult, detail: str = ""
) -> Step:
    """The status after the Eviction API answered ``result`` for ``step``'s EVICT."""
    rf = job.mode == m.RESERVATION_FIRST
    suffix = f": {detail}" if detail else ""
    if result is EvictionResult.EVICTED:
        return Step(
            m.RUNNING,
            m.REASON_WAIT_REPLACEMENT,
            f"pod {job.pod_key} evicted; waiting for a Running replacement",
            node_name=step.node_name,
        )
    if result is EvictionResult.GONE:
        return Step(
            m.SUCCEEDED,
            m.REASON_COMPLETED,
            f"pod {job.pod_key} was already gone (404)",
            (COMPLETE_RESERVATION,) if rf else (),
            node_name=step.node_name,
        )
    if result is EvictionResult.BLOCKED_BY_PDB:
        return Step(
            m.RUNNING,
            m.REASON_EVICTION_BLOCKED,
            f"eviction refused (429), retrying next round{suffix}",
            node_name=step.node_name,
        )
    return Step(
        m.RUNNING,
        m.REASON_EVICTION_FAILED,
        f"eviction failed, retrying next round{suffix}",
        node_name=step.node_name,
    )


# ---------------------------------------------------------------------------------------
# Observing: the World of a job from a cluster snapshot (pure)
# ---------------------------------------------------------------------------------------


def reservation_name(job_name: str) -> str:
    """``pmj-<job>``, shortened with a hash when it would pass the 253-character limit."""
    name = f"pmj-{job_name}"
    if len(name) <= 253:
        return name
    digest = hashlib.sha256(job_name.encode()).hexdigest()[:10]
    return f"{name[:242]}-{digest}"


@dataclass(frozen=True, slots=True)
class ClusterView:
    """Indexes over one snapshot that every job of a round reads."""

    store: ObjectStore
    pods: Mapping[str, Pod]
    running_by_owner: Mapping[str, tuple[Pod, ...]]
    reservations: Mapping[str, r.Reservation]

    @classmethod
    def build(cls, store: ObjectStore, log: Any = None) -> ClusterView:
        pods = {p.key: p for p in store.pods}
        by_owner: dict[str, list[Pod]] = {}
        for pod in store.pods:
            ctl = pod.controller
            if ctl is not None and ctl.uid and pod.phase == "Running" and not pod.is_terminating:
                by_owner.setdefault(ctl.uid, []).append(pod)
        reservations: dict[str, r.Reservation] = {}
        for raw in store.raw.get(r.KIND) or []:
            try:
                res = parse_reservation(raw)
            except InvalidObject as err:
                if log is not None:
                    log.warning("invalid reservation ignored", error=str(err))
                continue
            reservations[res.name] = res
        return cls(store, pods, {k: tuple(v) for k, v in by_owner.items()}, reservations)


def observe(
    job: m.PodMigrationJob,
    annotations: Mapping[str, str],
    view: ClusterView,
    now: float,
) -> tuple[World, Tracked | None]:
    """The World of ``job`` and what it tracks (from its annotations, else from its pod)."""
    tracked = tracked_from_annotations(annotations)
    pod = view.pods.get(job.pod_key)
    wanted_uid = tracked.pod_uid if tracked else job.pod_uid
    if pod is not None and wanted_uid and pod.uid != wanted_uid:
        pod = None  # a new pod took the name (StatefulSet): ours is gone
    if tracked is None and pod is not None:
        tracked = tracked_from_pod(pod)
    exists = False
    replacement = ""
    if tracked is not None and tracked.owner_uid:
        if tracked.owner_kind in WATCHED_CONTROLLER_KINDS:
            exists = tracked.owner_uid in view.store.workloads
        else:
            exists = True  # a kind we do not watch: assume it replaces its pods
        for other in view.running_by_owner.get(tracked.owner_uid, ()):
            if other.uid != tracked.pod_uid and _created_since(other, tracked.started_at):
                replacement = other.node_name
                break
    res = view.reservations.get(reservation_name(job.name))
    return (
        World(
            now=now,
            pod=pod,
            controller_exists=exists,
            replacement_node=replacement,
            reservation_phase=res.effective_phase(now) if res else "",
            reservation_node=res.node_name if res else "",
            abort_requested=annotations.get(ABORT_ANNOTATION) == "true",
        ),
        tracked,
    )


def _created_since(pod: Pod, started_at: float | None) -> bool:
    if started_at is None or pod.creation_time is None:
        return True
    return pod.creation_time >= math.floor(started_at) - REPLACEMENT_SLACK_SECONDS


def choose_target(pod: Pod, view: ClusterView, now: float, preferred: str = "") -> str | None:
    """The node a reservation for ``pod``'s replacement goes to: ``preferred`` when it
    passes every placement check, else the least requested (CPU share, then name) Ready,
    schedulable node other than the pod's own that does. None when none fits."""
    store = view.store
    nodes = [
        n
        for n in store.nodes.values()
        if n.ready and not n.unschedulable and n.name != pod.node_name
    ]
    snapshot = Snapshot.build(nodes, store.pods, holds_by_node(view.reservations.values(), now))
    free = [s for s in snapshot.states.values() if why_not(pod, s) is None]
    if not free:
        return None
    if any(s.name == preferred for s in free):
        return preferred
    return min(free, key=lambda s: (s.utilization("cpu"), s.name)).name


def _quantity(resource: str, amount: float) -> str:
    if resource == "cpu":
        return f"{round(amount * 1000)}m"
    return str(round(amount)) if abs(amount - round(amount)) < 1e-9 else repr(amount)


def reservation_body(job: m.PodMigrationJob, pod: Pod, tracked: Tracked) -> dict[str, Any]:
    """A Reservation that holds ``pod``'s request for a pod of the same controller."""
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "reserved",
                "resources": {"requests": {k: _quantity(k, v) for k, v in pod.requests.items()}},
            }
        ]
    }
    if pod.node_selector:
        spec["nodeSelector"] = dict(pod.node_selector)
    if pod.tolerations:
        spec["tolerations"] = [
            {
                k: v
                for k, v in (
                    ("key", t.key),
                    ("operator", t.operator),
                    ("value", t.value),
                    ("effect", t.effect),
                )
                if v
            }
            for t in pod.tolerations
        ]
    owner = (
        {
            "controller": {
                "kind": tracked.owner_kind,
                "name": tracked.owner_name,
                "uid": tracked.owner_uid,
                "namespace": pod.namespace,
            }
        }
        if tracked.owner_uid
        else {"object": {"namespace": pod.namespace, "name": pod.name}}
    )
    return {
        "apiVersion": m.API_VERSION,
        "kind": r.KIND,
        "metadata": {
            "name": reservation_name(job.name),
            "labels": {CREATED_BY_LABEL: "migration", JOB_LABEL: job.name[:63]},
        },
        "spec": {
            "template": {"metadata": {"namespace": pod.namespace}, "spec": spec},
            "owners": [owner],
            "ttl": f"{int(max(1.0, ttl_seconds(job)))}s",
            "allocateOnce": True,
        },
    }


# ---------------------------------------------------------------------------------------
# The executor
# ---------------------------------------------------------------------------------------


class Writes(Protocol):
    """Every write the migration makes. Each returns False when nothing was written
    (dry run); a lost leadership raises instead, ending the round at once."""

    def job_status(self, name: str, status: Mapping[str, Any]) -> bool: ...

    def job_annotations(self, name: str, annotations: Mapping[str, str]) -> bool: ...

    def create_reservation(self, body: Mapping[str, Any]) -> bool: ...

    def reservation_status(self, name: str, status: Mapping[str, Any]) -> bool: ...

    def delete_reservation(self, name: str) -> bool: ...

    def evict(self, pod: Pod) -> tuple[EvictionResult, str] | None: ...


def status_of(step: Step) -> dict[str, Any]:
    return {
        "phase": step.phase,
        "reason": step.reason,
        "message": step.message,
        "nodeName": step.node_name or None,
    }


def changed(job: m.PodMigrationJob, step: Step) -> bool:
    return (job.phase or m.PENDING, job.reason, job.message, job.node_name) != (
        step.phase,
        step.reason,
        step.message,
        step.node_name,
    )


class MigrationExecutor:
    """Performs a Step's actions, then writes the resulting status (only when it changed)."""

    def __init__(self, writes: Writes, logger: Any = None) -> None:
        self.writes = writes
        self.log = logger or structlog.get_logger("waterline.cluster.migrator")

    def start(self, job: m.PodMigrationJob, pod: Pod, view: ClusterView, now: float) -> Step | None:
        """Start a job that arbitration passed: record what it moves, then take its first step."""
        tracked = tracked_from_pod(pod, now)
        annotations = tracked.annotations()
        started = Step(m.RUNNING, "Started", f"passed arbitration; moving pod {pod.key}")
        # Record first, act second: a job whose pod was evicted must never stay Pending
        # (the next arbitration would fail it as MissingPod).
        if not self.writes.job_annotations(job.name, annotations):
            return None
        if not self.writes.job_status(job.name, status_of(started)):
            return None
        running = replace(job, phase=m.RUNNING, reason=started.reason, message=started.message)
        world, _ = observe(running, annotations, view, now)
        world = replace(world, pod=pod)
        return self.run(running, annotations, view, now, world=world, tracked=tracked)

    def run(
        self,
        job: m.PodMigrationJob,
        annotations: Mapping[str, str],
        view: ClusterView,
        now: float,
        *,
        world: World | None = None,
        tracked: Tracked | None = None,
    ) -> Step | None:
        """One step of a non-terminal job; the Step written (None: nothing to do)."""
        if world is None:
            world, tracked = observe(job, annotations, view, now)
        step = advance(job, world)
        if step is None:
            return None
        res_name = reservation_name(job.name)
        if EVICT in step.actions and world.pod is not None:
            answer = self.writes.evict(world.pod)
            if answer is None:
                return None
            step = after_eviction(job, step, *answer)
            self.log.info(
                "migration eviction", job=job.name, pod=job.pod_key, result=answer[0].value
            )
        if CREATE_RESERVATION in step.actions and world.pod is not None:
            body = reservation_body(job, world.pod, tracked or tracked_from_pod(world.pod))
            if not self.writes.create_reservation(body):
                step = replace(
                    step,
                    reason=m.REASON_RESERVATION_FAILED,
                    message="could not create the reservation; retrying next round",
                )
        if SCHEDULE_RESERVATION in step.actions and world.pod is not None:
            target = choose_target(
                world.pod, view, now, annotations.get(TARGET_NODE_ANNOTATION, "")
            )
            if target is None:
                step = replace(
                    step,
                    reason=m.REASON_RESERVATION_UNSCHEDULABLE,
                    message="no node fits the reservation yet; retrying next round",
                )
            else:
                held = {k: _quantity(k, v) for k, v in world.pod.requests.items()}
                self.writes.reservation_status(
                    res_name,
                    {
                        "phase": r.AVAILABLE,
                        "nodeName": target,
                        "allocatable": held,
                        "conditions": [{"type": "Ready", "status": "True", "reason": r.AVAILABLE}],
                    },
                )
                step = replace(step, message=f"reservation Available on {target}", node_name=target)
        if COMPLETE_RESERVATION in step.actions and world.reservation_phase:
            self.writes.reservation_status(res_name, {"phase": r.SUCCEEDED})
        if RELEASE_RESERVATION in step.actions and world.reservation_phase:
            self.writes.delete_reservation(res_name)
        if changed(job, step):
            self.writes.job_status(job.name, status_of(step))
            if step.phase != (job.phase or m.PENDING):
                self.log.info(
                    "migration job",
                    job=job.name,
                    phase=step.phase,
                    reason=step.reason,
                    message=step.message,
                )
        return step


__all__ = [
    "DEFAULT_TTL_SECONDS",
    "ClusterView",
    "MigrationExecutor",
    "Step",
    "Tracked",
    "World",
    "Writes",
    "advance",
    "after_eviction",
    "choose_target",
    "observe",
]
