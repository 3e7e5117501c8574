"""What the decision asks the world to do, as plain values, and the answers it needs.

The engine (``executors.engine``) never calls an actuator: it yields an intent and is
sent the answer, because the rest of its tick depends on it (a PodDisruptionBudget's 429
means "try the next candidate", a 404 counts as released, a cap that could not be written
is neither recorded nor credited). The shell that carries intents out is
``executors.drive``. A new kind of act (an idle class, CPU burst) is a new intent here
and one entry in the drive's table, not a branch in the engine.
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


Intent = Evict | WriteCap | RestoreCap
#: A decision in progress: yields intents, is sent their answers, returns its result.
Plan = Generator[Intent, Any, T]
