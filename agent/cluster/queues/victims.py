"""Who may be a victim of queue preemption, in which order, and what the plan has already
taken: donor queues' headroom and the disruption budgets, shared by every pod the plan
makes room for.

Victim order, cheapest first (the order users already express, in the order they
express it): lower priority; then lower ``controller.kubernetes.io/pod-deletion-cost``
(what a ReplicaSet scales down first); then lower ``scheduling.koordinator.sh/eviction-cost``
(koordinator's eviction order); then shorter running time; then namespace/name. A cost
that is not an integer reads as 0 (as the ReplicaSet controller reads it), and is named
(``unreadable_costs``: the plan's ``unreadable_costs``, a Warning Event from the controller). Never a
victim: a pod whose ``volcano.sh/preemptable`` annotation (else label) is not a true
boolean (``preemptable``), a terminating pod, a pod
whose eviction a PodDisruptionBudget forbids now (counting the victims the plan took
before it), a pod that alone would take its queue below deserved.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from agent.cluster.engine import slack
from agent.cluster.queues.shares import QueueUsage
from agent.model.objects import Pod, PodDisruptionBudget, budget_status
from agent.model.ordering import By, Order, ordered_by
from agent.model.queue import Queue

PREEMPTABLE_ANNOTATION = "volcano.sh/preemptable"
DELETION_COST_ANNOTATION = "controller.kubernetes.io/pod-deletion-cost"
EVICTION_COST_ANNOTATION = "scheduling.koordinator.sh/eviction-cost"


COST_ANNOTATIONS = (DELETION_COST_ANNOTATION, EVICTION_COST_ANNOTATION)
#: Why a pod's cost annotation is not used (``unreadable_costs``; the controller's Warning
#: Event reason).
UNREADABLE_COST = "UnreadableCost"


def _integer(raw: str) -> int | None:
    try:
        return int(raw)
    except ValueError:
        return None


def cost(pod: Pod, annotation: str) -> int:
    """An integer cost annotation; absent or unreadable reads as 0."""
    raw = pod.annotations.get(annotation)
    value = _integer(raw) if raw is not None else 0
    return 0 if value is None else value


def unreadable_costs(pods: Iterable[Pod]) -> dict[str, dict[str, str]]:
    """The pods (key -> annotation -> its value) whose cost annotation is not an integer:
    read as 0 (``cost``), which puts the pod among the cheapest victims, the opposite of
    what a user who wrote a cost there most likely meant; so it is named, not ignored."""
    out: dict[str, dict[str, str]] = {}
    for pod in pods:
        annotations = pod.annotations
        if not annotations:
            continue
        for annotation in COST_ANNOTATIONS:
            raw = annotations.get(annotation)
            if raw is not None and _integer(raw) is None:
                out.setdefault(pod.key, {})[annotation] = raw
    return out


@dataclass(frozen=True, slots=True)
class VictimCandidate:
    pod: Pod
    queue: str
    priority: int
    deletion_cost: int
    eviction_cost: int
    running: float
    #: Its victim-order key (``VICTIM_ORDER``), kept: plans compare sets by it.
    rank: tuple[object, ...] = ()
    #: The keys of the PodDisruptionBudgets that cover it (``Budgets.covering``), kept:
    #: every allowed check of every set it is in reads them.
    budgets: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return self.pod.key


#: The order victims are considered in, cheapest first.
VICTIM_ORDER: Order[VictimCandidate] = ordered_by(
    By("lower priority", lambda c: c.priority),
    By("lower pod-deletion-cost", lambda c: c.deletion_cost),
    By("lower eviction-cost", lambda c: c.eviction_cost),
    By("shorter running time", lambda c: c.running),
    By("namespace/name", lambda c: c.key),
)
victim_sort_key = VICTIM_ORDER.key


#: The spellings Go's strconv.ParseBool takes, as Volcano reads ``volcano.sh/preemptable``.
_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})


def preemptable(pod: Pod) -> bool:
    """``volcano.sh/preemptable`` read as Volcano reads it: the annotation, else the label;
    any spelling of false, and a value that is not a boolean at all, mean never a victim
    (the cautious reading: a user who wrote something there meant to protect the pod)."""
    for source in (pod.annotations, pod.labels):
        value = source.get(PREEMPTABLE_ANNOTATION)
        if value is not None:
            return value in _TRUE
    return True


def may_be_victim(pod: Pod) -> bool:
    return not pod.is_terminating and preemptable(pod)


def candidates_by_node(
    queues: Sequence[Queue],
    usage: Mapping[str, QueueUsage],
    donors: Mapping[str, object],
    now: float,
    covering: Callable[[Pod], Sequence[str]],
) -> dict[str, list[VictimCandidate]]:
    """The running pods of donor queues that may be victims, per node, in victim order;
    ``covering``: the keys of the budgets that cover a pod."""
    out: dict[str, list[VictimCandidate]] = {}
    for q in queues:
        if q.name not in donors:
            continue
        for pod in usage[q.name].running:
            if not may_be_victim(pod):
                continue
            c = VictimCandidate(
                pod,
                q.name,
                pod.priority,
                cost(pod, DELETION_COST_ANNOTATION),
                cost(pod, EVICTION_COST_ANNOTATION),
                pod.running_seconds(now),
                budgets=tuple(covering(pod)),
            )
            # its rank is a function of the fields above: set once here, where a
            # ``dataclasses.replace`` per candidate made each one twice (40,000 at 5,000 nodes)
            object.__setattr__(c, "rank", victim_sort_key(c))
            out.setdefault(pod.node_name, []).append(c)
    for cands in out.values():
        cands.sort(key=_rank)
    return out


def _rank(c: VictimCandidate) -> tuple[object, ...]:
    return c.rank


class Headroom:
    """Per donor queue: how much it may still lose per resource (allocated - deserved,
    never below zero), as the plan takes victims from it."""

    def __init__(
        self,
        queues: Sequence[Queue],
        usage: Mapping[str, QueueUsage],
        shares: Mapping[str, Mapping[str, float]],
    ) -> None:
        self.left: dict[str, dict[str, float]] = {}
        for q in queues:
            if not q.reclaimable:
                continue
            u, d = usage[q.name], shares[q.name]
            room = {r: max(0.0, u.allocated.get(r, 0.0) - d.get(r, 0.0)) for r in d}
            if any(x > slack(x) for x in room.values()):
                self.left[q.name] = room

    def allows(self, taken: Iterable[VictimCandidate], resources: Sequence[str]) -> bool:
        """Taking all of ``taken`` keeps each of their queues at or above deserved in each of
        ``resources`` (the resources being reclaimed)."""
        per: dict[str, dict[str, float]] = {}
        for c in taken:
            sums = per.setdefault(c.queue, {})
            for r in resources:
                sums[r] = sums.get(r, 0.0) + c.pod.request(r)
        for queue, sums in per.items():
            left = self.left[queue]
            for r, amount in sums.items():
                room = left.get(r, 0.0)
                if amount > room + slack(room):
                    return False
        return True

    def allows_one(self, c: VictimCandidate, resources: Sequence[str]) -> bool:
        """``allows([c], resources)``, without its sums: the plan asks it of every candidate
        of every node it looks at."""
        left, requests = self.left[c.queue], c.pod.requests
        for r in resources:
            room = left.get(r, 0.0)
            if requests.get(r, 0.0) > room + slack(room):
                return False
        return True

    def take(self, victims: Iterable[VictimCandidate]) -> None:
        for c in victims:
            left = self.left[c.queue]
            for r, q in c.pod.requests.items():
                if r in left:
                    left[r] -= q


class Budgets:
    """The disruptions each PodDisruptionBudget still allows, as the plan takes victims
    (the Eviction API would refuse the one past it, and the scheduler skips such victims)."""

    def __init__(self, pdbs: Sequence[PodDisruptionBudget], pods: Sequence[Pod]) -> None:
        self.pdbs = list(pdbs)
        selected: dict[str, list[Pod]] = {p.key: [] for p in self.pdbs}
        self.index = {ns: _BudgetIndex(budgets) for ns, budgets in _by_namespace(self.pdbs).items()}
        #: The keys of the budgets covering each pod (by uid), found once here.
        self._covering: dict[str, Sequence[str]] = {}
        if self.index:
            for pod in pods:
                index = self.index.get(pod.namespace)
                if index is not None:
                    found = index.selecting(pod)
                    for pdb in found:
                        selected[pdb.key].append(pod)
                    self._covering.setdefault(pod.uid, [pdb.key for pdb in found] if found else ())
        self.allowed = {p.key: budget_status(p, selected[p.key]).allowed for p in self.pdbs}

    def covering(self, pod: Pod) -> Sequence[str]:
        known = self._covering.get(pod.uid)
        if known is None:
            index = self.index.get(pod.namespace)
            if index is None:
                return ()
            known = self._covering[pod.uid] = [p.key for p in index.selecting(pod)]
        return known

    def allows(self, taken: Iterable[VictimCandidate]) -> bool:
        if not self.pdbs:
            return True
        count: dict[str, int] = {}
        for c in taken:
            for key in c.budgets:
                count[key] = count.get(key, 0) + 1
        return all(n <= self.allowed[key] for key, n in count.items())

    def allows_one(self, c: VictimCandidate) -> bool:
        """``allows([c])``: every budget that covers it allows one more disruption."""
        if not c.budgets:
            return True
        allowed = self.allowed
        return all(allowed[key] >= 1 for key in c.budgets)

    def take(self, victims: Iterable[VictimCandidate]) -> None:
        for c in victims:
            for key in c.budgets:
                self.allowed[key] -= 1


def _by_namespace(pdbs: Sequence[PodDisruptionBudget]) -> dict[str, list[PodDisruptionBudget]]:
    out: dict[str, list[PodDisruptionBudget]] = {}
    for pdb in pdbs:
        out.setdefault(pdb.namespace, []).append(pdb)
    return out


class _BudgetIndex:
    """A namespace's budgets, filed by the first of their ``matchLabels`` (a pod without
    that label value is not selected, so only the budgets filed under its own labels, and
    those with no ``matchLabels``, are asked): a namespace of twenty budgets asks one or
    two per pod instead of twenty."""

    def __init__(self, budgets: Sequence[PodDisruptionBudget]) -> None:
        self.order = {id(pdb): i for i, pdb in enumerate(budgets)}
        self.filed: dict[tuple[str, str], list[PodDisruptionBudget]] = {}
        self.unfiled: list[PodDisruptionBudget] = []
        for pdb in budgets:
            if pdb.selector.match_labels:
                self.filed.setdefault(pdb.selector.match_labels[0], []).append(pdb)
            else:
                self.unfiled.append(pdb)

    def selecting(self, pod: Pod) -> list[PodDisruptionBudget]:
        """The budgets that select ``pod``, in the namespace's order."""
        found = [pdb for pdb in self.unfiled if pdb.selects(pod)] if self.unfiled else []
        filed = self.filed
        for label in pod.labels.items():
            budgets = filed.get(label)
            if budgets is not None:
                found.extend(pdb for pdb in budgets if pdb.selects(pod))
        if len(found) > 1:
            found.sort(key=lambda pdb: self.order[id(pdb)])
        return found


class Taking:
    """A growing victim set that stays allowed: ``fits(c)`` is ``allows(taken + [c])`` of
    both the headroom and the budgets, asked in the time of one candidate (the set taken
    so far was allowed, so only ``c``'s queue and budgets can break; the sums are added
    in the same order as ``allows`` adds them, so they are the same floats)."""

    def __init__(self, headroom: Headroom, budgets: Budgets, resources: Sequence[str]) -> None:
        self.headroom, self.budgets, self.resources = headroom, budgets, resources
        self.sums: dict[str, dict[str, float]] = {}
        self.counts: dict[str, int] = {}

    def fits(self, c: VictimCandidate) -> bool:
        sums = self.sums.get(c.queue, {})
        left = self.headroom.left[c.queue]
        for r in self.resources:
            room = left.get(r, 0.0)
            if sums.get(r, 0.0) + c.pod.request(r) > room + slack(room):
                return False
        if c.budgets:
            allowed = self.budgets.allowed
            for key in c.budgets:
                if self.counts.get(key, 0) + 1 > allowed[key]:
                    return False
        return True

    def add(self, c: VictimCandidate) -> None:
        sums = self.sums.setdefault(c.queue, {})
        for r in self.resources:
            sums[r] = sums.get(r, 0.0) + c.pod.request(r)
        for key in c.budgets:
            self.counts[key] = self.counts.get(key, 0) + 1
