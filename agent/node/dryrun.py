"""Actuators that decide nothing and write nothing: they report what would be done.

``ReportingEvictor`` stands in for the Eviction API where there is none (local mode) or
where nothing may be written (``--dry-run``): it answers ``evicted`` so that the engine
shows the exact set of pods that would go, and the loop, told that evictions are not
performed, does not count them as terminating. ``DryRunThrottler`` writes no quota,
``DryRunIsolator`` no idle mark nor burst.
"""

from __future__ import annotations

from collections.abc import Mapping

import structlog

from agent.model.eviction import EvictionResult
from agent.model.isolation import IsolationSupport
from agent.model.objects import Pod


class ReportingEvictor:
    def __init__(self, why: str) -> None:
        self.why = why
        self.log = structlog.get_logger()

    def evict(self, pod: Pod, grace_seconds: int | None) -> EvictionResult:
        self.log.info(
            "eviction not performed", pod=pod.key, grace_seconds=grace_seconds, why=self.why
        )
        return EvictionResult.EVICTED


class DryRunThrottler:
    def __init__(self) -> None:
        self.log = structlog.get_logger()

    def apply(self, pod: Pod, container_caps: Mapping[str, float], owner: str = "") -> bool:
        """Reports success: a dry run shows the decisions as if every write went through."""
        self.log.debug("dry run: quota not written", pod=pod.key, caps=dict(container_caps))
        return True

    def restore(self, pod: Pod) -> bool:
        self.log.debug("dry run: quota not restored", pod=pod.key)
        return True


class DryRunIsolator:
    """Writes no mark and reports success, so a dry run shows the classes as decided."""

    support = IsolationSupport()

    def __init__(self) -> None:
        self.log = structlog.get_logger()

    def mark_idle(self, pod: Pod, owner: str = "") -> bool:
        self.log.debug("dry run: idle not marked", pod=pod.key)
        return True

    def release_idle(self, pod: Pod) -> bool:
        return True

    def set_burst(self, pod: Pod, percent: float, owner: str = "") -> bool:
        self.log.debug("dry run: burst not set", pod=pod.key, percent=percent)
        return True

    def release_burst(self, pod: Pod) -> bool:
        return True
