"""The CPU caps in force while a tick's figures were measured, by pod (cores).

What the kernel measured of a throttled pod is its cap, not its demand, so a sample marks
such a pod ``capped`` with the cap beside its usage. Two sources:

* ``OwnCaps`` when the capture itself acts (local mode): the figures of a tick were taken
  over the interval that followed the previous tick, under the caps that tick left in
  force, exactly as the decision core recorded them (so a replay with the same policies
  computes the very same caps);
* ``QuotaCaps`` when something else acts (on a cluster node the DaemonSet agent does; the
  capture only watches): the container quotas read from the cgroup tree at the tick. A pod
  is capped when every container has a quota and their sum is below the pod's CPU limit
  (or the pod has none): the limits kubelet writes are not caps. A cap changed during the
  interval is seen at its new value.
"""

from __future__ import annotations

from collections.abc import Mapping

from agent.model.batch import cpu_limit
from agent.model.objects import Pod
from agent.node.loop import TickOutcome
from collectors.cpu_quota import V1_PERIOD, V1_QUOTA, V2_MAX, parse_quota
from collectors.files import read_bytes
from collectors.layout import PodCgroupLayout

#: A quota sum within this many cores of the pod's limit is the limit (quotas are whole us).
SAME_CAP = 1e-3


class OwnCaps:
    """The caps this capture's own agent left in force at the previous tick."""

    def __init__(self) -> None:
        self._last: dict[str, float] = {}

    def __call__(self, outcome: TickOutcome) -> Mapping[str, float]:
        before, self._last = self._last, dict(outcome.caps)
        return before


class QuotaCaps:
    """The caps the cgroup tree holds now, whoever wrote them."""

    def __init__(self, cpu_root: str, version: int, layout: PodCgroupLayout) -> None:
        self.cpu_root = cpu_root
        self.version = version
        self.layout = layout

    def _cores(self, rel: str) -> float | None:
        """A container's quota in cores; None when unlimited or unreadable."""
        base = f"{self.cpu_root}/{rel}"
        try:
            if self.version == 1:
                text = read_bytes(f"{base}/{V1_QUOTA}", 64).decode()
                quota, period = parse_quota(1, text, read_bytes(f"{base}/{V1_PERIOD}", 64).decode())
            else:
                quota, period = parse_quota(2, read_bytes(f"{base}/{V2_MAX}", 64).decode())
        except (OSError, ValueError, UnicodeDecodeError):
            return None
        return None if quota is None or period <= 0 else quota / period

    def pod_cap(self, pod: Pod) -> float | None:
        found = self.layout.locate(pod)
        if found is None or not found.containers:
            return None
        cores = [self._cores(rel) for rel in found.containers.values()]
        if any(c is None for c in cores):
            return None  # a container without a quota: the pod is not capped
        total = sum(c for c in cores if c is not None)
        limit = cpu_limit(pod)  # a batch pod's limit from its batch-cpu is no cap either
        return total if limit is None or total < limit - SAME_CAP else None

    def __call__(self, outcome: TickOutcome) -> Mapping[str, float]:
        caps = {}
        for pod in outcome.pods:
            cap = self.pod_cap(pod)
            if cap is not None:
                caps[pod.key] = cap
        self.layout.retain({p.uid for p in outcome.pods})
        return caps
