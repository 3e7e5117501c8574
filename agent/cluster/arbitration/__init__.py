"""Arbitration of PodMigrationJobs: which pending jobs may start migrating this round.

One round (every ``interval`` seconds) takes the pending jobs, fails those that can never
run, orders the rest, and walks the order letting a job pass while the disruption it adds
stays within the per-node, per-namespace and per-workload budgets. Jobs that are Running
count as migrating, and so does every job passed earlier in the same round. At most
``select_count`` jobs pass a round; they go to a queue drained at ``processQueueQPS``.

Files: ``args`` (ArbitrationArgs), ``index`` (workloads by root owner), ``plan`` (the round).

Decisions made where DESIGN.md is silent (what an SRE on a large cluster would expect):

* "A batch Job already has pods migrating" is read at the start of the round (Running
  jobs); jobs passing during the round do not reorder it.
* Non-retryable failures are decided before the ordering: a failed job counts against no
  limit, so where it would have sat in the walk changes nothing. ForbiddenMigratePod
  covers ownerless, DaemonSet, mirror, protected-annotated and system-critical pods
  (``plan.FORBIDDEN``, checked in that order: the message names the first that applies).
* The retryable checks run in DESIGN's order: PodAlreadyMigrating, ExpectedReplicas (one
  replica, or an unavailable limit equal to the replicas after resolving a percentage,
  unless the pod is annotated ``qos.waterline.io/evictable: "true"``), MaxMigratingTotal
  (Running jobs, one per job, plus those passed this round), then the node, namespace
  and workload limits.
* ``spec.paused`` jobs are left alone and reported waiting as ``Paused``; a second job for
  a pod already migrating (Running, or passed earlier this round) waits as
  ``PodAlreadyMigrating`` rather than evicting the pod twice.
* A pod is *ownerless* when it has no ownerReferences. Its workload is its controller
  owner, or its first owner when none is marked controller.
* Workloads are counted at the Deployment when a ReplicaSet's Deployment is known, so
  the old and new ReplicaSets of a rollout share one budget. The Deployment is found via
  the ReplicaSet object's controller owner (by uid, else by name); when the ReplicaSet
  object is absent, a Deployment in the pod's namespace named exactly like the
  ReplicaSet, else like the ReplicaSet minus its last ``-hash`` suffix, is taken.
* Replicas come from that object's ``spec.replicas`` (a Job's ``parallelism``); when the
  object is unknown or gives none, the number of the workload's live pods is used.
* Unavailable pods are the workload's live pods (not Succeeded/Failed) that are not
  ready or are being deleted; the candidate itself is never counted, so a crash-looping
  pod can still be moved off a bad node.
* A Running job whose pod is gone (evicted, replacement not ready yet) still counts in
  its pod's namespace, and on the node it left when the migrator recorded it (annotation
  ``migration.qos.waterline.io/source-node``); ``status.nodeName`` is where the pod goes.
* ``spec.priorityClassName`` naming no known PriorityClass counts as priority 0.
* Workload limits accept an integer or a percentage of replicas (``"20%"``, rounded down,
  never below 1); node and namespace limits are integers, ``null`` meaning no limit.
"""

from __future__ import annotations

from agent.cluster.arbitration.args import (
    ArbitrationArgs,
    default_workload_limit,
    resolve_workload_limit,
)
from agent.cluster.arbitration.index import ClusterIndex
from agent.cluster.arbitration.plan import (
    ORDER,
    ArbitrationPlan,
    JobCandidate,
    Verdict,
    order_candidates,
    plan,
)
from agent.cluster.engine import Engine

#: Not switchable: passed jobs are started (the queue drains them); that is the point.
ENGINE = Engine("arbitration", ArbitrationArgs, plan, switchable=False)

__all__ = [
    "ENGINE",
    "ORDER",
    "ArbitrationArgs",
    "ArbitrationPlan",
    "ClusterIndex",
    "JobCandidate",
    "Verdict",
    "default_workload_limit",
    "order_candidates",
    "plan",
    "resolve_workload_limit",
]
