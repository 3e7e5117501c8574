"""What must change after a round's steps so that nothing leaks (pure): drain taints to set
and to lift, placeholders and PriorityClasses nobody uses any more.

Drains. The source of a defrag job (label ``qos.waterline.io/created-by: defrag``) is being
drained; it carries ``qos.waterline.io/draining:NoSchedule`` from its first eviction until
its drain ends. A drain is every non-terminal defrag job of that source (a Pending one's
source is its pod's node). The taint is wanted while the drain has jobs and has begun: the
node already carries the taint, or one of its jobs has reached its eviction. When no job of
a source is left the drain has ended and the taint goes, on every path (done, failed,
timed out, aborted, after a restart: the taint is the drain's memory, not ours). The drain
is *done*, its node freed, when the source then holds no pod that must move (DaemonSet,
mirror and terminating pods stay); else it *failed* and the pods left are named.

A job waits for its replacement to run before it ends, so the taint stays until the last
replacement has landed: a drain that lifted its taint when the node was merely empty would
let the pending replacements land back on it.

Orphans, found by label every round. A placeholder pod (label
``qos.waterline.io/reservation``) is stale when its Reservation is gone or final, or no
non-terminal ReservationFirst job owns that reservation (the job ended, was deleted, or
ended while no controller led). A PriorityClass ``waterline-reservation-*`` is unused
when no placeholder that stays uses it and none was created against it this round.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from agent.cluster.defrag.plan import stays
from agent.cluster.migrator.observe import ClusterView, reservation_name
from agent.cluster.migrator.placeholder import is_ours, label_value, reservation_of
from agent.cluster.migrator.steps import DRAINING_REASONS, is_drain
from agent.model import migration as m
from agent.model import reservation as r
from agent.model.objects import Node, Pod

DRAIN_TAINT_KEY = "qos.waterline.io/draining"
DRAIN_TAINT_EFFECT = "NoSchedule"


@dataclass(frozen=True, slots=True)
class DrainEnd:
    node: str
    #: The source holds no pod that must move: the node is free.
    freed: bool
    #: The pods that still must move (when not freed), namespace/name.
    remaining: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Cleanup:
    #: Sources whose drain has begun but which do not carry the taint.
    taint: tuple[str, ...] = ()
    #: Tainted nodes whose drain has ended.
    untaint: tuple[DrainEnd, ...] = ()
    placeholders: tuple[Pod, ...] = ()
    priority_classes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Marks:
    """What the executor already did since the last cleanup (the snapshot is older)."""

    placeholders_removed: frozenset[str] = frozenset()
    priority_classes_used: frozenset[str] = frozenset()
    tainted: frozenset[str] = frozenset()


def has_drain_taint(node: Node) -> bool:
    return any(t.key == DRAIN_TAINT_KEY for t in node.taints)


def drain_source(job: m.PodMigrationJob, view: ClusterView) -> str:
    """The node a drain's job moves its pod off: recorded when it started, else the
    pod's node."""
    if job.source_node:
        return job.source_node
    pod = view.pods.get(job.pod_key)
    if pod is None or (job.pod_uid and pod.uid != job.pod_uid):
        return ""
    return pod.node_name


def drains(
    jobs: Iterable[m.PodMigrationJob], view: ClusterView
) -> dict[str, list[m.PodMigrationJob]]:
    """Non-terminal defrag jobs by source node."""
    out: dict[str, list[m.PodMigrationJob]] = defaultdict(list)
    for job in jobs:
        if is_drain(job) and job.phase not in m.TERMINAL_PHASES:
            source = drain_source(job, view)
            if source:
                out[source].append(job)
    return out


def _drain_changes(
    jobs: Sequence[m.PodMigrationJob], view: ClusterView, tainted: frozenset[str]
) -> tuple[tuple[str, ...], tuple[DrainEnd, ...]]:
    nodes = view.store.nodes
    active = drains(jobs, view)
    taint = sorted(
        name
        for name, js in active.items()
        if name in nodes
        and name not in tainted
        and not has_drain_taint(nodes[name])
        and any(j.is_running and j.reason in DRAINING_REASONS for j in js)
    )
    ended = [
        name
        for name, node in sorted(nodes.items())
        if (has_drain_taint(node) or name in tainted) and name not in active
    ]
    by_node = view.store.pods_by_node() if ended else {}
    ends = []
    for name in ended:
        left = sorted(p.key for p in by_node.get(name, ()) if p.is_active and not stays(p))
        ends.append(DrainEnd(name, not left, tuple(left)))
    return tuple(taint), tuple(ends)


def _stale_placeholders(
    jobs: Sequence[m.PodMigrationJob], view: ClusterView, now: float, removed: frozenset[str]
) -> list[Pod]:
    live = {
        label_value(reservation_name(j.name))
        for j in jobs
        if j.phase not in m.TERMINAL_PHASES and j.mode == m.RESERVATION_FIRST
    }
    out = []
    for value, pod in sorted(view.placeholders.items()):
        if pod.is_terminating or pod.key in removed:
            continue
        res = view.reservations.get(reservation_of(pod))
        if res is None or value not in live or res.effective_phase(now) in r.FINAL_PHASES:
            out.append(pod)
    return out


def plan_cleanup(
    jobs: Sequence[m.PodMigrationJob], view: ClusterView, now: float, marks: Marks | None = None
) -> Cleanup:
    """The changes that keep drains and placeholders in step with the jobs after a
    round's steps (``jobs`` carry the phases and reasons the steps gave them)."""
    marks = marks or Marks()
    taint, untaint = _drain_changes(jobs, view, marks.tainted)
    stale = _stale_placeholders(jobs, view, now, marks.placeholders_removed)
    gone = {p.key for p in stale} | marks.placeholders_removed
    used = {p.priority_class_name for p in view.placeholders.values() if p.key not in gone}
    used |= marks.priority_classes_used
    unused = sorted(
        name for name in view.store.priority_classes if is_ours(name) and name not in used
    )
    return Cleanup(taint, untaint, tuple(stale), tuple(unused))
