"""Queue-proportional preemption: deserved shares by weighted water-filling, starving
queues, and the fewest, tightest victims that give a starving queue its share back.

A pod joins a queue through its label ``qos.waterline.io/queue``. The Queue CR
(``qos.waterline.io/v1alpha1``, cluster-scoped) has Volcano's shape::

    spec: {weight: 1, capability: {cpu: "8"}, guarantee: {resource: {cpu: "2"}},
           reclaimable: true}
    status: {deserved: {..}, allocated: {..}, request: {..}}   # written by the controller

Decisions where DESIGN.md is silent (what an operator of a large cluster would expect):

* The cluster total is the allocatable of Ready nodes; free capacity is counted on Ready,
  schedulable nodes only, per node (allocatable minus the requests of its active pods,
  never below zero), since a pending pod cannot use a cordoned node's room.
* allocated = requests of the queue's active pods (bound to a node, not finished), so a
  bound pod still in phase Pending holds its share; pending = phase Pending without a node.
  Pods naming a queue that does not exist belong to no queue (they still use capacity).
* Resources are the ones the queues request or guarantee; ``pods`` is not a queue resource.
* If the guarantees of all queues exceed the cluster total in a resource, they are scaled
  down in proportion to fit it, so deserved never sums above the total.
* Victims are active, non-terminating pods. A pod that frees none of the resources being
  reclaimed is never a victim (it would be evicted for nothing).

Victim choice, exactly: the resources being reclaimed are those with a positive need. A set
is allowed when no queue loses more than (allocated - deserved, floored at 0) in any of
them, and covers when it frees at least the need in each. Among covers the best has the
least excess = sum over reclaimed resources of (freed - need) / cluster total (ties within
1e-9), then the fewest pods, then the earliest in victim order: the sorted victim-order
positions compared lexicographically. The search is bounded (``select_victims``): exact
when the candidates form at most ``exactSearchClasses`` classes of interchangeable pods and
the search ends within ``searchSteps``; else the best of a greedy walk and of the exact
search over the first classes. The report says which (``exactVictimSearch``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent.errors import InvalidObject
from agent.model.objects import Node, Pod, Resources
from agent.model.quantity import parse_quantity
from agent.scenario import Scenario

KIND = "Queue"
QUEUE_LABEL = "qos.waterline.io/queue"
#: Relative tolerance for float comparisons of resource amounts.
REL_EPS = 1e-9
#: Water-filling rounds before the fixed point is taken as reached (it converges in far
#: fewer: each round satisfies at least one queue unless guarantees overshoot).
MAX_ROUNDS = 10_000


# -- args ----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class QueueArgs:
    """config.queues: bounds of the victim search (see ``select_victims``)."""

    #: The exact search looks at the first this-many candidate classes (a class is the
    #: pods of one queue with the same request of the reclaimed resources).
    exactSearchClasses: int = 16  # noqa: N815 - config key spelling
    #: Search steps before the exact search gives up and keeps the best found so far.
    searchSteps: int = 200_000  # noqa: N815

    def validate(self) -> QueueArgs:
        for name, minimum in (("exactSearchClasses", 0), ("searchSteps", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise InvalidObject("config", "queues", name, f"must be an integer, got {value!r}")
            if value < minimum:
                raise InvalidObject("config", "queues", name, f"must be >= {minimum}, got {value}")
        return self


def parse_args(raw: Mapping[str, Any] | None) -> QueueArgs:
    """Parse config.queues (absent: defaults); unknown keys are refused, typos included."""
    raw = raw or {}
    known = set(QueueArgs.__dataclass_fields__)
    for key in raw:
        if key not in known:
            raise InvalidObject(
                "config", "queues", str(key), f"unknown field (known: {sorted(known)})"
            )
    return QueueArgs(**{str(k): v for k, v in raw.items()}).validate()


# -- the Queue record -------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Queue:
    name: str
    weight: int = 1
    #: Upper bound per resource; a resource not listed is unbounded.
    capability: Resources = field(default_factory=dict)
    guarantee: Resources = field(default_factory=dict)
    reclaimable: bool = True


def _resources(name: str, path: str, raw: object) -> dict[str, float]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise InvalidObject(
            KIND, name, path, f"must be a mapping of resources, got {type(raw).__name__}"
        )
    out: dict[str, float] = {}
    for resource, quantity in raw.items():
        try:
            amount = parse_quantity(quantity)
        except ValueError as err:
            raise InvalidObject(KIND, name, f"{path}.{resource}", str(err)) from None
        if not amount >= 0 or math.isinf(amount):
            raise InvalidObject(
                KIND,
                name,
                f"{path}.{resource}",
                f"must be a finite quantity >= 0, got {quantity!r}",
            )
        out[str(resource)] = amount
    return out


def parse_queue(raw: Mapping[str, Any]) -> Queue:
    meta = raw.get("metadata") if isinstance(raw.get("metadata"), dict) else {}
    name = str((meta or {}).get("name") or "")
    if not name:
        raise InvalidObject(KIND, "", "metadata.name", "must be set")
    spec = raw.get("spec") or {}
    if not isinstance(spec, dict):
        raise InvalidObject(KIND, name, "spec", "must be a mapping")
    weight = spec.get("weight", 1)
    if weight is None:
        weight = 1
    if isinstance(weight, bool) or not isinstance(weight, int):
        raise InvalidObject(KIND, name, "spec.weight", f"must be an integer, got {weight!r}")
    if weight < 1:
        raise InvalidObject(KIND, name, "spec.weight", f"must be >= 1, got {weight}")
    capability = _resources(name, "spec.capability", spec.get("capability"))
    guarantee_raw = spec.get("guarantee")
    if guarantee_raw is not None and not isinstance(guarantee_raw, dict):
        raise InvalidObject(KIND, name, "spec.guarantee", "must be a mapping with a resource field")
    guarantee = _resources(name, "spec.guarantee.resource", (guarantee_raw or {}).get("resource"))
    for resource, amount in guarantee.items():
        if resource in capability and amount > capability[resource]:
            raise InvalidObject(
                KIND,
                name,
                f"spec.guarantee.resource.{resource}",
                f"must be <= spec.capability.{resource} ({capability[resource]:g}), got {amount:g}",
            )
    reclaimable = spec.get("reclaimable", True)
    if reclaimable is None:
        reclaimable = True
    if not isinstance(reclaimable, bool):
        raise InvalidObject(
            KIND, name, "spec.reclaimable", f"must be true or false, got {reclaimable!r}"
        )
    return Queue(name, weight, capability, guarantee, reclaimable)


def parse_queues(raws: Iterable[Mapping[str, Any]]) -> list[Queue]:
    queues: list[Queue] = []
    seen: set[str] = set()
    for raw in raws:
        queue = parse_queue(raw)
        if queue.name in seen:
            raise InvalidObject(KIND, queue.name, "metadata.name", "is defined twice")
        seen.add(queue.name)
        queues.append(queue)
    return queues


# -- small vector helpers (resources as plain dicts) -------------------------------------
def _add(into: dict[str, float], amounts: Mapping[str, float], sign: float = 1.0) -> None:
    for r, q in amounts.items():
        into[r] = into.get(r, 0.0) + sign * q


def _eps(scale: float) -> float:
    return max(REL_EPS, abs(scale) * REL_EPS)


# -- queue usage ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class QueueUsage:
    """What a queue holds and asks for. request = allocated + pending."""

    allocated: Resources
    pending: Resources
    running: tuple[Pod, ...]
    pending_pods: int

    @property
    def request(self) -> dict[str, float]:
        out = dict(self.allocated)
        _add(out, self.pending)
        return out


def is_pending(pod: Pod) -> bool:
    return pod.phase == "Pending" and not pod.node_name and not pod.is_terminating


def queue_usage(queues: Sequence[Queue], pods: Iterable[Pod]) -> dict[str, QueueUsage]:
    """Group pods by their queue label; pods of unknown queues are left out."""
    names = {q.name for q in queues}
    allocated: dict[str, dict[str, float]] = {n: {} for n in names}
    pending: dict[str, dict[str, float]] = {n: {} for n in names}
    running: dict[str, list[Pod]] = {n: [] for n in names}
    pending_count = dict.fromkeys(names, 0)
    for pod in pods:
        queue = pod.labels.get(QUEUE_LABEL)
        if queue not in names:
            continue
        if pod.is_active:
            _add(allocated[queue], pod.requests)
            running[queue].append(pod)
        elif is_pending(pod):
            _add(pending[queue], pod.requests)
            pending_count[queue] += 1
    return {
        n: QueueUsage(allocated[n], pending[n], tuple(running[n]), pending_count[n]) for n in names
    }


@dataclass(frozen=True, slots=True)
class Capacity:
    """The cluster as queue preemption sees it: total and free per resource."""

    total: Resources
    free: Resources


def cluster_capacity(nodes: Iterable[Node], pods: Iterable[Pod]) -> Capacity:
    ready = {n.name: n for n in nodes if n.ready}
    total: dict[str, float] = {}
    for node in ready.values():
        _add(total, node.allocatable)
    used: dict[str, dict[str, float]] = {}
    for pod in pods:
        if pod.is_active and pod.node_name in ready:
            _add(used.setdefault(pod.node_name, {}), pod.requests)
    free: dict[str, float] = {}
    for node in ready.values():
        if node.unschedulable:
            continue
        node_used = used.get(node.name, {})
        for r, alloc in node.allocatable.items():
            free[r] = free.get(r, 0.0) + max(0.0, alloc - node_used.get(r, 0.0))
    return Capacity(total, free)


# -- deserved: weighted water-filling ----------------------------------------------------
def deserved(
    queues: Sequence[Queue],
    requests: Mapping[str, Resources],
    total: Resources,
) -> dict[str, dict[str, float]]:
    """Each queue's deserved share per resource, as Volcano's proportion plugin computes it.

    Every round, each unsatisfied queue gets ``remaining x weight / total weight`` added,
    capped by min(capability, total - sum(guarantees) + own guarantee) and by its request,
    then raised to its guarantee. A queue is satisfied when its request is covered or its
    deserved stopped changing. Rounds stop when nothing remains or nothing changes.

    Unlike Volcano, a round whose guarantees overshoot (remaining goes negative) is
    followed by more rounds that hand the overshoot back, and a last projection trims the
    above-guarantee parts so the shares never sum above the total. Resources: those any
    queue requests or guarantees. Queues missing from ``requests`` request nothing.
    """
    dims = sorted(
        {r for q in queues for r in q.guarantee}
        | {r for q in queues for r in requests.get(q.name, {})}
    )
    totals = {r: max(0.0, total.get(r, 0.0)) for r in dims}
    # Guarantees, scaled down where together they exceed the total.
    sum_g = dict.fromkeys(dims, 0.0)
    for q in queues:
        _add(sum_g, {r: q.guarantee.get(r, 0.0) for r in dims})
    scale = {r: (totals[r] / sum_g[r] if sum_g[r] > totals[r] else 1.0) for r in dims}
    guarantee = {q.name: {r: q.guarantee.get(r, 0.0) * scale[r] for r in dims} for q in queues}
    sum_geff = {r: min(sum_g[r], totals[r]) for r in dims}
    cap = {
        q.name: {
            r: min(
                q.capability.get(r, math.inf),
                max(0.0, totals[r] - sum_geff[r]) + guarantee[q.name][r],
            )
            for r in dims
        }
        for q in queues
    }
    request = {q.name: {r: requests.get(q.name, {}).get(r, 0.0) for r in dims} for q in queues}
    eps = {r: _eps(totals[r]) for r in dims}

    share = {q.name: dict.fromkeys(dims, 0.0) for q in queues}
    remaining = dict(totals)
    satisfied: set[str] = set()
    for _ in range(MAX_ROUNDS):
        weight = sum(q.weight for q in queues if q.name not in satisfied)
        if weight == 0:
            break
        before = dict(remaining)
        delta = dict.fromkeys(dims, 0.0)
        for q in queues:
            if q.name in satisfied:
                continue
            old = share[q.name]
            new = {
                r: max(
                    min(old[r] + before[r] * q.weight / weight, cap[q.name][r], request[q.name][r]),
                    guarantee[q.name][r],
                )
                for r in dims
            }
            share[q.name] = new
            covered = all(request[q.name][r] <= new[r] + eps[r] for r in dims)
            unchanged = all(abs(new[r] - old[r]) <= eps[r] for r in dims)
            if covered or unchanged:
                satisfied.add(q.name)
            for r in dims:
                delta[r] += new[r] - old[r]
        for r in dims:
            remaining[r] -= delta[r]
        if all(abs(remaining[r]) <= eps[r] for r in dims):
            break
        if all(abs(remaining[r] - before[r]) <= eps[r] for r in dims):
            break
    _trim_to_total(share, guarantee, totals, dims)
    return share


def _trim_to_total(
    share: dict[str, dict[str, float]],
    guarantee: Mapping[str, Mapping[str, float]],
    totals: Mapping[str, float],
    dims: Sequence[str],
) -> None:
    """Scale the above-guarantee parts down where the shares sum above the total."""
    for r in dims:
        over = sum(s[r] for s in share.values()) - totals[r]
        if over <= 0:
            continue
        above = sum(s[r] - guarantee[n][r] for n, s in share.items())
        keep = max(0.0, 1.0 - over / above) if above > 0 else 0.0
        for n, s in share.items():
            g = guarantee[n][r]
            s[r] = g + (s[r] - g) * keep


# -- starving queues and the need ------------------------------------------------------
def starving(
    queues: Sequence[Queue],
    usage: Mapping[str, QueueUsage],
    shares: Mapping[str, Mapping[str, float]],
) -> list[str]:
    """Queues with pending pods whose allocated is below deserved in a resource they request."""
    out = []
    for q in queues:
        u = usage[q.name]
        if u.pending_pods == 0:
            continue
        d = shares[q.name]
        if any(
            amount > 0 and u.allocated.get(r, 0.0) < d.get(r, 0.0) - _eps(d.get(r, 0.0))
            for r, amount in u.pending.items()
        ):
            out.append(q.name)
    return out


def need(
    starving_queues: Iterable[str],
    usage: Mapping[str, QueueUsage],
    shares: Mapping[str, Mapping[str, float]],
    free: Resources,
) -> dict[str, float]:
    """Per resource: sum over starving queues of min(pending, deserved - allocated), minus
    the free capacity. Only the positive parts are returned."""
    want: dict[str, float] = {}
    for name in starving_queues:
        u, d = usage[name], shares[name]
        for r, pending in u.pending.items():
            gap = min(pending, d.get(r, 0.0) - u.allocated.get(r, 0.0))
            if gap > 0:
                want[r] = want.get(r, 0.0) + gap
    out = {}
    for r, amount in want.items():
        short = amount - free.get(r, 0.0)
        if short > _eps(amount):
            out[r] = short
    return out


# -- victims ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Candidate:
    key: str
    queue: str
    priority: int
    running: float
    #: Request of each reclaimed resource, in the order of ``VictimPlan.resources``.
    frees: tuple[float, ...]


#: The order victims are considered in, primary first: lower priority, then shorter running
#: time; the pod's namespace/name makes it total.
VICTIM_ORDER: tuple[tuple[str, Callable[[Candidate], Any]], ...] = (
    ("lower priority", lambda c: c.priority),
    ("shorter running time", lambda c: c.running),
    ("namespace/name", lambda c: c.key),
)


def victim_sort_key(c: Candidate) -> tuple[Any, ...]:
    return tuple(fn(c) for _, fn in VICTIM_ORDER)


@dataclass(frozen=True, slots=True)
class VictimPlan:
    victims: tuple[str, ...]
    resources: tuple[str, ...]
    #: Sum over reclaimed resources of (freed - need) / cluster total.
    excess: float
    #: True when the answer is proven the best by the rule in ``select_victims``.
    exact: bool


NO_VICTIMS = VictimPlan((), (), 0.0, True)


def candidates(
    queues: Sequence[Queue],
    usage: Mapping[str, QueueUsage],
    shares: Mapping[str, Mapping[str, float]],
    resources: Sequence[str],
    now: float,
) -> tuple[list[Candidate], dict[str, tuple[float, ...]]]:
    """Candidates in victim order, and each donor queue's headroom (allocated - deserved,
    never below zero) in the reclaimed resources. Donors: reclaimable queues above deserved
    in a reclaimed resource."""
    out: list[Candidate] = []
    headroom: dict[str, tuple[float, ...]] = {}
    for q in queues:
        if not q.reclaimable:
            continue
        u, d = usage[q.name], shares[q.name]
        room = tuple(max(0.0, u.allocated.get(r, 0.0) - d.get(r, 0.0)) for r in resources)
        if not any(x > _eps(x) for x in room):
            continue
        headroom[q.name] = room
        for pod in u.running:
            if pod.is_terminating:
                continue
            frees = tuple(pod.request(r) for r in resources)
            if not any(f > 0 for f in frees):
                continue
            if any(f > h + _eps(h) for f, h in zip(frees, room, strict=True)):
                continue  # alone it would take its queue below deserved
            out.append(Candidate(pod.key, q.name, pod.priority, pod.running_seconds(now), frees))
    out.sort(key=victim_sort_key)
    return out, headroom


@dataclass(slots=True)
class _Class:
    """Interchangeable candidates: same queue, same request of the reclaimed resources.
    Taking k of them always means the first k in victim order (best for the tie-break)."""

    queue: str
    frees: tuple[float, ...]
    members: list[int]  # positions in the candidate order
    limit: int = 0  # most that fit the queue's headroom alone


@dataclass(slots=True)
class _Best:
    excess: float = math.inf
    count: int = 0
    picks: tuple[int, ...] = ()


def _better(excess: float, count: int, picks: tuple[int, ...], best: _Best) -> bool:
    """least excess, then fewest pods, then earliest in victim order (lexicographic on the
    sorted positions)."""
    tol = 1e-9
    if excess < best.excess - tol:
        return True
    if excess > best.excess + tol:
        return False
    if count != best.count:
        return count < best.count
    return picks < best.picks


def _tidy(
    cands: Sequence[Candidate],
    headroom: Mapping[str, tuple[float, ...]],
    picks: list[int],
    freed: list[float],
    taken: dict[str, list[float]],
    covered: Callable[[Sequence[float]], bool],
    excess_of: Callable[[Sequence[float]], float],
) -> None:
    """Improve a greedy cover in place, never making it worse: drop picks the cover does not
    need (latest first), then swap the last pick for the unpicked candidate that closes the
    remaining gap with the least excess (the earliest among equals). One pass, O(pods)."""
    dims = range(len(freed))

    def take(pos: int, sign: float) -> None:
        c = cands[pos]
        for i in dims:
            freed[i] += sign * c.frees[i]
            taken[c.queue][i] += sign * c.frees[i]

    for pos in reversed(list(picks)):
        if covered([freed[i] - cands[pos].frees[i] for i in dims]):
            picks.remove(pos)
            take(pos, -1.0)
    if not picks:
        return
    last = picks.pop()
    before = excess_of(freed)
    take(last, -1.0)
    chosen = set(picks)
    best_pos, best_excess = last, before
    seen: set[tuple[str, tuple[float, ...]]] = set()
    for pos, c in enumerate(cands):
        shape = (c.queue, c.frees)
        if pos in chosen or shape in seen:
            continue
        seen.add(shape)  # the first unpicked pod of a shape stands for all of them
        room, used = headroom[c.queue], taken[c.queue]
        if any(used[i] + c.frees[i] > room[i] + _eps(room[i]) for i in dims):
            continue
        trial = [freed[i] + c.frees[i] for i in dims]
        if covered(trial) and excess_of(trial) < best_excess - 1e-9:
            best_pos, best_excess = pos, excess_of(trial)
    picks.append(best_pos)
    take(best_pos, 1.0)


def select_victims(
    cands: Sequence[Candidate],
    headroom: Mapping[str, tuple[float, ...]],
    need_vec: tuple[float, ...],
    totals: tuple[float, ...],
    args: QueueArgs | None = None,
) -> tuple[tuple[int, ...], float, bool] | None:
    """Choose positions in ``cands`` that cover ``need_vec`` without taking any queue past
    its headroom, best by: least excess (sum over reclaimed resources of (freed - need) /
    cluster total), then fewest pods, then the set whose sorted positions in victim order
    are lexicographically first. None when no set covers the need.

    Bounded search, never exponential in the number of pods:
    1. a greedy walk over all candidates in victim order, taking a pod when it fits its
       queue's headroom and frees a resource still short;
    2. candidates are grouped into classes (queue, request of the reclaimed resources); an
       exact branch and bound over how many of each class to take, on the first
       ``exactSearchClasses`` classes (by their first member's position), stopping after
       ``searchSteps`` steps.
    The better of the two wins. The answer is exact (the returned flag) when every
    candidate falls in those classes and the search finished within its steps; otherwise it
    is the best over the greedy walk and over sets drawn from those first classes.
    """
    args = args or QueueArgs()
    dims = range(len(need_vec))
    tol = [_eps(n) for n in need_vec]
    best = _Best()

    def excess_of(freed: Sequence[float]) -> float:
        return sum(max(0.0, freed[i] - need_vec[i]) / totals[i] for i in dims if totals[i] > 0)

    def covered(freed: Sequence[float]) -> bool:
        return all(freed[i] >= need_vec[i] - tol[i] for i in dims)

    # 1. greedy in victim order
    taken: dict[str, list[float]] = {q: [0.0] * len(need_vec) for q in headroom}
    freed = [0.0] * len(need_vec)
    picks: list[int] = []
    for pos, c in enumerate(cands):
        if covered(freed):
            break
        if not any(c.frees[i] > 0 and freed[i] < need_vec[i] - tol[i] for i in dims):
            continue
        room, used = headroom[c.queue], taken[c.queue]
        if any(used[i] + c.frees[i] > room[i] + _eps(room[i]) for i in dims):
            continue
        picks.append(pos)
        for i in dims:
            used[i] += c.frees[i]
            freed[i] += c.frees[i]
    if covered(freed):
        _tidy(cands, headroom, picks, freed, taken, covered, excess_of)
        best = _Best(excess_of(freed), len(picks), tuple(sorted(picks)))

    # 2. exact search over counts per class, on a bounded prefix of classes
    by_shape: dict[tuple[str, tuple[float, ...]], _Class] = {}
    for pos, c in enumerate(cands):
        cls = by_shape.get((c.queue, c.frees))
        if cls is None:
            cls = by_shape[(c.queue, c.frees)] = _Class(c.queue, c.frees, [])
        cls.members.append(pos)
    classes = list(by_shape.values())  # insertion order = first member's position
    for cls in classes:
        room = headroom[cls.queue]
        fit = min(
            (int((room[i] + _eps(room[i])) // cls.frees[i]) for i in dims if cls.frees[i] > 0),
            default=0,
        )
        cls.limit = min(len(cls.members), fit)
    classes = [c for c in classes if c.limit > 0]
    searched = classes[: args.exactSearchClasses]
    complete = len(searched) == len(classes)
    # what the classes from i on could free at most (ignores shared headroom: an upper bound)
    reach = [[0.0] * len(need_vec) for _ in range(len(searched) + 1)]
    for k in range(len(searched) - 1, -1, -1):
        reach[k] = [reach[k + 1][i] + searched[k].limit * searched[k].frees[i] for i in dims]
    steps = 0
    exhausted = False
    counts = [0] * len(searched)
    left = {q: list(room) for q, room in headroom.items()}

    def picks_of() -> tuple[int, ...]:
        chosen: list[int] = []
        for cls, k in zip(searched, counts, strict=True):
            chosen.extend(cls.members[:k])
        return tuple(sorted(chosen))

    def dfs(k: int, freed: list[float], count: int) -> None:
        nonlocal steps, exhausted, best
        steps += 1
        if steps > args.searchSteps:
            exhausted = True
            return
        if covered(freed):
            ex = excess_of(freed)
            if ex <= best.excess + 1e-9 and (ex < best.excess - 1e-9 or count <= best.count):
                chosen = picks_of()
                if _better(ex, count, chosen, best):
                    best = _Best(ex, count, chosen)
            return
        if k == len(searched):
            return
        if any(freed[i] + reach[k][i] < need_vec[i] - tol[i] for i in dims):
            return
        lower = excess_of(freed)  # excess only grows as pods are added
        if lower > best.excess + 1e-9 or (lower >= best.excess - 1e-9 and count + 1 > best.count):
            return
        cls = searched[k]
        room = left[cls.queue]
        most = cls.limit
        for i in dims:
            f = cls.frees[i]
            if f > 0:
                most = min(most, int((room[i] + _eps(room[i])) // f))
        # beyond what closes every shortfall this class helps with, more only adds excess
        useful = max(
            (
                math.ceil((need_vec[i] - freed[i] - tol[i]) / cls.frees[i])
                for i in dims
                if cls.frees[i] > 0 and freed[i] < need_vec[i] - tol[i]
            ),
            default=0,
        )
        most = min(most, max(useful, 0))
        for n in range(most, -1, -1):
            if exhausted:
                return
            counts[k] = n
            for i in dims:
                room[i] -= n * cls.frees[i]
            dfs(k + 1, [freed[i] + n * cls.frees[i] for i in dims], count + n)
            for i in dims:
                room[i] += n * cls.frees[i]
        counts[k] = 0

    if searched:
        dfs(0, [0.0] * len(need_vec), 0)
    if best.excess == math.inf:
        return None
    return best.picks, best.excess, complete and not exhausted


# -- the whole evaluation ------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class QueueStatus:
    deserved: Mapping[str, float]
    allocated: Mapping[str, float]
    request: Mapping[str, float]


@dataclass(frozen=True, slots=True)
class QueueDecision:
    status: Mapping[str, QueueStatus]
    starving: tuple[str, ...]
    need: Mapping[str, float]
    plan: VictimPlan


def decide(
    queues: Sequence[Queue],
    nodes: Iterable[Node],
    pods: Sequence[Pod],
    now: float,
    args: QueueArgs | None = None,
) -> QueueDecision:
    """Deserved shares, starving queues, the need and the victims, at ``now``."""
    usage = queue_usage(queues, pods)
    capacity = cluster_capacity(nodes, pods)
    requests = {n: u.request for n, u in usage.items()}
    shares = deserved(queues, requests, capacity.total)
    dims = sorted({r for s in shares.values() for r in s})
    status = {
        q.name: QueueStatus(
            deserved=dict(shares[q.name]),
            allocated={r: usage[q.name].allocated.get(r, 0.0) for r in dims},
            request={r: requests[q.name].get(r, 0.0) for r in dims},
        )
        for q in queues
    }
    hungry = starving(queues, usage, shares)
    short = need(hungry, usage, shares, capacity.free)
    plan = NO_VICTIMS
    if short:
        resources = tuple(sorted(short))
        cands, headroom = candidates(queues, usage, shares, resources, now)
        totals = tuple(capacity.total.get(r, 0.0) for r in resources)
        found = select_victims(cands, headroom, tuple(short[r] for r in resources), totals, args)
        if found is not None:
            positions, excess, exact = found
            plan = VictimPlan(tuple(cands[p].key for p in positions), resources, excess, exact)
        else:
            plan = VictimPlan((), resources, 0.0, True)
    return QueueDecision(status, tuple(hungry), short, plan)


def _rounded(amounts: Mapping[str, float]) -> dict[str, float]:
    """Report figures without float noise (6.999999999 -> 7.0): cores and bytes both read
    fine at 1e-6."""
    return {r: round(q, 6) for r, q in amounts.items()}


def simulate_section(scenario: Scenario) -> dict[str, Any] | None:
    """The report's ``queues`` key: per queue deserved/allocated/request, the victims in
    victim order; also the starving queues, the need and whether the victim search was
    exact. None when the scenario has no Queue."""
    args = parse_args(scenario.config_section("queues"))  # a bad config is refused even unused
    raws = scenario.store.raw.get(KIND) or []
    if not raws:
        return None
    queues = parse_queues(raws)
    result = decide(queues, scenario.store.nodes.values(), scenario.store.pods, scenario.now, args)
    return {
        "queues": {
            name: {
                "deserved": _rounded(s.deserved),
                "allocated": _rounded(s.allocated),
                "request": _rounded(s.request),
            }
            for name, s in result.status.items()
        },
        "starving": list(result.starving),
        "need": _rounded(result.need),
        "victims": list(result.plan.victims),
        "exactVictimSearch": result.plan.exact,
    }
