"""The ``queues`` section, when the scenario has a Queue: per queue deserved, allocated and
request; also the starving queues, the need, whether every victim set was proven the
fewest then cheapest (``exactVictimSearch``), ``fitsNow`` (pending pods that fit without a
victim), ``unplaced`` (pending pods of starving queues left without victims, with the
reason) and ``skipped`` (pods left out of every queue, with the reason: ``UnknownQueue
<name>``, a queue label naming no Queue) and ``unreadableCosts`` (running queue pods
whose ``pod-deletion-cost`` or ``eviction-cost`` is not an integer: annotation -> value;
read as 0).

Then what the controller does with the plan this round (``holding.step``, the live code,
with no hold in progress): ``reclaims`` (per pending pod given victims: its node and
victims, in the order the pods were served; ``deferred`` with the reason on a reclaim
that waits for a later round); ``victims``, the pods evicted this round, and
``victimsFor`` (per such victim, the pending pod it is evicted for and the node both are
on); ``placeholders``: per reclaim started, the placeholder pod that holds the room its
victims free until the pod is bound (``agent/cluster/queues/holding.py``: its name, the
pod, the node, the victims, the PriorityClass and the requests, CPU in cores, memory in
bytes). A reclaim on a node that already has one waits for the next round (the first
hold's hand-over): it is in ``placeholdersDeferred`` with the reason, and its victims are
in neither ``victims`` nor ``victimsFor``, since nothing is evicted for it yet (the next
plan chooses again, on what the first pod left)."""

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
        "exactVictimSearch": plan.exact,
        "fitsNow": list(plan.fits_now),
        "unplaced": dict(plan.unplaced),
        "skipped": dict(plan.skipped),
        "unreadableCosts": {k: dict(v) for k, v in plan.unreadable_costs.items()},
    }


def acted(plan: QueuePlan, args: QueueArgs, scenario: Scenario) -> dict[str, Any]:
    """What the controller would do with the plan at ``now`` with no hold in progress
    (``holding.step``, the live code): the holds it starts, whose victims it evicts, and
    the reclaims it defers."""
    pods = {p.key: p for p in scenario.store.pods}
    intents = holding.step({}, plan.reclaims, pods, {}, scenario.now, holding.HoldArgs())
    deferred = intents.deferred
    return {
        "reclaims": [
            {"pod": r.pod, "node": r.node, "victims": list(r.victims),
             **({"deferred": deferred[r.pod]} if r.pod in deferred else {})}
            for r in plan.reclaims
        ],  # fmt: skip
        "victims": [v for s in intents.starts for v in s.hold.victims],
        "victimsFor": {
            v: {"pod": s.hold.pod, "node": s.hold.node}
            for s in intents.starts
            for v in s.hold.victims
        },
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
        "placeholdersDeferred": dict(deferred),
    }


REPORT = Report(has_input, render, acted)
