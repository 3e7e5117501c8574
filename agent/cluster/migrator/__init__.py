"""The migration of one PodMigrationJob: pure transitions plus a thin executor.

Files: ``steps`` (the pure state machine: ``advance``, ``after_eviction``), ``observe``
(the World of a job from a snapshot, the reservation's target and body), ``executor``
(``MigrationExecutor`` over a ``Writes``).

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

from agent.cluster.migrator.executor import MigrationExecutor, Writes, changed, status_of
from agent.cluster.migrator.observe import (
    ClusterView,
    choose_target,
    observe,
    quantity,
    reservation_body,
    reservation_name,
)
from agent.cluster.migrator.steps import (
    ABORT_ANNOTATION,
    COMPLETE_RESERVATION,
    CREATE_RESERVATION,
    CREATED_BY_LABEL,
    DEFAULT_TTL_SECONDS,
    EVICT,
    JOB_LABEL,
    OWNER_ANNOTATION,
    POD_UID_ANNOTATION,
    RELEASE_RESERVATION,
    SCHEDULE_RESERVATION,
    STARTED_AT_ANNOTATION,
    TARGET_NODE_ANNOTATION,
    Step,
    Tracked,
    World,
    advance,
    after_eviction,
    expired,
    tracked_from_annotations,
    tracked_from_pod,
    ttl_seconds,
)

__all__ = [
    "ABORT_ANNOTATION",
    "COMPLETE_RESERVATION",
    "CREATED_BY_LABEL",
    "CREATE_RESERVATION",
    "DEFAULT_TTL_SECONDS",
    "EVICT",
    "JOB_LABEL",
    "OWNER_ANNOTATION",
    "POD_UID_ANNOTATION",
    "RELEASE_RESERVATION",
    "SCHEDULE_RESERVATION",
    "STARTED_AT_ANNOTATION",
    "TARGET_NODE_ANNOTATION",
    "ClusterView",
    "MigrationExecutor",
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
    "quantity",
    "reservation_body",
    "reservation_name",
    "status_of",
    "tracked_from_annotations",
    "tracked_from_pod",
    "ttl_seconds",
]
