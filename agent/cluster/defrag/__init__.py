"""Defragmentation: empty the least-used nodes by moving their pods onto the fullest ones.

Utilization of a node = sum of the requests of its active pods / allocatable, in percent,
of one resource (``resourceType``: cpu, memory, or an extended resource such as
nvidia.com/gpu). The plan is a list of ``<pod, source node, target node>`` triplets:

* Acts only when there are more source nodes than ``numberOfNodes`` (as the descheduler's
  HighNodeUtilization does: a gate, not a cap).
* Sources: utilization below ``lowThresholds``, least used first (then by name); never
  nodes labelled ``critical=true``, never nodes whose ``qos.waterline.io/last-defrag-time``
  annotation is younger than ``coolDownTime`` (an unreadable annotation counts as young:
  we would rather skip a node than churn it), and never nodes that hold an Available
  reservation (that capacity is promised to an incoming pod, so the node will not empty).
* Targets: utilization in (``defragmentThresholds``, ``protectionThresholds``), fullest
  first (then by name); never sources, cordoned or NotReady nodes.
* Pods of a source, largest request first (then namespace/name): DaemonSet pods, mirror
  pods and pods already terminating stay and do not keep the node from being freed; every
  other pod must pass the migratability filters (``migratable``: a controller owner that is not a
  DaemonSet, not a mirror pod, not annotated protected, namespace allowed by
  ``evictableNamespaces``, no local storage and no claim on a volume tied to the node
  unless annotated ``qos.waterline.io/evictable: "true"``, not a reservation's
  placeholder) and must find a target that passes every placement check
  (agent/cluster/placement.py, with the protection threshold) -- otherwise nothing moves
  off that source. The pods that may not move are reported with their reason
  (``not_migratable``; ``skipped`` names the first of a source).
* The snapshot is updated as the plan grows: a target's utilization, pods, pod count and
  reservations include what was planned onto it, and the target order follows it.
* Nodes with no allocatable of the resource take no part (neither source nor target) and
  are left out of the utilization report.
* A source with nothing that must move (empty, or only DaemonSet/mirror pods) counts as
  freed: after the plan it can be drained and removed like the others.

The plan also reports, for the resource, the cluster's *fragmentation* before and after:
the share (0..1) of free capacity, over Ready and schedulable nodes, that sits on nodes
whose free capacity is smaller than the median pod request (median over active pods that
request the resource). Free capacity excludes what reservations hold.

Files: ``args`` (DefragArgs), ``migratable`` (the migratability filters), ``targets`` (the sorted
target set), ``plan`` (the plan).
"""

from __future__ import annotations

from agent.cluster.defrag.args import DefragArgs
from agent.cluster.defrag.migratable import (
    PLACEHOLDER_LABEL,
    Storage,
    is_placeholder,
    storage_reason,
    why_not_migratable,
)
from agent.cluster.defrag.plan import (
    LAST_DEFRAG_ANNOTATION,
    DefragPlan,
    Migration,
    fragmentation,
    migratable,
    plan,
    plan_defrag,
    stays,
)
from agent.cluster.engine import Engine

ENGINE = Engine("defrag", DefragArgs, plan)

__all__ = [
    "ENGINE",
    "LAST_DEFRAG_ANNOTATION",
    "PLACEHOLDER_LABEL",
    "DefragArgs",
    "DefragPlan",
    "Migration",
    "Storage",
    "fragmentation",
    "is_placeholder",
    "migratable",
    "plan",
    "plan_defrag",
    "stays",
    "storage_reason",
    "why_not_migratable",
]
