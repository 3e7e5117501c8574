"""The migration state machine: pure transitions of one PodMigrationJob.

``advance(job, world)`` is the whole state machine: from a job and what the controller
observes about its pod, its replacement, its reservation and the reservation's placeholder
at ``world.now``, the next status (phase, reason, message, target and landing) and the
actions that get it there, in the order the executor performs them. ``after_eviction``
turns an Eviction API answer into the next status. No I/O.

ReservationFirst on a stock scheduler: create the Reservation; place its placeholder pod
on the target; once the placeholder runs, mark the Reservation Available, taint the
source (a drain's job) and evict; when the replacement appears, remove the placeholder so
the scheduler finds the room; when it runs, the job succeeds with where it landed. Every
ending (success, failure, TTL, abort) removes the placeholder and releases or completes
the reservation.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from agent.model import migration as m
from agent.model import reservation as r
from agent.model.eviction import EvictionResult
from agent.model.objects import EVICTABLE_ANNOTATION, Pod
from agent.model.timeutil import format_time, parse_time_or_none

DEFAULT_TTL_SECONDS = 300.0

ABORT_ANNOTATION = "qos.waterline.io/abort"
POD_UID_ANNOTATION = "migration.qos.waterline.io/pod-uid"
OWNER_ANNOTATION = "migration.qos.waterline.io/owner"  # Kind/name/uid
STARTED_AT_ANNOTATION = "migration.qos.waterline.io/started-at"
#: Comma-separated uids of the owner's pods already there at the start though created
#: within the slack below: siblings, never replacements.
PRESENT_AT_START_ANNOTATION = "migration.qos.waterline.io/present-at-start"
#: At most this many uids in it (a rollout creating more in one second is rare; past it
#: the slack's pods may still be taken for replacements).
MAX_PRESENT_AT_START = 50
#: creationTimestamp has whole seconds (compared with the start rounded down) and the API
#: server's clock is not ours: a pod of the owner created this much earlier still counts.
REPLACEMENT_SLACK_SECONDS = 1.0
#: Defrag writes its planned target here; the placeholder goes there while it still fits.
TARGET_NODE_ANNOTATION = "migration.qos.waterline.io/target-node"
CREATED_BY_LABEL = m.CREATED_BY_LABEL
JOB_LABEL = "qos.waterline.io/migration-job"

#: Kinds whose objects the controller watches: for these "the controller exists" is known.
WATCHED_CONTROLLER_KINDS = frozenset({"Deployment", "ReplicaSet", "StatefulSet", "Job"})

# -- actions (the executor performs them in order and stops at the first that fails) -----
CREATE_RESERVATION = "CreateReservation"
#: Choose the target, create its PriorityClass and the placeholder pod bound to it.
PLACE_RESERVATION = "PlaceReservation"
#: The placeholder runs on the target: the reservation is Available.
MARK_AVAILABLE = "MarkReservationAvailable"
REMOVE_PLACEHOLDER = "RemovePlaceholder"
#: Put the drain taint on the source node (a defrag drain's job, before its eviction).
TAINT_SOURCE = "TaintSource"
EVICT = "Evict"
COMPLETE_RESERVATION = "CompleteReservation"  # mark it Succeeded
RELEASE_RESERVATION = "ReleaseReservation"  # delete it

#: The creator label value of defragmentation's jobs: their sources are drains.
DRAIN_CREATOR = "defrag"
#: Reasons of a Running job that has reached its eviction: its drain has begun.
DRAINING_REASONS = frozenset(
    {
        m.REASON_EVICTING,
        m.REASON_EVICTION_FAILED,
        m.REASON_EVICTION_BLOCKED,
        m.REASON_WAIT_REPLACEMENT,
        m.REASON_TAINT_FAILED,
    }
)
#: Placeholder states as ``advance`` reads them (from the pod: ``placeholder_state``).
NO_PLACEHOLDER = ""
PLACEHOLDER_PENDING = "Pending"
PLACEHOLDER_RUNNING = "Running"
PLACEHOLDER_FAILED = "Failed"
PLACEHOLDER_UNSCHEDULABLE = "Unschedulable"
PLACEHOLDER_TERMINATING = "Terminating"


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
    #: Uids of the owner's pods there at the start though created within the slack.
    present_at_start: tuple[str, ...] = ()

    def annotations(self) -> dict[str, str]:
        started = "" if self.started_at is None else format_time(self.started_at)
        return {
            STARTED_AT_ANNOTATION: started,
            PRESENT_AT_START_ANNOTATION: ",".join(self.present_at_start),
            POD_UID_ANNOTATION: self.pod_uid,
            OWNER_ANNOTATION: f"{self.owner_kind}/{self.owner_name}/{self.owner_uid}"
            if self.owner_uid
            else "",
            m.SOURCE_NODE_ANNOTATION: self.source_node,
        }


def tracked_from_pod(pod: Pod, started_at: float | None = None,
                     siblings: Iterable[Pod] = ()) -> Tracked:
    """What a job starting at ``started_at`` moves; ``siblings``: the owner's pods now,
    those created within the slack are recorded as present (never replacements)."""
    ctl = pod.controller
    if ctl is None:
        return Tracked(pod.uid, source_node=pod.node_name, started_at=started_at)
    present = tuple(sorted(
        s.uid for s in siblings if s.uid != pod.uid and created_since(s, started_at)
    ))[:MAX_PRESENT_AT_START]  # fmt: skip
    return Tracked(pod.uid, ctl.kind, ctl.name, ctl.uid, pod.node_name, started_at, present)


def created_since(pod: Pod, started_at: float | None) -> bool:
    """Created at or after ``started_at``, within the slack (whole-second timestamps, the
    API server's clock): a pod that may be a replacement."""
    if started_at is None or pod.creation_time is None:
        return True
    return pod.creation_time >= math.floor(started_at) - REPLACEMENT_SLACK_SECONDS


def tracked_from_annotations(annotations: Mapping[str, str]) -> Tracked | None:
    uid = annotations.get(POD_UID_ANNOTATION)
    if not uid:
        return None
    kind, name, owner_uid = ([*annotations.get(OWNER_ANNOTATION, "").split("/", 2), "", ""])[:3]
    started = parse_time_or_none(annotations.get(STARTED_AT_ANNOTATION))
    present = tuple(u for u in annotations.get(PRESENT_AT_START_ANNOTATION, "").split(",") if u)
    return Tracked(
        uid, kind, name, owner_uid, annotations.get(m.SOURCE_NODE_ANNOTATION, ""), started,
        present,
    )


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
    #: A replacement pod of the same controller exists, in any phase (it has "appeared").
    replacement_seen: bool = False
    #: The job's reservation: its phase at ``now`` ("" when there is none) and node.
    reservation_phase: str = ""
    reservation_node: str = ""
    #: The reservation's placeholder pod, when there is one.
    placeholder: Pod | None = None
    #: Why the evictor filters keep the pod on its node (its storage); "" when they do not.
    storage_reason: str = ""
    abort_requested: bool = False


@dataclass(frozen=True, slots=True)
class Step:
    phase: str
    reason: str
    message: str = ""
    actions: tuple[str, ...] = ()
    #: status.nodeName: where the pod goes (the reservation's node, else the replacement's).
    node_name: str = ""
    #: status.targetNode: where the placeholder held room ("" when there was none).
    target_node: str = ""
    #: status.landedNode: where the replacement ran (set when the job succeeds).
    landed_node: str = ""


def placeholder_state(pod: Pod | None) -> str:
    """The placeholder's state: none, Pending (not bound or not running yet),
    Unschedulable (the scheduler found no room for it on the target), Running, Failed (the
    kubelet refused it, or it ended) or Terminating."""
    if pod is None:
        return NO_PLACEHOLDER
    if pod.is_terminating:
        return PLACEHOLDER_TERMINATING
    if pod.phase == "Running":
        return PLACEHOLDER_RUNNING
    if pod.phase in ("Failed", "Succeeded"):
        return PLACEHOLDER_FAILED
    if pod.unschedulable:
        return PLACEHOLDER_UNSCHEDULABLE
    return PLACEHOLDER_PENDING


def ttl_seconds(job: m.PodMigrationJob) -> float:
    return DEFAULT_TTL_SECONDS if job.ttl_seconds is None else job.ttl_seconds


def expired(job: m.PodMigrationJob, now: float) -> bool:
    """Past creationTimestamp + ttl (a ttl of 0 never expires)."""
    ttl = ttl_seconds(job)
    return ttl > 0 and job.creation_time is not None and now >= job.creation_time + ttl


def is_drain(job: m.PodMigrationJob) -> bool:
    """A job of a defrag drain: its source carries the drain taint from its eviction."""
    return job.created_by == DRAIN_CREATOR


def _holds_room(world: World) -> bool:
    """The job has a placeholder that is neither gone nor going."""
    return placeholder_state(world.placeholder) not in (NO_PLACEHOLDER, PLACEHOLDER_TERMINATING)


def _release(job: m.PodMigrationJob, world: World) -> tuple[str, ...]:
    """What an ending job gives back: its reservation and its placeholder."""
    actions: tuple[str, ...] = ()
    if job.mode == m.RESERVATION_FIRST and world.reservation_phase:
        actions += (RELEASE_RESERVATION,)
    if _holds_room(world):
        actions += (REMOVE_PLACEHOLDER,)
    return actions


def advance(job: m.PodMigrationJob, world: World) -> Step | None:
    """The next status of ``job`` and the actions to take; None for a terminal job.

    A Pending job only leaves Pending here by abort or timeout: arbitration starts it
    (the executor then calls ``advance`` on it as Running)."""
    step = _advance(job, world)
    if step is None or step.target_node or not job.target_node:
        return step
    return replace(step, target_node=job.target_node)


def _advance(job: m.PodMigrationJob, world: World) -> Step | None:
    if job.phase in m.TERMINAL_PHASES:
        return None
    phase = job.phase or m.PENDING
    if world.abort_requested:
        return Step(
            m.ABORTED,
            m.REASON_ABORTED_BY_USER,
            f"annotation {ABORT_ANNOTATION}",
            _release(job, world),
            node_name=job.node_name,
        )
    if job.paused:
        return Step(phase, m.REASON_PAUSED, "spec.paused is true", node_name=job.node_name)
    if expired(job, world.now):
        return Step(
            m.FAILED,
            m.REASON_TIMEOUT,
            f"not done within its ttl of {ttl_seconds(job):g}s (in phase {phase})",
            _release(job, world),
            node_name=job.node_name,
        )
    if phase != m.RUNNING:
        return Step(phase, job.reason, job.message, node_name=job.node_name)
    pod = world.pod
    if pod is None or pod.is_terminating:
        return _after_pod_left(job, world)
    if world.storage_reason:
        return Step(
            m.FAILED,
            m.REASON_FORBIDDEN_MIGRATE_POD,
            f"pod {pod.key} may not move: {world.storage_reason} (annotate it "
            f'{EVICTABLE_ANNOTATION}: "true" to move it anyway)',
            _release(job, world),
        )
    if job.mode != m.RESERVATION_FIRST:
        return _evict(job, pod, ())
    return _reservation_first(job, world, pod)


def _evict(job: m.PodMigrationJob, pod: Pod, before: tuple[str, ...], target: str = "") -> Step:
    """Evict the pod; a drain's job taints its source first."""
    taint = (TAINT_SOURCE,) if is_drain(job) else ()
    where = f"reservation Available on {target}; " if target else ""
    return Step(
        m.RUNNING,
        m.REASON_EVICTING,
        f"{where}evicting pod {pod.key}",
        (*before, *taint, EVICT),
        node_name=target,
        target_node=target,
    )


def _after_pod_left(job: m.PodMigrationJob, world: World) -> Step:
    """Running, the pod gone or terminating: the placeholder goes as soon as a
    replacement appears (so the scheduler finds the room); the job waits for the
    replacement to run when the controller exists to make one, else the move is done."""
    holding = _holds_room(world)
    if world.controller_exists and not world.replacement_node:
        if world.replacement_seen:  # one message while it stays so: one Event, not two
            released = "placeholder released, " if holding or job.target_node else ""
            return Step(
                m.RUNNING,
                m.REASON_WAIT_REPLACEMENT,
                f"pod {job.pod_key} evicted; its replacement appeared: {released}"
                "waiting for it to run",
                (REMOVE_PLACEHOLDER,) if holding else (),
                node_name=job.node_name,
            )
        return Step(
            m.RUNNING,
            m.REASON_WAIT_REPLACEMENT,
            f"pod {job.pod_key} evicted; waiting for a Running replacement",
            node_name=job.node_name,
        )
    landed = world.replacement_node
    actions = (COMPLETE_RESERVATION,) if job.mode == m.RESERVATION_FIRST else ()
    return Step(
        m.SUCCEEDED,
        m.REASON_COMPLETED,
        f"pod {job.pod_key} moved" + (f" to {landed}" if landed else ""),
        actions + ((REMOVE_PLACEHOLDER,) if holding else ()),
        node_name=landed or job.node_name,
        landed_node=landed,
    )


def _reservation_first(job: m.PodMigrationJob, world: World, pod: Pod) -> Step:
    """Running ReservationFirst, the pod still there: reserve, make the reservation real
    with a placeholder on the target, and evict once the placeholder runs there."""
    res = world.reservation_phase
    if not res:
        return Step(
            m.RUNNING,
            m.REASON_WAIT_RESERVATION,
            "creating a reservation for the replacement",
            (CREATE_RESERVATION,),
        )
    if res not in (r.PENDING, r.AVAILABLE):
        return Step(
            m.FAILED,
            m.REASON_MISSING_RESERVATION,
            f"the reservation is {res} before the pod was evicted",
            _release(job, world),
        )
    holder = world.placeholder
    bound = {world.reservation_node, holder.node_name if holder else ""} - {""}
    if pod.node_name in bound:
        return Step(
            m.ABORTED,
            m.REASON_RESERVATION_UNSCHEDULABLE,
            f"the reservation was bound to the pod's own node {pod.node_name}",
            _release(job, world),
        )
    return _hold(job, world, pod, res)


def _hold(job: m.PodMigrationJob, world: World, pod: Pod, res: str) -> Step:
    """The placeholder's part: place it, wait for the scheduler to bind it and for it to
    run, replace one that failed or that the scheduler cannot place (the target filled up
    since it was chosen: the next round chooses again); evict once it runs (marking the
    reservation Available first)."""
    holder = world.placeholder
    state = placeholder_state(holder)
    node = (holder.node_name if holder is not None else "") or world.reservation_node
    waiting = {
        NO_PLACEHOLDER: ("placing the reservation's placeholder", (PLACE_RESERVATION,)),
        PLACEHOLDER_TERMINATING: ("waiting for the old placeholder to go", ()),
        PLACEHOLDER_FAILED: (
            f"the placeholder on {node} did not run (phase {holder.phase if holder else ''}); "
            "placing it again",
            (REMOVE_PLACEHOLDER,),
        ),
        PLACEHOLDER_UNSCHEDULABLE: (
            f"the scheduler cannot place the placeholder on {node} "
            f"({holder.unschedulable if holder else ''}); placing it again",
            (REMOVE_PLACEHOLDER,),
        ),
        PLACEHOLDER_PENDING: (f"waiting for the placeholder on {node} to run", ()),
    }
    if state in waiting:
        message, actions = waiting[state]
        return Step(m.RUNNING, m.REASON_WAIT_RESERVATION, message, actions, node_name=job.node_name)
    before = (MARK_AVAILABLE,) if res != r.AVAILABLE else ()
    return _evict(job, pod, before, node)


def after_eviction(
    job: m.PodMigrationJob, step: Step, result: EvictionResult, detail: str = ""
) -> Step:
    """The status after the Eviction API answered ``result`` for ``step``'s EVICT (its
    nodes kept)."""
    rf = job.mode == m.RESERVATION_FIRST
    suffix = f": {detail}" if detail else ""
    outcomes: dict[EvictionResult, tuple[str, str, str, tuple[str, ...]]] = {
        EvictionResult.EVICTED: (
            m.RUNNING,
            m.REASON_WAIT_REPLACEMENT,
            f"pod {job.pod_key} evicted; waiting for a Running replacement",
            (),
        ),
        EvictionResult.GONE: (
            m.SUCCEEDED,
            m.REASON_COMPLETED,
            f"pod {job.pod_key} was already gone (404)",
            (COMPLETE_RESERVATION, REMOVE_PLACEHOLDER) if rf else (),
        ),
        EvictionResult.BLOCKED_BY_PDB: (
            m.RUNNING,
            m.REASON_EVICTION_BLOCKED,
            f"eviction refused (429), retrying next round{suffix}",
            (),
        ),
        EvictionResult.FAILED: (
            m.RUNNING,
            m.REASON_EVICTION_FAILED,
            f"eviction failed, retrying next round{suffix}",
            (),
        ),
    }
    phase, reason, message, actions = outcomes[result]
    return Step(
        phase, reason, message, actions, node_name=step.node_name, target_node=step.target_node
    )
