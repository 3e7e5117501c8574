"""PodMigrationJob (qos.waterline.io/v1alpha1, cluster-scoped): the record, its parser and
the phase and reason vocabulary shared by arbitration and the migration executor.

A job asks the controller to move one pod (``spec.podRef``) off its node, either by first
reserving room elsewhere (``ReservationFirst``) or by evicting at once (``EvictDirectly``).
Parsing happens once at the edge; the engines only see the frozen record.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from agent.errors import InvalidObject
from agent.model.conditions import Condition, parse_conditions
from agent.model.timeutil import parse_time

GROUP = "qos.waterline.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "PodMigrationJob"
#: Written by the migrator when it evicts the job's pod.
SOURCE_NODE_ANNOTATION = "migration.qos.waterline.io/source-node"

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

PRIORITY_CLASS_KIND = "PriorityClass"

_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_DURATION_UNIT = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}


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


def parse_duration(value: object) -> float:
    """A duration in seconds: a non-negative number of seconds or a Go/metav1.Duration
    string such as ``"90s"``, ``"5m"`` or ``"1h30m"``. Raises ValueError."""
    if isinstance(value, bool):
        raise ValueError(f"must be a duration, got {value!r}")
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str) and value.strip():
        text = value.strip()
        parts = _DURATION_PART.findall(text)
        if not parts or "".join(n + u for n, u in parts) != text:
            raise ValueError(f'must be a duration like "300s", "5m" or "1h30m", got {value!r}')
        seconds = sum(float(n) * _DURATION_UNIT[u] for n, u in parts)
    else:
        raise ValueError(f"must be a duration, got {value!r}")
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"must be a non-negative duration, got {value!r}")
    return seconds


def _text(value: object, field: str, name: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InvalidObject(KIND, name, field, f"must be a string, got {value!r}")
    return value


def parse_pod_migration_job(raw: Mapping[str, Any]) -> PodMigrationJob:
    """Parse and validate one PodMigrationJob dict; InvalidObject names the field."""
    meta = raw.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidObject(KIND, "", "metadata.name", "must be set")
    spec = raw.get("spec")
    if not isinstance(spec, dict):
        raise InvalidObject(KIND, name, "spec", "must be a mapping")
    status = raw.get("status") or {}
    if not isinstance(status, dict):
        raise InvalidObject(KIND, name, "status", "must be a mapping")

    ref = spec.get("podRef")
    if not isinstance(ref, dict):
        raise InvalidObject(KIND, name, "spec.podRef", "must be a mapping with namespace and name")
    pod_name = _text(ref.get("name"), "spec.podRef.name", name)
    if not pod_name:
        raise InvalidObject(KIND, name, "spec.podRef.name", "must be set")
    pod_namespace = _text(ref.get("namespace"), "spec.podRef.namespace", name)
    if not pod_namespace:
        # The job is cluster-scoped: an implicit "default" would silently pick a pod.
        raise InvalidObject(KIND, name, "spec.podRef.namespace", "must be set")

    mode = spec.get("mode") or RESERVATION_FIRST
    if mode not in MODES:
        raise InvalidObject(KIND, name, "spec.mode", f"must be one of {list(MODES)}, got {mode!r}")

    ttl = None
    if spec.get("ttl") is not None:
        try:
            ttl = parse_duration(spec["ttl"])
        except ValueError as err:
            raise InvalidObject(KIND, name, "spec.ttl", str(err)) from None

    priority = spec.get("priority")
    if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)):
        raise InvalidObject(KIND, name, "spec.priority", f"must be an integer, got {priority!r}")

    paused = spec.get("paused", False)
    if paused is None:
        paused = False
    if not isinstance(paused, bool):
        raise InvalidObject(KIND, name, "spec.paused", f"must be true or false, got {paused!r}")

    phase = status.get("phase") or ""
    if phase and phase not in PHASES:
        raise InvalidObject(
            KIND, name, "status.phase", f"must be one of {list(PHASES)}, got {phase!r}"
        )

    try:
        created = parse_time(meta.get("creationTimestamp"))
    except ValueError as err:
        raise InvalidObject(KIND, name, "metadata.creationTimestamp", str(err)) from None

    return PodMigrationJob(
        name=name,
        pod_namespace=pod_namespace,
        pod_name=pod_name,
        pod_uid=_text(ref.get("uid"), "spec.podRef.uid", name),
        mode=mode,
        ttl_seconds=ttl,
        priority=priority,
        priority_class_name=_text(spec.get("priorityClassName"), "spec.priorityClassName", name),
        paused=paused,
        creation_time=created,
        phase=phase,
        reason=_text(status.get("reason"), "status.reason", name),
        message=_text(status.get("message"), "status.message", name),
        node_name=_text(status.get("nodeName"), "status.nodeName", name),
        conditions=parse_conditions(status.get("conditions"), KIND, name),
        source_node=str((meta.get("annotations") or {}).get(SOURCE_NODE_ANNOTATION) or ""),
    )


def parse_pod_migration_jobs(raws: Iterable[Mapping[str, Any]]) -> list[PodMigrationJob]:
    """Parse a list of jobs; names are unique (the kind is cluster-scoped)."""
    jobs: list[PodMigrationJob] = []
    seen: set[str] = set()
    for raw in raws:
        job = parse_pod_migration_job(raw)
        if job.name in seen:
            raise InvalidObject(KIND, job.name, "metadata.name", "is not unique")
        seen.add(job.name)
        jobs.append(job)
    return jobs


def parse_priority_classes(raws: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """scheduling.k8s.io/v1 PriorityClass objects as {name: value}."""
    out: dict[str, int] = {}
    for raw in raws:
        meta = raw.get("metadata")
        name = meta.get("name") if isinstance(meta, dict) else None
        if not isinstance(name, str) or not name:
            raise InvalidObject(PRIORITY_CLASS_KIND, "", "metadata.name", "must be set")
        value = raw.get("value")
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidObject(
                PRIORITY_CLASS_KIND, name, "value", f"must be an integer, got {value!r}"
            )
        out[name] = value
    return out
