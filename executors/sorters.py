"""Candidate sorters: the pods acted on first come first.

A sorter is an ordered list of sort keys, read like crane's ``orderedBy(...)``: the first
key that tells two pods apart decides. Keys (rather than pairwise comparators) keep a
250-pod sort well under a millisecond. Every sorter ends with namespace/name so the order
is total and deterministic. A pod with no usage figure for the sorter's resource sorts
after every pod that has one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.model.objects import QOS_RANK, Pod
from agent.model.registry import SorterName
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


SortKey = Callable[[Candidate], Any]


def class_and_priority(c: Candidate) -> tuple[int, int]:
    """BestEffort < Burstable < Guaranteed, then lower priority first."""
    return (QOS_RANK[c.pod.qos_class], c.pod.priority)


def running_time(c: Candidate) -> float:
    """Shorter running time first: the least work is lost."""
    return c.pod.running_seconds(c.now)


def cpu_usage(c: Candidate) -> float:
    """Higher CPU usage first (unknown last)."""
    return -c.usage.cpu if c.usage.cpu is not None else _LAST


def mem_usage(c: Candidate) -> float:
    """Higher memory usage first (unknown last)."""
    return -c.usage.memory if c.usage.memory is not None else _LAST


def ext_cpu_usage(c: Candidate) -> tuple[int, float]:
    """Pods that request the extended CPU resource first, then higher usage / limit."""
    resource = c.ext_cpu_resource
    requested = c.pod.requests.get(resource, 0.0) > 0
    limit = c.pod.limits.get(resource) or c.pod.requests.get(resource)
    ratio = c.usage.ext_cpu / limit if limit and c.usage.ext_cpu is not None else None
    return (0 if requested else 1, -ratio if ratio is not None else _LAST)


def cpu_figure_known(c: Candidate) -> bool:
    return c.usage.cpu is None


def memory_figure_known(c: Candidate) -> bool:
    return c.usage.memory is None


def by_name(c: Candidate) -> str:
    return c.key


@dataclass(frozen=True)
class Sorter:
    name: SorterName
    keys: tuple[SortKey, ...]

    def sort(self, candidates: Sequence[Candidate]) -> list[Candidate]:
        keys = self.keys
        return sorted(candidates, key=lambda c: tuple(k(c) for k in keys))


def ordered_by(name: SorterName, *keys: SortKey) -> Sorter:
    return Sorter(name, (*keys, by_name))


#: One sorter per ``SorterName`` (the registry's metrics name them; a test checks both ways).
SORTERS: Mapping[SorterName, Sorter] = {s.name: s for s in (
    ordered_by(SorterName.GENERAL, class_and_priority, running_time),
    ordered_by(SorterName.CPU, cpu_figure_known, class_and_priority, cpu_usage, ext_cpu_usage,
               running_time),
    ordered_by(SorterName.MEMORY, memory_figure_known, class_and_priority, mem_usage,
               running_time),
)}
