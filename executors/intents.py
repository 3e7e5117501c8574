"""What the decision asks the world to do, as plain values, and the answers it needs.

The engine (``executors.engine``) never calls an actuator: it yields an intent and is
sent the answer, because the rest of its tick depends on it (a PodDisruptionBudget's 429
means "try the next candidate", a 404 counts as released, a cap that could not be written
is neither recorded nor credited). The shell that carries intents out is
``executors.drive``. A new kind of act is a new intent here and one entry in the drive's
table, not a branch in the engine (the idle class and CPU burst are four of them).
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from agent.model.objects import Pod

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Evict:
    """Ask the Eviction API to evict ``pod``. Answered by an ``EvictionAnswer``."""

    pod: Pod
    grace_seconds: int | None


@dataclass(frozen=True, slots=True)
class WriteCap:
    """Cap each named container at the given cores; ``owner`` (the action and rule) is
    persisted beside the cap. Answered True when written."""

    pod: Pod
    container_caps: Mapping[str, float]
    owner: str


@dataclass(frozen=True, slots=True)
class RestoreCap:
    """Write the original quota of every container of ``pod`` back. Answered True when
    nothing is left to restore."""

    pod: Pod


@dataclass(frozen=True, slots=True)
class MarkIdle:
    """Put ``pod`` in the idle class (``cpu.idle = 1`` on its pod-level cgroup), the
    weight it had recorded first, with ``owner`` (the policy). Asked every tick the pod
    is in the class, so a mark something reverted is written again. Answered True when
    the mark is in force."""

    pod: Pod
    owner: str = ""


@dataclass(frozen=True, slots=True)
class ReleaseIdle:
    """Take ``pod`` out of the idle class: ``cpu.idle = 0``, then the weight it had
    before written back (the kernel leaves the default there). Answered True when
    nothing is left to write back (a pod gone counts as done)."""

    pod: Pod


@dataclass(frozen=True, slots=True)
class SetBurst:
    """Let ``pod``'s cgroups (the pod's and its containers') borrow ``percent`` of their
    CFS quota, the burst each had recorded first, with ``owner`` (the policy). Asked
    every tick, so it follows a quota that changed. Answered True when in force on a
    cgroup with a quota."""

    pod: Pod
    percent: float
    owner: str = ""


@dataclass(frozen=True, slots=True)
class ReleaseBurst:
    """Write the burst ``pod``'s cgroups had before back. Answered True when done."""

    pod: Pod


Intent = Evict | WriteCap | RestoreCap | MarkIdle | ReleaseIdle | SetBurst | ReleaseBurst
#: A decision in progress: yields intents, is sent their answers, returns its result.
Plan = Generator[Intent, Any, T]
