"""What must change after a round's steps so that nothing leaks (pure): drain taints to set
and to lift, placeholders and PriorityClasses nobody uses any more.

Drains. The source of a defrag job (label ``qos.waterline.io/created-by: defrag``) is being
drained; it carries ``qos.waterline.io/draining:NoSchedule`` from its first eviction until
its drain ends. A drain is every non-terminal defrag job of that source (a Pending one's
source is its pod's node). When no job of a source is left its drain has ended (the taint
is the drain's memory, not ours, so this holds after a restart too). The drain is *done*,
its node freed, when the source then holds no pod that must move (DaemonSet, mirror and
terminating pods stay); else it *failed* and the pods left are named. A source of the plan
with nothing to move (defrag stamps it with the plan when it creates the plan's jobs) has
no job: it is drained with its plan, tainted with the plan's first eviction and freed when
the plan's drains end.

Decisions where DESIGN.md is silent (bench/defrag_e2e.py measured them against a model of
the stock kube-scheduler, whose LeastAllocated scoring sends a pod to the emptiest node
that fits, which is just what a source being drained or a freed node is):

* The sources of one defrag plan are drained together, as one drain: a plan is told by
  the sources' ``qos.waterline.io/last-defrag-time`` (defrag stamps every source of a
  plan with the plan's time; an unstamped node is a drain of its own). Its first
  eviction taints every source of the plan that still has jobs, before it evicts
  (``plan_sources``; the round's cleanup catches any it missed): a source whose turn has
  not come (at most 2 jobs a node run at once) is otherwise where the others'
  replacements go. On the 5,000-node bench cluster that took the nodes freed from 105 to
  all 144 planned (the model); on a real scheduler the sources tainted only at the
  round's end still took the first replacements (bench/defrag_real.py).
* A job waits for its replacement to run before it ends, so the taint stays until the
  last replacement has landed: lifting it when the node is merely empty would let the
  pending replacements land back on it.
* A failed drain's taint goes at once: the node keeps pods and must take new ones.
* A done drain's taint stays while the other drains of its plan (or of an older one)
  still run; lifted as each drain ended, the 1,000-node bench cluster kept 4 of 39
  planned nodes free, kept until the plan's drains end, all 39 (the model; on 24 kwok
  nodes and the real scheduler, kept so, every node the plan meant to free where there
  was room elsewhere). Jobs end by their TTL, so this is bounded.

Orphans, found by label every round. A placeholder pod (label
``qos.waterline.io/reservation``) is stale when its Reservation is gone or final, or no
non-terminal ReservationFirst job owns that reservation (the job ended, was deleted, or
ended while no controller led). A PriorityClass ``waterline-reservation-*`` is unused
when no placeholder that stays uses it and none was created against it this round.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from dataclasses import dataclass

from agent.cluster.defrag.plan import LAST_DEFRAG_ANNOTATION, stays
from agent.cluster.migrator.observe import ClusterView, reservation_name
from agent.cluster.migrator.placeholder import is_ours, label_value, reservation_of
from agent.cluster.migrator.steps import DRAINING_REASONS, is_drain
from agent.model import migration as m
from agent.model import reservation as r
from agent.model.objects import Node, Pod
from agent.model.timeutil import parse_time_or_none

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


def plan_time(node: Node | None) -> float | None:
    """When defrag planned the drain of ``node`` (its last-defrag-time), if readable."""
    if node is None:
        return None
    return parse_time_or_none(node.annotations.get(LAST_DEFRAG_ANNOTATION))


def must_move(pods: Iterable[Pod]) -> list[str]:
    """The pods that keep a source from being freed (namespace/name): DaemonSet, mirror
    and terminating pods stay."""
    return sorted(p.key for p in pods if p.is_active and not stays(p))


PodsOn = Callable[[str], Sequence[Pod]]


def _pods_on(view: ClusterView) -> PodsOn:
    """The pods of a node, indexed on first use."""
    index: list[Mapping[str, Sequence[Pod]]] = []

    def pods_on(name: str) -> Sequence[Pod]:
        if not index:
            index.append(view.store.pods_by_node())
        return index[0].get(name, ())

    return pods_on


def _of_plans(
    plans: Set[float],
    nodes: Mapping[str, Node],
    active: Mapping[str, Sequence[m.PodMigrationJob]],
    pods_on: PodsOn,
) -> set[str]:
    """The sources of these plans still drained: those with a drain job, and those with
    nothing to move (freed by the plan as they are: the emptiest nodes, they would take
    the replacements of the others)."""
    if not plans:
        return set()
    return {
        name
        for name, node in nodes.items()
        if plan_time(node) in plans and (name in active or not must_move(pods_on(name)))
    }


def plan_sources(source: str, jobs: Iterable[m.PodMigrationJob], view: ClusterView) -> list[str]:
    """The nodes a drain's first eviction taints: its source, then every other source of
    its plan (the same last-defrag-time) still drained (``_of_plans``). Tainted only at
    the round's end, they were the emptiest nodes in the meantime, and a real
    kube-scheduler sent the first replacements there (bench/defrag_real.py)."""
    nodes = view.store.nodes
    planned = plan_time(nodes.get(source))
    if planned is None:
        return [source]
    others = _of_plans({planned}, nodes, drains(jobs, view), _pods_on(view)) - {source}
    return [source, *sorted(others)]


def _wanted(
    active: Mapping[str, Sequence[m.PodMigrationJob]],
    nodes: Mapping[str, Node],
    tainted: frozenset[str],
    pods_on: PodsOn,
) -> set[str]:
    """The sources that must carry the taint: those whose drain has begun (tainted, or a
    job of it reached its eviction), and every source of a plan one of whose drains has."""
    begun = {
        name
        for name, js in active.items()
        if name in tainted
        or (name in nodes and has_drain_taint(nodes[name]))
        or any(j.is_running and j.reason in DRAINING_REASONS for j in js)
    }
    plans = {t for name in begun if (t := plan_time(nodes.get(name))) is not None}
    return begun | _of_plans(plans, nodes, active, pods_on)


def _drain_changes(
    jobs: Sequence[m.PodMigrationJob], view: ClusterView, tainted: frozenset[str]
) -> tuple[tuple[str, ...], tuple[DrainEnd, ...]]:
    nodes = view.store.nodes
    active = drains(jobs, view)
    pods_on = _pods_on(view)
    taint = sorted(
        name
        for name in _wanted(active, nodes, tainted, pods_on)
        if name in nodes and name not in tainted and not has_drain_taint(nodes[name])
    )
    ended = [
        name
        for name, node in sorted(nodes.items())
        if (has_drain_taint(node) or name in tainted) and name not in active
    ]
    running_plans = [t for t in (plan_time(nodes.get(n)) for n in active) if t is not None]
    ends = []
    for name in ended:
        left = must_move(pods_on(name))
        planned = plan_time(nodes[name])
        if not left and planned is not None and any(t <= planned for t in running_plans):
            continue  # freed; its plan's other drains still run: it keeps the taint
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
