"""What the migrator observes of a job in a cluster snapshot (pure): the ``World`` of a job,
the node a reservation should go to, and the Reservation a job creates."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence, Set
from dataclasses import dataclass, field
from typing import Any

from agent.cluster.defrag.migratable import PLACEHOLDER_LABEL, Storage, storage_reason
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
    WATCHED_CONTROLLER_KINDS,
    Tracked,
    World,
    created_since,
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
    reservations: Mapping[str, r.Reservation]
    #: Pods not terminating, by controller uid (has a replacement appeared?).
    by_owner: Mapping[str, tuple[Pod, ...]] = field(default_factory=dict)
    #: Placeholder pods by their reservation label value (a live one over a terminating).
    placeholders: Mapping[str, Pod] = field(default_factory=dict)
    storage: Storage = field(default_factory=Storage)
    #: The placement snapshot the round's targets are chosen on, built on first use and
    #: kept current as placeholders are placed (so two jobs do not take one gap).
    _placement: list[Snapshot] = field(default_factory=list)
    #: Job name -> the pod that replaces its pod (``replacement_of``), built on first use.
    _claims: list[Mapping[str, Pod | None]] = field(default_factory=list)

    @classmethod
    def build(cls, store: ObjectStore) -> ClusterView:
        pods = {p.key: p for p in store.pods}
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
        return cls(
            store,
            pods,
            {res.name: res for res in store.reservations},
            {k: tuple(v) for k, v in alive.items()},
            placeholders,
            Storage(store.claims, store.volumes),
        )

    def replacement_of(self, job: m.PodMigrationJob, tracked: Tracked) -> Pod | None:
        """The pod that replaces ``job``'s: each new pod of an owner is one job's
        replacement, never two jobs' (``claim_replacements``). A job the snapshot does not
        know as started (it starts this round) gets a pod no other job took."""
        if not self._claims:
            self._claims.append(claim_replacements(self.store.migration_jobs, self.by_owner))
        claims = self._claims[0]
        if job.name in claims:
            return claims[job.name]
        taken = {p.uid for p in claims.values() if p is not None}
        pods = _candidates(job, tracked, self.by_owner.get(tracked.owner_uid, ()), taken)
        return next((p for p in pods if p.phase == "Running"), pods[0] if pods else None)

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
        successor = view.replacement_of(job, tracked)
        seen = successor is not None
        if successor is not None and successor.phase == "Running":
            replacement = successor.node_name
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


def claim_replacements(
    jobs: Iterable[m.PodMigrationJob], by_owner: Mapping[str, Sequence[Pod]]
) -> dict[str, Pod | None]:
    """Each started job's replacement, one pod a job: the jobs of an owner in the order
    they started (name on a tie), each taking the first pod (by creation) of the owner
    that is not taken, not its own, not there at its start and created since it; then a
    Running job whose pod is still Pending takes a Running one nobody took instead (a
    lone job is done on any new replica). A StatefulSet's pod is replaced only by the pod
    of its name. A Succeeded job keeps a Running pod on the node it landed on (none when
    it landed nowhere: a 404), so a later job of the workload waits for a pod of its own
    (two jobs of one ReplicaSet both took the first new replica before). Pure: the same
    snapshot gives the same claims, so no claim needs to be written."""
    started = []
    for job in jobs:
        if job.phase not in (m.RUNNING, m.SUCCEEDED):
            continue
        tracked = tracked_from_annotations(job.annotations)
        if tracked is not None and tracked.owner_uid:
            started.append((tracked.started_at or 0.0, job.name, job, tracked))
    started.sort(key=lambda s: (s[0], s[1]))
    claims: dict[str, Pod | None] = {}
    taken: dict[str, set[str]] = {}
    for _, name, job, tracked in started:
        owner_taken = taken.setdefault(tracked.owner_uid, set())
        pods = _candidates(job, tracked, by_owner.get(tracked.owner_uid, ()), owner_taken)
        claims[name] = pods[0] if pods else None
        owner_taken.update(p.uid for p in pods[:1])
    for _, name, job, tracked in started:
        claim, owner_taken = claims[name], taken[tracked.owner_uid]
        if job.phase != m.RUNNING or claim is None or claim.phase == "Running":
            continue
        pods = _candidates(job, tracked, by_owner.get(tracked.owner_uid, ()), owner_taken)
        running = next((p for p in pods if p.phase == "Running"), None)
        if running is not None:
            owner_taken.symmetric_difference_update({claim.uid, running.uid})
            claims[name] = running
    return claims


def _candidates(
    job: m.PodMigrationJob, tracked: Tracked, pods: Iterable[Pod], taken: Set[str]
) -> list[Pod]:
    """The pods that may replace ``job``'s, oldest first (see ``claim_replacements``)."""
    if job.phase == m.SUCCEEDED and not job.landed_node:
        return []
    name = job.pod_key if tracked.owner_kind == "StatefulSet" else ""
    landed = job.landed_node if job.phase == m.SUCCEEDED else ""
    candidates = [
        p for p in pods
        if p.uid != tracked.pod_uid and p.uid not in taken
        and p.uid not in tracked.present_at_start and created_since(p, tracked.started_at)
        and (not name or p.key == name)
        and (not landed or (p.node_name == landed and p.phase == "Running"))
    ]  # fmt: skip
    return sorted(candidates, key=lambda p: (p.creation_time or 0.0, p.name))


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
