"""CPU isolation: who runs first, not only how much (DESIGN.md "CPU isolation").

A NodeQOSEnsurancePolicy may carry a ``cpuIsolation`` section for the nodes it selects
(a node pool), beside or instead of its waterline rules:

* ``idle``: the *idle class*. The pod-level cgroups of the pods its scope picks get
  ``cpu.idle = 1``: they run only when no other task wants the CPU, and a waking
  latency-critical task preempts them at once. A CFS quota says how much a batch pod may
  run per period, not when; the idle class says when, and keeps every spare cycle for
  batch work. Default scope: BestEffort pods only.
* ``burst``: CPU burst (``cpu.cfs_burst_us`` / ``cpu.max.burst``) for latency-critical
  pods, ``quotaPercent`` of each quota, so a pod near its own limit borrows what it left
  unused in earlier periods instead of throttling itself. Default scope: the pods
  labelled ``qos.waterline.io/latency-critical: "true"``, any QoS class and priority.
  With ``quotaAboveLimitPercent`` the quota itself breathes (koordinator's CPU burst by
  quota, ``cfsQuotaBurstPercent`` less 100): while no throttle or evict line of the node
  is in force, the CFS quota of a pod in the scope whose containers all have a CPU limit
  rises to its limit plus that percent; when one comes into force it is taken back first,
  before any pod is throttled or evicted (``engine.phases.isolation``). Unset: off.

Why a section of the policy rather than a new kind or an action: a class applies to a
node pool (the policy's ``nodeSelector``) and holds all the time, not when a rule
triggers; the policy is already watched by every agent, validated in its status by the
controller, listed by ``kubectl get nqp`` and carried by `simulate` and `capture`; and a
deleted policy releases its class like it releases its caps.

Several policies on one node: a pod is idle when any idle scope picks it; a pod's burst
is that of the first policy (by name) whose burst scope picks it. A pod given burst, or
labelled latency-critical, is never idle, whatever a scope says.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from agent.model.fields import Fields, is_number
from agent.model.latency import LATENCY_CRITICAL_LABEL
from agent.model.objects import BEST_EFFORT, QOS_CLASSES
from agent.model.scope import MAX_PRIORITY, Scope, parse_scope
from agent.model.selectors import LabelSelector

#: The idle class picks BestEffort pods unless its scope says otherwise.
IDLE_SCOPE = Scope(qos_classes=frozenset({BEST_EFFORT}))
#: Burst goes to the pods labelled latency-critical, whatever their class or priority.
BURST_SCOPE = Scope(
    qos_classes=frozenset(QOS_CLASSES),
    max_priority=MAX_PRIORITY,
    pod_selector=LabelSelector(match_labels=((LATENCY_CRITICAL_LABEL, "true"),)),
)
#: The kernel refuses a burst above the quota (EINVAL): 100% is the most there is.
DEFAULT_BURST_PERCENT = 100.0
#: The most a quota may rise above the limit (koordinator's cfsQuotaBurstPercent default,
#: 300, is 200 above): 400 is five times the limit, far past any sensible policy.
MAX_ABOVE_LIMIT_PERCENT = 400.0


@dataclass(frozen=True, slots=True)
class IdleClass:
    scope: Scope = IDLE_SCOPE
    #: The batch pods (``agent.model.batch.is_batch_pod``) instead of a scope: the class
    #: a ``batchCapacity`` section with ``idle: true`` puts its batch pods in.
    batch_pods: bool = False


@dataclass(frozen=True, slots=True)
class CpuBurst:
    #: Percent of each cgroup's CFS quota it may borrow (1..100).
    quota_percent: float = DEFAULT_BURST_PERCENT
    scope: Scope = BURST_SCOPE
    #: Percent above the CPU limit the quota may rise while the node is under its lines
    #: (1..400); None: the quota stays the limit.
    above_limit_percent: float | None = None


@dataclass(frozen=True, slots=True)
class CpuIsolation:
    idle: IdleClass | None = None
    burst: CpuBurst | None = None


#: The idle class of the batch pods of a ``batchCapacity`` section with ``idle: true``.
BATCH_IDLE = CpuIsolation(idle=IdleClass(batch_pods=True))


@dataclass(frozen=True, slots=True)
class IsolationSupport:
    """What this host's kernel offers (``cpu.idle``: 5.15+; burst: 5.14+), detected by
    the actuator. A class the kernel lacks is neither planned nor reported."""

    idle: bool = True
    burst: bool = True
    #: The quota raised above the limit (the CFS quota files: wherever there is a cpu
    #: controller).
    quota: bool = True


NO_SUPPORT = IsolationSupport(idle=False, burst=False, quota=False)


def parse_cpu_isolation(raw: object, spec: Fields) -> CpuIsolation:
    """``spec.cpuIsolation`` (``spec``: the fields of the policy's spec): idle, burst, or
    both."""
    section = spec.mapping(raw, "cpuIsolation")
    fields = spec.child("cpuIsolation")
    fields.only(section, ("idle", "burst"))
    idle = burst = None
    if section.get("idle") is not None:
        at = fields.child("idle")
        body = at.mapping(section["idle"])
        at.only(body, ("scope",))
        idle = IdleClass(parse_scope(body.get("scope"), at.child("scope"), IDLE_SCOPE))
    if section.get("burst") is not None:
        at = fields.child("burst")
        body = at.mapping(section["burst"])
        at.only(body, ("quotaPercent", "scope", "quotaAboveLimitPercent"))
        burst = CpuBurst(_percent(at, body.get("quotaPercent")),
                         parse_scope(body.get("scope"), at.child("scope"), BURST_SCOPE),
                         _above_limit(at, body.get("quotaAboveLimitPercent")))
    if idle is None and burst is None:
        raise spec.bad("cpuIsolation", "must set idle or burst (or both)", dict(section))
    return CpuIsolation(idle, burst)


def _percent(fields: Fields, value: object) -> float:
    if value is None:
        return DEFAULT_BURST_PERCENT
    if not is_number(value) or not math.isfinite(value):
        raise fields.bad("quotaPercent", "must be a number (percent of the quota)", value)
    if not 1 <= value <= 100:
        raise fields.bad("quotaPercent", "must be between 1 and 100 (the kernel refuses a "
                         "burst above the quota)", value)
    return float(value)


def _above_limit(fields: Fields, value: object) -> float | None:
    if value is None:
        return None
    if not is_number(value) or not math.isfinite(value):
        raise fields.bad("quotaAboveLimitPercent", "must be a number (percent above the CPU limit)", value)
    if not 1 <= value <= MAX_ABOVE_LIMIT_PERCENT:
        raise fields.bad("quotaAboveLimitPercent",
                         f"must be between 1 and {MAX_ABOVE_LIMIT_PERCENT:g} (percent above the CPU limit)", value)
    return float(value)
