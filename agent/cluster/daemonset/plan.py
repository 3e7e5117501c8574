"""The DaemonSet preemption plan: pending DaemonSet pods that do not fit their node, the
victim classes and order, and the strategies (the rules are in the package docstring)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from agent.cluster.daemonset.args import MULTIPLE, SINGLE, DaemonSetArgs
from agent.cluster.engine import EPSILON
from agent.cluster.placement import NodeState, anti_affinity_reason, shortfall, static_reason
from agent.model.objects import Node, Pod
from agent.model.ordering import By, Order, ordered_by
from agent.model.store import ObjectStore

#: A terminating pod is on its way out until this long past its deletion deadline
#: (``deletionTimestamp``: the end of its grace period); later it is stuck (a finalizer,
#: an unreachable kubelet) and holds its room like any pod.
LEAVING_SECONDS = 60.0

OPT_OUT_LABEL = "qos.waterline.io/allow-preemption"

#: Victim classes, least protected first.
REGULAR = 0
OWNER = 1  # other pods name this pod as their owner
OPTED_OUT = 2  # labelled qos.waterline.io/allow-preemption: "false" (wins over OWNER)
CLASS_NAMES = ("regular", "owner", "opted-out")


# -- the node snapshot -------------------------------------------------------------------
class NodeRoom:
    """A node's allocatable against the requests of its active pods (a placement
    ``NodeState``: "fits" is read the way every planner reads it); updated as the plan
    evicts victims and places DaemonSet pods."""

    __slots__ = ("state",)

    def __init__(self, node: Node, pods: Iterable[Pod]) -> None:
        self.state = NodeState(node)
        for pod in pods:
            self.state.add(pod)

    @property
    def node(self) -> Node:
        return self.state.node

    @property
    def pods(self) -> list[Pod]:
        return self.state.pods

    def shortfall(self, pod: Pod, without: Iterable[Pod] = ()) -> dict[str, float]:
        """What is missing for ``pod`` to fit once ``without`` are gone (``pods`` = slots)."""
        return shortfall(pod, self.state, without)

    def blocked(self, pod: Pod) -> str | None:
        """Why no victim can make room for ``pod`` here: a pod the scheduler places (bound
        by node affinity, not by ``spec.nodeName``) must also pass the node's selector,
        affinity, taints and hostname anti-affinity, which evicting pods for it does not
        change (anti-affinity aside: the planners never evict to satisfy it)."""
        if pod.node_name:
            return None  # bound by name: the scheduler's filters do not run for it
        return static_reason(pod, self.state.node) or anti_affinity_reason(pod, self.state)

    def leaving(self, now: float) -> list[Pod]:
        """Terminating pods still within ``LEAVING_SECONDS`` of their deletion deadline."""
        return [p for p in self.state.pods
                if p.deletion_time is not None and now - p.deletion_time <= LEAVING_SECONDS]  # fmt: skip

    def remove(self, victims: Iterable[Pod]) -> None:
        gone = {v.uid for v in victims}
        for pod in [p for p in self.state.pods if p.uid in gone]:
            self.state.drop(pod)

    def place(self, pod: Pod) -> None:
        self.state.add(pod)


# -- victims: who may go, and in which order --------------------------------------------
def owner_uids(pods: Iterable[Pod]) -> frozenset[str]:
    """Uids (and namespace/name, for owner references without uid) of pods that other pods
    name as owner."""
    out: set[str] = set()
    for pod in pods:
        for ref in pod.owners:
            if ref.kind == "Pod":
                if ref.uid:
                    out.add(ref.uid)
                out.add(f"{pod.namespace}/{ref.name}")
    return frozenset(out)


def victim_class(pod: Pod, owners: frozenset[str]) -> int:
    if pod.labels.get(OPT_OUT_LABEL) == "false":
        return OPTED_OUT
    if pod.uid in owners or pod.key in owners:
        return OWNER
    return REGULAR


def may_preempt(victim: Pod, ds_pod: Pod) -> bool:
    """Never victims: DaemonSet pods, mirror pods, pods of higher priority, terminating pods."""
    return not (
        victim.is_daemonset
        or victim.is_mirror
        or victim.priority > ds_pod.priority
        or victim.is_terminating
    )


def dominant_resource(ds_pod: Pod, node: Node) -> str | None:
    """The DaemonSet pod's largest request relative to the node's allocatable."""
    best: tuple[float, str] | None = None
    for r, q in sorted(ds_pod.requests.items()):
        if q <= 0:
            continue
        alloc = node.allocatable.get(r, 0.0)
        ratio = q / alloc if alloc > 0 else math.inf
        if best is None or ratio > best[0]:
            best = (ratio, r)
    return best[1] if best else None


def deviation(victim: Pod, ds_pod: Pod) -> float:
    """Largest |victim - daemonset| / daemonset over the resources the DaemonSet pod requests."""
    return max(
        (abs(victim.request(r) - q) / q for r, q in ds_pod.requests.items() if q > 0),
        default=0.0,
    )


@dataclass(frozen=True, slots=True)
class Victim:
    pod: Pod
    klass: int
    dominant: float  # request of the DaemonSet pod's dominant resource


#: Inside the class order: class, lower priority, younger, smaller request of the dominant
#: resource, then namespace/name so the order is total.
CLASS_ORDER: Order[Victim] = ordered_by(
    By("class", lambda v: v.klass),
    By("lower priority", lambda v: v.pod.priority),
    By("younger", lambda v: -(v.pod.creation_time if v.pod.creation_time is not None else -math.inf)),
    By("smaller dominant request", lambda v: v.dominant),
    By("namespace/name", lambda v: v.pod.key),
)
class_order_key = CLASS_ORDER.key


# -- strategies ------------------------------------------------------------------------------
def _single(
    room: NodeRoom, ds_pod: Pod, victims: Sequence[Victim], args: DaemonSetArgs
) -> list[Pod] | None:
    """One victim within deviationPercent on every resource the DaemonSet pod requests,
    whose removal makes it fit; closest first, ties by the class order."""
    limit = args.deviation_percent / 100.0 + EPSILON
    fitting = [
        (deviation(v.pod, ds_pod), class_order_key(v), v)
        for v in victims
        if deviation(v.pod, ds_pod) <= limit and not room.shortfall(ds_pod, (v.pod,))
    ]
    if not fitting:
        return None
    # deviations equal to 1e-9 are ties (0.95 and 1.05 against 1 differ only by float noise)
    fitting.sort(key=lambda t: (round(t[0], 9), t[1]))
    return [fitting[0][2].pod]


def _multiple(
    room: NodeRoom, ds_pod: Pod, victims: Sequence[Victim], args: DaemonSetArgs
) -> list[Pod] | None:
    """Class 1, then classes 1+2, then all: largest dominant request first until the pod
    fits, at most maxVictims."""
    for tier in (REGULAR, OWNER, OPTED_OUT):
        pool = sorted(
            (v for v in victims if v.klass <= tier), key=lambda v: (-v.dominant, class_order_key(v))
        )
        chosen: list[Pod] = []
        short = room.shortfall(ds_pod)
        for v in pool:
            if len(chosen) == args.max_victims:
                break
            if not any(r == "pods" or v.pod.request(r) > 0 for r in short):
                continue
            chosen.append(v.pod)
            short = room.shortfall(ds_pod, chosen)
            if not short:
                return chosen
    return None


STRATEGY_FNS: Mapping[
    str, Callable[[NodeRoom, Pod, Sequence[Victim], DaemonSetArgs], list[Pod] | None]
] = {
    SINGLE: _single,
    MULTIPLE: _multiple,
}


@dataclass(frozen=True, slots=True)
class Preemption:
    pod: str
    node: str
    strategy: str | None
    victims: tuple[str, ...]


def plan_pod(
    room: NodeRoom, ds_pod: Pod, owners: frozenset[str], args: DaemonSetArgs
) -> tuple[str | None, list[Pod]]:
    """The strategy that found victims and the victims, or (None, []) when none did."""
    dominant = dominant_resource(ds_pod, room.node)
    victims = [
        Victim(p, victim_class(p, owners), p.request(dominant) if dominant else 0.0)
        for p in room.pods
        if may_preempt(p, ds_pod)
    ]
    for name in args.strategy:
        chosen = STRATEGY_FNS[name](room, ds_pod, victims, args)
        if chosen:
            return name, chosen
    return None, []


# -- pending DaemonSet pods ------------------------------------------------------------------
def required_node(pod: Pod) -> str | None:
    if pod.node_name:
        return pod.node_name
    if pod.node_affinity is not None:
        names = pod.node_affinity.required_node_names()
        if names is not None and len(names) == 1:
            return next(iter(names))
    return None


def pending_daemonset_pods(pods: Iterable[Pod], nodes: Mapping[str, Node]) -> list[tuple[Pod, str]]:
    """Pending DaemonSet pods bound to a known node, oldest first."""
    out = []
    for pod in pods:
        if not pod.is_daemonset or pod.phase != "Pending" or pod.is_terminating:
            continue
        node = required_node(pod)
        if node is not None and node in nodes:
            out.append((pod, node))
    out.sort(
        key=lambda t: (
            t[0].creation_time if t[0].creation_time is not None else -math.inf,
            t[0].key,
        )
    )
    return out


def past_delay(pod: Pod, now: float, delay: float) -> bool:
    return pod.creation_time is None or now - pod.creation_time > delay


@dataclass(frozen=True, slots=True)
class DaemonSetPlan:
    #: One entry per pending DaemonSet pod past the delay that does not fit its node.
    preemptions: tuple[Preemption, ...] = ()
    #: Keys of every pending DaemonSet pod bound to a known node (past the delay or not).
    pending: tuple[str, ...] = ()

    @property
    def victims(self) -> tuple[str, ...]:
        return tuple(v for p in self.preemptions for v in p.victims)


def plan(snapshot: ObjectStore, args: DaemonSetArgs, now: float) -> DaemonSetPlan:
    return decide(snapshot.nodes, snapshot.pods, now, args)


def decide(
    nodes: Mapping[str, Node], pods: Sequence[Pod], now: float, args: DaemonSetArgs | None = None
) -> DaemonSetPlan:
    """One Preemption per pending DaemonSet pod past the delay that does not fit its node,
    served oldest first on a snapshot updated as victims go and DaemonSet pods land."""
    args = args or DaemonSetArgs()
    pending = pending_daemonset_pods(pods, nodes)
    if not pending:
        return DaemonSetPlan()
    rooms = _Rooms(nodes, pods, {p.uid for p, _ in pending})
    owners = owner_uids(pods)
    out: list[Preemption] = []
    for pod, node_name in pending:
        if not past_delay(pod, now, args.preemption_start_delay):
            continue
        room = rooms[node_name]
        blocked = room.blocked(pod)
        if blocked is None and not room.shortfall(pod):
            room.place(pod)  # it fits: the scheduler will place it, later pods see it there
            continue
        leaving = room.leaving(now) if blocked is None else []
        if leaving and not room.shortfall(pod, without=leaving):
            # Its room is on the way (the victims of an earlier round, terminating): no new
            # victims, as the scheduler's own preemption waits for its victims. Counting
            # them as present evicted a second pod for one DaemonSet pod in a CI run.
            room.remove(leaving)
            room.place(pod)
            continue
        strategy, victims = plan_pod(room, pod, owners, args) if blocked is None else (None, [])
        if strategy is not None:
            room.remove(victims)
            room.place(pod)
        out.append(Preemption(pod.key, node_name, strategy, tuple(v.key for v in victims)))
    return DaemonSetPlan(tuple(out), tuple(p.key for p, _ in pending))


class _Rooms:
    """A NodeRoom per node, built on first use from the node's active pods (the pending
    DaemonSet pods left out: they are placed as the plan serves them)."""

    def __init__(self, nodes: Mapping[str, Node], pods: Iterable[Pod], waiting: set[str]) -> None:
        self.nodes = nodes
        self.active: dict[str, list[Pod]] = {}
        for pod in pods:
            if pod.is_active and pod.node_name in nodes and pod.uid not in waiting:
                self.active.setdefault(pod.node_name, []).append(pod)
        self.rooms: dict[str, NodeRoom] = {}

    def __getitem__(self, name: str) -> NodeRoom:
        room = self.rooms.get(name)
        if room is None:
            room = self.rooms[name] = NodeRoom(self.nodes[name], list(self.active.get(name, [])))
        return room
