"""What each queue holds, asks for and deserves: usage by queue label, the cluster's
capacity, deserved shares by weighted water-filling (as Volcano's proportion plugin), the
starving queues and what they need."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from agent.cluster.engine import slack
from agent.model.objects import Namespace, Node, Pod, Resources
from agent.model.queue import QUEUE_LABEL, Queue

#: Water-filling rounds before the fixed point is taken as reached (it converges in far
#: fewer: each round satisfies at least one queue unless guarantees overshoot).
MAX_ROUNDS = 10_000


# -- small vector helpers (resources as plain dicts) -------------------------------------
def _add(into: dict[str, float], amounts: Mapping[str, float]) -> None:
    for r, q in amounts.items():
        into[r] = into.get(r, 0.0) + q


# -- queue usage ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class QueueUsage:
    """What a queue holds and asks for. request = allocated + pending."""

    allocated: Resources
    pending: Resources
    running: tuple[Pod, ...]
    #: Its pending pods (``is_pending``), in the order given.
    waiting: tuple[Pod, ...]

    @property
    def pending_pods(self) -> int:
        return len(self.waiting)

    @property
    def request(self) -> dict[str, float]:
        out = dict(self.allocated)
        _add(out, self.pending)
        return out


def is_pending(pod: Pod) -> bool:
    return pod.phase == "Pending" and not pod.node_name and not pod.is_terminating


#: Why a pod is in no queue: its label names a Queue that does not exist.
UNKNOWN_QUEUE = "UnknownQueue"
_EMPTY_NAME = '""'


def unknown_queue(
    queues: Sequence[Queue], pods: Iterable[Pod], namespaces: Mapping[str, Namespace] | None = None
) -> dict[str, str]:
    """Pods (running or pending) whose queue label names no Queue, each with the reason
    ``UnknownQueue <name>`` (``""`` for an empty label): ``queue_usage`` leaves them out
    (they still use capacity), and a pod that vanished from every figure without a word
    would look served, or forgotten. A terminating pod, or one of a terminating namespace,
    is leaving (its Queue may have gone first): nothing to report."""
    names = {q.name for q in queues}
    going = {n.name for n in (namespaces or {}).values() if n.terminating}
    out = {}
    for pod in pods:
        queue = pod.labels.get(QUEUE_LABEL)
        if queue is None or queue in names or pod.is_terminating or pod.namespace in going:
            continue
        if pod.is_active or is_pending(pod):
            out[pod.key] = f"{UNKNOWN_QUEUE} {queue or _EMPTY_NAME}"
    return dict(sorted(out.items()))


def queue_usage(queues: Sequence[Queue], pods: Iterable[Pod]) -> dict[str, QueueUsage]:
    """Group pods by their queue label; pods of unknown queues are left out
    (``unknown_queue`` names them)."""
    names = {q.name for q in queues}
    allocated: dict[str, dict[str, float]] = {n: {} for n in names}
    pending: dict[str, dict[str, float]] = {n: {} for n in names}
    running: dict[str, list[Pod]] = {n: [] for n in names}
    waiting: dict[str, list[Pod]] = {n: [] for n in names}
    for pod in pods:
        queue = pod.labels.get(QUEUE_LABEL)
        if queue not in names:
            continue
        if pod.is_active:
            _add(allocated[queue], pod.requests)
            running[queue].append(pod)
        elif is_pending(pod):
            _add(pending[queue], pod.requests)
            waiting[queue].append(pod)
    return {
        n: QueueUsage(allocated[n], pending[n], tuple(running[n]), tuple(waiting[n])) for n in names
    }


@dataclass(frozen=True, slots=True)
class Capacity:
    """The cluster as queue preemption sees it: total and free per resource."""

    total: Resources
    free: Resources


def cluster_capacity(nodes: Iterable[Node], used: Mapping[str, Mapping[str, float]]) -> Capacity:
    """``used``: the requests of the active pods on each Ready, schedulable node (the
    placement snapshot's count, which the plan goes on with)."""
    ready = {n.name: n for n in nodes if n.ready}
    total: dict[str, float] = {}
    for node in ready.values():
        _add(total, node.allocatable)
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
    fill = _Fill.of(queues, requests, total)
    dims, eps = fill.dims, fill.eps
    share = {q.name: dict.fromkeys(dims, 0.0) for q in queues}
    remaining = dict(fill.totals)
    satisfied: set[str] = set()
    for _ in range(MAX_ROUNDS):
        weight = sum(q.weight for q in queues if q.name not in satisfied)
        if weight == 0:
            break
        before = dict(remaining)
        delta = fill.round(queues, share, before, weight, satisfied)
        for r in dims:
            remaining[r] -= delta[r]
        if all(abs(remaining[r]) <= eps[r] for r in dims):
            break
        if all(abs(remaining[r] - before[r]) <= eps[r] for r in dims):
            break
    _trim_to_total(share, fill.guarantee, fill.totals, dims)
    return share


@dataclass(frozen=True, slots=True)
class _Fill:
    """The fixed inputs of water-filling, per queue name and resource: guarantees (scaled
    down where together they exceed the total), caps and requests."""

    dims: list[str]
    totals: dict[str, float]
    guarantee: dict[str, dict[str, float]]
    cap: dict[str, dict[str, float]]
    request: dict[str, dict[str, float]]
    eps: dict[str, float]

    @classmethod
    def of(
        cls, queues: Sequence[Queue], requests: Mapping[str, Resources], total: Resources
    ) -> _Fill:
        dims = sorted(
            {r for q in queues for r in q.guarantee}
            | {r for q in queues for r in requests.get(q.name, {})}
        )
        totals = {r: max(0.0, total.get(r, 0.0)) for r in dims}
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
        return cls(dims, totals, guarantee, cap, request, {r: slack(totals[r]) for r in dims})

    def round(
        self,
        queues: Sequence[Queue],
        share: dict[str, dict[str, float]],
        before: Mapping[str, float],
        weight: int,
        satisfied: set[str],
    ) -> dict[str, float]:
        """One round: every unsatisfied queue gets its weighted part of what remained
        (``before``), within its bounds; returns the total handed out per resource."""
        dims, eps = self.dims, self.eps
        delta = dict.fromkeys(dims, 0.0)
        for q in queues:
            if q.name in satisfied:
                continue
            old, cap, request = share[q.name], self.cap[q.name], self.request[q.name]
            new = {
                r: max(
                    min(old[r] + before[r] * q.weight / weight, cap[r], request[r]),
                    self.guarantee[q.name][r],
                )
                for r in dims
            }
            share[q.name] = new
            covered = all(request[r] <= new[r] + eps[r] for r in dims)
            unchanged = all(abs(new[r] - old[r]) <= eps[r] for r in dims)
            if covered or unchanged:
                satisfied.add(q.name)
            for r in dims:
                delta[r] += new[r] - old[r]
        return delta


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
            amount > 0 and u.allocated.get(r, 0.0) < d.get(r, 0.0) - slack(d.get(r, 0.0))
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
        if short > slack(amount):
            out[r] = short
    return out
