"""The metric registry: every node metric a rule can name, with its attributes.

As in the crane-agent design, a metric says how it may be acted on: whether throttling or
eviction can relieve it, whether that relief is *quantified* (the release of an action
can be computed and subtracted from the gap) or *closed loop* (one step a tick, then
re-measure), and which sorter orders the candidates. Adding a metric is one entry here
plus a collector field. Registry order is the order in which metrics are handled within
a tick.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

CPU = "cpu"
MEMORY = "memory"


class Relief(Enum):
    """How an action (throttle or evict) relieves a metric."""

    #: It does not: the action never runs for this metric.
    NONE = "none"
    #: It does, by an amount that cannot be computed: one step a tick, re-measured.
    CLOSED_LOOP = "closed loop"
    #: What each action releases is computed and subtracted from the gap.
    QUANTIFIED = "quantified"

    @property
    def acts(self) -> bool:
        return self is not Relief.NONE


NONE, CLOSED_LOOP, QUANTIFIED = Relief.NONE, Relief.CLOSED_LOOP, Relief.QUANTIFIED


@dataclass(frozen=True, slots=True, kw_only=True)
class MetricSpec:
    name: str
    unit: str  # cores | bytes | percent
    #: The pod resource whose release relieves this metric (None: nothing is credited).
    resource: str | None
    #: The candidate order (a name in ``engine.sorters.SORTERS``, its one registry).
    sorter: str
    throttle: Relief
    evict: Relief
    #: Utilization metrics are a percentage of the node's allocatable ``resource``.
    percent_of_allocatable: bool = False

    @property
    def throttleable(self) -> bool:
        return self.throttle.acts

    @property
    def throttle_quantified(self) -> bool:
        return self.throttle is QUANTIFIED

    @property
    def evictable(self) -> bool:
        return self.evict.acts

    @property
    def evict_quantified(self) -> bool:
        return self.evict is QUANTIFIED

    def per_resource_unit(self, allocatable: Mapping[str, float]) -> float:
        """How many metric units one unit of ``resource`` is worth on this node
        (1 for usage metrics, 100/allocatable for utilization metrics, 0 if unknown)."""
        if not self.percent_of_allocatable:
            return 1.0
        total = allocatable.get(self.resource or "", 0.0)
        return 100.0 / total if total > 0 else 0.0


METRICS: tuple[MetricSpec, ...] = (
    MetricSpec(name="cpu_total_usage", unit="cores", resource=CPU, sorter="cpu",
               throttle=QUANTIFIED, evict=QUANTIFIED),
    MetricSpec(name="cpu_total_utilization", unit="percent", resource=CPU, sorter="cpu",
               throttle=QUANTIFIED, evict=QUANTIFIED, percent_of_allocatable=True),
    MetricSpec(name="memory_total_usage", unit="bytes", resource=MEMORY, sorter="memory",
               throttle=NONE, evict=QUANTIFIED),
    MetricSpec(name="memory_total_utilization", unit="percent", resource=MEMORY,
               sorter="memory", throttle=NONE, evict=QUANTIFIED,
               percent_of_allocatable=True),
    MetricSpec(name="cpu_pressure", unit="percent", resource=None, sorter="cpu",
               throttle=CLOSED_LOOP, evict=CLOSED_LOOP),
    # DESIGN's table: both pressures are throttleable and evictable, neither quantified
    # (memory pressure is relieved by throttling CPU: fewer allocations, less reclaim).
    MetricSpec(name="memory_pressure", unit="percent", resource=None, sorter="memory",
               throttle=CLOSED_LOOP, evict=CLOSED_LOOP),
    # Interference seen by the victims (DESIGN.md): taken from the latency-critical pods
    # (``agent.model.latency``), handled exactly like the pressure metrics.
    MetricSpec(name="lc_cpu_wait_ratio", unit="percent", resource=None, sorter="cpu",
               throttle=CLOSED_LOOP, evict=CLOSED_LOOP),
    MetricSpec(name="lc_cpu_throttled_ratio", unit="percent", resource=None,
               sorter="cpu", throttle=CLOSED_LOOP, evict=CLOSED_LOOP),
    MetricSpec(name="lc_cpu_pressure", unit="percent", resource=None, sorter="cpu",
               throttle=CLOSED_LOOP, evict=CLOSED_LOOP),
)  # fmt: skip

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
