"""Fit-aware reclaim: for each pending pod of a starving queue, the node where the fewest,
cheapest victims make it fit, or why there is none (the rules are in the package
docstring).

A plan is a walk over the pending pods on a placement snapshot (``agent.cluster.placement``,
the one reading of "fits" that defrag and DaemonSet preemption use too) that the walk
updates as it goes: victims leave their node, the pod lands on it, donor queues' headroom
and the disruption budgets shrink. Two memos keep it linear in practice at thousands of
nodes: pods of the same shape (requests, scheduling constraints, labels) reuse the nodes
found for the previous one, and only nodes the plan changed since are looked at again.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from agent.cluster.engine import slack
from agent.cluster.placement import (
    POD_SLOTS,
    NodeState,
    Snapshot,
    anti_affinity_reason,
    hostname_terms,
    shortfall,
    static_reason,
    term_selects,
    why_not,
)
from agent.cluster.queues.args import QueueArgs
from agent.cluster.queues.shares import QueueUsage
from agent.cluster.queues.victims import (
    Budgets,
    Headroom,
    Taking,
    VictimCandidate,
    candidates_by_node,
)
from agent.model.objects import PREEMPT_NEVER, Node, Pod, PodDisruptionBudget
from agent.model.ordering import By, Order, ordered_by
from agent.model.queue import Queue

#: Reasons a pending pod gets no victims.
NEVER = "PreemptionPolicyNever"
ABOVE_DESERVED = "AboveDeserved"
NO_NODE = "NoNodeFits"
LEAVING = "VictimsLeaving"
#: A node's reason (counted in ``NoNodeFits``) when queue pods hold the room the pod lacks
#: there but none of them may go (``volcano.sh/preemptable: "false"``, their queue at
#: deserved, not reclaimable, a disruption budget, terminating, the pod's own queue): said
#: apart from ``Insufficient <resource>`` (the node too small even with them gone), since
#: the remedy differs (the victims' protection, not the pod's size).
NO_ALLOWED_VICTIMS = "no allowed victims for"

#: The order a starving queue's pending pods are served in: higher priority, older, name.
PENDING_ORDER: Order[Pod] = ordered_by(
    By("higher priority", lambda p: -p.priority),
    By("older", lambda p: p.creation_time if p.creation_time is not None else -math.inf),
    By("namespace/name", lambda p: p.key),
)


@dataclass(frozen=True, slots=True)
class Reclaim:
    """A pending pod, the node its room is made on and the victims evicted there for it
    (the room is held by a placeholder nominated there until it is all free, then the pod
    is nominated and the placeholder deleted: ``holding.py``)."""

    pod: str
    node: str
    #: Keys of the victims, in victim order.
    victims: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Reclaimed:
    #: Pods placed by evicting victims, in the order they were served.
    reclaims: tuple[Reclaim, ...] = ()
    #: Pods that fit somewhere without a victim (the scheduler places them; no nomination).
    fits_now: tuple[str, ...] = ()
    #: Pods served that got no victims, with the reason.
    unplaced: Mapping[str, str] = field(default_factory=dict)
    #: True when every node's victim set was proven the fewest-then-cheapest.
    exact: bool = True


def pending_by_queue(
    starving: Sequence[str], usage: Mapping[str, QueueUsage]
) -> dict[str, list[Pod]]:
    """The pending pods of each starving queue, in the order they are served."""
    return {q: PENDING_ORDER.sort(usage[q].waiting) for q in starving}


def usable_snapshot(nodes: Iterable[Node], pods: Iterable[Pod]) -> Snapshot:
    """The placement snapshot of the nodes a pending pod may go to (Ready, schedulable),
    by name."""
    usable = sorted((n for n in nodes if n.ready and not n.unschedulable), key=lambda n: n.name)
    return Snapshot.build(usable, pods)


def _shape(pod: Pod, labelled: bool) -> object:
    """What decides where a pod fits, as a hashable key (the pod itself when a part of it
    does not hash: no memo for it). Its namespace and labels count only when a hostname
    anti-affinity term of some pod selects it (``labelled``): only those read them."""
    key = (
        tuple(sorted(pod.requests.items())),
        tuple(sorted(pod.node_selector.items())),
        pod.node_affinity,
        pod.tolerations,
        pod.anti_affinity,
        (pod.namespace, tuple(sorted(pod.labels.items()))) if labelled else None,
    )
    try:
        hash(key)
    except TypeError:
        return id(pod)
    return key


@dataclass(slots=True)
class _Ranked:
    """Per shape, what ``best_node`` keeps between pods: each node's answer and a heap of
    (rank, push order, node, answer) over them. The heap is kept, not rebuilt per pod:
    an entry whose answer is no longer the node's (a later answer replaced it) is
    dropped when it comes up, so only the nodes the plan changed are pushed again."""

    found: dict[str, _Hit | None]
    heap: list[tuple[tuple[int, list[tuple[object, ...]], str], int, str, _Hit]]
    at: int

    def put(self, name: str, hit: _Hit | None, order: Iterator[int]) -> None:
        self.found[name] = hit
        if hit is not None:
            heapq.heappush(self.heap, (hit.rank(name), next(order), name, hit))


@dataclass(slots=True)
class _Reasons:
    """Per shape, what ``no_node_reason`` keeps between pods: each node's reason, the count
    of nodes per reason (kept as reasons change, not recounted over every node), and the
    touched-log position they saw."""

    reasons: dict[str, str]
    counts: Counter[str]
    at: int


@dataclass(slots=True)
class _Seen:
    """What the last scan for a shape found: the nodes from ``nodes[start]`` on (sorted;
    kept whole, not sliced, so a scan that finds room early copies nothing), and the
    change log position it saw."""

    nodes: list[str]
    start: int
    at: int


def _holds(names: list[str], start: int, name: str) -> bool:
    """``name`` is in the sorted ``names[start:]``."""
    i = bisect.bisect_left(names, name, start)
    return i < len(names) and names[i] == name


class _Walk:
    """The plan's mutable state while it serves pending pods."""

    def __init__(
        self,
        queues: Sequence[Queue],
        usage: Mapping[str, QueueUsage],
        shares: Mapping[str, Mapping[str, float]],
        snapshot: Snapshot,
        pods: Sequence[Pod],
        pdbs: Sequence[PodDisruptionBudget],
        now: float,
        args: QueueArgs,
    ) -> None:
        self.snapshot = snapshot
        self.names = list(snapshot.states)
        self.shares = shares
        self.allocated = {name: dict(u.allocated) for name, u in usage.items()}
        self.headroom = Headroom(queues, usage, shares)
        self.budgets = Budgets(pdbs, pods)
        self.cands = {
            name: cs
            for name, cs in candidates_by_node(
                queues, usage, self.headroom.left, now, self.budgets.covering
            ).items()
            if name in self.snapshot.states
        }
        self.args = args
        #: Nodes whose room grew (victims left), in order: the memos re-check only these.
        self.changed: list[str] = []
        #: Every node a pod landed on, in order (its room changed either way).
        self.touched: list[str] = []
        self.fit_memo: dict[object, _Seen] = {}
        #: Per shape: each node's victims (and the resources they were checked in), or
        #: None, with the heap that orders them and the touched-log position they saw.
        self.victim_memo: dict[object, _Ranked] = {}
        #: Push order of the heaps' entries (the same node's old and new answer may rank
        #: alike; this keeps the tuples from comparing answers).
        self.order = itertools.count()
        self.reason_memo: dict[object, _Reasons] = {}
        #: (namespace, term) of every hostname anti-affinity term a pod carries (running
        #: or pending: a pending pod may land): only a pod one of them selects has its
        #: labels in its shape.
        self.terms = list(
            {(p.namespace, t) for p in pods if p.anti_affinity for t in hostname_terms(p)}
        )
        self.selected: dict[tuple[str, tuple[tuple[str, str], ...]], bool] = {}
        #: The queue pods (by id): a node's reason tells the room they hold, which victims
        #: could free were they allowed, from the rest.
        self.queued = {id(p) for u in usage.values() for p in (*u.running, *u.waiting)}
        #: What every node could free at most (its donor candidates' requests summed).
        self.reach: dict[str, dict[str, float]] = {}
        for name, cands in self.cands.items():
            total: dict[str, float] = {}
            for c in cands:
                for r, q in c.pod.requests.items():
                    total[r] = total.get(r, 0.0) + q
            self.reach[name] = total
        #: Sets the exact searches of the whole plan may still try.
        self.steps_left = args.search_steps
        self.exact = True

    def labelled(self, pod: Pod) -> bool:
        key = (pod.namespace, tuple(sorted(pod.labels.items())))
        known = self.selected.get(key)
        if known is None:
            known = self.selected[key] = any(term_selects(t, ns, pod) for ns, t in self.terms)
        return known

    # -- serving one pod ----------------------------------------------------------------
    def serve(self, queue: str, pod: Pod) -> tuple[str, Reclaim | str | None]:
        """("fits", None) when it fits without victims; ("reclaim", Reclaim); or
        ("unplaced", reason)."""
        key = _shape(pod, self.labelled(pod))
        node = self.fits_somewhere(pod, key)
        if node is not None:
            self.land(queue, pod, node, ())
            return "fits", None
        if self.victims_leaving(pod):
            # as the scheduler: no more victims for a pod while pods are still leaving the
            # node it was nominated to; the room they leave is counted as its own
            self.land(queue, pod, pod.nominated_node, ())
            return "unplaced", f"{LEAVING} {pod.nominated_node}"
        if pod.preemption_policy == PREEMPT_NEVER:
            return "unplaced", NEVER
        if not self.within_deserved(queue, pod):
            return "unplaced", ABOVE_DESERVED
        found = self.best_node(pod, key)
        if isinstance(found, str):
            return "unplaced", found
        name, victims = found
        self.land(queue, pod, name, victims)
        return "reclaim", Reclaim(pod.key, name, tuple(c.key for c in victims))

    def victims_leaving(self, pod: Pod) -> bool:
        """The pod is nominated to a node where pods of no higher priority are terminating
        (the scheduler's own test before it lets a nominated pod preempt again)."""
        state = self.snapshot.states.get(pod.nominated_node) if pod.nominated_node else None
        return state is not None and any(
            p.is_terminating and p.priority <= pod.priority for p in state.pods
        )

    def within_deserved(self, queue: str, pod: Pod) -> bool:
        """Placing the pod keeps its queue at or below deserved in every queue resource it
        requests (Volcano's reclaim asks the same of the proportion plugin)."""
        deserved, allocated = self.shares[queue], self.allocated[queue]
        for r, q in pod.requests.items():
            if q > 0 and r in deserved:
                d = deserved[r]
                if allocated.get(r, 0.0) + q > d + slack(d):
                    return False
        return True

    def land(self, queue: str, pod: Pod, name: str, victims: Sequence[VictimCandidate]) -> None:
        state = self.snapshot[name]
        for c in victims:
            state.drop(c.pod)
            allocated = self.allocated[c.queue]
            for r, q in c.pod.requests.items():
                allocated[r] = allocated.get(r, 0.0) - q
        if victims:
            gone = {id(c) for c in victims}
            self.cands[name] = [c for c in self.cands[name] if id(c) not in gone]
            reach = self.reach[name]
            for c in victims:
                for r, q in c.pod.requests.items():
                    reach[r] = reach.get(r, 0.0) - q
            self.headroom.take(victims)
            self.budgets.take(victims)
            self.changed.append(name)
        self.touched.append(name)
        state.add(pod)
        allocated = self.allocated.setdefault(queue, {})
        for r, q in pod.requests.items():
            allocated[r] = allocated.get(r, 0.0) + q

    # -- without victims -----------------------------------------------------------------
    def fits_somewhere(self, pod: Pod, key: object) -> str | None:
        """The first node by name the pod fits on as things stand (the scheduler picks its
        own; this only tells later pods of the plan where room went)."""
        seen = self.fit_memo.get(key)
        if seen is None:
            names, start = self.names, 0
        else:
            names, start = seen.nodes, seen.start
            back = {n for n in self.changed[seen.at :] if not _holds(names, start, n)}
            if back:  # two sorted runs: the sort merges them in linear time
                names, start = names[start:] + sorted(back), 0
                names.sort()
        # in name order, up to the first that fits: the ones before it no longer do (they
        # only come back through ``changed``), the ones after it are kept unchecked
        for i in range(start, len(names)):
            if why_not(pod, self.snapshot[names[i]]) is None:
                self.fit_memo[key] = _Seen(names, i, len(self.changed))
                return names[i]
        self.fit_memo[key] = _Seen([], 0, len(self.changed))
        return None

    # -- with victims --------------------------------------------------------------------
    def best_node(self, pod: Pod, key: object) -> tuple[str, list[VictimCandidate]] | str:
        """The node with the fewest victims, then the cheapest (their victim-order keys,
        compared in order), then the name; or the reason there is none.

        Per shape, the answer of each node is kept: a node no pod landed on since keeps it
        while its victims are still allowed (headroom and budgets only shrink, so a set
        that is still allowed is still the best there, and a node with none still has
        none)."""
        memo = self.victim_memo.get(key)
        if memo is None:
            memo = self.victim_memo[key] = _Ranked({}, [], 0)
            fresh: set[str] = set(self.cands)
        else:
            fresh = {n for n in self.touched[memo.at :] if n in self.cands}
        for name in fresh:
            memo.put(
                name,
                self.on_node(pod, self.snapshot[name], self.cands[name], refine=False),
                self.order,
            )
        memo.at = len(self.touched)
        # Best first. A greedy answer enters with its lower bound (and sorts before an exact
        # answer of that size): it is refined by the exact search only when it comes up; a
        # kept answer is checked (still allowed?) only when it comes up.
        found, heap = memo.found, memo.heap
        while heap:
            entry = heapq.heappop(heap)
            name, hit = entry[2], entry[3]
            if found.get(name) is not hit:
                continue  # replaced since it was pushed
            if (
                name not in fresh
                and hit.victims is not None
                and not self.allowed(hit.victims, hit.resources)
            ):
                refine = False  # taken since: look again
            elif hit.refined and hit.victims is not None:
                heapq.heappush(heap, entry)  # still the node's answer for the next pod
                return name, hit.victims
            else:
                refine = True
            fresh.add(name)
            memo.put(
                name,
                self.on_node(pod, self.snapshot[name], self.cands[name], refine=refine),
                self.order,
            )
        return self.no_node_reason(pod, key)

    def on_node(
        self, pod: Pod, state: NodeState, cands: Sequence[VictimCandidate], refine: bool
    ) -> _Hit | None:
        """The fewest, then cheapest, allowed victims on the node that make the pod fit
        (``refine``: by the exact search; else the greedy walk's, with a lower bound of
        the count); None when there are none."""
        reach = self.reach.get(state.name, {})
        used, allocatable = state.used, state.node.allocatable
        for r, q in pod.requests.items():
            if q > 0:
                total = allocatable.get(r, 0.0)
                if used.get(r, 0.0) - reach.get(r, 0.0) + q > total + slack(total):
                    return None  # even with every candidate gone
        if static_reason(pod, state.node) or anti_affinity_reason(pod, state):
            return None
        short = shortfall(pod, state)
        if not short:
            return _Hit([], [], True, 0)
        dims = list(short)
        resources = reclaimed(pod, short)
        need = [short[d] for d in dims]
        tol = [0.0 if d == POD_SLOTS else slack(state.allocatable(d)) for d in dims]
        #: what the victims must free at least, per dim (``_covers``)
        floor = [n - t for n, t in zip(need, tol, strict=True)]
        useful = self.useful(cands, dims, resources)
        if not useful:
            return None
        most = [sum(f[i] for _, f in useful) for i in range(len(dims))]
        if any(r < f for r, f in zip(most, floor, strict=True)):
            return None  # even every allowed victim leaves it short
        greedy = self.greedy(useful, floor, resources)
        if not refine:
            return _Hit(greedy, resources, False, _fewest(useful, need, tol))
        upto = len(greedy) if greedy is not None else len(useful)
        exact = self.exact_search(useful, need, tol, floor, resources, upto)
        if exact is not None:
            return _Hit(exact, resources, True, len(exact))
        return _Hit(greedy, resources, True, len(greedy)) if greedy is not None else None

    def useful(
        self, cands: Sequence[VictimCandidate], dims: Sequence[str], resources: Sequence[str]
    ) -> list[tuple[VictimCandidate, tuple[float, ...]]]:
        """The candidates, in victim order, that free something the pod lacks (a pod slot
        or a resource in ``dims``) and may go alone, each with what it frees per dim."""
        out: list[tuple[VictimCandidate, tuple[float, ...]]] = []
        allowed_one = self.allowed_one
        if dims == [POD_SLOTS]:  # the common cases, spelled out: one tuple per candidate
            return [(c, (1.0,)) for c in cands if allowed_one(c, resources)]
        if len(dims) == 1:
            (d,) = dims
            for c in cands:
                f = c.pod.requests.get(d, 0.0)
                if f > 0 and allowed_one(c, resources):
                    out.append((c, (f,)))
            return out
        slots = [d == POD_SLOTS for d in dims]
        for c in cands:
            requests = c.pod.requests
            frees = tuple(
                [1.0 if slot else requests.get(d, 0.0) for d, slot in zip(dims, slots, strict=True)]
            )
            if any(f > 0 for f in frees) and allowed_one(c, resources):
                out.append((c, frees))
        return out

    def allowed(self, taken: Sequence[VictimCandidate], resources: Sequence[str]) -> bool:
        return self.headroom.allows(taken, resources) and self.budgets.allows(taken)

    def allowed_one(self, c: VictimCandidate, resources: Sequence[str]) -> bool:
        return self.headroom.allows_one(c, resources) and self.budgets.allows_one(c)

    def greedy(
        self,
        useful: Sequence[tuple[VictimCandidate, tuple[float, ...]]],
        floor: Sequence[float],
        resources: Sequence[str],
    ) -> list[VictimCandidate] | None:
        """Victim order, taking a pod that frees something still short and is allowed
        with those taken, until the pod fits; then drop, most expensive first, any pod
        it still fits without."""
        taking = Taking(self.headroom, self.budgets, resources)
        if len(floor) == 1:
            return _greedy_one(useful, floor[0], taking)
        taken: list[int] = []
        freed = [0.0] * len(floor)
        for i, (c, frees) in enumerate(useful):
            if _covers(freed, floor):
                break
            if not any(f > 0 and x < m for f, x, m in zip(frees, freed, floor, strict=True)):
                continue
            if not taking.fits(c):
                continue
            taking.add(c)
            taken.append(i)
            freed = [x + f for x, f in zip(freed, frees, strict=True)]
        if not _covers(freed, floor):
            return None
        for i in reversed(taken[:]):  # ``taken`` is ascending: most expensive first
            less = [x - f for x, f in zip(freed, useful[i][1], strict=True)]
            if _covers(less, floor):
                taken.remove(i)
                freed = less
        return [useful[i][0] for i in taken]

    def exact_search(
        self,
        useful: Sequence[tuple[VictimCandidate, tuple[float, ...]]],
        need: Sequence[float],
        tol: Sequence[float],
        floor: Sequence[float],
        resources: Sequence[str],
        most: int,
    ) -> list[VictimCandidate] | None:
        """The first allowed covering set of the fewest pods, sets of one size tried in
        victim order (so the first found is the cheapest), among the first
        ``exact_search_classes`` candidates, while the plan's ``search_steps`` last. Marks
        the plan inexact when it could not look at every set it needed to.

        The sets of one size are walked in the order ``itertools.combinations`` gives
        them (lexicographic in victim-order positions), as a tree of growing prefixes; a
        prefix is cut when even the largest pods left after it could not make up what it
        lacks in some dim (``_Tops``). Only sets that could cover are reached, in the same
        order, and each is checked as before: the same set is found. Without the cut, the
        big pending pods of a generated 1,000-node cluster (one that needs 10 of 16
        candidates of 0.5-2 cpu) had every set of sizes 10 to 13 tried on every node that
        might be best, short or not, and the plan's 200,000 steps were spent by its first
        pods (docs/controller.md, "Scale"). A step is
        still a set tried: the sets tried are a subset of the ones tried before, in the
        same order, so a search that ended within the steps before ends within them now,
        with the same answer."""
        if self.steps_left <= 0:
            self.exact = False
            return None
        pool = useful[: self.args.exact_search_classes]
        if len(pool) < len(useful):
            self.exact = False
        if not pool:
            return None
        fewest = _fewest(pool, need, tol)
        # per dim, what each pod of the pool frees: a set's sum is taken dim by dim, in
        # the set's order (the same floats as summing its tuples), up to the first short
        frees = [[f[d] for _, f in pool] for d in range(len(floor))]
        columns = [(col.__getitem__, m) for col, m in zip(frees, floor, strict=True)]
        first, least = columns[0]  # the one column, mostly: tried without a generator
        tops = [_Tops(col, m) for col, m in zip(frees, floor, strict=True)]
        size = len(pool)
        combo: list[int] = []

        def tried() -> list[VictimCandidate] | None:
            """``combo``, a whole set: one step; the set if it covers and is allowed."""
            self.steps_left -= 1
            if self.steps_left < 0:
                raise _OutOfSteps
            if sum(map(first, combo)) >= least and all(
                sum(map(get, combo)) >= m for get, m in columns[1:]
            ):
                chosen = [pool[j][0] for j in combo]
                if self.allowed(chosen, resources):
                    return chosen
            return None

        def grow(start: int, left: int, sums: list[float]) -> list[VictimCandidate] | None:
            """The first allowed covering set that extends ``combo`` by ``left`` pods from
            ``pool[start:]``; raises _OutOfSteps when the plan's steps run out."""
            for i in range(start, size - left + 1):
                after = [x + col[i] for x, col in zip(sums, frees, strict=True)]
                if any(t.short(x, i + 1, left - 1) for t, x in zip(tops, after, strict=True)):
                    continue
                combo.append(i)
                found = grow(i + 1, left - 1, after) if left > 1 else tried()
                combo.pop()
                if found is not None:
                    return found
            return None

        only = tops[0] if len(tops) == 1 else None
        single = frees[0]

        def grow_one(start: int, left: int, total: float) -> list[VictimCandidate] | None:
            """``grow`` when one thing is short (the common case): the same steps on a
            float (the same sums, so the same cuts and the same answer)."""
            assert only is not None
            for i in range(start, size - left + 1):
                after = total + single[i]
                if only.short(after, i + 1, left - 1):
                    continue
                combo.append(i)
                found = grow_one(i + 1, left - 1, after) if left > 1 else tried()
                combo.pop()
                if found is not None:
                    return found
            return None

        try:
            for k in range(max(1, int(min(fewest, most + 1))), min(most, size) + 1):
                if only is not None:
                    found = grow_one(0, k, 0.0)
                else:
                    found = grow(0, k, [0.0] * len(frees))
                if found is not None:
                    return found
        except _OutOfSteps:
            self.exact = False
        return None

    def no_node_reason(self, pod: Pod, key: object) -> str:
        """Why each node refuses the pod even with every allowed victim gone, counted as
        the scheduler's message counts them (per shape, nodes no pod landed on since keep
        their reason)."""
        memo = self.reason_memo.get(key)
        if memo is None:
            memo = self.reason_memo[key] = _Reasons({}, Counter(), 0)
            again: Iterable[str] = self.names
        else:
            again = set(self.touched[memo.at :])
        reasons, counts = memo.reasons, memo.counts
        for name in again:
            new = self.node_reason(pod, self.snapshot[name])
            old = reasons.get(name)
            if new != old:
                if old is not None:
                    counts[old] -= 1
                    if not counts[old]:
                        del counts[old]
                counts[new] += 1
                reasons[name] = new
        memo.at = len(self.touched)
        parts = ", ".join(
            f"{n} {r}" for r, n in sorted(counts.items(), key=lambda t: (-t[1], t[0]))
        )
        return (
            f"{NO_NODE}: 0/{len(self.names)} nodes ({parts})"
            if parts
            else f"{NO_NODE}: no schedulable node"
        )

    def node_reason(self, pod: Pod, state: NodeState) -> str:
        """The node's part of ``NoNodeFits``: a static reason (selector, affinity, taints,
        anti-affinity); ``Insufficient <resource>`` when it lacks room even with every
        queue pod gone; ``no allowed victims for <resource>`` when queue pods hold the room
        but none of them may go (the pod's own queue's among them: never its victims);
        ``victims not allowed together`` when each may go but not all that are needed."""
        reason = static_reason(pod, state.node) or anti_affinity_reason(pod, state)
        if reason is not None:
            return reason
        short = shortfall(pod, state)
        resources = reclaimed(pod, short)
        gone = [c.pod for c in self.cands.get(state.name, ()) if self.allowed_one(c, resources)]
        left = shortfall(pod, state, gone)
        if not left:
            return "victims not allowed together"
        queued = self.queued
        if shortfall(pod, state, [p for p in state.pods if id(p) in queued]):
            return f"Insufficient {next(iter(left))}"
        return f"{NO_ALLOWED_VICTIMS} {next(iter(left))}"


def _greedy_one(
    useful: Sequence[tuple[VictimCandidate, tuple[float, ...]]], floor: float, taking: Taking
) -> list[VictimCandidate] | None:
    """``_Walk.greedy`` when one thing is short (the common case): the same steps, on a
    float instead of one-element lists (the same sums, so the same answer)."""
    taken: list[int] = []
    freed = 0.0
    for i, (c, (f,)) in enumerate(useful):
        if freed >= floor:
            break
        if not (f > 0 and freed < floor):
            continue
        if not taking.fits(c):
            continue
        taking.add(c)
        taken.append(i)
        freed = freed + f
    if not freed >= floor:
        return None
    for i in reversed(taken[:]):
        less = freed - useful[i][1][0]
        if less >= floor:
            taken.remove(i)
            freed = less
    return [useful[i][0] for i in taken]


class _OutOfSteps(Exception):
    """The plan's ``search_steps`` ran out in the middle of an exact search."""


class _Tops:
    """One dim of an exact search's pool: the most any ``r`` pods of ``pool[j:]`` free
    (the sum of the ``r`` largest there), to cut the prefixes that cannot cover. Made
    when first asked: a search for one victim never needs it."""

    __slots__ = ("_best", "column", "floor", "margin")

    def __init__(self, column: Sequence[float], floor: float) -> None:
        self.column = column
        self._best: list[list[float]] | None = None
        self.floor = floor
        #: A prefix is cut only when short by more than any float error of a sum of a
        #: few requests (16 of them err by under 4e-15 of their size): never a set the
        #: check itself would take.
        self.margin = 1e-9 * max(1.0, abs(floor))

    def short(self, sum_so_far: float, start: int, left: int) -> bool:
        if not left:
            return sum_so_far + self.margin < self.floor
        best = self._best
        if best is None:
            column = self.column
            best = self._best = [
                list(itertools.accumulate(sorted(column[j:], reverse=True), initial=0.0))
                for j in range(len(column) + 1)
            ]
        return sum_so_far + best[start][left] + self.margin < self.floor


def _fewest(
    useful: Sequence[tuple[VictimCandidate, tuple[float, ...]]],
    need: Sequence[float],
    tol: Sequence[float],
) -> int:
    """A lower bound of how many of ``useful`` cover ``need``: in each resource, the
    shortfall over the largest single free."""
    bound = 1
    for i, (n, t) in enumerate(zip(need, tol, strict=True)):
        big = max((f[i] for _, f in useful), default=0.0)
        bound = max(bound, math.ceil((n - t) / big) if big > 0 else len(useful) + 1)
    return bound


@dataclass(slots=True)
class _Hit:
    """A node's answer for a pod: the victims (None: the greedy walk found none), the
    resources they were checked in, whether the exact search ran (else ``lower`` bounds
    the count from below)."""

    victims: list[VictimCandidate] | None
    resources: list[str]
    refined: bool
    lower: int

    def rank(self, node: str) -> tuple[int, list[tuple[object, ...]], str]:
        """Fewest victims, then the cheapest (their victim-order keys, compared in order),
        then the node's name; an unrefined answer by its lower bound, before the refined
        ones of that size."""
        if not self.refined or self.victims is None:
            return (self.lower, [], node)
        return (len(self.victims), [c.rank for c in self.victims], node)


def reclaimed(pod: Pod, short: Mapping[str, float]) -> list[str]:
    """The resources being reclaimed on a node, in which no victim may take its queue below
    deserved: those the pod is short of there; when only pod slots are short, the pod's
    own requests (a slot is no queue resource, yet its victim must not be free to take)."""
    return [d for d in short if d != POD_SLOTS] or [r for r, q in pod.requests.items() if q > 0]


def _covers(freed: Sequence[float], floor: Sequence[float]) -> bool:
    return all(x >= m for x, m in zip(freed, floor, strict=True))


def reclaim(
    queues: Sequence[Queue],
    usage: Mapping[str, QueueUsage],
    shares: Mapping[str, Mapping[str, float]],
    starving: Sequence[str],
    snapshot: Snapshot,
    pods: Sequence[Pod],
    pdbs: Sequence[PodDisruptionBudget],
    now: float,
    args: QueueArgs,
) -> Reclaimed:
    """Serve the starving queues' pending pods, queue by queue in ``starving`` order, each
    queue's pods in ``PENDING_ORDER``, on ``snapshot`` (``usable_snapshot``; the plan
    changes it as it goes)."""
    walk = _Walk(queues, usage, shares, snapshot, pods, pdbs, now, args)
    reclaims: list[Reclaim] = []
    fits_now: list[str] = []
    unplaced: dict[str, str] = {}
    for queue, waiting in pending_by_queue(starving, usage).items():
        for pod in waiting:
            outcome, detail = walk.serve(queue, pod)
            if outcome == "fits":
                fits_now.append(pod.key)
            elif isinstance(detail, Reclaim):
                reclaims.append(detail)
            elif isinstance(detail, str):
                unplaced[pod.key] = detail
    return Reclaimed(tuple(reclaims), tuple(fits_now), unplaced, walk.exact)
