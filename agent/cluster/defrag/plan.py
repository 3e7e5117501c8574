"""The defrag plan: sources, the all-or-nothing drain of each onto the targets, and the
fragmentation before and after (the rules are in the package docstring)."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent.cluster.defrag.args import DefragArgs
from agent.cluster.defrag.migratable import Storage, why_not_migratable
from agent.cluster.defrag.targets import Targets
from agent.cluster.engine import EPSILON
from agent.cluster.placement import Hold, NodeState, Snapshot, holds_by_node
from agent.model.objects import Node, Pod
from agent.model.ordering import By, Order, ordered_by
from agent.model.store import ObjectStore
from agent.model.timeutil import parse_time

CRITICAL_LABEL = "critical"
LAST_DEFRAG_ANNOTATION = "qos.waterline.io/last-defrag-time"


@dataclass(frozen=True, slots=True)
class Migration:
    pod: Pod
    source: str
    target: str


@dataclass(frozen=True, slots=True)
class DefragPlan:
    migrations: tuple[Migration, ...] = ()
    source_nodes: tuple[str, ...] = ()
    freed_nodes: tuple[str, ...] = ()
    #: Whether there were more sources than numberOfNodes (else nothing was planned).
    acted: bool = False
    #: Nodes below lowThresholds left out, and sources not freed: node -> reason.
    skipped: Mapping[str, str] = field(default_factory=dict)
    #: Pods that kept a source from being freed because they may not move: pod -> reason
    #: (the migratability filters', ``agent.cluster.defrag.migratable``).
    not_migratable: Mapping[str, str] = field(default_factory=dict)
    utilization_before: Mapping[str, float] = field(default_factory=dict)
    utilization_after: Mapping[str, float] = field(default_factory=dict)
    fragmentation_before: float = 0.0
    fragmentation_after: float = 0.0


def stays(pod: Pod) -> bool:
    """Pods that stay on a freed node without keeping it from being freed."""
    return pod.is_daemonset or pod.is_mirror or pod.is_terminating


def migratable(pod: Pod, args: DefragArgs, storage: Storage | None = None) -> bool:
    return why_not_migratable(pod, args, storage or Storage()) is None


def _cooling(node: Node, now: float, cool_down: float) -> bool:
    if cool_down <= 0:
        return False
    text = node.annotations.get(LAST_DEFRAG_ANNOTATION)
    if not text:
        return False
    try:
        last = parse_time(text)
    except ValueError:
        return True
    return last is not None and now - last < cool_down


# Orderings, primary key first; both are of the resource defrag works on.
def source_order(resource: str) -> Order[NodeState]:
    return ordered_by(
        By("least used first", lambda s: s.utilization(resource)),
        By("node name", lambda s: s.name),
    )


def pod_order(resource: str) -> Order[Pod]:
    return ordered_by(
        By("largest request of the resource first", lambda p: -p.request(resource)),
        By("namespace/name", lambda p: p.key),
    )


def plan(snapshot: ObjectStore, args: DefragArgs, now: float) -> DefragPlan:
    """The defrag plan of a snapshot: its reservations hold capacity as they do at ``now``."""
    return plan_defrag(
        snapshot.nodes.values(),
        snapshot.pods_by_node(),
        args,
        now,
        holds_by_node(snapshot.reservations, now),
        Storage(snapshot.claims, snapshot.volumes),
    )


def plan_defrag(
    nodes: Iterable[Node],
    pods_by_node: Mapping[str, Sequence[Pod]],
    args: DefragArgs,
    now: float,
    holds: Mapping[str, list[Hold]] | None = None,
    storage: Storage | None = None,
) -> DefragPlan:
    """Plan the migrations. Pure: the inputs are not changed (holds are copied)."""
    resource = args.resource_type
    node_list = sorted(nodes, key=lambda n: n.name)
    copied_holds = {
        name: [Hold(h.reservation, dict(h.remaining)) for h in hs]
        for name, hs in (holds or {}).items()
    }
    snapshot = Snapshot.build(
        node_list, (p for n in node_list for p in pods_by_node.get(n.name, ())), copied_holds
    )
    states = [snapshot[n.name] for n in node_list if n.allocatable.get(resource, 0.0) > 0]
    before = {s.name: s.utilization(resource) for s in states}
    frag_before = fragmentation(states, resource)
    sources, skipped = _sources(states, before, args, now)
    acted = len(sources) > args.number_of_nodes
    migrations: list[Migration] = []
    freed: list[str] = []
    not_migratable: dict[str, str] = {}
    if acted:
        planner = _Planner.over(snapshot, states, sources, args, copied_holds, storage)
        for source in sources:
            blocked = planner.unmovable(source)
            if blocked:
                not_migratable.update(blocked)
                key, why = next(iter(blocked.items()))
                skipped[source.name] = f"NotMigratable {key}: {why}"
                continue
            moved, reason = planner.drain(source)
            if reason is not None:
                skipped[source.name] = reason
                continue
            migrations.extend(moved)
            freed.append(source.name)
    return DefragPlan(
        migrations=tuple(migrations),
        source_nodes=tuple(s.name for s in sources),
        freed_nodes=tuple(freed),
        acted=acted,
        skipped=skipped,
        not_migratable=not_migratable,
        utilization_before=before,
        utilization_after={s.name: s.utilization(resource) for s in states},
        fragmentation_before=frag_before,
        fragmentation_after=fragmentation(states, resource),
    )


def _sources(
    states: Sequence[NodeState], before: Mapping[str, float], args: DefragArgs, now: float
) -> tuple[list[NodeState], dict[str, str]]:
    """The nodes below lowThresholds that may be emptied, in source order, and why the
    others below it may not (node -> Critical, CoolingDown, HoldsReservation)."""
    skipped: dict[str, str] = {}
    sources: list[NodeState] = []
    for state in states:
        if before[state.name] >= args.low_threshold:
            continue
        node = state.node
        if node.labels.get(CRITICAL_LABEL) == "true":
            skipped[state.name] = "Critical"
        elif _cooling(node, now, args.cool_down_seconds):
            skipped[state.name] = "CoolingDown"
        elif state.holds:
            skipped[state.name] = "HoldsReservation"
        else:
            sources.append(state)
    sources.sort(key=source_order(args.resource_type).key)
    return sources, skipped


def _signature(pod: Pod, resource: str) -> tuple[Any, ...]:
    """Everything the placement checks read from a pod except its name, uid and its
    request of ``resource``: two pods with one signature fit the same targets, the larger
    one no more often."""
    return (
        pod.namespace,
        tuple(sorted(pod.labels.items())),
        tuple(sorted((r, q) for r, q in pod.requests.items() if r != resource)),
        tuple(sorted(pod.node_selector.items())),
        pod.node_affinity,
        pod.anti_affinity,
        pod.tolerations,
    )


@dataclass(slots=True)
class _Planner:
    """One planning pass: the snapshot, the targets and what is known not to fit.

    Committed plan states only ever get fuller (targets gain pods and lose headroom, the
    target set shrinks), so a pod shape that found no target in a committed state never
    will later; ``unplaceable`` keeps the smallest such request per signature so that the
    many sources holding a replica of an unplaceable pod are rejected without a scan.
    """

    snapshot: Snapshot
    targets: Targets
    args: DefragArgs
    reservation_owners: Callable[[Pod], bool]
    storage: Storage = field(default_factory=Storage)
    unplaceable: dict[tuple[Any, ...], float] = field(default_factory=dict)

    @classmethod
    def over(
        cls,
        snapshot: Snapshot,
        states: Iterable[NodeState],
        sources: Sequence[NodeState],
        args: DefragArgs,
        holds: Mapping[str, list[Hold]],
        storage: Storage | None = None,
    ) -> _Planner:
        """A pass whose targets are the Ready, schedulable nodes that are not sources."""
        source_names = {s.name for s in sources}
        targets = Targets(
            (
                s
                for s in states
                if s.name not in source_names and s.node.ready and not s.node.unschedulable
            ),
            args,
        )
        all_holds = [h for hs in holds.values() for h in hs]
        return cls(
            snapshot,
            targets,
            args,
            lambda pod: any(h.reservation.owns(pod) for h in all_holds),
            storage or Storage(),
        )

    def _known_unplaceable(self, pod: Pod, sig: tuple[Any, ...] | None) -> bool:
        if sig is None or sig not in self.unplaceable:
            return False
        return pod.request(self.args.resource_type) >= self.unplaceable[sig]

    def _remember(self, pod: Pod, sig: tuple[Any, ...] | None) -> None:
        if sig is not None:
            need = pod.request(self.args.resource_type)
            self.unplaceable[sig] = min(need, self.unplaceable.get(sig, need))

    def unmovable(self, source: NodeState) -> dict[str, str]:
        """The pods that must leave ``source`` but may not move: pod -> reason, in pod order."""
        out: dict[str, str] = {}
        for pod in sorted(source.pods, key=lambda p: p.key):
            if not stays(pod):
                reason = why_not_migratable(pod, self.args, self.storage)
                if reason is not None:
                    out[pod.key] = reason
        return out

    def drain(self, source: NodeState) -> tuple[list[Migration], str | None]:
        """Place every pod that must leave ``source`` (all migratable: ``unmovable`` is
        asked first), or nothing: on the first pod that finds no target, undo this
        source's placements and say why."""
        args, targets, snapshot = self.args, self.targets, self.snapshot
        resource = args.resource_type
        movers = [p for p in source.pods if not stays(p)]
        movers.sort(key=pod_order(resource).key)
        sigs = [None if self.reservation_owners(p) else _signature(p, resource) for p in movers]
        for pod, sig in zip(movers, sigs, strict=True):
            if self._known_unplaceable(pod, sig):
                return [], f"NoTarget {pod.key}"
        placed: list[tuple[Pod, NodeState, list[tuple[Hold, dict[str, float]]]]] = []
        for pod, sig in zip(movers, sigs, strict=True):
            target = targets.find(pod)
            if target is None:
                for done, state, taken in reversed(placed):
                    old = targets.key_of(state)
                    snapshot.remove(done, state.name, taken)
                    targets.update(state, old)
                # Back at a committed state: learn whether the pod fits there at all.
                if not placed or targets.find(pod) is None:
                    self._remember(pod, sig)
                return [], f"NoTarget {pod.key}"
            old = targets.key_of(target)
            taken = snapshot.place(pod, target.name)
            targets.update(target, old)
            placed.append((pod, target, taken))
        for pod in movers:
            snapshot.remove(pod, source.name)
        return [Migration(pod, source.name, state.name) for pod, state, _ in placed], None


def fragmentation(states: Iterable[NodeState], resource: str) -> float:
    """Share of free capacity on Ready, schedulable nodes that sits on nodes whose free
    capacity is smaller than the median pod request of the resource."""
    states = [s for s in states if s.node.ready and not s.node.unschedulable]
    sizes = [q for s in states for p in s.pods if (q := p.request(resource)) > 0]
    if not sizes:
        return 0.0
    median = statistics.median(sizes)
    free_total = stranded = 0.0
    for s in states:
        held = sum(h.remaining.get(resource, 0.0) for h in s.holds)
        free = max(0.0, s.allocatable(resource) - s.used.get(resource, 0.0) - held)
        free_total += free
        if free + EPSILON < median:
            stranded += free
    return stranded / free_total if free_total > 0 else 0.0
