"""The ``arbitration`` section: one round at ``now`` over the scenario's PodMigrationJobs.

``dequeueAt`` adds when the controller would start each passed job (seconds after the
round), through the real rate-limited queue."""

from __future__ import annotations

from typing import Any

from agent.cluster.arbitration import ArbitrationArgs, ArbitrationPlan
from agent.cluster.rate_queue import release_schedule
from agent.scenario import Scenario
from agent.simulate.sections.render import Report


def has_input(scenario: Scenario) -> bool:
    return bool(scenario.store.migration_jobs)


def render(plan: ArbitrationPlan, args: ArbitrationArgs) -> dict[str, Any]:
    schedule = release_schedule(list(plan.passed), args.process_queue_qps)
    return {
        "passed": list(plan.passed),
        "waiting": {name: v.reason for name, v in plan.waiting.items()},
        "failed": {name: v.reason for name, v in plan.failed.items()},
        "dequeueAt": {name: round(at, 6) for name, at in schedule.items()},
    }


REPORT = Report(has_input, render)
