"""The report sections of `waterline simulate`, one per engine, in report order.

A section is a function ``(Scenario) -> dict | None``; None means the engine had no input
and its key is left out of the report. Adding an engine is one line here.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agent.scenario import Scenario

SectionFn = Callable[[Scenario], "dict[str, Any] | None"]


@dataclass(frozen=True)
class Section:
    key: str
    target: str  # "module:function"

    def load(self) -> SectionFn:
        module, _, function = self.target.partition(":")
        fn: SectionFn = getattr(importlib.import_module(module), function)
        return fn


SECTIONS: tuple[Section, ...] = (
    Section("nodes", "agent.simulate.nodes:simulate_nodes"),
    Section("arbitration", "agent.cluster.arbitration:simulate_section"),
    Section("defrag", "agent.cluster.defrag:simulate_section"),
    Section("queues", "agent.cluster.queues:simulate_section"),
    Section("daemonset", "agent.cluster.daemonset:simulate_section"),
)


def build_report(scenario: Scenario) -> dict[str, Any]:
    """Run every section; any InvalidObject propagates so nothing half-valid is reported."""
    report: dict[str, Any] = {}
    for section in SECTIONS:
        result = section.load()(scenario)
        if result is not None:
            report[section.key] = result
    return report
