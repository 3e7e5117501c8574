"""Every write of the controller, behind one guard.

* Leadership is checked right before each write: a leader whose lease lapsed raises
  ``NotLeader`` and the round ends there.
* Each write is bounded by the time left before the renew deadline (``time_left``): the
  client gives up and the API server is told to abandon the request (its ``timeout``
  parameter) when the deadline comes, so a write sent by a leader that stops leading at
  4.8 s is never committed after 4.8 s, when a new leader may already act. With less
  than ``MIN_WRITE_SECONDS`` left nothing is sent (``NotLeader``).
* Status writes carry the resourceVersion they were decided on when the caller knows it
  (a merge patch with ``metadata.resourceVersion`` is a precondition): a status decided
  on a stale object is refused with 409 and decided again next round.
* Nothing is written in a dry run. API failures are logged, counted in ``failures`` (the
  round that had any is a failed round) and reported as False: the next round retries.

Every call is declared with ``@calls`` next to the method that makes it; those rows are
the controller's access table for writes (``agent/cluster/access.py``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar

import structlog

from agent.cluster import brake
from agent.cluster.metrics import ControllerMetrics
from agent.cluster.migrator.placeholder import target_of
from agent.cluster.resources import MIGRATION_JOBS, PRIORITY_CLASSES, RESERVATIONS
from agent.defaults import NAMESPACE
from agent.kube import evicting
from agent.kube.access import Permission, grant
from agent.kube.client import KubeApi
from agent.kube.creating import create
from agent.kube.deleting import delete
from agent.kube.errors import KubeConflict, KubeError, KubeNotFound
from agent.kube.events import NORMAL, WARNING, ObjectRef, pod_ref
from agent.kube.patching import merge_patch
from agent.kube.resources import ACTIONS, CONFIGMAPS, EVENTS, NODES, PODS, POLICIES, by_kind
from agent.kube.taints import read_taints, write_taints
from agent.model.eviction import EvictionResult
from agent.model.objects import Pod
from agent.model.objects.pods import parse_pod

#: Events on a PodMigrationJob when the controller moves it to a phase: (type, reason).
MIGRATION_EVENTS = {
    "Running": (NORMAL, "MigrationStarted"),
    "Succeeded": (NORMAL, "MigrationSucceeded"),
    "Failed": (WARNING, "MigrationFailed"),
    "Aborted": (WARNING, "MigrationFailed"),
}


def job_ref(name: str) -> ObjectRef:
    return ObjectRef("PodMigrationJob", name, api_version=MIGRATION_JOBS.api_version)


#: Below this many seconds before the renew deadline no write is sent.
MIN_WRITE_SECONDS = 0.05

#: Every call the writers make (``@calls``), for the access table.
WRITE_CALLS: list[Permission] = []

F = TypeVar("F", bound=Callable[..., Any])


def calls(*permissions: Permission) -> Callable[[F], F]:
    """Declare the API calls a write method makes (they join ``WRITE_CALLS``)."""

    def mark(fn: F) -> F:
        WRITE_CALLS.extend(permissions)
        return fn

    return mark


class NotLeader(Exception):
    """The lease is not ours (any more): stop the round before the next write."""


def status_patch(status: Mapping[str, Any], resource_version: str = "") -> dict[str, Any]:
    """A status merge patch; with a resourceVersion it is a precondition (409 if stale)."""
    patch: dict[str, Any] = {"status": dict(status)}
    if resource_version:
        patch["metadata"] = {"resourceVersion": resource_version}
    return patch


class Recorder(Protocol):
    """Where the controller's Events go (``agent.kube.events.EventRecorder``)."""

    def record(self, ref: ObjectRef, type_: str, reason: str, message: str) -> str: ...


class GuardedWriter:
    """Every write of the controller: leadership checked right before each one, nothing
    written in a dry run. API failures are logged and reported as False (the next round
    retries); a 409 AlreadyExists on create means it is there, which is what we wanted."""

    def __init__(
        self,
        api: KubeApi,
        time_left: Callable[[], float],
        dry_run: bool,
        metrics: ControllerMetrics,
        logger: Any = None,
    ) -> None:
        """``time_left``: seconds before the renew deadline while leading, else <= 0."""
        self.api, self.time_left, self.dry_run, self.metrics = api, time_left, dry_run, metrics
        self.log = logger or structlog.get_logger("waterline.cluster.writes")
        #: API failures since the last ``take_failures``.
        self.failures = 0
        #: The controller's Events (set by the controller; None: none recorded).
        self.recorder: Recorder | None = None

    def event(self, ref: ObjectRef, type_: str, reason: str, message: str) -> None:
        """Record an Event of the controller's own (best effort, never in a dry run)."""
        if self.recorder is None or self.dry_run:
            return
        with contextlib.suppress(NotLeader):  # the round ends at its next write
            self.recorder.record(ref, type_, reason, message)

    def take_failures(self) -> int:
        """API failures since the last call (the round's)."""
        count, self.failures = self.failures, 0
        return count

    def guard(self, what: str, **fields: Any) -> KubeApi | None:
        """The API bounded by the time left to lead, or None in a dry run; NotLeader when
        too little is left."""
        left = self.time_left()
        if left < MIN_WRITE_SECONDS:
            raise NotLeader(what)
        if self.dry_run:
            self.log.info(f"dry run: would {what}", **fields)
            return None
        return self.api.bounded(min(left, self.api.args.read_timeout))

    def _call(self, what: str, fn: Callable[[], object], **fields: Any) -> bool:
        try:
            fn()
            return True
        except KubeNotFound:
            self.log.info(f"could not {what}: not found", **fields)
        except KubeConflict as err:
            self.log.info(f"could not {what}: changed meanwhile", error=str(err), **fields)
        except KubeError as err:
            self._failed(what, err, **fields)
        return False

    def _failed(self, what: str, err: KubeError, **fields: Any) -> bool:
        """An API failure: logged, counted in ``failures`` (the round failed); False."""
        self.failures += 1
        self.log.warning(f"could not {what}", error=str(err), status=err.status, **fields)
        return False

    # -- migration (the migrator's Writes) ------------------------------------------------
    @calls(grant(MIGRATION_JOBS, "patch", "status"))
    def job_status(self, name: str, status: Mapping[str, Any], resource_version: str = "",
                   *, transition: bool = True) -> bool:
        """Write a job's status; a ``transition`` (its phase changes) is counted and told
        as the phase's Event, once: a status rewritten within a phase tells nothing here
        (the migrator tells each step itself)."""
        if (api := self.guard("write job status", job=name, **status)) is None:
            return False
        patch = status_patch(status, resource_version)
        ok = self._call(
            "write job status",
            lambda: merge_patch(api, MIGRATION_JOBS, name, patch, subresource="status"),
            job=name,
        )
        if ok and transition:
            phase = str(status.get("phase"))
            self.metrics.migrations.labels(phase).inc()
            self._migration_event(name, phase, status)
        return ok

    def _migration_event(self, name: str, phase: str, status: Mapping[str, Any]) -> None:
        said = MIGRATION_EVENTS.get(phase)
        if said is not None:
            type_, reason = said
            why = f"{status.get('reason') or phase}: {status.get('message') or ''}".rstrip(": ")
            self.event(job_ref(name), type_, reason, f"migration {phase.lower()}: {why}")

    @calls(grant(MIGRATION_JOBS, "patch"))
    def job_annotations(self, name: str, annotations: Mapping[str, str]) -> bool:
        if (api := self.guard("annotate job", job=name)) is None:
            return False
        patch = {"metadata": {"annotations": dict(annotations)}}
        return self._call(
            "annotate job", lambda: merge_patch(api, MIGRATION_JOBS, name, patch), job=name
        )

    @calls(grant(RESERVATIONS, "create"))
    def create_reservation(self, body: Mapping[str, Any]) -> bool:
        name = body["metadata"]["name"]
        if (api := self.guard("create reservation", reservation=name)) is None:
            return False
        return self._created(
            "create reservation", lambda: create(api, RESERVATIONS, body), reservation=name
        )

    @calls(grant(RESERVATIONS, "patch", "status"))
    def reservation_status(
        self, name: str, status: Mapping[str, Any], resource_version: str = ""
    ) -> bool:
        api = self.guard("write reservation status", reservation=name, phase=status.get("phase"))
        if api is None:
            return False
        patch = status_patch(status, resource_version)
        return self._call(
            "write reservation status",
            lambda: merge_patch(api, RESERVATIONS, name, patch, subresource="status"),
            reservation=name,
        )

    @calls(grant(RESERVATIONS, "delete"))
    def delete_reservation(self, name: str) -> bool:
        if (api := self.guard("delete reservation", reservation=name)) is None:
            return False
        return self._call(
            "delete reservation", lambda: delete(api, RESERVATIONS, name), reservation=name
        )

    @calls(grant(PODS, "create", "eviction"))
    def evict(self, pod: Pod, source: str = "migration") -> tuple[EvictionResult, str] | None:
        if (api := self.guard("evict pod", pod=pod.key, source=source)) is None:
            return None
        outcome = evicting.evict(
            api, pod.namespace, pod.name, None, pod.uid if pod.uid != pod.key else ""
        )
        result = outcome.result
        if result is EvictionResult.FAILED:
            self.failures += 1
        if result is EvictionResult.EVICTED and source != "migration":
            self.event(pod_ref(pod), WARNING, "Preempted", f"evicted by {source} preemption")
        self.metrics.evictions.labels(source, result.value).inc()
        self.log.info(
            "eviction",
            pod=pod.key,
            source=source,
            result=result.value,
            status=outcome.status,
            detail=outcome.message,
        )
        return result, outcome.message

    @calls(grant(PODS, "patch", "status"))
    def nominate(self, pod: Pod, node: str, source: str) -> bool:
        """Set a pending pod's ``status.nominatedNodeName`` to the node its preemption makes
        room on (``source``: which one), as the scheduler's own preemption does: the
        scheduler (KEP-5278, stable in Kubernetes 1.37) then holds that room for it against
        pods of lower or equal priority, the victims' own replacements among them."""
        if (api := self.guard("nominate pod", pod=pod.key, node=node, source=source)) is None:
            return False
        patch = {"status": {"nominatedNodeName": node}}
        return self._call("nominate pod", lambda: merge_patch(api, PODS, pod.name, patch,
                                                                 namespace=pod.namespace,
                                                                 subresource="status"),
                          pod=pod.key, node=node)  # fmt: skip

    @calls(grant(PODS, "get", why="queue hand-over: the pending pod re-read"))
    def read_pod(self, namespace: str, name: str) -> tuple[bool, Pod | None]:
        """A pod as the API server has it now (a read, guarded as the writes are: it
        decides one): (True, the pod), (True, None) when it is gone, (False, None) when it
        could not be read (an API error, a dry run)."""
        if (api := self.guard("read pod", pod=f"{namespace}/{name}")) is None:
            return False, None
        try:
            return True, parse_pod(api.request("GET", PODS.path(namespace, name)))
        except KubeNotFound:
            return True, None
        except KubeError as err:
            self._failed("read pod", err, pod=f"{namespace}/{name}")
        except ValueError as err:  # InvalidObject: what it says is not for us to act on
            self.log.warning("could not read pod", pod=f"{namespace}/{name}", error=str(err))
        return False, None

    # -- the planners' decisions --------------------------------------------------------------
    @calls(grant(MIGRATION_JOBS, "create"))
    def create_job(self, body: Mapping[str, Any]) -> bool:
        if (api := self.guard("create PodMigrationJob", pod=body["spec"]["podRef"])) is None:
            return False
        return self._call("create PodMigrationJob", lambda: create(api, MIGRATION_JOBS, body))

    @calls(grant(NODES, "patch"))
    def annotate_node(self, name: str, annotations: Mapping[str, str]) -> bool:
        if (api := self.guard("annotate node", node=name)) is None:
            return False
        patch = {"metadata": {"annotations": dict(annotations)}}
        return self._call("annotate node", lambda: merge_patch(api, NODES, name, patch), node=name)

    # -- policies' status ---------------------------------------------------------------------
    @calls(grant(POLICIES, "patch", "status"), grant(ACTIONS, "patch", "status"))
    def policy_status(
        self, kind: str, name: str, status: Mapping[str, Any], resource_version: str
    ) -> bool:
        """Write a NodeQOSEnsurancePolicy's or AvoidanceAction's status, preconditioned on
        the resourceVersion it was decided on."""
        if (api := self.guard(f"write {kind} status", name=name)) is None:
            return False
        patch = status_patch(status, resource_version)
        resource = by_kind(kind)
        return self._call(
            f"write {kind} status",
            lambda: merge_patch(api, resource, name, patch, subresource="status"),
            name=name,
        )

    # -- the cluster brake ------------------------------------------------------------------
    @calls(
        grant(CONFIGMAPS, "create", namespace=NAMESPACE),
        grant(CONFIGMAPS, "patch", namespace=NAMESPACE, name=brake.CONFIGMAP),
    )
    def set_brake(self, data: Mapping[str, str], exists: bool) -> bool:
        """Create the brake ConfigMap (or patch its data when it exists)."""
        if (api := self.guard("set the cluster brake", **data)) is None:
            return False
        if exists:
            patch = {
                "metadata": {"labels": {brake.MANAGED_BY_LABEL: brake.MANAGER}},
                "data": dict(data),
            }
            return self._call(
                "set the cluster brake",
                lambda: merge_patch(api, CONFIGMAPS, brake.CONFIGMAP, patch, namespace=NAMESPACE),
            )
        body = {
            "metadata": {
                "name": brake.CONFIGMAP,
                "namespace": NAMESPACE,
                "labels": {brake.MANAGED_BY_LABEL: brake.MANAGER},
            },
            "data": dict(data),
        }
        return self._call("set the cluster brake", lambda: create(api, CONFIGMAPS, body))

    @calls(grant(CONFIGMAPS, "delete", namespace=NAMESPACE, name=brake.CONFIGMAP))
    def lift_brake(self) -> bool:
        if (api := self.guard("lift the cluster brake")) is None:
            return False
        return self._call(
            "lift the cluster brake",
            lambda: delete(api, CONFIGMAPS, brake.CONFIGMAP, NAMESPACE),
        )

    # -- migration on a stock scheduler: placeholders, their PriorityClasses, drain taints --
    @calls(grant(PRIORITY_CLASSES, "create", why="placeholder priority"))
    def create_priority_class(self, body: Mapping[str, Any]) -> bool:
        """Create a placeholder PriorityClass; one that exists already is what we wanted."""
        name = body["metadata"]["name"]
        if (api := self.guard("create PriorityClass", priority_class=name)) is None:
            return False
        return self._created(
            "create PriorityClass", lambda: create(api, PRIORITY_CLASSES, body), priority_class=name
        )

    @calls(grant(PRIORITY_CLASSES, "delete", why="unused placeholder priority"))
    def delete_priority_class(self, name: str) -> bool:
        if (api := self.guard("delete PriorityClass", priority_class=name)) is None:
            return False
        return self._gone(
            "delete PriorityClass",
            lambda: delete(api, PRIORITY_CLASSES, name),
            priority_class=name,
        )

    @calls(grant(PODS, "create", namespace=NAMESPACE, why="reservation and queue placeholders"))
    def create_placeholder(self, body: Mapping[str, Any]) -> bool:
        """Create a reservation's placeholder pod (in the controller's namespace); one of
        that name already there counts (the migrator reads its state next round)."""
        meta = body["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        node = target_of(body)
        if (api := self.guard("create placeholder", placeholder=key, node=node)) is None:
            return False
        return self._created("create placeholder", lambda: create(api, PODS, body), placeholder=key)

    @calls(grant(PODS, "delete", namespace=NAMESPACE, why="reservation and queue placeholders"))
    def delete_placeholder(
        self, namespace: str, name: str, uid: str, grace_seconds: int | None = None
    ) -> bool:
        """Delete a placeholder pod, only the one of that uid (a precondition); gone
        already is what we wanted. ``grace_seconds`` 0: gone from the API at once (queue
        preemption hands its room over in one event)."""
        key = f"{namespace}/{name}"
        if (api := self.guard("delete placeholder", placeholder=key)) is None:
            return False
        options: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions",
                                   "preconditions": {"uid": uid}}  # fmt: skip
        if grace_seconds is not None:
            options["gracePeriodSeconds"] = grace_seconds
        return self._gone(
            "delete placeholder",
            lambda: api.request(
                "DELETE", PODS.path(namespace, name), body=options if uid else None
            ),
            placeholder=key,
        )

    @calls(grant(NODES, "get", why="drain taint"), grant(NODES, "patch", why="drain taint"))
    def node_taint(self, name: str, key: str, effect: str, wanted: bool) -> bool:
        """Add (``wanted``) or remove our taint ``key`` on a node, every other taint kept;
        True when the node carries it as wanted. The patch carries the node's
        resourceVersion: a concurrent taint writer (the node agent, the node lifecycle
        controller) makes it fail with 409 rather than be overwritten; the next round
        retries."""
        what = "taint node" if wanted else "untaint node"
        if (api := self.guard(what, node=name, taint=key)) is None:
            return False
        try:
            read = read_taints(api, name)
        except KubeNotFound:
            return not wanted  # a node that is gone carries no taint
        except KubeError as err:
            return self._failed(what, err, node=name)
        taints = read.taints
        kept = [t for t in taints if t.get("key") != key]
        if wanted:
            kept.append({"key": key, "effect": effect})
        if kept == taints:
            return True
        return self._call(what, lambda: write_taints(api, name, kept, read), node=name)

    def _created(self, what: str, fn: Callable[[], object], **fields: Any) -> bool:
        """A create: done, or there already (409: what we wanted)."""
        try:
            fn()
            return True
        except KubeConflict:
            return True
        except KubeError as err:
            return self._failed(what, err, **fields)

    def _gone(self, what: str, fn: Callable[[], object], **fields: Any) -> bool:
        """A delete: done, or not found (gone already: what we wanted)."""
        try:
            fn()
            return True
        except KubeNotFound:
            return True
        except KubeError as err:
            return self._failed(what, err, **fields)


class GuardedEvents:
    """An ``EventSink`` for the controller's recorder whose writes are leader writes
    (bounded by the time left to lead; none in a dry run)."""

    def __init__(self, writer: GuardedWriter) -> None:
        self.writer = writer

    @calls(grant(EVENTS, "create"))
    def create(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        api = self.writer.guard("record an event")
        return {} if api is None else create(api, EVENTS, body, namespace)

    @calls(grant(EVENTS, "patch"))
    def patch(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        api = self.writer.guard("record an event")
        return {} if api is None else merge_patch(api, EVENTS, name, patch, namespace=namespace)
