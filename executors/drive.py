"""The shell around the decision: carry its intents out and send back the answers.

``drive`` walks a plan (``executors.intents.Plan``) against real or simulated actuators;
``assume_done`` answers every intent as if it succeeded (no actuator at all), which is
"what would the engine do" and how tests read a decision with no fakes. The table
``CARRY`` has one entry per kind of intent: a new actuator is one more entry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from agent.model.eviction import EvictionResult
from executors.actuators import (
    CpuIsolator,
    CpuThrottler,
    EvictionAnswer,
    Evictor,
    NoIsolation,
    answer_of,
)
from executors.intents import (
    Evict,
    Intent,
    MarkIdle,
    Plan,
    ReleaseBurst,
    ReleaseIdle,
    RestoreCap,
    SetBurst,
    WriteCap,
)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Hands:
    """The actuators a node's decisions are carried out with."""

    evictor: Evictor
    throttler: CpuThrottler
    #: None given: no CPU isolation class is ever planned (``NoIsolation``).
    isolator: CpuIsolator = NoIsolation()


def _evict(hands: Hands, intent: Evict) -> EvictionAnswer:
    return answer_of(hands.evictor.evict(intent.pod, intent.grace_seconds))


def _write_cap(hands: Hands, intent: WriteCap) -> bool:
    return hands.throttler.apply(intent.pod, intent.container_caps, intent.owner)


def _restore_cap(hands: Hands, intent: RestoreCap) -> bool:
    return hands.throttler.restore(intent.pod)


def _mark_idle(hands: Hands, intent: MarkIdle) -> bool:
    return hands.isolator.mark_idle(intent.pod, intent.owner)


def _release_idle(hands: Hands, intent: ReleaseIdle) -> bool:
    return hands.isolator.release_idle(intent.pod)


def _set_burst(hands: Hands, intent: SetBurst) -> bool:
    return hands.isolator.set_burst(intent.pod, intent.percent, intent.owner)


def _release_burst(hands: Hands, intent: ReleaseBurst) -> bool:
    return hands.isolator.release_burst(intent.pod)


#: How each kind of intent is carried out.
CARRY: dict[type, Callable[[Hands, Any], Any]] = {
    Evict: _evict,
    WriteCap: _write_cap,
    RestoreCap: _restore_cap,
    MarkIdle: _mark_idle,
    ReleaseIdle: _release_idle,
    SetBurst: _set_burst,
    ReleaseBurst: _release_burst,
}

#: What ``assume_done`` answers each kind of intent.
DONE: dict[type, Any] = {
    Evict: EvictionAnswer(EvictionResult.EVICTED),
    WriteCap: True,
    RestoreCap: True,
    MarkIdle: True,
    ReleaseIdle: True,
    SetBurst: True,
    ReleaseBurst: True,
}


def walk(plan: Plan[T], answer: Callable[[Intent], Any]) -> T:
    """Run a plan to its end, answering each intent with ``answer``; return its result."""
    try:
        intent = next(plan)
        while True:
            intent = plan.send(answer(intent))
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


def drive(plan: Plan[T], hands: Hands) -> T:
    """Carry a plan out with real (or simulated) actuators."""
    return walk(plan, lambda intent: CARRY[type(intent)](hands, intent))


def assume_done(plan: Plan[T]) -> T:
    """The plan's result had every intent succeeded: no actuator is called."""
    return walk(plan, lambda intent: DONE[type(intent)])
