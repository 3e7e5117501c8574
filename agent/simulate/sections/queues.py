"""The ``queues`` section, when the scenario has a Queue: per queue deserved, allocated and
request, the victims (in the order their pods were served); also the starving queues, the
need, whether every victim set was proven the fewest then cheapest
(``exactVictimSearch``), and where the victims were chosen: ``victimsFor`` (per victim, the
pending pod it is evicted for and the node both are on), ``reclaims`` (per pending pod
given victims: its node and victims), ``fitsNow`` (pending pods that fit without a victim),
``unplaced`` (pending pods of starving queues left without victims, with the reason) and
``skipped`` (pods left out of every queue, with the reason: ``UnknownQueue <name>``, a
queue label naming no Queue);
``placeholders``: per reclaim, the placeholder pod the controller would create to hold the
room its victims free until the pod is bound (``agent/cluster/queues/holding.py``: its
name, the pod, the node, the victims, the PriorityClass and the requests, CPU in cores,
memory in bytes), in the order the pods were served. A reclaim on a node that already
has one waits for the next round (the first hold's hand-over) and is in
``placeholdersDeferred`` with the reason; the live controller creates the same ones."""

from __future__ import annotations

from typing import Any

from agent.cluster.queues import QueueArgs, QueuePlan, holding
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
        "skipped": dict(plan.skipped),
    }


def placeholders(plan: QueuePlan, args: QueueArgs, scenario: Scenario) -> dict[str, Any]:
    """What the controller would create for the plan at ``now`` with no hold in progress
    (``holding.step``, the live code)."""
    pods = {p.key: p for p in scenario.store.pods}
    intents = holding.step({}, plan.reclaims, pods, {}, scenario.now, holding.HoldArgs())
    return {
        "placeholders": [
            {
                "name": s.hold.placeholder,
                "pod": s.hold.pod,
                "node": s.hold.node,
                "victims": list(s.hold.victims),
                "priorityClassName": s.hold.priority_class,
                "requests": rounded({r: v for r, v in pods[s.hold.pod].requests.items()
                                     if v > 0 and r != "pods"}),  # fmt: skip
            }
            for s in intents.starts
        ],
        "placeholdersDeferred": dict(intents.deferred),
    }


REPORT = Report(has_input, render, placeholders)
