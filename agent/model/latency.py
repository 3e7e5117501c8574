"""Which pods are *latency-critical*: the victims whose interference the ``lc_*`` metrics
report (DESIGN.md "Interference seen by the victims").

Pods labelled ``qos.waterline.io/latency-critical: "true"``; when no pod of the node is
labelled, its Guaranteed pods (what a cluster without the label protects: the pods that
asked for a fixed share of the node). A label on any pod switches the node to the label,
so a user who labels one pod is not surprised by the others still counting.

Pods without a cgroup to read (not running, being deleted) are filtered by the
collectors, which simply find no figure for them.
"""

from __future__ import annotations

from collections.abc import Iterable

from agent.model.objects import GUARANTEED, Pod

LATENCY_CRITICAL_LABEL = "qos.waterline.io/latency-critical"


def is_labelled(pod: Pod) -> bool:
    return pod.labels.get(LATENCY_CRITICAL_LABEL) == "true"


def latency_critical(pods: Iterable[Pod]) -> list[Pod]:
    """The node's latency-critical pods, in the order given."""
    pods = list(pods)
    labelled = [p for p in pods if is_labelled(p)]
    if labelled:
        return labelled
    return [p for p in pods if p.qos_class == GUARANTEED]
