"""The shell around the decision: carry its intents out and send back the answers.

``drive`` walks a plan (``engine.intents.Plan``) against the node's actuators
(``executors.actuators.Hands``: real, simulated, guarded or reported ones, all of one
shape); ``assume_done`` answers every intent as if it succeeded (no actuator at all,
``Intent.DONE``), which is "what would the engine do" and how tests read a decision with
no fakes. A new actuator needs nothing here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from engine.intents import Intent, Plan
from executors.actuators import Hands

T = TypeVar("T")

__all__ = ["Hands", "assume_done", "drive", "walk"]


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
    return walk(plan, hands.carry)


def _done(intent: Intent) -> Any:
    return intent.DONE


def assume_done(plan: Plan[T]) -> T:
    """The plan's result had every intent succeeded: no actuator is called."""
    return walk(plan, _done)
