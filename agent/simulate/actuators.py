"""Simulated actuators: an Eviction API that honours PodDisruptionBudgets the way the API
server does, a CPU throttler that remembers caps, a CPU isolator that remembers the
idle and burst marks, and a batch limiter that remembers the batch pods' limits. Used by
`simulate` and tests."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from agent.model.batch import BatchLimits
from agent.model.eviction import EvictionResult
from agent.model.isolation import IsolationSupport
from agent.model.objects import Pod, PodDisruptionBudget, disruptions_allowed
from executors.actuators import BatchLimiter, CpuIsolator, CpuThrottler, Evictor, NodeStatusWriter


class SimulatedEvictionAPI(Evictor):
    """policy/v1 Eviction semantics: 404 for a pod that is gone, 500 when more than one
    budget selects the pod, 429 when its budget allows no disruption, else evicted."""

    def __init__(self, pods: Iterable[Pod], pdbs: Iterable[PodDisruptionBudget]) -> None:
        self.pods = {p.key: p for p in pods}
        self.pdbs = list(pdbs)
        self.gone: set[str] = set()
        self.calls: list[tuple[str, EvictionResult]] = []

    def evict(self, pod: Pod, grace_seconds: int | None) -> EvictionResult:
        result = self._decide(pod)
        if result is EvictionResult.EVICTED:
            self.gone.add(pod.key)
        self.calls.append((pod.key, result))
        return result

    def _decide(self, pod: Pod) -> EvictionResult:
        if pod.key in self.gone or pod.key not in self.pods:
            return EvictionResult.GONE
        budgets = [b for b in self.pdbs if b.selects(pod)]
        if len(budgets) > 1:
            return EvictionResult.FAILED
        if budgets and pod.phase == "Running":
            budget = budgets[0]
            selected = [p for k, p in self.pods.items() if k not in self.gone and budget.selects(p)]
            if disruptions_allowed(budget, selected) <= 0:
                return EvictionResult.BLOCKED_BY_PDB
        return EvictionResult.EVICTED


class SimulatedThrottler(CpuThrottler):
    """Remembers the container caps written; restore forgets them."""

    def __init__(self) -> None:
        self.caps: dict[str, dict[str, float]] = {}
        self.writes = 0

    def apply(self, pod: Pod, container_caps: Mapping[str, float], owner: str = "") -> bool:
        self.caps[pod.key] = dict(container_caps)
        self.writes += 1
        return True

    def restore(self, pod: Pod) -> bool:
        self.caps.pop(pod.key, None)
        self.writes += 1
        return True

    def pod_cap(self, key: str) -> float | None:
        caps = self.caps.get(key)
        return sum(caps.values()) if caps else None


class SimulatedIsolator(CpuIsolator):
    """Remembers the pods marked idle and the bursts set (percent of the quota); a host
    whose kernel offers both classes unless ``support`` says otherwise."""

    def __init__(self, support: IsolationSupport | None = None) -> None:
        self._support = support or IsolationSupport()
        self.idle: set[str] = set()
        self.burst: dict[str, float] = {}
        #: Pods whose quota is raised, and the percent above the limit.
        self.quota: dict[str, float] = {}

    @property
    def support(self) -> IsolationSupport:
        return self._support

    def mark_idle(self, pod: Pod, owner: str = "") -> bool:
        self.idle.add(pod.key)
        return True

    def release_idle(self, pod: Pod) -> bool:
        self.idle.discard(pod.key)
        return True

    def set_burst(self, pod: Pod, percent: float, owner: str = "") -> bool:
        self.burst[pod.key] = percent
        return True

    def release_burst(self, pod: Pod) -> bool:
        self.burst.pop(pod.key, None)
        return True

    def raise_quota(self, pod: Pod, percent: float, owner: str = "") -> bool:
        self.quota[pod.key] = percent
        return True

    def take_back_quota(self, pod: Pod) -> bool:
        self.quota.pop(pod.key, None)
        return True


class SimulatedBatchLimiter(BatchLimiter):
    """Remembers each batch pod's limits written; a release forgets them."""

    def __init__(self) -> None:
        self.limits: dict[str, BatchLimits] = {}

    def set_limits(self, pod: Pod, limits: BatchLimits) -> bool:
        self.limits[pod.key] = limits
        return True

    def release_limits(self, pod: Pod) -> bool:
        self.limits.pop(pod.key, None)
        return True

    def container_caps(self, key: str) -> dict[str, float] | None:
        """The containers' CPU limits (cores) where every container has one, else the
        pod's as one figure (None: no CPU limit)."""
        limits = self.limits.get(key)
        if limits is None:
            return None
        by_container = {n: a.cpu for n, a in limits.containers.items()}
        if by_container and all(v is not None for v in by_container.values()):
            return {n: v for n, v in by_container.items() if v is not None}
        return None if limits.cpu is None else {"": limits.cpu}


class SimulatedNodeStatus(NodeStatusWriter):
    """The batch resources a simulated node's status holds (None: none); every write
    goes through."""

    def __init__(self) -> None:
        self.batch: tuple[int, int] | None = None
        self.writes = 0

    def publish(self, millicores: int, bytes_: int) -> bool:
        self.batch = (millicores, bytes_)
        self.writes += 1
        return True

    def remove(self) -> bool:
        self.batch = None
        self.writes += 1
        return True
