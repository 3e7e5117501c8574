"""Candidate sorters: the pods acted on first come first.

A sorter is a comparator chain (``agent.model.ordering``), read like crane's
``orderedBy(...)``: the first rule that tells two pods apart decides. Every sorter ends
with namespace/name so the order is total and deterministic. A pod with no usage figure
for the sorter's resource sorts after every pod that has one.

``SORTERS`` is the one registry: a new sorter is one entry there, and a metric names it
(``MetricSpec.sorter`` in ``agent.model.registry``; a test checks every name resolves).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from agent.model.objects import QOS_RANK, Pod
from agent.model.ordering import By, Order, ordered_by
from agent.model.settings import DEFAULT_EXT_CPU_RESOURCE
from agent.model.usage import PodUsage

_LAST = float("inf")


@dataclass(frozen=True, slots=True)
class Candidate:
    """A pod with what the sorters look at."""

    pod: Pod
    usage: PodUsage
    now: float
    ext_cpu_resource: str = DEFAULT_EXT_CPU_RESOURCE

    @property
    def key(self) -> str:
        return self.pod.key


def _ext_cpu_usage(c: Candidate) -> tuple[int, float]:
    resource = c.ext_cpu_resource
    requested = c.pod.requests.get(resource, 0.0) > 0
    limit = c.pod.limits.get(resource) or c.pod.requests.get(resource)
    ratio = c.usage.ext_cpu / limit if limit and c.usage.ext_cpu is not None else None
    return (0 if requested else 1, -ratio if ratio is not None else _LAST)


CPU_FIGURE_FIRST: By[Candidate] = By(
    "pods with a CPU figure first (an unknown one releases nothing known)",
    lambda c: c.usage.cpu is None)
MEMORY_FIGURE_FIRST: By[Candidate] = By(
    "pods with a memory figure first", lambda c: c.usage.memory is None)
CLASS_AND_PRIORITY: By[Candidate] = By(
    "BestEffort < Burstable < Guaranteed, then lower priority",
    lambda c: (QOS_RANK[c.pod.qos_class], c.pod.priority))
RUNNING_TIME: By[Candidate] = By(
    "shorter running time (the least work is lost)", lambda c: c.pod.running_seconds(c.now))
CPU_USAGE: By[Candidate] = By(
    "higher CPU usage", lambda c: -c.usage.cpu if c.usage.cpu is not None else _LAST)
MEMORY_USAGE: By[Candidate] = By(
    "higher memory usage", lambda c: -c.usage.memory if c.usage.memory is not None else _LAST)
EXT_CPU_USAGE: By[Candidate] = By(
    "pods that request the extended CPU resource, then higher usage / limit", _ext_cpu_usage)
BY_NAME: By[Candidate] = By("namespace/name (the order is total)", lambda c: c.key)


def sorter(name: str, *rules: By[Candidate]) -> Order[Candidate]:
    return ordered_by(*rules, BY_NAME, name=name)


#: Every candidate order a metric can name, by name.
SORTERS: Mapping[str, Order[Candidate]] = {s.name: s for s in (
    sorter("general", CLASS_AND_PRIORITY, RUNNING_TIME),
    sorter("cpu", CPU_FIGURE_FIRST, CLASS_AND_PRIORITY, CPU_USAGE, EXT_CPU_USAGE, RUNNING_TIME),
    sorter("memory", MEMORY_FIGURE_FIRST, CLASS_AND_PRIORITY, MEMORY_USAGE, RUNNING_TIME),
)}

