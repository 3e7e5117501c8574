"""Ticks -> scenario samples, and the scenario document (the contract: SIMULATE.md).

A sample is what the agent decided on at that tick: the node metrics it saw (utilization
included, as derived) and each pod's usage, at the brain's own clock, relative to the
first sample's whole second (the scenario's ``now``), so a replay sees the same times for
cool-downs and running times. A tick that made no decision (objects or collection failed)
writes no sample: it moved no rule counter live either.

Pod usage is written as pod totals (the pod cgroup's figure, what the decision core used),
not per container: a scenario's pod figure is the sum of its containers', which would
leave out the sandbox and so differ from what the live agent saw.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TextIO

from agent.model.settings import AgentSettings
from agent.model.timeutil import format_time
from agent.model.usage import PodUsage
from agent.node.loop import TickOutcome

DIGITS = 6


def _round(value: float) -> float:
    return round(value, DIGITS)


def pod_entry(usage: PodUsage, cap: float | None) -> dict[str, Any]:
    entry: dict[str, Any] = {}
    if usage.cpu is not None:
        entry["cpu"] = _round(usage.cpu)
    if usage.memory is not None:
        entry["memory"] = round(usage.memory)
    if usage.ext_cpu:  # only pods that use the extended resource have a figure that matters
        entry["extCpu"] = _round(usage.ext_cpu)
    if cap is not None:
        entry["capped"] = True
        entry["cpuCap"] = _round(cap)
    return entry


@dataclass
class Recorder:
    """A loop publisher keeping one sample per decided tick."""

    caps: Callable[[TickOutcome], Mapping[str, float]]
    samples: list[dict[str, Any]] = field(default_factory=list)
    origin: float | None = None
    last: TickOutcome | None = None
    capped_last: int = 0

    def __call__(self, outcome: TickOutcome) -> None:
        caps = self.caps(outcome)  # every tick: the own caps follow each outcome
        report = outcome.report
        if report is None:
            return
        if self.origin is None:
            self.origin = float(math.floor(report.at))
        pods = {key: pod_entry(usage, caps.get(key)) for key, usage in sorted(outcome.usage.items())}
        self.capped_last = sum(1 for p in pods.values() if p.get("capped"))
        self.samples.append({
            "at": _round(report.at - self.origin),
            "node": outcome.node,
            "metrics": {m: _round(v) for m, v in sorted(report.usage.items())},
            "pods": pods,
        })  # fmt: skip
        self.last = outcome


def agent_config(settings: AgentSettings) -> dict[str, Any]:
    """The live agent settings that differ from the defaults and change a replay's
    decisions, as ``config.agent`` (the API time budget does not; the cluster brake is
    read live from its ConfigMap, not from the settings, and is not recorded)."""
    default = AgentSettings()
    out: dict[str, Any] = {}
    if settings.execute_excess_percent != default.execute_excess_percent:
        out["executeExcessPercent"] = settings.execute_excess_percent
    if settings.ext_cpu_resource != default.ext_cpu_resource:
        out["extCpuResource"] = settings.ext_cpu_resource
    limit = settings.eviction_rate_limit
    if limit != default.eviction_rate_limit:
        out["evictionRateLimit"] = {"perMinute": limit.per_minute, "burst": limit.burst}
    return out


def scenario_document(
    recorder: Recorder, objects: list[dict[str, Any]], settings: AgentSettings
) -> dict[str, Any]:
    doc: dict[str, Any] = {"now": format_time(recorder.origin or 0.0)}
    config = agent_config(settings)
    if config:
        doc["config"] = {"agent": config}
    doc["objects"] = objects
    doc["samples"] = recorder.samples
    return doc


class Progress:
    """One line on stderr while recording: rewritten in place on a terminal, else every
    ``every`` ticks (a log file gets a line now and then, not one per tick)."""

    def __init__(self, stream: TextIO, recorder: Recorder, total: int | None, every: int = 10):
        self.stream = stream
        self.recorder = recorder
        self.total = total
        self.every = every
        self.ticks = 0
        self.actions = 0
        self.tty = stream.isatty()

    def line(self) -> str:
        of = f"/{self.total}" if self.total else ""
        return (
            f"capture: tick {self.ticks}{of}, {len(self.recorder.samples)} samples, "
            f"{self.recorder.capped_last} pods capped, {self.actions} actions"
        )

    def __call__(self, outcome: TickOutcome) -> None:
        self.ticks += 1
        if outcome.report is not None:
            self.actions += len(outcome.report.actions)
        if self.tty:
            self.stream.write("\r" + self.line() + "\033[K")
        elif self.ticks % self.every == 0 or self.ticks == self.total:
            self.stream.write(self.line() + "\n")
        self.stream.flush()

    def done(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()
