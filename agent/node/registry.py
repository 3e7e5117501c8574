"""The metric registry: every node metric a rule can name, with its attributes.

As in the crane-agent design, a metric says how it may be acted on: whether throttling or
eviction can relieve it, whether that relief is *quantified* (the release of an action
can be computed and subtracted from the gap) and which sorter orders the candidates.
Adding a metric is one entry here plus a collector field. Registry order is the order in
which metrics are handled within a tick.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

CPU = "cpu"
MEMORY = "memory"


@dataclass(frozen=True, slots=True)
class MetricSpec:
    name: str
    unit: str  # cores | bytes | percent
    #: The pod resource whose release relieves this metric (None: nothing is credited).
    resource: str | None
    sorter: str  # key into executors.sorters.SORTERS
    throttleable: bool
    throttle_quantified: bool
    evictable: bool
    evict_quantified: bool
    #: Utilization metrics are a percentage of the node's allocatable ``resource``.
    percent_of_allocatable: bool = False

    def per_resource_unit(self, allocatable: Mapping[str, float]) -> float:
        """How many metric units one unit of ``resource`` is worth on this node
        (1 for usage metrics, 100/allocatable for utilization metrics, 0 if unknown)."""
        if not self.percent_of_allocatable:
            return 1.0
        total = allocatable.get(self.resource or "", 0.0)
        return 100.0 / total if total > 0 else 0.0

    def quantified(self, action_type: str) -> bool:
        return self.evict_quantified if action_type == "evict" else self.throttle_quantified


METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("cpu_total_usage", "cores", CPU, "cpu", True, True, True, True),
    MetricSpec("cpu_total_utilization", "percent", CPU, "cpu", True, True, True, True, True),
    MetricSpec("memory_total_usage", "bytes", MEMORY, "memory", False, False, True, True),
    MetricSpec("memory_total_utilization", "percent", MEMORY, "memory", False, False, True, True, True),
    MetricSpec("cpu_pressure", "percent", None, "cpu", True, False, True, False),
    # DESIGN's table: both pressures are throttleable and evictable, neither quantified
    # (memory pressure is relieved by throttling CPU: fewer allocations, less reclaim).
    MetricSpec("memory_pressure", "percent", None, "memory", True, False, True, False),
)

BY_NAME: dict[str, MetricSpec] = {m.name: m for m in METRICS}
#: Usage metric a utilization metric is derived from when a sample does not give it.
DERIVED_FROM: dict[str, str] = {
    "cpu_total_utilization": "cpu_total_usage",
    "memory_total_utilization": "memory_total_usage",
}


def derive_utilization(metrics: Mapping[str, float], allocatable: Mapping[str, float]) -> dict[str, float]:
    """Fill in utilization metrics from usage and allocatable where they are not given."""
    out = dict(metrics)
    for name, source in DERIVED_FROM.items():
        if name in out or source not in out:
            continue
        scale = BY_NAME[name].per_resource_unit(allocatable)
        if scale > 0:
            out[name] = out[source] * scale
    return out
