"""Every write of the controller, behind one guard: leadership is checked right before
each write (a leader whose lease lapsed raises ``NotLeader`` and the round ends there) and
nothing is written in a dry run. API failures are logged and reported as False: the next
round retries."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import structlog

from agent.cluster.metrics import ControllerMetrics
from agent.cluster.resources import MIGRATION_JOBS, PRIORITY_CLASSES, RESERVATIONS
from agent.kube import evicting
from agent.kube.client import KubeApi
from agent.kube.creating import create, delete
from agent.kube.errors import KubeConflict, KubeError, KubeNotFound
from agent.kube.patching import merge_patch
from agent.kube.resources import NODES, PODS
from agent.model.eviction import EvictionResult
from agent.model.objects import Pod

# The node agent's table of adapter outcome -> EvictionResult, shared rather than copied.


class NotLeader(Exception):
    """The lease is not ours (any more): stop the round before the next write."""


class GuardedWriter:
    """Every write of the controller: leadership checked right before each one, nothing
    written in a dry run. API failures are logged and reported as False (the next round
    retries); a 409 AlreadyExists on create means it is there, which is what we wanted."""

    def __init__(
        self,
        api: KubeApi,
        is_leader: Callable[[], bool],
        dry_run: bool,
        metrics: ControllerMetrics,
        logger: Any = None,
    ) -> None:
        self.api, self.is_leader, self.dry_run, self.metrics = api, is_leader, dry_run, metrics
        self.log = logger or structlog.get_logger("waterline.cluster.writes")

    def _may(self, what: str, **fields: Any) -> bool:
        if not self.is_leader():
            raise NotLeader(what)
        if self.dry_run:
            self.log.info(f"dry run: would {what}", **fields)
            return False
        return True

    def _call(self, what: str, fn: Callable[[], object], **fields: Any) -> bool:
        try:
            fn()
            return True
        except KubeNotFound:
            self.log.info(f"could not {what}: not found", **fields)
        except KubeError as err:
            self.log.warning(f"could not {what}", error=str(err), status=err.status, **fields)
        return False

    # -- migration (the migrator's Writes) ------------------------------------------------
    def job_status(self, name: str, status: Mapping[str, Any]) -> bool:
        if not self._may("write job status", job=name, **status):
            return False
        ok = self._call(
            "write job status",
            lambda: merge_patch(
                self.api, MIGRATION_JOBS, name, {"status": dict(status)}, subresource="status"
            ),
            job=name,
        )
        if ok:
            self.metrics.migrations.labels(str(status.get("phase"))).inc()
        return ok

    def job_annotations(self, name: str, annotations: Mapping[str, str]) -> bool:
        if not self._may("annotate job", job=name):
            return False
        patch = {"metadata": {"annotations": dict(annotations)}}
        return self._call(
            "annotate job", lambda: merge_patch(self.api, MIGRATION_JOBS, name, patch), job=name
        )

    def create_reservation(self, body: Mapping[str, Any]) -> bool:
        name = body["metadata"]["name"]
        if not self._may("create reservation", reservation=name):
            return False
        try:
            create(self.api, RESERVATIONS, body)
            return True
        except KubeConflict:
            return True
        except KubeError as err:
            self.log.warning("could not create reservation", reservation=name, error=str(err))
            return False

    def reservation_status(self, name: str, status: Mapping[str, Any]) -> bool:
        if not self._may("write reservation status", reservation=name, phase=status.get("phase")):
            return False
        return self._call(
            "write reservation status",
            lambda: merge_patch(
                self.api, RESERVATIONS, name, {"status": dict(status)}, subresource="status"
            ),
            reservation=name,
        )

    def delete_reservation(self, name: str) -> bool:
        if not self._may("delete reservation", reservation=name):
            return False
        return self._call(
            "delete reservation", lambda: delete(self.api, RESERVATIONS, name), reservation=name
        )

    def evict(self, pod: Pod, source: str = "migration") -> tuple[EvictionResult, str] | None:
        if not self._may("evict pod", pod=pod.key, source=source):
            return None
        outcome = evicting.evict(
            self.api, pod.namespace, pod.name, None, pod.uid if pod.uid != pod.key else ""
        )
        result = outcome.result
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

    # -- the planners' decisions --------------------------------------------------------------
    def create_job(self, body: Mapping[str, Any]) -> bool:
        if not self._may("create PodMigrationJob", pod=body["spec"]["podRef"]):
            return False
        return self._call("create PodMigrationJob", lambda: create(self.api, MIGRATION_JOBS, body))

    def annotate_node(self, name: str, annotations: Mapping[str, str]) -> bool:
        if not self._may("annotate node", node=name):
            return False
        patch = {"metadata": {"annotations": dict(annotations)}}
        return self._call(
            "annotate node", lambda: merge_patch(self.api, NODES, name, patch), node=name
        )

    # -- migration on a stock scheduler: placeholders, their PriorityClasses, drain taints --
    # API calls (RBAC): scheduling.k8s.io priorityclasses create, delete; core pods create,
    # delete (the placeholders, in the controller's namespace); core nodes get, patch.
    def create_priority_class(self, body: Mapping[str, Any]) -> bool:
        """Create a placeholder PriorityClass; one that exists already is what we wanted."""
        name = body["metadata"]["name"]
        if not self._may("create PriorityClass", priority_class=name):
            return False
        try:
            create(self.api, PRIORITY_CLASSES, body)
            return True
        except KubeConflict:
            return True
        except KubeError as err:
            self.log.warning("could not create PriorityClass", priority_class=name, error=str(err))
            return False

    def delete_priority_class(self, name: str) -> bool:
        if not self._may("delete PriorityClass", priority_class=name):
            return False
        return self._gone(
            "delete PriorityClass",
            lambda: delete(self.api, PRIORITY_CLASSES, name),
            priority_class=name,
        )

    def create_placeholder(self, body: Mapping[str, Any]) -> bool:
        """Create a reservation's placeholder pod; one of that name already there counts
        (the migrator reads its state from the cache next round)."""
        meta = body["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        if not self._may("create placeholder", placeholder=key, node=body["spec"]["nodeName"]):
            return False
        try:
            create(self.api, PODS, body)
            return True
        except KubeConflict:
            return True
        except KubeError as err:
            self.log.warning("could not create placeholder", placeholder=key, error=str(err))
            return False

    def delete_placeholder(self, namespace: str, name: str, uid: str) -> bool:
        """Delete a placeholder pod, only the one of that uid (a precondition); gone
        already is what we wanted."""
        key = f"{namespace}/{name}"
        if not self._may("delete placeholder", placeholder=key):
            return False
        options = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
        return self._gone(
            "delete placeholder",
            lambda: self.api.request(
                "DELETE", PODS.path(namespace, name), body=options if uid else None
            ),
            placeholder=key,
        )

    def node_taint(self, name: str, key: str, effect: str, wanted: bool) -> bool:
        """Add (``wanted``) or remove our taint ``key`` on a node, every other taint kept;
        True when the node carries it as wanted. The patch carries the node's
        resourceVersion: a concurrent taint writer (the node agent, the node lifecycle
        controller) makes it fail with 409 rather than be overwritten; the next round
        retries."""
        if not self._may("taint node" if wanted else "untaint node", node=name, taint=key):
            return False
        try:
            raw = self.api.request("GET", NODES.path(None, name))
            taints = [t for t in (raw.get("spec") or {}).get("taints") or [] if isinstance(t, dict)]
            kept = [t for t in taints if t.get("key") != key]
            if wanted:
                kept.append({"key": key, "effect": effect})
            if kept == taints:
                return True
            patch: dict[str, Any] = {"spec": {"taints": kept}}
            version = (raw.get("metadata") or {}).get("resourceVersion")
            if version:
                patch["metadata"] = {"resourceVersion": version}
            merge_patch(self.api, NODES, name, patch)
            self.log.info("drain taint set" if wanted else "drain taint removed", node=name)
            return True
        except KubeNotFound:
            return not wanted  # a node that is gone carries no taint
        except KubeError as err:
            self.log.warning("could not change node taint", node=name, error=str(err), status=err.status)
            return False

    def _gone(self, what: str, fn: Callable[[], object], **fields: Any) -> bool:
        """A delete: done, or not found (gone already: what we wanted)."""
        try:
            fn()
            return True
        except KubeNotFound:
            return True
        except KubeError as err:
            self.log.warning(f"could not {what}", error=str(err), status=err.status, **fields)
            return False
