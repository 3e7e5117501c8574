"""The two things the node agent can do to a pod, as small interfaces.

The precise-execution engine decides and never calls these: it yields intents
(``executors.intents``) that ``executors.drive`` carries out with them. Behind them: the
simulated API and cgroups (``waterline simulate``, tests), real cgroup files
(``executors.cgroup_throttle``) and the Eviction API (``executors.eviction``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from agent.model.eviction import EvictionResult
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
