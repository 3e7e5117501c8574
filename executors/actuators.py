"""The things the node agent can do to a pod: actuators of one shape.

The decision never calls an actuator: it yields intents (``engine.intents``) and is
sent their answers. An actuator carries some kinds of intent (``intents``) and answers
each with what it found and did (``carry(intent)``); ``name`` is where its failures are
counted. Everything around the act is a wrapper around that one call, not a family of
classes per actuator: ``Guarded`` (one pod's failure is logged and counted, never fatal),
``Reported`` (nothing is written, each intent is logged and answered as done: local mode's
evictions, ``--dry-run``), and in the agent ``agent.node.incluster`` wraps the evictor so
that nothing is sent while the API server is away. ``Hands`` routes each intent to the
actuator that carries it: adding an actuator is its intent, its writer, and its tests.

The writers: the simulated API and cgroups (``agent.simulate.actuators``), real cgroup
files (``executors.cgroup_throttle``, ``executors.cgroup_isolation``,
``executors.cgroup_batch_limits``) and the Eviction
API (``executors.eviction``). Each implements its domain's methods (``evict``, ``apply``
and ``restore``, ``mark_idle`` ...), which the three bases below turn into ``carry``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import structlog

from agent.model.batch import BatchLimits
from agent.model.eviction import EvictionResult
from agent.model.isolation import IsolationSupport
from agent.model.objects import Pod
from engine.intents import (
    Evict,
    EvictionAnswer,
    Intent,
    MarkIdle,
    PublishBatchCapacity,
    RaiseQuota,
    ReleaseBatchLimits,
    ReleaseBurst,
    ReleaseIdle,
    RemoveBatchCapacity,
    RestoreCap,
    SetBatchLimits,
    SetBurst,
    TakeBackQuota,
    WriteCap,
    answer_of,
)
from engine.state import NodeState

__all__ = [
    "Actuator", "BatchLimiter", "CpuIsolator", "CpuThrottler", "EvictionAnswer", "Evictor", "Guarded",
    "Hands", "Holder", "NodeStatusWriter", "Reported", "about", "answer_of",
]  # fmt: skip


class Actuator(Protocol):
    """Carries some kinds of intent out and answers each (``Intent.DONE`` is the shape of
    the answer: True when done, an ``EvictionAnswer`` for an eviction)."""

    @property
    def name(self) -> str:
        """Where its failures are counted (``TickOutcome.errors``)."""
        ...

    @property
    def intents(self) -> tuple[type, ...]:
        """The kinds of intent it carries here (read at each tick: what the host offers)."""
        ...

    def carry(self, intent: Any) -> Any: ...


class Holder(Protocol):
    """A writer that holds something on the host across ticks and restarts (caps, marks),
    recorded in its state file: the agent's shutdown (``agent.node.lifecycle``) and
    `waterline agent release` hand all of it back through this, whatever it holds."""

    #: What is said when some were handed back, and its stable log code.
    released: str
    released_code: str

    def release_all(self) -> list[str]:
        """Everything its state file names written back; the pod uids fully handed back."""
        ...

    def forget_all(self, state: NodeState) -> None:
        """The node's memory after ``release_all``: none of it held any more."""
        ...


class Hands:
    """The node's actuators, each intent routed to the one that carries its kind. An
    intent nobody carries is answered ``UNCARRIED`` (an undo: nothing to undo; anything
    else: not done), so a host with no CPU isolation simply has no isolator."""

    def __init__(self, *actuators: Actuator) -> None:
        self.actuators = actuators
        self._by_kind: dict[type, Actuator] = {}
        for actuator in actuators:
            for kind in actuator.intents:
                if kind in self._by_kind:
                    raise ValueError(f"two actuators carry {kind.__name__}: "
                                     f"{self._by_kind[kind].name} and {actuator.name}")
                self._by_kind[kind] = actuator

    def carry(self, intent: Intent) -> Any:
        actuator = self._by_kind.get(type(intent))
        return intent.UNCARRIED if actuator is None else actuator.carry(intent)

    def carries(self, kind: type) -> bool:
        return kind in self._by_kind

    @property
    def support(self) -> IsolationSupport:
        """The CPU isolation classes someone here can put a pod in."""
        return IsolationSupport(idle=self.carries(MarkIdle), burst=self.carries(SetBurst),
                                quota=self.carries(RaiseQuota))


class Guarded:
    """An actuator whose failure on one pod is logged and counted (in ``errors``, under
    the actuator's name), not fatal: a raise is answered ``FAILED``, and a write answered
    False is counted too."""

    def __init__(self, actuator: Actuator, errors: dict[str, int], log: Any) -> None:
        self.actuator = actuator
        self.errors = errors
        self.log = log

    @property
    def name(self) -> str:
        return self.actuator.name

    @property
    def intents(self) -> tuple[type, ...]:
        return self.actuator.intents

    def carry(self, intent: Intent) -> Any:
        try:
            answer = self.actuator.carry(intent)
        except Exception as err:  # noqa: BLE001 - one pod must not stop the tick
            self._count()
            self.log.error(f"{intent.WHAT} raised", **about(intent), error=repr(err))
            return intent.FAILED
        if answer is False:
            self._count()
        return answer

    def _count(self) -> None:
        self.errors[self.name] = self.errors.get(self.name, 0) + 1


class Reported:
    """Carries nothing out: each intent is logged and answered as done (``DONE``), so the
    decisions show as if every write went through. An eviction is said at info level
    (local mode: there is no API server; ``--dry-run``), the rest at debug."""

    def __init__(self, name: str, intents: tuple[type, ...], why: str) -> None:
        self.name = name
        self.intents = intents
        self.why = why
        self.log = structlog.get_logger()

    def carry(self, intent: Intent) -> Any:
        if isinstance(intent, Evict):
            self.log.info("eviction not performed", pod=intent.pod.key,
                          grace_seconds=intent.grace_seconds, why=self.why)  # fmt: skip
        else:
            self.log.debug(f"{self.why}: {intent.WHAT} not written", **about(intent))
        return intent.DONE


def about(intent: Intent) -> dict[str, str]:
    """What a log line names of an intent: its pod, where it has one (the node's own
    status has none)."""
    pod = getattr(intent, "pod", None)
    return {"pod": pod.key} if isinstance(pod, Pod) else {}


# -- the writers' bases: their domain's methods, carried ---------------------------------------
class Evictor(ABC):
    """Writes evictions (``Evict``)."""

    name = "evictor"
    intents: tuple[type, ...] = (Evict,)

    @abstractmethod
    def evict(self, pod: Pod, grace_seconds: int | None) -> EvictionResult | EvictionAnswer:
        """Ask for the eviction of ``pod``; never a direct delete. ``grace_seconds`` None:
        the pod's own grace period. ``failed`` means the API itself failed (5xx, timeout,
        throttling): the engine ends the round and backs off."""

    def carry(self, intent: Evict) -> EvictionAnswer:
        return answer_of(self.evict(intent.pod, intent.grace_seconds))


class CpuThrottler(ABC):
    """Writes CPU caps (``WriteCap``, ``RestoreCap``)."""

    name = "throttler"
    intents: tuple[type, ...] = (WriteCap, RestoreCap)

    @abstractmethod
    def apply(self, pod: Pod, container_caps: Mapping[str, float], owner: str = "") -> bool:
        """Cap each named container at the given cores. Before the first write for a pod
        the original quotas are persisted, so they can be restored exactly; ``owner``
        (the action and rule holding the cap) is persisted beside them, so a restarted
        agent adopts the cap. False when nothing was written (cgroup not found, write
        refused): the engine then neither records the cap nor credits a release."""

    @abstractmethod
    def restore(self, pod: Pod) -> bool:
        """Write back the original quota of every container of ``pod`` and forget it.
        False when something is left to restore (the engine retries next tick)."""

    def carry(self, intent: WriteCap | RestoreCap) -> bool:
        if isinstance(intent, WriteCap):
            return self.apply(intent.pod, intent.container_caps, intent.owner)
        return self.restore(intent.pod)


#: How a ``CpuIsolator`` carries each of its intents.
_ISOLATE: dict[type, Callable[[Any, Any], bool]] = {
    MarkIdle: lambda iso, i: iso.mark_idle(i.pod, i.owner),
    ReleaseIdle: lambda iso, i: iso.release_idle(i.pod),
    SetBurst: lambda iso, i: iso.set_burst(i.pod, i.percent, i.owner),
    ReleaseBurst: lambda iso, i: iso.release_burst(i.pod),
    RaiseQuota: lambda iso, i: iso.raise_quota(i.pod, i.percent, i.owner),
    TakeBackQuota: lambda iso, i: iso.take_back_quota(i.pod),
}


class CpuIsolator(ABC):
    """Writes the CPU isolation classes on the pods' cgroups (``executors.cgroup_isolation``).
    Like the throttler, it records what was there before its first write (so a release
    writes exactly that back, and a restarted agent adopts rather than re-reads a value
    it wrote itself), and logs rather than raises. It carries the releases always and a
    class only where the kernel offers it (``support``): a class it lacks is never asked for."""

    name = "isolator"

    @property
    @abstractmethod
    def support(self) -> IsolationSupport:
        """What the kernel offers here."""

    @property
    def intents(self) -> tuple[type, ...]:
        support = self.support
        return (ReleaseIdle, ReleaseBurst, TakeBackQuota, *((MarkIdle,) if support.idle else ()),
                *((SetBurst,) if support.burst else ()),
                *((RaiseQuota,) if support.quota else ()))  # fmt: skip

    @abstractmethod
    def mark_idle(self, pod: Pod, owner: str = "") -> bool: ...

    @abstractmethod
    def release_idle(self, pod: Pod) -> bool: ...

    @abstractmethod
    def set_burst(self, pod: Pod, percent: float, owner: str = "") -> bool: ...

    @abstractmethod
    def release_burst(self, pod: Pod) -> bool: ...

    @abstractmethod
    def raise_quota(self, pod: Pod, percent: float, owner: str = "") -> bool:
        """The pod's CFS quotas (pod cgroup and containers) ``percent`` above the quota
        each had, which is recorded first; True when the pod cgroup holds the raise."""

    @abstractmethod
    def take_back_quota(self, pod: Pod) -> bool:
        """The recorded quotas written back; True when none is left to write."""

    def carry(self, intent: MarkIdle | ReleaseIdle | SetBurst | ReleaseBurst | RaiseQuota
              | TakeBackQuota) -> bool:
        return _ISOLATE[type(intent)](self, intent)


class BatchLimiter(ABC):
    """Writes a batch pod's limits from its batch resources on its cgroups
    (``SetBatchLimits``, ``ReleaseBatchLimits``; ``executors.cgroup_batch_limits``). Like
    the throttler, it records what each file held before its first write, so a release
    writes exactly that back and a restarted agent adopts the limits."""

    name = "batch-limiter"
    intents: tuple[type, ...] = (SetBatchLimits, ReleaseBatchLimits)

    @abstractmethod
    def set_limits(self, pod: Pod, limits: BatchLimits) -> bool:
        """Every limit in force (written, or found at or below it)."""

    @abstractmethod
    def release_limits(self, pod: Pod) -> bool:
        """What the pod's cgroups held before written back (True when nothing is left)."""

    def carry(self, intent: SetBatchLimits | ReleaseBatchLimits) -> bool:
        if isinstance(intent, SetBatchLimits):
            return self.set_limits(intent.pod, intent.limits)
        return self.release_limits(intent.pod)


class NodeStatusWriter(ABC):
    """Writes the node's batch capacity in its own Node's status (``PublishBatchCapacity``,
    ``RemoveBatchCapacity``): the API server in a cluster (``agent.node.batch_status``),
    a record in `simulate`."""

    name = "node-status"
    intents: tuple[type, ...] = (PublishBatchCapacity, RemoveBatchCapacity)

    @abstractmethod
    def publish(self, millicores: int, bytes_: int) -> bool:
        """Capacity and allocatable ``waterline.io/batch-cpu`` / ``-memory`` set so."""

    @abstractmethod
    def remove(self) -> bool:
        """Both resources out of capacity and allocatable (True when gone)."""

    def carry(self, intent: PublishBatchCapacity | RemoveBatchCapacity) -> bool:
        if isinstance(intent, PublishBatchCapacity):
            return self.publish(intent.millicores, intent.bytes)
        return self.remove()


#: Every kind of intent of each writer: what a ``Reported`` stand-in carries.
EVICTION = (Evict,)
CAPS = (WriteCap, RestoreCap)
ISOLATION = (MarkIdle, ReleaseIdle, SetBurst, ReleaseBurst, RaiseQuota, TakeBackQuota)
BATCH_LIMITS = (SetBatchLimits, ReleaseBatchLimits)
NODE_STATUS = (PublishBatchCapacity, RemoveBatchCapacity)
