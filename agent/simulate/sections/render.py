"""How an engine's plan appears in the report: whether the scenario gave the engine input,
and the plan rendered as the SIMULATE.md keys."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from agent.scenario import Scenario

A = TypeVar("A")
P = TypeVar("P")


@dataclass(frozen=True)
class Report(Generic[A, P]):
    has_input: Callable[[Scenario], bool]
    render: Callable[[P, A], dict[str, Any] | None]
    #: Keys that also read the scenario (what the controller would do with the plan, such
    #: as queue preemption's placeholders), merged over ``render``'s.
    acts: Callable[[P, A, Scenario], Mapping[str, Any]] | None = None


def rounded(amounts: Mapping[str, float]) -> dict[str, float]:
    """Report figures without float noise (6.999999999 -> 7.0): cores and bytes both read
    fine at 1e-6."""
    return {r: round(q, 6) for r, q in amounts.items()}
