"""Observed usage: what a collector measured, or what a scenario says was demanded.

Units: CPU in cores, memory in bytes. ``None`` means "no figure", which is not zero:
a pod without a figure is sorted last and never credited with a release.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class ContainerUsage:
    cpu: float | None = None
    memory: float | None = None
    ext_cpu: float | None = None


@dataclass(frozen=True, slots=True)
class PodUsage:
    """Pod totals; ``containers`` holds the per-container split where it is known."""

    cpu: float | None = None
    memory: float | None = None
    ext_cpu: float | None = None
    containers: Mapping[str, ContainerUsage] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class NodeSample:
    """One observation of a node: node metrics by registry name, pod usage by ns/name."""

    at: float
    node: str
    metrics: Mapping[str, float]
    pods: Mapping[str, PodUsage] = field(default_factory=dict)
    #: Pods throttled when measured (``capped: true``), with the cap in force (cores; None
    #: when not recorded): their CPU figure is a lower bound of their demand.
    capped: Mapping[str, float | None] = field(default_factory=dict)


def within_cpu_limit(usage: PodUsage, limit: float | None) -> PodUsage:
    """A pod's CPU figure above its CPU limit is read as the limit (SIMULATE.md): the
    kernel enforces the limit, so more is a measuring artefact or demand that cannot run.
    The containers' figures are scaled alike, so a cap split by usage keeps its shares."""
    if limit is None or usage.cpu is None or usage.cpu <= limit:
        return usage
    scale = limit / usage.cpu if usage.cpu else 0.0
    containers = {
        name: c if c.cpu is None else ContainerUsage(c.cpu * scale, c.memory, c.ext_cpu)
        for name, c in usage.containers.items()
    }
    return PodUsage(limit, usage.memory, usage.ext_cpu, containers)
