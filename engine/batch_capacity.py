"""The batch capacity a node publishes, computed (pure; DESIGN.md "Batch capacity").

Per node, per resource (CPU in cores, memory in bytes):

    allocatable - high-water mark of non-batch use over the window - margin

clipped at 0 and kept within the policy's ``min`` / ``max`` (``agent.model.batch``).
*Non-batch use* is the node's measured total (``cpu_total_usage``, ``memory_total_usage``:
the pods' and the system's) less what the batch pods use: the system is counted without
a figure of its own, and a batch pod with no figure counts as non-batch (the capacity is
then lower, never higher, than it should be).

The published figure follows that target only when it moves by more than the hysteresis
(a percent of allocatable) or reaches a bound (0, ``min``, ``max``: a node with nothing
spare must say 0 however small the last step), and at most once per minimum interval;
the first figure is published at once. Figures are whole millicores and whole bytes, as
the Node's status holds them (extended resources are integers).

Decisions where DESIGN.md is silent:

* the hysteresis and the interval hold per node, not per resource: a change of either
  figure publishes both (one status patch), and starts the interval;
* a resource with no total in the window (its metric missing) keeps its published figure;
  nothing is published before both have one;
* the window holds the samples of the last ``windowSeconds`` and the current one, so a
  window of 0 is the last sample.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from agent.model.batch import BatchCapacity, is_batch_pod
from agent.model.objects import Pod
from agent.model.registry import CPU, MEMORY
from agent.model.usage import PodUsage

CPU_TOTAL = "cpu_total_usage"
MEMORY_TOTAL = "memory_total_usage"


@dataclass(frozen=True, slots=True)
class UseSample:
    """Non-batch use at one tick (None: the node's total for it was not measured)."""

    at: float
    cpu: float | None
    memory: float | None


@dataclass(frozen=True, slots=True)
class Published:
    """What the node's status says: cores (whole millicores) and bytes, since ``at``."""

    cpu: float
    memory: float
    at: float

    def to_report(self) -> dict[str, float | int]:
        return {"cpu": round(self.cpu, 3), "memory": int(self.memory)}


@dataclass(frozen=True, slots=True)
class BatchMemory:
    """What a node remembers between ticks: the window of non-batch use and the figures
    it published (None: none, or removed)."""

    window: tuple[UseSample, ...] = ()
    published: Published | None = None


def non_batch_use(now: float, metrics: Mapping[str, float], pods: Iterable[Pod],
                  usage: Mapping[str, PodUsage]) -> UseSample:
    batch_cpu = batch_memory = 0.0
    for pod in pods:
        if not is_batch_pod(pod):
            continue
        measured = usage.get(pod.key)
        if measured is not None:
            batch_cpu += measured.cpu or 0.0
            batch_memory += measured.memory or 0.0
    cpu, memory = metrics.get(CPU_TOTAL), metrics.get(MEMORY_TOTAL)
    return UseSample(
        now,
        None if cpu is None else max(0.0, cpu - batch_cpu),
        None if memory is None else max(0.0, memory - batch_memory),
    )


def remember(window: tuple[UseSample, ...], sample: UseSample, seconds: float) -> tuple[UseSample, ...]:
    """The window after ``sample``: the samples of the last ``seconds`` and it."""
    since = sample.at - seconds
    return (*(s for s in window if s.at >= since and s.at < sample.at), sample)


def _peak(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def _bounded(spare: float, low: float | None, high: float | None) -> float:
    value = max(0.0, spare)
    if high is not None:
        value = min(value, high)
    if low is not None:
        value = max(value, low)
    return value


def target(section: BatchCapacity, allocatable: Mapping[str, float],
           window: Iterable[UseSample]) -> tuple[float | None, float | None]:
    """What the node would publish now (cores in whole millicores, whole bytes); None for
    a resource with no figure in the window."""
    samples = tuple(window)
    out: list[float | None] = []
    for resource, peak in ((CPU, _peak(s.cpu for s in samples)),
                           (MEMORY, _peak(s.memory for s in samples))):
        if peak is None:
            out.append(None)
            continue
        total = allocatable.get(resource, 0.0)
        spare = total - peak - total * section.margin_percent / 100.0
        low = getattr(section.minimum, resource)
        high = getattr(section.maximum, resource)
        value = _bounded(spare, low, high)
        out.append(_whole_millicores(value) if resource == CPU else _whole(value))
    return out[0], out[1]


def _whole(value: float) -> float:
    """Rounded down to a whole unit, past the float noise of the subtractions (8 - 2.2 -
    0.8 is 4.999999999999999: 5 cores, not 4.999)."""
    return float(math.floor(round(value, 6)))


def _whole_millicores(cores: float) -> float:
    return _whole(cores * 1000) / 1000


def _moved(old: float, new: float, threshold: float, bounds: tuple[float | None, ...]) -> bool:
    if new == old:
        return False
    return abs(new - old) > threshold or new in bounds


def next_published(section: BatchCapacity, allocatable: Mapping[str, float],
                   published: Published | None, wanted: tuple[float | None, float | None],
                   now: float) -> Published | None:
    """The figures to publish after this tick (the same object: no change)."""
    cpu, memory = wanted
    if published is None:
        if cpu is None or memory is None:
            return None
        return Published(cpu, memory, now)
    if now - published.at < section.min_interval_seconds:
        return published
    share = section.hysteresis_percent / 100.0
    moved = False
    if cpu is not None:
        moved |= _moved(published.cpu, cpu, allocatable.get(CPU, 0.0) * share,
                        (0.0, section.minimum.cpu, section.maximum.cpu))
    if memory is not None:
        moved |= _moved(published.memory, memory, allocatable.get(MEMORY, 0.0) * share,
                        (0.0, section.minimum.memory, section.maximum.memory))
    if not moved:
        return published
    return Published(published.cpu if cpu is None else cpu,
                     published.memory if memory is None else memory, now)


def step(section: BatchCapacity, memory: BatchMemory, now: float, allocatable: Mapping[str, float],
         metrics: Mapping[str, float], pods: Iterable[Pod],
         usage: Mapping[str, PodUsage]) -> BatchMemory:
    """One tick: the sample joins the window, and the figures follow it as the section says."""
    window = remember(memory.window, non_batch_use(now, metrics, pods, usage),
                      section.window_seconds)
    wanted = target(section, allocatable, window)
    return BatchMemory(window, next_published(section, allocatable, memory.published, wanted, now))
