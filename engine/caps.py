"""CPU cap arithmetic: the lowest cap a pod may get, one throttle step, and how a pod cap
is split across its containers (DESIGN.md "Executor", points 5 and 6)."""

from __future__ import annotations

from agent.model.batch import cpu_limit
from agent.model.objects import Node, Pod
from agent.model.policy import CpuThrottle
from agent.model.registry import CPU
from agent.model.usage import PodUsage

#: The smallest cap the kernel enforces: a CFS quota of 1 ms per the kubelet's 100 ms
#: period (the kernel refuses less). A lower cap would be credited but never hold.
MIN_CPU_CAP = 0.01


def ceiling(pod: Pod, node: Node) -> float:
    """The cap a pod returns to: its CPU limit (a batch pod's from its ``batch-cpu``
    limit, ``agent.model.batch.cpu_limit``), or the node's cores when it has none."""
    return cpu_limit(pod) or node.cpu_cores


def throttle_floor(pod: Pod, throttle: CpuThrottle, node: Node) -> float:
    """The lowest cap a pod may get: its CPU request, and minCPURatio% of its CPU limit
    (of the node's cores when it has no limit), whichever is higher; never below the
    kernel's smallest quota (MIN_CPU_CAP)."""
    return max(pod.request(CPU), throttle.min_cpu_ratio / 100.0 * ceiling(pod, node), MIN_CPU_CAP)


def throttle_step(pod: Pod, throttle: CpuThrottle, node: Node) -> float:
    return throttle.step_cpu_ratio / 100.0 * ceiling(pod, node)


def split_cap(pod: Pod, usage: PodUsage, cap: float) -> dict[str, float]:
    """Split a pod cap across its containers by their usage (equally when unknown)."""
    names = [c.name for c in pod.containers] or list(usage.containers)
    if not names:
        return {}
    shares = [usage.containers[n].cpu if n in usage.containers else None for n in names]
    known = [s for s in shares if s is not None and s > 0]
    if len(known) == len(names):
        total = sum(known)
        return {n: cap * (s or 0.0) / total for n, s in zip(names, shares, strict=True)}
    return {n: cap / len(names) for n in names}
