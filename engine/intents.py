"""What the decision asks the world to do, as plain values, and the answers it needs.

The engine (``engine.plan``) never calls an actuator: it yields an intent and is
sent the answer, because the rest of its tick depends on it (a PodDisruptionBudget's 429
means "try the next candidate", a 404 counts as released, a cap that could not be written
is neither recorded nor credited). The shell that carries intents out is
``executors.drive``, with the node's actuators (``executors.actuators``): a new kind of
act is a new intent here and a writer that carries it, not a branch in the engine nor an
entry in a table (the idle class and CPU burst are four of them, the quota burst two, the
batch capacity two, a batch pod's limits two).
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from agent.model.batch import BatchLimits
from agent.model.eviction import EvictionResult
from agent.model.objects import Pod

T = TypeVar("T")

# Every intent names, beside its fields, the answers its shell gives without a writer:
# ``DONE`` had it been carried out (``executors.drive.assume_done``, a dry run),
# ``FAILED`` when its writer raised (``executors.actuators.Guarded``), ``UNCARRIED``
# when no actuator of the node carries it (a host with no CPU isolation: nothing to undo,
# nothing done), and ``WHAT`` names it in the logs.


@dataclass(frozen=True, slots=True)
class EvictionAnswer:
    """An eviction's result with what the server said about retrying (``Retry-After``,
    seconds) when it refused for its own sake (5xx, throttling 429). ``unanswered``: a
    ``failed`` that is no answer in time: the request goes on in the background and may
    still evict the pod (the engine then counts it, ``engine.unanswered``)."""

    result: EvictionResult
    retry_after: float | None = None
    unanswered: bool = False


def answer_of(reply: EvictionResult | EvictionAnswer) -> EvictionAnswer:
    return reply if isinstance(reply, EvictionAnswer) else EvictionAnswer(reply)


@dataclass(frozen=True, slots=True)
class Evict:
    """Ask the Eviction API to evict ``pod``. Answered by an ``EvictionAnswer``."""

    pod: Pod
    grace_seconds: int | None
    DONE: ClassVar[Any] = EvictionAnswer(EvictionResult.EVICTED)
    FAILED: ClassVar[Any] = EvictionAnswer(EvictionResult.FAILED)
    UNCARRIED: ClassVar[Any] = EvictionAnswer(EvictionResult.FAILED)
    WHAT: ClassVar[str] = "eviction"


class Write:
    """An intent answered True when done, False when not (every one but ``Evict``). One
    that undoes answers True where no actuator carries it: nobody could have written."""

    __slots__ = ()
    DONE: ClassVar[Any] = True
    FAILED: ClassVar[Any] = False
    UNCARRIED: ClassVar[Any] = False
    WHAT: ClassVar[str] = ""


@dataclass(frozen=True, slots=True)
class WriteCap(Write):
    """Cap each named container at the given cores; ``owner`` (the action and rule) is
    persisted beside the cap. Answered True when written."""

    pod: Pod
    container_caps: Mapping[str, float]
    owner: str
    WHAT: ClassVar[str] = "throttle"


@dataclass(frozen=True, slots=True)
class RestoreCap(Write):
    """Write the original quota of every container of ``pod`` back. Answered True when
    nothing is left to restore."""

    pod: Pod
    WHAT: ClassVar[str] = "restore"
    UNCARRIED: ClassVar[Any] = True


@dataclass(frozen=True, slots=True)
class MarkIdle(Write):
    """Put ``pod`` in the idle class (``cpu.idle = 1`` on its pod-level cgroup), the
    weight it had recorded first, with ``owner`` (the policy). Asked every tick the pod
    is in the class, so a mark something reverted is written again. Answered True when
    the mark is in force."""

    pod: Pod
    owner: str = ""
    WHAT: ClassVar[str] = "idle mark"


@dataclass(frozen=True, slots=True)
class ReleaseIdle(Write):
    """Take ``pod`` out of the idle class: ``cpu.idle = 0``, then the weight it had
    before written back (the kernel leaves the default there). Answered True when
    nothing is left to write back (a pod gone counts as done)."""

    pod: Pod
    WHAT: ClassVar[str] = "idle release"
    UNCARRIED: ClassVar[Any] = True


@dataclass(frozen=True, slots=True)
class SetBurst(Write):
    """Let ``pod``'s cgroups (the pod's and its containers') borrow ``percent`` of their
    CFS quota, the burst each had recorded first, with ``owner`` (the policy). Asked
    every tick, so it follows a quota that changed. Answered True when in force on a
    cgroup with a quota."""

    pod: Pod
    percent: float
    owner: str = ""
    WHAT: ClassVar[str] = "burst"


@dataclass(frozen=True, slots=True)
class ReleaseBurst(Write):
    """Write the burst ``pod``'s cgroups had before back. Answered True when done."""

    pod: Pod
    WHAT: ClassVar[str] = "burst release"
    UNCARRIED: ClassVar[Any] = True


@dataclass(frozen=True, slots=True)
class SetBatchLimits(Write):
    """Enforce a batch pod's limits from its batch resources (``agent.model.batch.
    batch_limits``): the CFS quota and the memory limit of its pod-level cgroup and of
    each container's, what each file held recorded first. Asked every tick for every
    batch pod on the node, so a limit something lifted is written again. Answered True
    when every limit is in force (a file at or below its limit counts: a cap is tighter)."""

    pod: Pod
    limits: BatchLimits
    WHAT: ClassVar[str] = "batch limits"


@dataclass(frozen=True, slots=True)
class ReleaseBatchLimits(Write):
    """Write back what ``pod``'s cgroups held before its batch limits. Answered True when
    nothing is left to write back (a pod gone counts as done)."""

    pod: Pod
    WHAT: ClassVar[str] = "batch limits release"
    UNCARRIED: ClassVar[Any] = True


@dataclass(frozen=True, slots=True)
class RaiseQuota(Write):
    """Let ``pod``'s CFS quota (its pod cgroup's and its containers') rise ``percent``
    above its CPU limit, each quota there recorded first, with ``owner`` (the policy).
    Asked every tick the node is under its lines, so a quota something put back is raised
    again. Answered True when the pod-level quota holds the raise."""

    pod: Pod
    percent: float
    owner: str = ""
    WHAT: ClassVar[str] = "quota burst"


@dataclass(frozen=True, slots=True)
class TakeBackQuota(Write):
    """Write the quotas ``pod``'s cgroups had before the raise back. Answered True when
    none is left to write (a pod gone counts as done)."""

    pod: Pod
    WHAT: ClassVar[str] = "quota take-back"
    UNCARRIED: ClassVar[Any] = True


@dataclass(frozen=True, slots=True)
class PublishBatchCapacity(Write):
    """Write the node's batch capacity in its own Node's status, capacity and allocatable:
    ``waterline.io/batch-cpu`` in millicores, ``waterline.io/batch-memory`` in bytes
    (``engine.batch_capacity``). Asked only when the figures change. Answered True when
    written."""

    millicores: int
    bytes: int
    WHAT: ClassVar[str] = "batch capacity"


@dataclass(frozen=True, slots=True)
class RemoveBatchCapacity(Write):
    """Take the batch resources out of the node's status (no policy asks for them any
    more). Answered True when they are gone."""

    WHAT: ClassVar[str] = "batch capacity removal"
    UNCARRIED: ClassVar[Any] = True


Intent = (Evict | WriteCap | RestoreCap | MarkIdle | ReleaseIdle | SetBurst | ReleaseBurst
          | SetBatchLimits | ReleaseBatchLimits | RaiseQuota | TakeBackQuota | PublishBatchCapacity
          | RemoveBatchCapacity)
#: A decision in progress: yields intents, is sent their answers, returns its result.
Plan = Generator[Intent, Any, T]
