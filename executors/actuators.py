"""The things the node agent can do to a pod, as small interfaces.

The precise-execution engine decides and never calls these: it yields intents
(``executors.intents``) that ``executors.drive`` carries out with them. Behind them: the
simulated API and cgroups (``waterline simulate``, tests), real cgroup files
(``executors.cgroup_throttle``, ``executors.cgroup_isolation``) and the Eviction API
(``executors.eviction``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from agent.model.eviction import EvictionResult
from agent.model.isolation import NO_SUPPORT, IsolationSupport
from agent.model.objects import Pod


@dataclass(frozen=True, slots=True)
class EvictionAnswer:
    """An eviction's result with what the server said about retrying (``Retry-After``,
    seconds) when it refused for its own sake (5xx, throttling 429). ``unanswered``: a
    ``failed`` that is no answer in time: the request goes on in the background and may
    still evict the pod (the engine then counts it, ``executors.unanswered``)."""

    result: EvictionResult
    retry_after: float | None = None
    unanswered: bool = False


def answer_of(reply: EvictionResult | EvictionAnswer) -> EvictionAnswer:
    return reply if isinstance(reply, EvictionAnswer) else EvictionAnswer(reply)


class Evictor(Protocol):
    def evict(self, pod: Pod, grace_seconds: int | None) -> EvictionResult | EvictionAnswer:
        """Ask for the eviction of ``pod``; never a direct delete. ``grace_seconds`` None:
        the pod's own grace period. ``failed`` means the API itself failed (5xx, timeout,
        throttling): the engine ends the round and backs off."""
        ...


class CpuThrottler(Protocol):
    def apply(self, pod: Pod, container_caps: Mapping[str, float], owner: str = "") -> bool:
        """Cap each named container at the given cores. Before the first write for a pod
        the original quotas are persisted, so they can be restored exactly; ``owner``
        (the action and rule holding the cap) is persisted beside them, so a restarted
        agent adopts the cap. False when nothing was written (cgroup not found, write
        refused): the engine then neither records the cap nor credits a release."""
        ...

    def restore(self, pod: Pod) -> bool:
        """Write back the original quota of every container of ``pod`` and forget it.
        False when something is left to restore (the engine retries next tick)."""
        ...


class CpuIsolator(Protocol):
    """The CPU isolation classes on the pods' cgroups (``executors.cgroup_isolation``).
    Like the throttler, it records what was there before its first write (so a release
    writes exactly that back, and a restarted agent adopts rather than re-reads a value
    it wrote itself), and logs rather than raises."""

    @property
    def support(self) -> IsolationSupport:
        """What the kernel offers here; a class it lacks is never asked for."""
        ...

    def mark_idle(self, pod: Pod, owner: str = "") -> bool: ...

    def release_idle(self, pod: Pod) -> bool: ...

    def set_burst(self, pod: Pod, percent: float, owner: str = "") -> bool: ...

    def release_burst(self, pod: Pod) -> bool: ...


class NoIsolation:
    """Where no isolator is given: no class is supported, so none is ever planned."""

    support = NO_SUPPORT

    def mark_idle(self, pod: Pod, owner: str = "") -> bool:
        return False

    def release_idle(self, pod: Pod) -> bool:
        return True

    def set_burst(self, pod: Pod, percent: float, owner: str = "") -> bool:
        return False

    def release_burst(self, pod: Pod) -> bool:
        return True
