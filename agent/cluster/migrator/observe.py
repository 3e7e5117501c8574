"""What the migrator observes of a job in a cluster snapshot (pure): the ``World`` of a job,
the node a reservation should go to, and the Reservation a job creates."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agent.cluster.defrag.evictor import PLACEHOLDER_LABEL, Storage, storage_reason
from agent.cluster.migrator.placeholder import (
    is_placeholder_pod,
    label_value,
    quantity,
    toleration,
)
from agent.cluster.migrator.steps import (
    ABORT_ANNOTATION,
    CREATED_BY_LABEL,
    JOB_LABEL,
    REPLACEMENT_SLACK_SECONDS,
    WATCHED_CONTROLLER_KINDS,
    Tracked,
    World,
    tracked_from_annotations,
    tracked_from_pod,
    ttl_seconds,
)
from agent.cluster.placement import Snapshot, holds_by_node, why_not
from agent.model import migration as m
from agent.model import reservation as r
from agent.model.objects import Pod
from agent.model.store import ObjectStore


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
    #: Pods not terminating, by controller uid (has a replacement appeared?).
    by_owner: Mapping[str, tuple[Pod, ...]] = field(default_factory=dict)
    #: Placeholder pods by their reservation label value (a live one over a terminating).
    placeholders: Mapping[str, Pod] = field(default_factory=dict)
    storage: Storage = field(default_factory=Storage)
    #: The placement snapshot the round's targets are chosen on, built on first use and
    #: kept current as placeholders are placed (so two jobs do not take one gap).
    _placement: list[Snapshot] = field(default_factory=list)

    @classmethod
    def build(cls, store: ObjectStore) -> ClusterView:
        pods = {p.key: p for p in store.pods}
        running: dict[str, list[Pod]] = {}
        alive: dict[str, list[Pod]] = {}
        placeholders: dict[str, Pod] = {}
        for pod in store.pods:
            ctl = pod.controller
            if is_placeholder_pod(pod):
                value = pod.labels[PLACEHOLDER_LABEL]
                if value not in placeholders or placeholders[value].is_terminating:
                    placeholders[value] = pod
            if ctl is None or not ctl.uid or pod.is_terminating:
                continue
            alive.setdefault(ctl.uid, []).append(pod)
            if pod.phase == "Running":
                running.setdefault(ctl.uid, []).append(pod)
        return cls(
            store,
            pods,
            {k: tuple(v) for k, v in running.items()},
            {res.name: res for res in store.reservations},
            {k: tuple(v) for k, v in alive.items()},
            placeholders,
            Storage(store.claims, store.volumes),
        )

    def placement(self, now: float) -> Snapshot:
        """Ready, schedulable nodes with what is bound to them and reserved at ``now``."""
        if not self._placement:
            store = self.store
            nodes = [n for n in store.nodes.values() if n.ready and not n.unschedulable]
            self._placement.append(
                Snapshot.build(nodes, store.pods, holds_by_node(self.reservations.values(), now))
            )
        return self._placement[0]


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
    seen = False
    if tracked is not None and tracked.owner_uid:
        if tracked.owner_kind in WATCHED_CONTROLLER_KINDS:
            exists = tracked.owner_uid in view.store.workloads
        else:
            exists = True  # a kind we do not watch: assume it replaces its pods
        for other in view.running_by_owner.get(tracked.owner_uid, ()):
            if other.uid != tracked.pod_uid and _created_since(other, tracked.started_at):
                replacement = other.node_name
                break
        seen = bool(replacement) or any(
            other.uid != tracked.pod_uid and _created_since(other, tracked.started_at)
            for other in view.by_owner.get(tracked.owner_uid, ())
        )
    name = reservation_name(job.name)
    res = view.reservations.get(name)
    return (
        World(
            now=now,
            pod=pod,
            controller_exists=exists,
            replacement_node=replacement,
            replacement_seen=seen,
            reservation_phase=res.effective_phase(now) if res else "",
            reservation_node=res.node_name if res else "",
            placeholder=view.placeholders.get(label_value(name)),
            storage_reason=(storage_reason(pod, view.storage) or "") if pod else "",
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
    snapshot = view.placement(now)
    state = snapshot.states.get(preferred)
    if state is not None and preferred != pod.node_name and why_not(pod, state) is None:
        return preferred
    free = [
        s for s in snapshot.states.values() if s.name != pod.node_name and why_not(pod, s) is None
    ]
    if not free:
        return None
    return min(free, key=lambda s: (s.utilization("cpu"), s.name)).name


def reservation_body(job: m.PodMigrationJob, pod: Pod, tracked: Tracked) -> dict[str, Any]:
    """A Reservation that holds ``pod``'s request for a pod of the same controller."""
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "reserved",
                "resources": {"requests": {k: quantity(k, v) for k, v in pod.requests.items()}},
            }
        ]
    }
    if pod.node_selector:
        spec["nodeSelector"] = dict(pod.node_selector)
    if pod.tolerations:
        spec["tolerations"] = [toleration(t) for t in pod.tolerations]
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
    metadata: dict[str, Any] = {
        "name": reservation_name(job.name),
        "labels": {CREATED_BY_LABEL: "migration", JOB_LABEL: label_value(job.name)},
    }
    if job.uid:  # deleted with its job by the garbage collector, its placeholder with it
        metadata["ownerReferences"] = [
            {"apiVersion": m.API_VERSION, "kind": m.KIND, "name": job.name, "uid": job.uid}
        ]
    return {
        "apiVersion": m.API_VERSION,
        "kind": r.KIND,
        "metadata": metadata,
        "spec": {
            "template": {"metadata": {"namespace": pod.namespace}, "spec": spec},
            "owners": [owner],
            "ttl": f"{int(max(1.0, ttl_seconds(job)))}s",
            "allocateOnce": True,
        },
    }
