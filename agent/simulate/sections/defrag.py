"""The ``defrag`` section, when the scenario gives ``config.defrag``.

Beyond SIMULATE.md's keys: ``acted`` (false when numberOfNodes gated the plan),
``skipped`` (node -> why it was not a source or was not freed: Critical, CoolingDown,
HoldsReservation, ``NotMigratable ns/pod: <reason>``, ``NoTarget ns/pod``),
``notMigratable`` (pod -> the evictor filter's reason, for every pod that kept a source
from being freed) and ``fragmentation`` {before, after} as a share in 0..1."""

from __future__ import annotations

from typing import Any

from agent.cluster.defrag import DefragArgs, DefragPlan
from agent.scenario import Scenario
from agent.simulate.sections.render import Report


def has_input(scenario: Scenario) -> bool:
    return scenario.config_section("defrag") is not None


def render(plan: DefragPlan, args: DefragArgs) -> dict[str, Any]:
    return {
        "migrations": [
            {"pod": m.pod.key, "source": m.source, "target": m.target} for m in plan.migrations
        ],
        "sourceNodes": list(plan.source_nodes),
        "freedNodes": list(plan.freed_nodes),
        "acted": plan.acted,
        "skipped": dict(sorted(plan.skipped.items())),
        "notMigratable": dict(sorted(plan.not_migratable.items())),
        "utilization": {
            "before": {n: _percent(u) for n, u in plan.utilization_before.items()},
            "after": {n: _percent(u) for n, u in plan.utilization_after.items()},
        },
        "fragmentation": {
            "before": _percent(plan.fragmentation_before),
            "after": _percent(plan.fragmentation_after),
        },
    }


def _percent(value: float) -> float:
    """Four decimals; ``+ 0.0`` turns -0.0 into 0.0."""
    return round(value, 4) + 0.0


REPORT = Report(has_input, render)
