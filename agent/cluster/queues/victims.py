"""The victims of queue preemption: the fewest, tightest pods that give a starving queue
its share back without taking any donor queue below its deserved share.

``select_victims`` is a bounded search: a greedy walk in victim order (then tidied), and an
exact branch and bound (``_ExactSearch``) over how many pods of each class of
interchangeable candidates to take; the better answer wins.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from agent.cluster.engine import EPSILON, slack
from agent.cluster.queues.args import QueueArgs
from agent.cluster.queues.shares import QueueUsage
from agent.model.ordering import By, Order, ordered_by
from agent.model.queue import Queue


@dataclass(frozen=True, slots=True)
class VictimCandidate:
    key: str
    queue: str
    priority: int
    running: float
    #: Request of each reclaimed resource, in the order of the plan's ``resources``.
    frees: tuple[float, ...]


#: The order victims are considered in, primary first: lower priority, then shorter running
#: time; the pod's namespace/name makes it total.
VICTIM_ORDER: Order[VictimCandidate] = ordered_by(
    By("lower priority", lambda c: c.priority),
    By("shorter running time", lambda c: c.running),
    By("namespace/name", lambda c: c.key),
)
victim_sort_key = VICTIM_ORDER.key


def candidates(
    queues: Sequence[Queue],
    usage: Mapping[str, QueueUsage],
    shares: Mapping[str, Mapping[str, float]],
    resources: Sequence[str],
    now: float,
) -> tuple[list[VictimCandidate], dict[str, tuple[float, ...]]]:
    """Candidates in victim order, and each donor queue's headroom (allocated - deserved,
    never below zero) in the reclaimed resources. Donors: reclaimable queues above deserved
    in a reclaimed resource."""
    out: list[VictimCandidate] = []
    headroom: dict[str, tuple[float, ...]] = {}
    for q in queues:
        if not q.reclaimable:
            continue
        u, d = usage[q.name], shares[q.name]
        room = tuple(max(0.0, u.allocated.get(r, 0.0) - d.get(r, 0.0)) for r in resources)
        if not any(x > slack(x) for x in room):
            continue
        headroom[q.name] = room
        for pod in u.running:
            if pod.is_terminating:
                continue
            frees = tuple(pod.request(r) for r in resources)
            if not any(f > 0 for f in frees):
                continue
            if any(f > h + slack(h) for f, h in zip(frees, room, strict=True)):
                continue  # alone it would take its queue below deserved
            out.append(
                VictimCandidate(pod.key, q.name, pod.priority, pod.running_seconds(now), frees)
            )
    out.sort(key=victim_sort_key)
    return out, headroom


# -- the search ----------------------------------------------------------------------------
class VictimChoice(NamedTuple):
    #: Positions in the candidate order, sorted.
    picks: tuple[int, ...]
    #: Sum over reclaimed resources of (freed - need) / cluster total.
    excess: float
    #: True when proven the best by the rule of ``select_victims``.
    exact: bool


@dataclass(frozen=True, slots=True)
class Goal:
    """What the victims must free (``need``, per reclaimed resource) and the cluster totals
    that weigh the excess. A resource counts as covered from ``floor`` = need - slack on
    (the search asks this hundreds of thousands of times: it reads tuples, not methods)."""

    need: tuple[float, ...]
    totals: tuple[float, ...]
    tol: tuple[float, ...]
    floor: tuple[float, ...]
    dims: range
    #: (index, need, total) of the resources whose excess counts (total > 0).
    weighed: tuple[tuple[int, float, float], ...]

    @classmethod
    def of(cls, need: Sequence[float], totals: Sequence[float]) -> Goal:
        tol = tuple(slack(n) for n in need)
        floor = tuple(n - t for n, t in zip(need, tol, strict=True))
        weighed = tuple((i, n, t) for i, (n, t) in enumerate(zip(need, totals, strict=True)) if t > 0)
        return cls(tuple(need), tuple(totals), tol, floor, range(len(need)), weighed)

    def short(self, freed: Sequence[float], i: int) -> bool:
        return freed[i] < self.floor[i]

    def covered(self, freed: Sequence[float]) -> bool:
        return all(map(operator.ge, freed, self.floor))

    def excess(self, freed: Sequence[float]) -> float:
        return sum(max(0.0, freed[i] - n) / t for i, n, t in self.weighed)


@dataclass(frozen=True, slots=True)
class _Best:
    excess: float = math.inf
    count: int = 0
    picks: tuple[int, ...] = ()

    def beaten_by(self, excess: float, count: int, picks: tuple[int, ...]) -> bool:
        """Least excess (ties within EPSILON), then fewest pods, then earliest in victim
        order (lexicographic on the sorted positions)."""
        if excess < self.excess - EPSILON:
            return True
        if excess > self.excess + EPSILON:
            return False
        if count != self.count:
            return count < self.count
        return picks < self.picks


def _fits(frees: Sequence[float], used: Sequence[float], room: Sequence[float]) -> bool:
    """Taking ``frees`` on top of ``used`` stays within the queue's headroom ``room``."""
    return all(u + f <= r + slack(r) for f, u, r in zip(frees, used, room, strict=True))


def select_victims(
    cands: Sequence[VictimCandidate],
    headroom: Mapping[str, tuple[float, ...]],
    need_vec: tuple[float, ...],
    totals: tuple[float, ...],
    args: QueueArgs | None = None,
) -> VictimChoice | None:
    """Choose positions in ``cands`` that cover ``need_vec`` without taking any queue past
    its headroom, best by: least excess (sum over reclaimed resources of (freed - need) /
    cluster total), then fewest pods, then the set whose sorted positions in victim order
    are lexicographically first. None when no set covers the need.

    Bounded search, never exponential in the number of pods:
    1. a greedy walk over all candidates in victim order, taking a pod when it fits its
       queue's headroom and frees a resource still short (then tidied);
    2. candidates are grouped into classes (queue, request of the reclaimed resources); an
       exact branch and bound over how many of each class to take, on the first
       ``exact_search_classes`` classes (by their first member's position), stopping after
       ``search_steps`` steps.
    The better of the two wins. The answer is exact when every candidate falls in those
    classes and the search finished within its steps; otherwise it is the best over the
    greedy walk and over sets drawn from those first classes.
    """
    args = args or QueueArgs()
    goal = Goal.of(need_vec, totals)
    classes = _classes(cands, headroom)
    searched = classes[: args.exact_search_classes]
    search = _ExactSearch(searched, headroom, goal, args.search_steps, _greedy(cands, headroom, goal))
    search.run()
    best = search.best
    if best.excess == math.inf:
        return None
    return VictimChoice(best.picks, best.excess, len(searched) == len(classes) and not search.exhausted)


# -- 1. the greedy walk --------------------------------------------------------------------
@dataclass(slots=True)
class _Walk:
    """A set of picks with what it frees in total and per queue."""

    cands: Sequence[VictimCandidate]
    headroom: Mapping[str, tuple[float, ...]]
    goal: Goal
    picks: list[int] = field(default_factory=list)
    freed: list[float] = field(default_factory=list)
    taken: dict[str, list[float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.freed = [0.0] * len(self.goal.need)
        self.taken = {q: [0.0] * len(self.goal.need) for q in self.headroom}

    def fits(self, c: VictimCandidate) -> bool:
        return _fits(c.frees, self.taken[c.queue], self.headroom[c.queue])

    def take(self, pos: int, sign: float = 1.0) -> None:
        c = self.cands[pos]
        used = self.taken[c.queue]
        for i in self.goal.dims:
            used[i] += sign * c.frees[i]
            self.freed[i] += sign * c.frees[i]

    def without(self, pos: int) -> list[float]:
        return [f - q for f, q in zip(self.freed, self.cands[pos].frees, strict=True)]


def _greedy(
    cands: Sequence[VictimCandidate], headroom: Mapping[str, tuple[float, ...]], goal: Goal
) -> _Best:
    """Walk the candidates in victim order, taking each that fits its queue's headroom and
    frees a resource still short, until the need is covered; then tidy the cover."""
    walk = _Walk(cands, headroom, goal)
    for pos, c in enumerate(cands):
        if goal.covered(walk.freed):
            break
        helps = any(c.frees[i] > 0 and goal.short(walk.freed, i) for i in goal.dims)
        if helps and walk.fits(c):
            walk.picks.append(pos)
            walk.take(pos)
    if not goal.covered(walk.freed):
        return _Best()
    _drop_unneeded(walk)
    if walk.picks:
        _swap_last(walk)
    return _Best(goal.excess(walk.freed), len(walk.picks), tuple(sorted(walk.picks)))


def _drop_unneeded(walk: _Walk) -> None:
    """Drop the picks the cover does not need, latest first."""
    for pos in reversed(list(walk.picks)):
        if walk.goal.covered(walk.without(pos)):
            walk.picks.remove(pos)
            walk.take(pos, -1.0)


def _swap_last(walk: _Walk) -> None:
    """Swap the last pick for the unpicked candidate that closes the remaining gap with the
    least excess (the earliest among equals); never worse than keeping it. O(pods)."""
    goal = walk.goal
    last = walk.picks.pop()
    best_pos, best_excess = last, goal.excess(walk.freed)
    walk.take(last, -1.0)
    chosen = set(walk.picks)
    seen: set[tuple[str, tuple[float, ...]]] = set()
    for pos, c in enumerate(walk.cands):
        shape = (c.queue, c.frees)
        if pos in chosen or shape in seen:
            continue
        seen.add(shape)  # the first unpicked pod of a shape stands for all of them
        if not walk.fits(c):
            continue
        trial = [f + q for f, q in zip(walk.freed, c.frees, strict=True)]
        if goal.covered(trial) and goal.excess(trial) < best_excess - EPSILON:
            best_pos, best_excess = pos, goal.excess(trial)
    walk.picks.append(best_pos)
    walk.take(best_pos)


# -- 2. the exact search over classes ------------------------------------------------------
@dataclass(slots=True)
class _Class:
    """Interchangeable candidates: same queue, same request of the reclaimed resources.
    Taking k of them always means the first k in victim order (best for the tie-break)."""

    queue: str
    frees: tuple[float, ...]
    members: list[int]  # positions in the candidate order
    limit: int = 0  # most that fit the queue's headroom alone


def _most_within(frees: Sequence[float], room: Sequence[float], cap: int) -> int:
    """How many pods freeing ``frees`` fit in ``room`` (at most ``cap``)."""
    for f, r in zip(frees, room, strict=True):
        if f > 0:
            cap = min(cap, int((r + slack(r)) // f))
    return cap


def _classes(
    cands: Sequence[VictimCandidate], headroom: Mapping[str, tuple[float, ...]]
) -> list[_Class]:
    """The classes in order of their first member, each with how many fit its queue; the
    ones of which none fit are left out."""
    by_shape: dict[tuple[str, tuple[float, ...]], _Class] = {}
    for pos, c in enumerate(cands):
        shape = (c.queue, c.frees)
        if shape not in by_shape:
            by_shape[shape] = _Class(c.queue, c.frees, [])
        by_shape[shape].members.append(pos)
    classes = list(by_shape.values())
    for cls in classes:
        fit = _most_within(cls.frees, headroom[cls.queue], len(cls.members))
        cls.limit = fit if any(f > 0 for f in cls.frees) else 0
    return [c for c in classes if c.limit > 0]


class _ExactSearch:
    """Branch and bound over how many pods of each class to take, most first, within the
    headroom left in each queue; stops after ``max_steps`` visits (``exhausted``)."""

    def __init__(
        self,
        classes: Sequence[_Class],
        headroom: Mapping[str, tuple[float, ...]],
        goal: Goal,
        max_steps: int,
        best: _Best,
    ) -> None:
        self.classes, self.goal, self.max_steps, self.best = classes, goal, max_steps, best
        self.depth = len(classes)
        self.steps = 0
        self.exhausted = False
        self.counts = [0] * len(classes)
        self.left = {q: list(room) for q, room in headroom.items()}
        #: reach[k]: what the classes from k on could free at most (ignores the headroom
        #: they share: an upper bound).
        self.reach = [[0.0] * len(goal.need) for _ in range(len(classes) + 1)]
        for k in range(len(classes) - 1, -1, -1):
            cls = classes[k]
            self.reach[k] = [r + cls.limit * f for r, f in zip(self.reach[k + 1], cls.frees, strict=True)]

    def run(self) -> None:
        if self.classes:
            self._visit(0, [0.0] * len(self.goal.need), 0)

    def _visit(self, k: int, freed: list[float], count: int) -> None:
        self.steps += 1
        if self.steps > self.max_steps:
            self.exhausted = True
            return
        if self.goal.covered(freed):
            self._offer(freed, count)
        elif k < self.depth and not self._hopeless(k, freed, count):
            self._branch(k, freed, count)

    def _offer(self, freed: list[float], count: int) -> None:
        best, excess = self.best, self.goal.excess(freed)
        if excess > best.excess + EPSILON or (excess >= best.excess - EPSILON and count > best.count):
            return
        picks = self._picks()
        if best.beaten_by(excess, count, picks):
            self.best = _Best(excess, count, picks)

    def _hopeless(self, k: int, freed: list[float], count: int) -> bool:
        """Even every pod of the classes left cannot cover the need, or any cover from here
        has more excess (excess only grows as pods are added) or, at equal excess, more pods
        than the best so far."""
        reach = self.reach[k]
        if any(f + r < fl for f, r, fl in zip(freed, reach, self.goal.floor, strict=True)):
            return True
        lower, best = self.goal.excess(freed), self.best
        return lower > best.excess + EPSILON or (
            lower >= best.excess - EPSILON and count + 1 > best.count
        )

    def _branch(self, k: int, freed: list[float], count: int) -> None:
        """Take n of class k, most first: at most what fits the queue's headroom left and
        what closes every shortfall the class helps with (more only adds excess)."""
        cls, goal = self.classes[k], self.goal
        room = self.left[cls.queue]
        most, useful = cls.limit, 0
        for n_i, t_i, fl_i, x_i, f_i, r_i in zip(
            goal.need, goal.tol, goal.floor, freed, cls.frees, room, strict=True
        ):
            if f_i > 0:
                most = min(most, int((r_i + slack(r_i)) // f_i))
                if x_i < fl_i:
                    useful = max(useful, math.ceil((n_i - x_i - t_i) / f_i))
        for n in range(min(most, useful), -1, -1):
            if self.exhausted:
                return
            self.counts[k] = n
            for i, f in enumerate(cls.frees):
                room[i] -= n * f
            self._visit(k + 1, [x + n * f for x, f in zip(freed, cls.frees, strict=True)], count + n)
            for i, f in enumerate(cls.frees):
                room[i] += n * f
        self.counts[k] = 0

    def _picks(self) -> tuple[int, ...]:
        chosen: list[int] = []
        for cls, n in zip(self.classes, self.counts, strict=True):
            chosen.extend(cls.members[:n])
        return tuple(sorted(chosen))
