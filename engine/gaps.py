"""The open gaps of one tick, per action type and metric, with cross-metric credit.

What an action releases (cores, bytes) is subtracted from every metric it relieves, in
that metric's unit (a core is 100/allocatable percent of a utilization metric); a gap
at or below ``EPSILON`` is closed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from agent.model.analysis import Analysis
from agent.model.numbers import EPSILON
from agent.model.registry import METRICS


class Gaps:
    def __init__(self, analysis: Analysis, allocatable: Mapping[str, float]) -> None:
        self.tables = {t: dict(g) for t, g in analysis.gaps.items()}
        self.allocatable = allocatable

    def get(self, action_type: str, metric: str) -> float | None:
        return self.tables[action_type].get(metric)

    def credit(self, action_types: Sequence[str], released: Mapping[str, float]) -> dict[str, float]:
        """Subtract released resources (cores, bytes) from every metric they relieve.
        Returns what was credited per metric, in the metric's unit."""
        credited: dict[str, float] = {}
        for spec in METRICS:
            if spec.resource is None or spec.resource not in released:
                continue
            amount = released[spec.resource] * spec.per_resource_unit(self.allocatable)
            for action_type in action_types:
                table = self.tables[action_type]
                if spec.name not in table:
                    continue
                credited[spec.name] = amount
                table[spec.name] -= amount
                if table[spec.name] <= EPSILON:
                    del table[spec.name]
        return credited

    def close(self, action_type: str, metric: str) -> None:
        self.tables[action_type].pop(metric, None)

    def charge(self, action_type: str, metric: str, amount: float) -> None:
        table = self.tables[action_type]
        if metric in table:
            table[metric] -= amount
            if table[metric] <= EPSILON:
                del table[metric]
