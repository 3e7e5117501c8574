"""Actuators that decide nothing and write nothing: they report what would be done.

``ReportingEvictor`` stands in for the Eviction API where there is none (local mode) or
where nothing may be written (``--dry-run``): it answers ``evicted`` so that the engine
shows the exact set of pods that would go, and the loop, told that evictions are not
performed, does not count them as terminating. ``dry_run_writers`` stands in for the
throttler and the isolator: no quota, no idle mark nor burst is written, every class is
offered and every write answered done, so a dry run shows the decisions as decided. All
are ``executors.actuators.Reported``: one wrapper, whatever the actuator.
"""

from __future__ import annotations

from executors.actuators import BATCH_LIMITS, CAPS, EVICTION, ISOLATION, Reported

DRY_RUN = "dry run"


class ReportingEvictor(Reported):
    """An evictor that evicts nothing: it logs the eviction (with ``why``) as not performed."""

    def __init__(self, why: str) -> None:
        super().__init__("evictor", EVICTION, why)


def dry_run_throttler() -> Reported:
    return Reported("throttler", CAPS, DRY_RUN)


def dry_run_isolator() -> Reported:
    return Reported("isolator", ISOLATION, DRY_RUN)


def dry_run_limiter() -> Reported:
    return Reported("batch-limiter", BATCH_LIMITS, DRY_RUN)
