"""DaemonSet preemption: make room on its node for a DaemonSet pod that cannot fit there.

A DaemonSet pod is bound to one node (spec.nodeName, or a required node affinity on
``metadata.name`` as the DaemonSet controller writes it). When it stays Pending past
``preemptionStartDelay`` and the node's allocatable minus the requests of its active pods
cannot hold it (every resource it requests, plus one pod slot), victims are chosen on that
node by the configured strategies, tried in order.

Decisions where DESIGN.md is silent:

* Fit is checked against requests, as the scheduler does, by the placement check every
  planner shares (``agent.cluster.placement.shortfall``): active pods are the pods bound to
  the node and not finished (terminating pods still hold their room until they are gone,
  but are never chosen again as victims).
* A pod placed by the scheduler (bound by node affinity, not ``spec.nodeName``) that the
  node's selector, required affinity, taints or hostname anti-affinity refuse gets no
  victims (``strategy: null``): evicting pods would not let the scheduler place it.
* A pod without creationTimestamp has an unknown age and is taken as past the delay.
* A pending DaemonSet pod whose node is unknown, or whose affinity names several nodes, is
  skipped (there is no single node to make room on).
* The strategy ``multiple`` skips a pod that frees none of what is still short (evicting it
  would not bring the pod closer to fitting).
* Pending pods that fit, or are younger than the delay, produce no entry; the plan lists
  every pending DaemonSet pod bound to a known node (``pending``) so that a report can tell
  "nothing pending" from "nothing to do".

Files: ``args`` (DaemonSetArgs), ``plan`` (fit, victims, strategies, the plan).
"""

from __future__ import annotations

from agent.cluster.daemonset.args import MULTIPLE, SINGLE, STRATEGIES, DaemonSetArgs
from agent.cluster.daemonset.plan import (
    CLASS_NAMES,
    OPT_OUT_LABEL,
    OPTED_OUT,
    OWNER,
    REGULAR,
    DaemonSetPlan,
    Preemption,
    decide,
    deviation,
    dominant_resource,
    may_preempt,
    owner_uids,
    pending_daemonset_pods,
    plan,
    victim_class,
)
from agent.cluster.engine import Engine

ENGINE = Engine("daemonset", DaemonSetArgs, plan)

__all__ = [
    "CLASS_NAMES",
    "ENGINE",
    "MULTIPLE",
    "OPTED_OUT",
    "OPT_OUT_LABEL",
    "OWNER",
    "REGULAR",
    "SINGLE",
    "STRATEGIES",
    "DaemonSetArgs",
    "DaemonSetPlan",
    "Preemption",
    "decide",
    "deviation",
    "dominant_resource",
    "may_preempt",
    "owner_uids",
    "pending_daemonset_pods",
    "plan",
    "victim_class",
]
