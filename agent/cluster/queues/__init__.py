"""Queue-proportional preemption: deserved shares by weighted water-filling, starving
queues, and the fewest, tightest victims that give a starving queue its share back.

A pod joins a queue through its label ``qos.waterline.io/queue``; the Queue record and
its parser are ``agent.model.queue``.

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

Files: ``args`` (QueueArgs), ``shares`` (usage, capacity, deserved, starving, need),
``victims`` (candidates and the bounded search), ``plan`` (the plan).
"""

from __future__ import annotations

from agent.cluster.engine import Engine
from agent.cluster.queues.args import QueueArgs
from agent.cluster.queues.plan import QueuePlan, QueueStatus, decide, plan
from agent.cluster.queues.shares import deserved, need, queue_usage, starving
from agent.cluster.queues.victims import VictimCandidate, VictimChoice, select_victims

ENGINE = Engine("queues", QueueArgs, plan)

__all__ = [
    "ENGINE",
    "QueueArgs",
    "QueuePlan",
    "QueueStatus",
    "VictimCandidate",
    "VictimChoice",
    "decide",
    "deserved",
    "need",
    "plan",
    "queue_usage",
    "select_victims",
    "starving",
]
