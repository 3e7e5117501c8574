"""The report sections of `waterline simulate`, in report order: the node agent's, then one
per cluster engine of ``agent.cluster.registry`` (the registry the controller runs).

An engine's section parses the engine's config section from the scenario (a bad one is
refused even when the engine has no input), and when the scenario gives the engine input,
plans once at ``now`` and renders the plan. A section is None when its engine had no input;
its key is then left out of the report. ``REPORTS`` has one entry per engine (a test
checks that none is missing).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agent.cluster.engine import ClusterEngine
from agent.cluster.registry import ENGINES
from agent.scenario import Scenario
from agent.simulate.nodes import simulate_nodes
from agent.simulate.sections import arbitration, daemonset, defrag, queues
from agent.simulate.sections.render import Report

SectionFn = Callable[[Scenario], "dict[str, Any] | None"]

#: Engine key -> how its plan appears in the report.
REPORTS: Mapping[str, Report[Any, Any]] = {
    "arbitration": arbitration.REPORT,
    "defrag": defrag.REPORT,
    "queues": queues.REPORT,
    "daemonset": daemonset.REPORT,
}


@dataclass(frozen=True)
class EngineSection:
    """The section of one engine: its args from the scenario, its plan, its rendering."""

    engine: ClusterEngine[Any, Any]
    report: Report[Any, Any]

    def __call__(self, scenario: Scenario) -> dict[str, Any] | None:
        args = self.engine.parse_args(scenario.config_section(self.engine.key))
        if not self.report.has_input(scenario):
            return None
        plan = self.engine.plan(scenario.store, args, scenario.now)
        out = self.report.render(plan, args)
        if out is not None and self.report.acts is not None:
            out.update(self.report.acts(plan, args, scenario))
        return out


@dataclass(frozen=True)
class Section:
    key: str
    run: SectionFn


SECTIONS: tuple[Section, ...] = (
    Section("nodes", simulate_nodes),
    *(Section(e.key, EngineSection(e, REPORTS[e.key])) for e in ENGINES),
)


def run_section(key: str, scenario: Scenario) -> dict[str, Any] | None:
    """One section on its own (tests, the cluster benchmark)."""
    return next(s for s in SECTIONS if s.key == key).run(scenario)


def build_report(scenario: Scenario) -> dict[str, Any]:
    """Run every section; any InvalidObject propagates so nothing half-valid is reported."""
    report: dict[str, Any] = {}
    for section in SECTIONS:
        result = section.run(scenario)
        if result is not None:
            report[section.key] = result
    return report
