"""Queue-proportional preemption: deserved shares by weighted water-filling, starving
queues, and for their pending pods the node where the fewest, cheapest victims make each
fit.

A pod joins a queue through its label ``qos.waterline.io/queue``; the Queue record and
its parser are ``agent.model.queue``.

Decisions where DESIGN.md is silent (what an operator of a large cluster would expect):

* The cluster total is the allocatable of Ready nodes; free capacity is counted on Ready,
  schedulable nodes only, per node (allocatable minus the requests of its active pods,
  never below zero), since a pending pod cannot use a cordoned node's room.
* allocated = requests of the queue's active pods (bound to a node, not finished), so a
  bound pod still in phase Pending holds its share; pending = phase Pending without a node.
  Pods naming a queue that does not exist belong to no queue (they still use capacity);
  the plan names them (``skipped``: ``UnknownQueue <name>``), so that none vanishes
  without a word (the controller warns once per pod, with a Warning Event on it).
* Resources are the ones the queues request or guarantee; ``pods`` is not a queue resource.
* If the guarantees of all queues exceed the cluster total in a resource, they are scaled
  down in proportion to fit it, so deserved never sums above the total.
* Victims are active, non-terminating pods. A pod that frees none of what the pending pod
  lacks on its node (a resource or a pod slot) is never a victim for it.

Fit-aware reclaim (``reclaim``): the queue-level figures above (deserved, starving, need)
say who may take and who may give; *where* is decided pod by pod, as the scheduler and
Volcano's reclaim do, on a placement snapshot (``agent.cluster.placement``: every
requested resource against allocatable, the pod count, nodeSelector, required node
affinity, taints and tolerations, hostname anti-affinity; the one reading of "fits" that
defrag and DaemonSet preemption share):

* Pending pods of the starving queues are served queue by queue (in the order of
  ``starving``), each queue's pods higher priority first, then older, then namespace/name.
* A pod that fits a Ready, schedulable node as things stand needs no victim (``fitsNow``);
  the plan counts it on the first such node by name (the scheduler picks its own node;
  this only tells later pods of the plan that the room is taken). Else:
* A pod nominated to a node (``status.nominatedNodeName``) where pods of no higher
  priority are still terminating gets no more victims (``VictimsLeaving <node>``): its
  victims are leaving; the plan counts it on that node. The scheduler's own rule: without
  it, every round until the victims are gone would take another set.
* ``preemptionPolicy: Never``: no victims (``PreemptionPolicyNever``), as the scheduler.
* A pod that would take its queue above deserved in a queue resource it requests
  (allocated, with the pods placed before it, + its request) gets no victims
  (``AboveDeserved``): Volcano's reclaim asks the same of its proportion plugin.
* Otherwise, on each node that passes the pod's selector, affinity, taints and
  anti-affinity: the resources it lacks there (its *shortfall*, pod slots included) are
  the resources being reclaimed. Candidates: running pods of reclaimable queues above
  deserved, never ``volcano.sh/preemptable: "false"``, never terminating, never one whose
  PodDisruptionBudget allows no more disruptions (counting the victims the plan already
  took), in victim order (``victims``: priority, pod-deletion-cost, eviction-cost, running
  time). A set is allowed when no queue loses more than (allocated - deserved) in a
  resource being reclaimed (when only pod slots are short: in the pod's own resources) and
  no budget is overdrawn. The node's answer: the fewest pods that cover the shortfall,
  then the first such set in victim order (sets of one size tried in lexicographic order
  of victim-order positions, over the first ``exactSearchClasses`` candidates, while the
  plan's ``searchSteps`` sets last, skipping the sets whose pods are too small to cover;
  else a greedy walk in victim order, tidied most
  expensive first). The exact search runs only for the nodes that come up best by their
  greedy answer's lower bound; per shape of pod, each node's answer is kept while no pod
  lands there and its victims are still allowed.
* The pod goes to the node with the fewest victims, then the cheapest (their victim-order
  keys compared in order), then the name; before its victims are evicted, a placeholder
  pod of its shape is created and nominated there (``status.nominatedNodeName``) to hold
  the room they free, and handed to the pod once it is all free (``holding.py``; the pod
  itself is nominated only then). None: ``NoNodeFits`` with
  the count of nodes per reason, as the scheduler's message counts them (``no allowed
  victims for <resource>`` where queue pods hold the room but none may go, apart from
  ``Insufficient <resource>``, a node too small even with them gone).
* The snapshot follows the plan: victims leave, the pod lands, budgets and headroom shrink.

Decisions where DESIGN.md is silent: the plan does not look ahead. The cheapest victims for
one pod are not always the ones that would also make room for the queue's next pod (one
3-cpu victim could seat two 2-cpu pods where the cheapest, a 2-cpu victim, seats one):
each pod gets the fewest, cheapest victims for itself, which the scheduler can then be
seen to honour. No priority check between a pending pod and its victims: fair share, not
priority, decides between queues (as Volcano's reclaim). ``need`` is still reported: it
is the queue-level shortfall; the victims no longer have to cover it.

Files: ``args`` (QueueArgs), ``shares`` (usage, capacity, deserved, starving, need),
``victims`` (candidates, their order, donors' headroom, disruption budgets), ``reclaim``
(the pod-by-pod walk), ``plan`` (the plan).
"""

from __future__ import annotations

from agent.cluster.engine import Engine
from agent.cluster.queues.args import QueueArgs
from agent.cluster.queues.plan import QueuePlan, QueueStatus, decide, plan
from agent.cluster.queues.reclaim import Reclaim, Reclaimed, reclaim
from agent.cluster.queues.shares import deserved, need, queue_usage, starving
from agent.cluster.queues.victims import VICTIM_ORDER, VictimCandidate

ENGINE = Engine("queues", QueueArgs, plan)

__all__ = [
    "ENGINE",
    "QueueArgs",
    "QueuePlan",
    "QueueStatus",
    "VICTIM_ORDER",
    "Reclaim",
    "Reclaimed",
    "VictimCandidate",
    "decide",
    "deserved",
    "need",
    "plan",
    "queue_usage",
    "reclaim",
    "starving",
]
