"""PodMigrationJob (qos.waterline.io/v1alpha1, cluster-scoped): the record, its parser and
the phase and reason vocabulary shared by arbitration and the migration executor.

A job asks the controller to move one pod (``spec.podRef``) off its node, either by first
reserving room elsewhere (``ReservationFirst``) or by evicting at once (``EvictDirectly``).
Parsing happens once at the edge; the engines only see the frozen record.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agent.errors import InvalidObject
from agent.model.conditions import Condition, parse_conditions
from agent.model.fields import Fields, shown
from agent.model.group import API_VERSION as API_VERSION  # a PodMigrationJob's apiVersion

KIND = "PodMigrationJob"
#: Written by the migrator when it evicts the job's pod.
SOURCE_NODE_ANNOTATION = "migration.qos.waterline.io/source-node"
#: Who made the job (``defrag`` for the drains of defragmentation).
CREATED_BY_LABEL = "qos.waterline.io/created-by"

# -- modes -------------------------------------------------------------------------------
RESERVATION_FIRST = "ReservationFirst"
EVICT_DIRECTLY = "EvictDirectly"
MODES = (RESERVATION_FIRST, EVICT_DIRECTLY)

# -- phases (status.phase; empty means not yet seen by the controller = Pending) ---------
PENDING = "Pending"
RUNNING = "Running"
SUCCEEDED = "Succeeded"
FAILED = "Failed"
ABORTED = "Aborted"
PHASES = (PENDING, RUNNING, SUCCEEDED, FAILED, ABORTED)
TERMINAL_PHASES = frozenset({SUCCEEDED, FAILED, ABORTED})

# -- reasons: arbitration, non-retryable (the job is Failed) -----------------------------
REASON_MISSING_POD = "MissingPod"
REASON_FORBIDDEN_MIGRATE_POD = "ForbiddenMigratePod"
# -- reasons: arbitration, retryable (the job stays Pending and is arbitrated again) -----
REASON_MAX_MIGRATING_PER_NODE = "MaxMigratingPerNode"
REASON_MAX_MIGRATING_PER_NAMESPACE = "MaxMigratingPerNamespace"
REASON_MAX_MIGRATING_PER_WORKLOAD = "MaxMigratingPerWorkload"
REASON_MAX_UNAVAILABLE_PER_WORKLOAD = "MaxUnavailablePerWorkload"
REASON_SELECT_LIMIT = "SelectLimit"
#: Another job of the same pod is Running or passed earlier in the round.
REASON_POD_ALREADY_MIGRATING = "PodAlreadyMigrating"
#: A workload of one replica, or whose unavailable limit equals its replicas.
REASON_EXPECTED_REPLICAS = "ExpectedReplicas"
#: maxMigratingTotal: the cluster-wide bound on Running jobs.
REASON_MAX_MIGRATING_TOTAL = "MaxMigratingTotal"
#: spec.paused: the job is left alone until it is unpaused.
REASON_PAUSED = "Paused"
# -- reasons: migration execution ---------------------------------------------------------
REASON_TIMEOUT = "Timeout"
REASON_RESERVATION_FAILED = "FailedCreateReservation"
REASON_RESERVATION_UNSCHEDULABLE = "UnschedulableReservation"
REASON_MISSING_RESERVATION = "MissingReservation"
REASON_WAIT_RESERVATION = "WaitForReservationAvailable"
REASON_EVICTING = "Evicting"
REASON_EVICTION_FAILED = "FailedEvict"
REASON_EVICTION_BLOCKED = "EvictionBlockedByPDB"
REASON_WAIT_REPLACEMENT = "WaitForReplacementReady"
REASON_COMPLETED = "MigrationCompleted"
REASON_ABORTED_BY_USER = "AbortedByUser"
#: The drain taint could not be set on the source: nothing is evicted without it.
REASON_TAINT_FAILED = "FailedTaintNode"
#: The placeholder pod that makes the reservation real could not be written.
REASON_PLACEHOLDER_FAILED = "FailedPlaceholder"

# -- the landing condition (status.conditions[type=LandedOnTarget]) -----------------------
CONDITION_LANDED = "LandedOnTarget"
REASON_LANDED_ON_TARGET = "LandedOnTarget"
REASON_LANDED_ELSEWHERE = "LandedElsewhere"
REASON_NO_TARGET = "NoTarget"

@dataclass(frozen=True, slots=True)
class PodMigrationJob:
    name: str
    pod_namespace: str
    pod_name: str
    #: podRef.uid when given: a pod of the same name but another uid is a replacement,
    #: and the job's pod counts as missing.
    pod_uid: str = ""
    mode: str = RESERVATION_FIRST
    ttl_seconds: float | None = None
    priority: int | None = None
    priority_class_name: str = ""
    paused: bool = False
    creation_time: float | None = None
    phase: str = ""
    reason: str = ""
    message: str = ""
    node_name: str = ""
    conditions: tuple[Condition, ...] = ()
    #: The node the pod was on when the migrator evicted it (its annotation), so a job
    #: whose pod is already gone still counts against that node's migration limit.
    source_node: str = ""
    #: metadata.annotations: what the migrator recorded when it started the job, and an
    #: operator's abort request.
    annotations: Mapping[str, str] = field(default_factory=dict)
    #: metadata.resourceVersion: the precondition of a status decided on this record.
    resource_version: str = ""
    uid: str = ""
    #: Label ``qos.waterline.io/created-by``: ``defrag`` marks a drain's job.
    created_by: str = ""
    #: status.targetNode: where the reservation's placeholder held room for the pod.
    target_node: str = ""
    #: status.landedNode: where the replacement ran when the job succeeded.
    landed_node: str = ""

    @property
    def pod_key(self) -> str:
        return f"{self.pod_namespace}/{self.pod_name}"

    @property
    def is_pending(self) -> bool:
        """Waiting for arbitration: status.phase empty or Pending."""
        return self.phase in ("", PENDING)

    @property
    def is_running(self) -> bool:
        return self.phase == RUNNING


def parse_pod_migration_job(raw: Mapping[str, Any]) -> PodMigrationJob:
    """Parse and validate one PodMigrationJob dict; InvalidObject names the field."""
    meta = raw.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidObject(KIND, "", "metadata.name", f"must be set, got {shown(name)}")
    f = Fields(KIND, name)
    spec = raw.get("spec")
    if not isinstance(spec, dict):
        raise f.bad("spec", "must be a mapping", spec)
    status = raw.get("status") or {}
    if not isinstance(status, dict):
        raise f.bad("status", "must be a mapping", status)
    ref = spec.get("podRef")
    if not isinstance(ref, dict):
        raise f.bad("spec.podRef", "must be a mapping with namespace and name", ref)
    ref_f = f.child("spec.podRef")
    pod_name = ref_f.string(ref.get("name"), "name", required=True)
    # The job is cluster-scoped: an implicit "default" would silently pick a pod.
    pod_namespace = ref_f.string(ref.get("namespace"), "namespace", required=True)
    spec_f, status_f = f.child("spec"), f.child("status")
    priority = spec.get("priority")
    if priority is not None:
        spec_f.integer(priority, "priority")
    paused = spec.get("paused")
    phase = status.get("phase") or ""
    if phase:
        status_f.choice(phase, "phase", PHASES)
    created = f.time(meta.get("creationTimestamp"), "metadata.creationTimestamp")
    annotations = meta.get("annotations")
    annotations = annotations if isinstance(annotations, dict) else {}
    labels = meta.get("labels")
    labels = labels if isinstance(labels, dict) else {}
    return PodMigrationJob(
        name=name,
        pod_namespace=pod_namespace,
        pod_name=pod_name,
        pod_uid=ref_f.string(ref.get("uid"), "uid"),
        mode=spec_f.choice(spec.get("mode") or RESERVATION_FIRST, "mode", MODES),
        ttl_seconds=None if spec.get("ttl") is None else spec_f.duration(spec["ttl"], "ttl"),
        priority=priority,
        priority_class_name=spec_f.string(spec.get("priorityClassName"), "priorityClassName"),
        paused=False if paused is None else spec_f.boolean(paused, "paused"),
        creation_time=created,
        phase=phase,
        reason=status_f.string(status.get("reason"), "reason"),
        message=status_f.string(status.get("message"), "message"),
        node_name=status_f.string(status.get("nodeName"), "nodeName"),
        conditions=parse_conditions(status.get("conditions"), KIND, name),
        source_node=str(annotations.get(SOURCE_NODE_ANNOTATION) or ""),
        annotations={str(k): str(v) for k, v in annotations.items()},
        resource_version=str(meta.get("resourceVersion") or ""),
        uid=str(meta.get("uid") or ""),
        created_by=str(labels.get(CREATED_BY_LABEL) or ""),
        target_node=status_f.string(status.get("targetNode"), "targetNode"),
        landed_node=status_f.string(status.get("landedNode"), "landedNode"),
    )
