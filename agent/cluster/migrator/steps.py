"""The migration state machine: pure transitions of one PodMigrationJob.

``advance(job, world)`` is the whole state machine: from a job and what the controller
observes about its pod, its replacement and its reservation at ``world.now``, the next
status (phase, reason, message) and the actions that get it there. ``after_eviction``
turns an Eviction API answer into the next status. No I/O.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

from agent.model import migration as m
from agent.model import reservation as r
from agent.model.eviction import EvictionResult
from agent.model.objects import Pod
from agent.model.timeutil import parse_time

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
    pod = world.pod
    if pod is None or pod.is_terminating:
        return _after_pod_left(job, world)
    if job.mode != m.RESERVATION_FIRST:
        return Step(m.RUNNING, m.REASON_EVICTING, f"evicting pod {pod.key}", (EVICT,))
    return _reservation_first(world, pod)


def _after_pod_left(job: m.PodMigrationJob, world: World) -> Step:
    """Running, the pod gone or terminating: wait for a Running replacement when the
    controller exists to make one, else the move is done."""
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
        (COMPLETE_RESERVATION,) if job.mode == m.RESERVATION_FIRST else (),
        node_name=world.replacement_node or job.node_name,
    )


def _reservation_first(world: World, pod: Pod) -> Step:
    """Running ReservationFirst, the pod still there: reserve, wait for the reservation to
    be Available elsewhere, then evict."""
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
    if res != r.AVAILABLE:
        return Step(
            m.FAILED,
            m.REASON_MISSING_RESERVATION,
            f"the reservation is {res} before the pod was evicted",
            (RELEASE_RESERVATION,),
        )
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
