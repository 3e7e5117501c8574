"""Would this pod fit on that node? The scheduler's filters, as pure checks on a snapshot.

A planner (defragmentation, migration targets, preemption) builds a ``Snapshot`` once (pods
indexed by node, per-node used/allocatable vectors, reserved capacity), asks ``why_not``
for candidate nodes, and ``place``/``remove`` pods as its plan grows, so later checks see
earlier decisions. Checks, in the order they run (cheapest and most selective first):

1. every requested resource fits: used + reserved-for-others + request <= allocatable;
2. the optional protection threshold on one resource (percent of allocatable), with
   reserved-for-others counted as used;
3. the node's pod count (allocatable ``pods``);
4. ``nodeSelector``; 5. required node affinity (matchExpressions and matchFields);
6. taints: NoSchedule and NoExecute block unless tolerated, PreferNoSchedule does not;
7. required pod anti-affinity on ``kubernetes.io/hostname``, both directions: the pod's
   terms against the pods on the node, and the node's pods' terms against the pod.
   Terms on other topology keys (zones) are not checked here: they need the whole
   domain, and the planners only move pods between nodes.

A reservation's remaining capacity is free only for its owners; an owner placed on the
node consumes it (all of it, for allocateOnce reservations).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from agent.cluster.engine import slack
from agent.model.objects import HOSTNAME_LABEL, Node, Pod, PodAffinityTerm
from agent.model.reservation import Reservation

BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


@dataclass(slots=True)
class Hold:
    """Capacity a reservation still holds on a node; mutable so that a planner can let an
    owner consume it while the plan grows."""

    reservation: Reservation
    remaining: dict[str, float]

    def blocks(self, pod: Pod) -> bool:
        return not self.reservation.owns(pod)


def holds_by_node(reservations: Iterable[Reservation], now: float) -> dict[str, list[Hold]]:
    """Reserved capacity per node, from the reservations that hold some at ``now``
    (ordered by name so that owners consume them deterministically)."""
    out: dict[str, list[Hold]] = {}
    for res in sorted(reservations, key=lambda r: r.name):
        if not res.holds_capacity(now):
            continue
        remaining = {r: q for r, q in res.reserved().items() if q > 0}
        if remaining:
            out.setdefault(res.node_name, []).append(Hold(res, remaining))
    return out


@dataclass(slots=True)
class NodeState:
    """A node with what is bound to it in the snapshot. Mutable: planners update it."""

    node: Node
    used: dict[str, float] = field(default_factory=dict)
    pods: list[Pod] = field(default_factory=list)
    #: Pods on the node that carry required hostname anti-affinity terms.
    guarded: list[Pod] = field(default_factory=list)
    holds: list[Hold] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.node.name

    def allocatable(self, resource: str) -> float:
        return self.node.allocatable.get(resource, 0.0)

    def utilization(self, resource: str) -> float:
        """Requested share of allocatable, in percent (0 when the node has none)."""
        total = self.allocatable(resource)
        return 100.0 * self.used.get(resource, 0.0) / total if total > 0 else 0.0

    def add(self, pod: Pod) -> None:
        """Count ``pod`` on the node (its requests, its slot, its anti-affinity terms)."""
        _add(self, pod)

    def drop(self, pod: Pod) -> None:
        """Stop counting ``pod`` on the node (by identity)."""
        for r, q in pod.requests.items():
            self.used[r] = self.used.get(r, 0.0) - q
        _drop(self.pods, pod)
        _drop(self.guarded, pod)

    def blocked_for(self, pod: Pod) -> dict[str, float]:
        """Capacity held by reservations this pod does not own."""
        out: dict[str, float] = {}
        for hold in self.holds:
            if hold.blocks(pod):
                for r, q in hold.remaining.items():
                    out[r] = out.get(r, 0.0) + q
        return out


def hostname_terms(pod: Pod) -> tuple[PodAffinityTerm, ...]:
    return tuple(t for t in pod.anti_affinity if t.topology_key == HOSTNAME_LABEL)


def term_selects(term: PodAffinityTerm, owner_namespace: str, other: Pod) -> bool:
    """A required anti-affinity term of a pod in ``owner_namespace`` selects ``other``."""
    return _term_selects(term, owner_namespace, other)


def _term_selects(term: PodAffinityTerm, owner_namespace: str, other: Pod) -> bool:
    namespaces = term.namespaces or (owner_namespace,)
    return other.namespace in namespaces and term.selector.matches(other.labels)


class Snapshot:
    """Per-node state for a set of nodes, built once from pods indexed by node."""

    def __init__(self, states: dict[str, NodeState]) -> None:
        self.states = states

    @classmethod
    def build(
        cls,
        nodes: Iterable[Node],
        pods: Iterable[Pod],
        holds: Mapping[str, list[Hold]] | None = None,
    ) -> Snapshot:
        """Active pods (bound, not finished) count on their node; pods bound to unknown
        nodes are ignored."""
        states = {n.name: NodeState(n) for n in nodes}
        for pod in pods:
            if not pod.is_active:
                continue
            state = states.get(pod.node_name)
            if state is not None:
                _add(state, pod)
        for name, node_holds in (holds or {}).items():
            state = states.get(name)
            if state is not None:
                state.holds = list(node_holds)
        return cls(states)

    def __getitem__(self, name: str) -> NodeState:
        return self.states[name]

    def place(self, pod: Pod, name: str) -> list[tuple[Hold, dict[str, float]]]:
        """Bind pod to node ``name`` in the snapshot. Returns what it took from
        reservations, for ``remove`` to give back."""
        state = self.states[name]
        _add(state, pod)
        taken: list[tuple[Hold, dict[str, float]]] = []
        for hold in state.holds:
            if hold.blocks(pod):
                continue
            before = dict(hold.remaining)
            touched = False
            for r, q in pod.requests.items():
                have = hold.remaining.get(r, 0.0)
                if q > 0 and have > 0:
                    hold.remaining[r] = max(0.0, have - q)
                    touched = True
            if touched and hold.reservation.allocate_once:
                hold.remaining = {}
            if hold.remaining != before:
                taken.append((hold, before))
        return taken

    def remove(
        self, pod: Pod, name: str, taken: Iterable[tuple[Hold, dict[str, float]]] = ()
    ) -> None:
        """Unbind pod from node ``name`` (undoing ``place`` when given its result)."""
        self.states[name].drop(pod)
        for hold, before in taken:
            hold.remaining = before


def _drop(pods: list[Pod], pod: Pod) -> None:
    """Remove by identity (dataclass equality would compare every field)."""
    for i, other in enumerate(pods):
        if other is pod:
            del pods[i]
            return


def _add(state: NodeState, pod: Pod) -> None:
    used = state.used
    for r, q in pod.requests.items():
        used[r] = used.get(r, 0.0) + q
    state.pods.append(pod)
    if pod.anti_affinity and hostname_terms(pod):
        state.guarded.append(pod)


# -- the checks --------------------------------------------------------------------------


#: The key of ``shortfall`` for missing pod slots.
POD_SLOTS = "pods"


def shortfall(
    pod: Pod,
    state: NodeState,
    without: Iterable[Pod] = (),
    blocked: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """What is missing for ``pod`` to fit on the node once the pods ``without`` are gone:
    per requested resource, used + reserved-for-others + request - freed - allocatable where
    that is above the float slack of allocatable, and ``pods`` = the slots missing. Empty
    when the resources and the pod count allow it. The one reading of "fits" of the
    planners: queue and DaemonSet preemption ask it with their victims, ``why_not`` without."""
    if blocked is None:
        blocked = state.blocked_for(pod) if state.holds else {}
    freed: dict[str, float] = {}
    gone = 0
    for victim in without:
        gone += 1
        for r, q in victim.requests.items():
            freed[r] = freed.get(r, 0.0) + q
    short: dict[str, float] = {}
    for r, q in pod.requests.items():
        gap = _over(state, blocked, r, q, freed.get(r, 0.0))
        if gap is not None:
            short[r] = gap
    slots = len(state.pods) - gone + 1 - state.node.max_pods
    if slots > 0:
        short[POD_SLOTS] = slots
    return short


def _over(
    state: NodeState, blocked: Mapping[str, float], resource: str, request: float, freed: float = 0.0
) -> float | None:
    """How far a pod's ``request`` of ``resource`` takes the node above its allocatable
    (reserved-for-others counted as used, ``freed`` taken off), or None when it stays
    within (float slack); a resource the pod does not request never blocks it."""
    if request <= 0:
        return None
    total = state.node.allocatable.get(resource, 0.0)
    gap = state.used.get(resource, 0.0) + blocked.get(resource, 0.0) + request - freed - total
    return gap if gap > slack(total) else None


def resources_reason(pod: Pod, state: NodeState, blocked: Mapping[str, float]) -> str | None:
    """The first requested resource that does not fit (``shortfall``'s rule, no dict built:
    defrag asks it for thousands of nodes)."""
    for r, q in pod.requests.items():
        if _over(state, blocked, r, q) is not None:
            return f"Insufficient {r}"
    return None


def threshold_reason(
    pod: Pod, state: NodeState, blocked: Mapping[str, float], resource: str, percent: float
) -> str | None:
    total = state.allocatable(resource)
    after = state.used.get(resource, 0.0) + blocked.get(resource, 0.0) + pod.request(resource)
    if after > total * percent / 100.0 + slack(total):
        return f"ProtectionThreshold {resource}"
    return None


def pod_count_reason(state: NodeState) -> str | None:
    return "TooManyPods" if len(state.pods) + 1 > state.node.max_pods else None


def node_selector_reason(pod: Pod, node: Node) -> str | None:
    labels = node.labels
    for key, value in pod.node_selector.items():
        if labels.get(key) != value:
            return "NodeSelector"
    return None


def node_affinity_reason(pod: Pod, node: Node) -> str | None:
    if pod.node_affinity is not None and not pod.node_affinity.matches(node.name, node.labels):
        return "NodeAffinity"
    return None


def taints_reason(pod: Pod, node: Node) -> str | None:
    for taint in node.taints:
        if taint.effect not in BLOCKING_EFFECTS:
            continue
        if not any(t.tolerates(taint) for t in pod.tolerations):
            return f"Taint {taint.key}"
    return None


def anti_affinity_reason(pod: Pod, state: NodeState) -> str | None:
    terms = hostname_terms(pod) if pod.anti_affinity else ()
    if terms:
        for other in state.pods:
            if other.uid != pod.uid and any(_term_selects(t, pod.namespace, other) for t in terms):
                return "PodAntiAffinity"
    for other in state.guarded:
        if other.uid == pod.uid:
            continue
        if any(_term_selects(t, other.namespace, pod) for t in hostname_terms(other)):
            return "PodAntiAffinity"
    return None


def static_reason(pod: Pod, node: Node) -> str | None:
    """The checks that depend only on the pod and the node, not on what runs there."""
    return (
        node_selector_reason(pod, node)
        or node_affinity_reason(pod, node)
        or taints_reason(pod, node)
    )


def why_not(
    pod: Pod,
    state: NodeState,
    threshold: tuple[str, float] | None = None,
) -> str | None:
    """None when ``pod`` may be placed on the node, else the first failing check's reason.
    ``threshold`` = (resource, percent) that the node must stay at or below afterwards."""
    blocked = state.blocked_for(pod) if state.holds else {}
    reason = resources_reason(pod, state, blocked)
    if reason is None and threshold is not None:
        reason = threshold_reason(pod, state, blocked, threshold[0], threshold[1])
    return (
        reason
        or pod_count_reason(state)
        or static_reason(pod, state.node)
        or anti_affinity_reason(pod, state)
    )


def fits(pod: Pod, state: NodeState, threshold: tuple[str, float] | None = None) -> bool:
    return why_not(pod, state, threshold) is None
