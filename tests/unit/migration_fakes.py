"""What the migration tests share: a recording ``Writes`` (Events included), and builders of jobs, reservations and placeholders as the API would show them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent.cluster import migrator as mg
from agent.model import migration as m
from agent.model.eviction import EvictionResult


class Recorder:
    """Every write, in order; ``refuse`` names the writes that fail (return False)."""

    def __init__(
        self, evict_answer: EvictionResult = EvictionResult.EVICTED, refuse: tuple[str, ...] = ()
    ) -> None:
        self.calls: list[tuple[str, Any, Any]] = []
        self.evict_answer = evict_answer
        self.refuse = set(refuse)
        #: Events: (kind/name, type, reason, message).
        self.recorded: list[tuple[str, str, str, str]] = []
        #: Status writes: (job, phase, whether the phase changed).
        self.transitions: list[tuple[str, str, bool]] = []
        #: Status writes: (job, the resourceVersion they were conditioned on, "" for none).
        self.versions: list[tuple[str, str]] = []

    def _note(self, kind: str, key: Any, body: Any) -> bool:
        self.calls.append((kind, key, body))
        return kind not in self.refuse

    def job_status(
        self, name: str, status: Mapping[str, Any], resource_version: str = "",
        *, transition: bool = True,
    ) -> bool:  # fmt: skip
        self.transitions.append((name, str(status.get("phase")), transition))
        self.versions.append((name, resource_version))
        return self._note("job_status", name, dict(status))

    def job_annotations(self, name: str, annotations: Mapping[str, str]) -> bool:
        return self._note("job_annotations", name, dict(annotations))

    def create_reservation(self, body: Mapping[str, Any]) -> bool:
        return self._note("create_reservation", body["metadata"]["name"], body)

    def reservation_status(self, name: str, status: Mapping[str, Any]) -> bool:
        return self._note("reservation_status", name, dict(status))

    def delete_reservation(self, name: str) -> bool:
        return self._note("delete_reservation", name, None)

    def evict(self, p: Any) -> tuple[EvictionResult, str] | None:
        if not self._note("evict", p.key, None):
            return None
        return self.evict_answer, ""

    def create_priority_class(self, body: Mapping[str, Any]) -> bool:
        return self._note("create_priority_class", body["metadata"]["name"], body)

    def delete_priority_class(self, name: str) -> bool:
        return self._note("delete_priority_class", name, None)

    def create_placeholder(self, body: Mapping[str, Any]) -> bool:
        meta = body["metadata"]
        return self._note("create_placeholder", f"{meta['namespace']}/{meta['name']}", body)

    def delete_placeholder(self, namespace: str, name: str, uid: str) -> bool:
        return self._note("delete_placeholder", f"{namespace}/{name}", uid)

    def node_taint(self, name: str, key: str, effect: str, wanted: bool) -> bool:
        return self._note("node_taint", name, (key, effect, wanted))

    def event(self, ref: Any, type_: str, reason: str, message: str) -> None:
        self.recorded.append((f"{ref.kind}/{ref.name}", type_, reason, message))

    def about(self, kind: str) -> list[tuple[str, str, str, str]]:
        return [e for e in self.recorded if e[0].startswith(f"{kind}/")]

    def kinds(self) -> list[str]:
        return [c[0] for c in self.calls]

    def of(self, kind: str) -> list[tuple[str, Any, Any]]:
        return [c for c in self.calls if c[0] == kind]


def job(
    mode: str = m.EVICT_DIRECTLY,
    phase: str = "",
    *,
    name: str = "j1",
    pod_name: str = "web-1",
    created_by: str = "",
    status: Mapping[str, Any] | None = None,
    annotations: Mapping[str, str] | None = None,
    **spec: Any,
) -> m.PodMigrationJob:
    meta: dict[str, Any] = {
        "name": name,
        "uid": f"uid-job-{name}",
        "creationTimestamp": "2026-01-01T00:00:00Z",
        "annotations": dict(annotations or {}),
    }
    if created_by:
        meta["labels"] = {m.CREATED_BY_LABEL: created_by}
    raw: dict[str, Any] = {
        "metadata": meta,
        "spec": {"podRef": {"namespace": "default", "name": pod_name}, "mode": mode, **spec},
        "status": {**({"phase": phase} if phase else {}), **(status or {})},
    }
    return m.parse_pod_migration_job(raw)


def reservation(
    job_name: str = "j1", phase: str = "", node_name: str = "", uid: str = "uid-res"
) -> dict[str, Any]:
    """The Reservation a job made, as the API returns it (created a second after T0)."""
    status: dict[str, Any] = {}
    if phase:
        status = {"phase": phase, "nodeName": node_name}
        status["placeholder"] = {
            "namespace": "waterline-system",
            "name": f"placeholder-pmj-{job_name}",
        }
    return {
        "apiVersion": "qos.waterline.io/v1alpha1",
        "kind": "Reservation",
        "metadata": {
            "name": mg.reservation_name(job_name),
            "uid": uid,
            "creationTimestamp": "2026-01-01T00:00:01Z",
        },
        "spec": {
            "template": {
                "spec": {"containers": [{"name": "r", "resources": {"requests": {"cpu": "1"}}}]}
            },
            "owners": [
                {
                    "controller": {
                        "kind": "ReplicaSet",
                        "name": "web-1-owner",
                        "uid": "uid-web-1-owner",
                    }
                }
            ],
            "ttl": "300s",
        },
        "status": status,
    }


def placeholder(
    job_name: str = "j1",
    node_name: str = "n2",
    phase: str = "Running",
    cpu: str = "1",
    priority_class: str = "waterline-reservation--1",
    deleting: bool = False,
) -> dict[str, Any]:
    """A job's placeholder pod as the kubelet left it (``phase``)."""
    res = mg.reservation_name(job_name)
    meta: dict[str, Any] = {
        "name": f"placeholder-{res}",
        "namespace": "waterline-system",
        "uid": f"uid-placeholder-{job_name}",
        "labels": {"qos.waterline.io/reservation": res, m.CREATED_BY_LABEL: "migration"},
        "ownerReferences": [
            {
                "apiVersion": "qos.waterline.io/v1alpha1",
                "kind": "Reservation",
                "name": res,
                "uid": "uid-res",
                "controller": True,
            }
        ],
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:30Z"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "nodeName": node_name,
            "priorityClassName": priority_class,
            "containers": [{"name": "pause", "resources": {"requests": {"cpu": cpu}}}],
        },
        "status": {"phase": phase},
    }
