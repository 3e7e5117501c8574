"""The ``queues`` section, when the scenario has a Queue: per queue deserved, allocated and
request, the victims in victim order; also the starving queues, the need and whether the
victim search was exact (``exactVictimSearch``)."""

from __future__ import annotations

from typing import Any

from agent.cluster.queues import QueueArgs, QueuePlan
from agent.scenario import Scenario
from agent.simulate.sections.render import Report, rounded


def has_input(scenario: Scenario) -> bool:
    return bool(scenario.store.queues)


def render(plan: QueuePlan, args: QueueArgs) -> dict[str, Any]:
    return {
        "queues": {
            name: {
                "deserved": rounded(s.deserved),
                "allocated": rounded(s.allocated),
                "request": rounded(s.request),
            }
            for name, s in plan.status.items()
        },
        "starving": list(plan.starving),
        "need": rounded(plan.need),
        "victims": list(plan.victims),
        "exactVictimSearch": plan.exact,
    }


REPORT = Report(has_input, render)
