"""The ``daemonset`` section: one entry per pending DaemonSet pod past the start delay that
does not fit its node; None when no DaemonSet pod is pending on a known node at all."""

from __future__ import annotations

from typing import Any

from agent.cluster.daemonset import DaemonSetArgs, DaemonSetPlan
from agent.scenario import Scenario
from agent.simulate.sections.render import Report


def has_input(scenario: Scenario) -> bool:
    return True  # whether a DaemonSet pod is pending is the plan's to say


def render(plan: DaemonSetPlan, args: DaemonSetArgs) -> dict[str, Any] | None:
    if not plan.pending:
        return None
    return {
        p.pod: {"node": p.node, "strategy": p.strategy, "victims": list(p.victims)}
        for p in plan.preemptions
    }


REPORT = Report(has_input, render)
