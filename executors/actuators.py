"""The two things the node agent can do to a pod, as small interfaces.

The precise-execution engine decides and calls these; what sits behind them is the
simulated API and cgroups (``waterline simulate``, tests), real cgroup files
(``executors.cgroup_throttle``) and the Eviction API (``executors.eviction``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from agent.model.eviction import EvictionResult
from agent.model.objects import Pod


class Evictor(Protocol):
    def evict(self, pod: Pod, grace_seconds: int) -> EvictionResult:
        """Ask for the eviction of ``pod``; never a direct delete."""
        ...


class CpuThrottler(Protocol):
    def apply(self, pod: Pod, container_caps: Mapping[str, float]) -> bool:
        """Cap each named container at the given cores. Before the first write for a pod
        the original quotas are persisted, so they can be restored exactly. False when
        nothing was written (cgroup not found, write refused): the engine then neither
        records the cap nor credits a release."""
        ...

    def restore(self, pod: Pod) -> bool:
        """Write back the original quota of every container of ``pod`` and forget it.
        False when something is left to restore (the engine retries next tick)."""
        ...
