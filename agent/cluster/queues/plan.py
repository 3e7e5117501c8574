"""The queue preemption plan of a snapshot: deserved shares, starving queues, the need and
the victims (the rules are in the package docstring)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from agent.cluster.queues.args import QueueArgs
from agent.cluster.queues.shares import cluster_capacity, deserved, need, queue_usage, starving
from agent.cluster.queues.victims import candidates, select_victims
from agent.model.objects import Node, Pod
from agent.model.queue import Queue
from agent.model.store import ObjectStore


@dataclass(frozen=True, slots=True)
class QueueStatus:
    deserved: Mapping[str, float]
    allocated: Mapping[str, float]
    request: Mapping[str, float]


@dataclass(frozen=True, slots=True)
class QueuePlan:
    status: Mapping[str, QueueStatus] = field(default_factory=dict)
    starving: tuple[str, ...] = ()
    need: Mapping[str, float] = field(default_factory=dict)
    #: Pod keys to evict, in victim order.
    victims: tuple[str, ...] = ()
    #: The resources being reclaimed (those with a positive need), sorted.
    resources: tuple[str, ...] = ()
    #: Sum over reclaimed resources of (freed - need) / cluster total.
    excess: float = 0.0
    #: True when the victims are proven the best by the rule in ``select_victims``.
    exact: bool = True


def plan(snapshot: ObjectStore, args: QueueArgs, now: float) -> QueuePlan:
    return decide(snapshot.queues, snapshot.nodes.values(), snapshot.pods, now, args)


def decide(
    queues: Sequence[Queue],
    nodes: Iterable[Node],
    pods: Sequence[Pod],
    now: float,
    args: QueueArgs | None = None,
) -> QueuePlan:
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
    hungry = tuple(starving(queues, usage, shares))
    short = need(hungry, usage, shares, capacity.free)
    if not short:
        return QueuePlan(status, hungry, short)
    resources = tuple(sorted(short))
    cands, headroom = candidates(queues, usage, shares, resources, now)
    totals = tuple(capacity.total.get(r, 0.0) for r in resources)
    found = select_victims(cands, headroom, tuple(short[r] for r in resources), totals, args)
    if found is None:
        return QueuePlan(status, hungry, short, resources=resources)
    victims = tuple(cands[p].key for p in found.picks)
    return QueuePlan(status, hungry, short, victims, resources, found.excess, found.exact)
