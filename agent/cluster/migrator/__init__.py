"""The migration of one PodMigrationJob: pure transitions plus a thin executor.

Files: ``steps`` (the pure state machine: ``advance``, ``after_eviction``), ``observe``
(the World of a job from a snapshot, the reservation's target and body), ``placeholder``
(the placeholder pod and PriorityClass that make a reservation real), ``cleanup`` (pure:
drain taints to set and lift, orphans to delete), ``args`` (the ``migration`` config
section), ``executor`` (``MigrationExecutor`` over a ``Writes``).

``advance(job, world)`` is the whole state machine: from a job and what the controller
observes about its pod, its replacement, its reservation and the reservation's placeholder
at ``world.now``, the next status and the actions that get it there. No I/O: the executor
(``MigrationExecutor``) performs the actions through a ``Writes`` object, writes the
status, records Events (through the writer: the leader's, none in a dry run), and after
every round reconciles (``reconcile``); tests drive it with a fake clock and a recording
writer.

Modes:

* **EvictDirectly**: evict the pod through the Eviction API. 429 (a disruption budget, or
  API throttling) keeps the job Running and it is tried again next round; 404 (the pod is
  already gone, so nothing is disrupted by us) ends it Succeeded at once.
* **ReservationFirst**, on a stock kube-scheduler (no scheduler plugin): create a
  Reservation (owners: the pod's controller, so that the replacement pod may use it; owned
  by the job); choose its target (the defrag target when it still passes the placement
  checks of ``agent/cluster/placement.py``, else the least requested node that does) and
  make it real with a *placeholder pod* bound there (``placeholder``); when the
  placeholder runs, the Reservation is Available and the pod is evicted (a defrag drain's
  source first gets the taint ``qos.waterline.io/draining:NoSchedule``, so the
  replacement cannot land back on it); when the replacement appears the placeholder is
  deleted, so the scheduler finds the room; when the replacement runs the job succeeds,
  recording ``status.landedNode`` and the condition ``LandedOnTarget`` (True, or False
  with reason LandedElsewhere). A placeholder the kubelet refused (Failed) is deleted and
  placed again, on the then best node.

After the eviction the job is Succeeded when the pod is gone (or terminating) and, when its
controller still exists, a replacement pod of the same controller is Running.

Nothing leaks: every ending (success, failure, TTL, abort) removes the job's placeholder,
and ``reconcile`` after every round lifts the taints of drains that ended and deletes
placeholders and ``waterline-reservation-*`` PriorityClasses nobody uses, found by label
and name, so what a controller left behind when it stopped or lost its lease is collected
by the next leader (``cleanup``).

Decisions where DESIGN.md is silent:

* TTL (``spec.ttl``, default 5m) counts from the job's creationTimestamp, as Koordinator
  does: a job that waited in arbitration that long is stale too. Past it: Failed/Timeout,
  and a reservation it made is deleted so its capacity is not held for nobody.
* ``spec.paused`` freezes a job where it is: a Pending one stays Pending, a Running one
  takes no further step (its placeholder keeps the room); a paused job never times out.
* Users abort a job with the annotation ``qos.waterline.io/abort: "true"``: it ends
  Aborted/AbortedByUser and its reservation is deleted (a pod already evicted stays
  evicted: its controller replaces it as usual).
* A failed write or eviction (5xx, network) keeps the job Running with the reason,
  retried next round until the TTL. The drain taint that cannot be set stops the eviction
  (``FailedTaintNode``): evicting without it would let the replacement land back.
* A job whose pod keeps data on its node (the evictor's storage filters,
  ``agent.cluster.defrag.migratable``) fails ``ForbiddenMigratePod`` before any eviction,
  naming the volume, unless the pod is annotated ``qos.waterline.io/evictable: "true"``.
* What the job moves (pod uid, controller, source node) is recorded in annotations when the
  job starts, so the controller still knows which replacement to wait for after the pod is
  gone, even after a fail-over to another replica.
"""

from __future__ import annotations

from agent.cluster.migrator.args import DEFAULT_PLACEHOLDER_IMAGE, MigrationArgs
from agent.cluster.migrator.cleanup import (
    DRAIN_TAINT_EFFECT,
    DRAIN_TAINT_KEY,
    Cleanup,
    DrainEnd,
    Marks,
    plan_cleanup,
)
from agent.cluster.migrator.executor import (
    MigrationExecutor,
    PlaceholderSettings,
    Writes,
    changed,
    status_of,
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
    PRIORITY_CLASS_PREFIX,
    placeholder_body,
    placeholder_name,
    placeholder_priority,
    priority_class_name,
    target_of,
)
from agent.cluster.migrator.steps import (
    ABORT_ANNOTATION,
    COMPLETE_RESERVATION,
    CREATE_RESERVATION,
    CREATED_BY_LABEL,
    DEFAULT_TTL_SECONDS,
    DRAIN_CREATOR,
    EVICT,
    JOB_LABEL,
    MARK_AVAILABLE,
    OWNER_ANNOTATION,
    PLACE_RESERVATION,
    POD_UID_ANNOTATION,
    PRESENT_AT_START_ANNOTATION,
    RELEASE_RESERVATION,
    REMOVE_PLACEHOLDER,
    STARTED_AT_ANNOTATION,
    TAINT_SOURCE,
    TARGET_NODE_ANNOTATION,
    Step,
    Tracked,
    World,
    advance,
    after_eviction,
    expired,
    placeholder_state,
    tracked_from_annotations,
    tracked_from_pod,
    ttl_seconds,
)

__all__ = [
    "ABORT_ANNOTATION",
    "COMPLETE_RESERVATION",
    "CREATED_BY_LABEL",
    "CREATE_RESERVATION",
    "DEFAULT_PLACEHOLDER_IMAGE",
    "DEFAULT_TTL_SECONDS",
    "DRAIN_CREATOR",
    "DRAIN_TAINT_EFFECT",
    "DRAIN_TAINT_KEY",
    "EVICT",
    "JOB_LABEL",
    "MARK_AVAILABLE",
    "OWNER_ANNOTATION",
    "PLACE_RESERVATION",
    "POD_UID_ANNOTATION",
    "PRESENT_AT_START_ANNOTATION",
    "PRIORITY_CLASS_PREFIX",
    "RELEASE_RESERVATION",
    "REMOVE_PLACEHOLDER",
    "STARTED_AT_ANNOTATION",
    "TAINT_SOURCE",
    "TARGET_NODE_ANNOTATION",
    "Cleanup",
    "ClusterView",
    "DrainEnd",
    "Marks",
    "MigrationArgs",
    "MigrationExecutor",
    "PlaceholderSettings",
    "Step",
    "Tracked",
    "World",
    "Writes",
    "advance",
    "after_eviction",
    "changed",
    "choose_target",
    "expired",
    "observe",
    "placeholder_body",
    "placeholder_name",
    "placeholder_priority",
    "placeholder_state",
    "plan_cleanup",
    "priority_class_name",
    "target_of",
    "quantity",
    "reservation_body",
    "reservation_name",
    "status_of",
    "tracked_from_annotations",
    "tracked_from_pod",
    "ttl_seconds",
]
