"""Precise execution, decided: act on just enough pods to close each gap, and no more.

Per tick: evict first, then throttle down, then throttle up (DESIGN.md "Executor: precise
execution"). For a *quantified* metric the candidates are sorted by the metric's sorter
and acted on in order; what each action releases is subtracted from the gap of every
metric it relieves, and the loop stops as soon as the gap is closed. A metric that is not
quantified (pressure) is handled in closed loop: one step a tick, re-measured next tick.

``plan_actions`` is pure: it works on plain data and a copy of the node's memory, and it
never calls an actuator. It is a generator that yields what it wants done
(``engine.intents``) and is sent the answer, because the rest of the tick depends on
it (a 429 means "the next candidate", a 404 counts as released, a cap not written is
neither recorded nor credited); it returns the records and the node's memory after the
tick. The live agent, `simulate` and tests drive the same plan (``executors.drive``).
The phases are a table (``PHASES``) of generators in ``engine.phases`` over one
working set (``engine.work.TickWork``): a new actuator is a new phase, a new intent and
its writer (``executors.actuators``), not a branch in the phases here (the CPU isolation
classes came so: ``engine.phases.isolation``).

Decisions taken where DESIGN.md is silent:

* A pod with no usage figure for a quantified metric is neither throttled nor credited.
  For eviction, once every pod with a figure has been tried and the gap is still open,
  the first pod without a figure is evicted and the round stops there (closed loop, like
  pressure): evicting every pod of unknown size on one sample would be reckless.
* Throttle-up does not run in a tick in which any throttle-down waterline is in force, so
  two rules never fight over the same caps.
* An eviction releases CPU and memory from both the evict and the throttle-down gaps.
* A Preview eviction never calls the Eviction API: it is reported as ``evicted`` with
  ``preview: true``, credited so the report shows the exact set that would go, and
  starts no cool-down.
* A cap whose action changed is checked against the action's floor every tick: a cap
  below the new floor (minCPURatio raised) is raised to it; an action that no longer
  throttles hands its caps back at once, like a deleted one.
* An evicted pod keeps its cap record (it is not a candidate while it terminates, and is
  forgotten once gone), so a pod that was not evicted after all (local mode) stays managed.

The safety limits on evictions (maxPodsPerRound, the node's token bucket, the cluster
brake, the backoff after an API fault) are ``engine.limits``; an eviction the API did
not answer in its tick is settled by ``NodeState.settle_late_evictions``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from engine.intents import Plan
from engine.phases.batch import batch_capacity
from engine.phases.batch_limits import batch_limits_phase
from engine.phases.batch_squeeze import batch_squeeze
from engine.phases.caps import reconcile_caps, throttle_down, throttle_up
from engine.phases.evict import evict
from engine.phases.isolation import cpu_burst, idle_class, quota_burst, take_back_quota
from engine.records import ActionRecord, IsolationChange
from engine.state import NodeState
from engine.work import Steps, TickContext, TickWork


@dataclass(frozen=True, slots=True, kw_only=True)
class Execution:
    """What a tick's plan decided: its records, the node's memory after it, and what the
    safety limits said."""

    records: list[ActionRecord]
    state: NodeState
    #: Pods that joined or left a CPU isolation class (``engine.phases.isolation``).
    changes: list[IsolationChange] = field(default_factory=list)
    #: The safety limit that stopped an eviction round (engine.limits), if any.
    limited: str | None = None
    #: Seconds the node's eviction rounds now wait after an API fault this tick.
    backoff_delay: float | None = None


def plan_actions(ctx: TickContext, state: NodeState) -> Plan[Execution]:
    """Decide one tick on a copy of ``state``: yields the intents, returns the records and
    the node's memory after the tick. ``state`` itself is never changed."""
    tick = TickWork(ctx, state.copy())
    for phase in PHASES:
        yield from phase(tick)
    return Execution(records=tick.records, state=tick.state, limited=tick.limits.limited,
                     backoff_delay=tick.limits.backoff_delay, changes=tick.changes)


#: The phases of a tick, in order (first the batch pods' limits, which every cap sits
#: under; DESIGN.md: evict first, then throttle down, then up; but a quota raised above
#: an LC pod's limit is taken back before any of them; then the CPU isolation classes,
#: which change who runs first and nobody's usage, so they come after every decision
#: about how much (the quota burst before burst, which is sized from the quota in force);
#: then the batch capacity the node publishes, which follows what the node used; last the
#: batch pods held within it).
PHASES: tuple[Callable[[TickWork], Steps], ...] = (
    batch_limits_phase, reconcile_caps, take_back_quota, evict, throttle_down, throttle_up,
    idle_class, quota_burst, cpu_burst, batch_capacity, batch_squeeze,
)
