"""The ``queues`` section, when the scenario has a Queue: per queue deserved, allocated and
request, the victims (in the order their pods were served); also the starving queues, the
need, whether every victim set was proven the fewest then cheapest
(``exactVictimSearch``), and where the victims were chosen: ``victimsFor`` (per victim, the
pending pod it is evicted for and the node both are on), ``reclaims`` (per pending pod
given victims: its node and victims), ``fitsNow`` (pending pods that fit without a victim)
and ``unplaced`` (pending pods of starving queues left without victims, with the reason)."""

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
        "victimsFor": {v: {"pod": r.pod, "node": r.node} for v, r in plan.chosen_for().items()},
        "reclaims": [{"pod": r.pod, "node": r.node, "victims": list(r.victims)} for r in plan.reclaims],
        "fitsNow": list(plan.fits_now),
        "unplaced": dict(plan.unplaced),
    }


REPORT = Report(has_input, render)
