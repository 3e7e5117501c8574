"""The queue preemption plan of a snapshot: deserved shares, starving queues, the need, and
for the starving queues' pending pods the node and victims that make each fit (the rules
are in the package docstring)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from agent.cluster.queues.args import QueueArgs
from agent.cluster.queues.reclaim import Reclaim, reclaim, usable_snapshot
from agent.cluster.queues.shares import (
    cluster_capacity,
    deserved,
    need,
    queue_usage,
    starving,
    unknown_queue,
)
from agent.cluster.queues.victims import unreadable_costs
from agent.model.objects import Node, Pod, PodDisruptionBudget
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
    #: The queue-level shortfall (DESIGN.md): what the starving queues lack beyond free.
    need: Mapping[str, float] = field(default_factory=dict)
    #: One per pending pod given victims: the pod, its node, its victims.
    reclaims: tuple[Reclaim, ...] = ()
    #: Pending pods of starving queues that fit without a victim.
    fits_now: tuple[str, ...] = ()
    #: Pending pods of starving queues served without victims, and why.
    unplaced: Mapping[str, str] = field(default_factory=dict)
    #: True when every victim set is proven the fewest, then cheapest, on its node.
    exact: bool = True
    #: Pods left out of every queue, and why (``UnknownQueue <name>``; ``plan`` fills it,
    #: with the namespaces at hand).
    skipped: Mapping[str, str] = field(default_factory=dict)
    #: Running pods of the queues whose cost annotation is not an integer (pod key ->
    #: annotation -> value): read as 0, and named so the user learns it.
    unreadable_costs: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    @property
    def victims(self) -> tuple[str, ...]:
        """Pod keys to evict: the reclaims' victims, in the order the pods were served."""
        return tuple(v for r in self.reclaims for v in r.victims)

    def chosen_for(self) -> dict[str, Reclaim]:
        """Each victim's reclaim: the pod it is evicted for and the node."""
        return {v: r for r in self.reclaims for v in r.victims}


def plan(snapshot: ObjectStore, args: QueueArgs, now: float) -> QueuePlan:
    done = decide(snapshot.queues, snapshot.nodes.values(), snapshot.pods, now, args, snapshot.pdbs)
    return replace(done, skipped=unknown_queue(snapshot.queues, snapshot.pods, snapshot.namespaces))


def decide(
    queues: Sequence[Queue],
    nodes: Iterable[Node],
    pods: Sequence[Pod],
    now: float,
    args: QueueArgs | None = None,
    pdbs: Sequence[PodDisruptionBudget] = (),
) -> QueuePlan:
    """Deserved shares, starving queues, the need and the reclaims, at ``now``."""
    args = args or QueueArgs()
    nodes = list(nodes)
    usage = queue_usage(queues, pods)
    snapshot = usable_snapshot(nodes, pods)
    capacity = cluster_capacity(nodes, {name: s.used for name, s in snapshot.states.items()})
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
    # every queue's running pods, not only the donors': a queue may become one next round
    bad = unreadable_costs(p for u in usage.values() for p in u.running)
    if not hungry:
        return QueuePlan(status, hungry, short, unreadable_costs=bad)
    done = reclaim(queues, usage, shares, hungry, snapshot, pods, pdbs, now, args)
    return QueuePlan(status, hungry, short, done.reclaims, done.fits_now, done.unplaced,
                     done.exact, unreadable_costs=bad)  # fmt: skip
