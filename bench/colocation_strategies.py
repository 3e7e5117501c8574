"""The windows the co-location benchmark compares: the strategies, as policies and node
brains for the real loop, and the baselines they are judged against.

All of them run the product's own loop, collectors, decision (``engine.decide``),
quota throttler and CPU isolator; they differ only in the policy and in a small *hook*
that reshapes what the decision is given (never a copy of the decision):

* ``none``: no policy (the agent measures, and does nothing);
* ``waterline-cpu``: Waterline on a node CPU waterline (``cpu_total_usage``);
* ``waterline-lc``: Waterline on what the victim suffers (``lc_cpu_wait_ratio``);
* ``floor-all``: the same CPU rule, but every candidate is throttled to its floor as soon
  as it triggers (crane-agent before its precise-execution proposal): the hook makes the
  throttle-down gap one no pod can close;
* ``one-per-tick``: the same CPU rule, one more pod throttled to its floor a tick (the
  kubelet's pace): the hook also shows the engine only the pods already throttled and the
  next candidate;
* ``idle``: no rule at all: the batch pods in the idle class (``cpu.idle`` on their pod
  cgroups, ``spec.cpuIsolation.idle``): who runs first rather than how much;
* ``idle-burst``: the same, and CPU burst (100% of the quota) for the latency-critical
  pod;
* ``batch-capacity``: the batch demand carried by batch-capacity pods (``cap-1..3``,
  requesting ``waterline.io/batch-cpu`` and ``batch-memory`` only: BestEffort to
  Kubernetes, their CFS quota written by the agent from their ``batch-cpu`` limit) under
  a policy with a ``batchCapacity`` section (their idle class, the published capacity,
  the squeeze); the real node only (``bench.colocation_real``: the kubelet must admit
  them against what the node publishes);
* ``batch-capacity-breathe``: the same, and web's CFS quota breathing
  (``cpuIsolation.burst.quotaAboveLimitPercent``: its quota raised above its limit while
  no line is in force, and burst): issue 33's answer for an LC pod near its own limit,
  throttled by its own quota.

The baselines (``BASELINES``): web alone; web alone with burst (the baseline of
``idle-burst``: a strategy that changes web's own settings is judged against web alone
with the same settings, and what burst does for web alone is reported apart); web alone
with its quota breathing (``alone-breathe``, the baseline of ``batch-capacity-breathe``,
likewise); web beside
one idle-class spinner (``busy-alone``, a control: what a busy CPU's wake-ups cost web).
Throttle-up is Waterline's for all. A run runs only the baselines it judges against
(``baselines``): ``alone`` always, ``alone-burst`` and ``alone-breathe`` only for a
strategy judged against them, ``busy-alone`` unless the control is left out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from agent.model.analysis import THROTTLE_DOWN
from agent.model.numbers import EPSILON
from agent.model.usage import PodUsage
from agent.node.tick import NodeBrain
from engine.caps import throttle_floor
from engine.decide import Strategy as EngineStrategy
from engine.sorters import SORTERS, Candidate
from engine.state import NodeState
from engine.work import TickContext

QOS = "qos.waterline.io/v1alpha1"
LC_LABEL = "qos.waterline.io/latency-critical"
#: The label of the batch-capacity pods (``cap-1..3``): kept out of every other strategy's
#: scope, so the other windows treat the run's pods as they did before those pods existed.
CAP_LABEL = "bench.waterline.io/batch-capacity"
NOT_LC_NOR_CAP = [{"key": LC_LABEL, "operator": "NotIn", "values": ["true"]},
                  {"key": CAP_LABEL, "operator": "DoesNotExist"}]  # fmt: skip
#: A gap no pod can close: the engine throttles every candidate down to its floor.
WHOLE = 1e9


def rules(metric: str, value: float, min_ratio: int, step_ratio: int) -> list[dict[str, Any]]:
    """One rule on ``metric`` and the throttle action every strategy shares (the
    latency-critical pod is never a candidate, even when it is Burstable)."""
    policy = {
        "apiVersion": QOS, "kind": "NodeQOSEnsurancePolicy", "metadata": {"name": "bench"},
        "spec": {"objectiveEnsurances": [{
            "name": metric, "metricRule": {"name": metric, "value": f"{value:g}"},
            "avoidanceThreshold": 1, "restoreThreshold": 3, "actionName": "throttle-batch",
        }]},
    }  # fmt: skip
    action = {
        "apiVersion": QOS, "kind": "AvoidanceAction", "metadata": {"name": "throttle-batch"},
        "spec": {
            "throttle": {"cpuThrottle": {"minCPURatio": min_ratio, "stepCPURatio": step_ratio}},
            "scope": {"qosClasses": ["BestEffort", "Burstable"], "podSelector": {
                "matchExpressions": NOT_LC_NOR_CAP}},
        },
    }  # fmt: skip
    return [policy, action]


def floor_all(ctx: TickContext, state: NodeState) -> TickContext:
    """The throttle-down gaps made whole (a gap no pod can close): the engine then caps
    every candidate at its floor at once (``engine.decide.Strategy``)."""
    down = ctx.analysis.gaps[THROTTLE_DOWN]
    if not down:
        return ctx
    gaps = {**ctx.analysis.gaps, THROTTLE_DOWN: {m: WHOLE for m in down}}
    return replace(ctx, analysis=replace(ctx.analysis, gaps=gaps))


def one_per_tick(ctx: TickContext, state: NodeState) -> TickContext:
    """As ``floor_all``, the engine shown only the pods already throttled and the first
    candidate a cap would lower."""
    whole = floor_all(ctx, state)
    action = next(iter(ctx.actions.values()), None)
    if whole is ctx or action is None or action.throttle is None:
        return whole
    throttle = action.throttle
    free = [Candidate(p, ctx.usage.get(k, PodUsage()), ctx.now) for k, p in ctx.pods.items()
            if k not in state.throttled and action.scope.admits(p, ctx.namespace_labels(p.namespace))]  # fmt: skip
    lowerable = [c for c in free if c.usage.cpu is not None
                 and c.usage.cpu > throttle_floor(c.pod, throttle, ctx.node) + EPSILON]  # fmt: skip
    keep = {c.key for c in SORTERS["cpu"].sort(lowerable)[:1]} | set(state.throttled)
    return replace(whole, pods={k: p for k, p in ctx.pods.items() if k in keep})


#: The batch pods' steady demand in a contended window (batch-1, batch-2, batch-3), cores:
#: 1.5 together, above the protocol's one core; and the busy-alone control's one spinner.
CONTENDED = (0.6, 0.5, 0.4)
SPINNER = (0.0, 0.0, 1.0)
ALONE = (0.0, 0.0, 0.0)


@dataclass(frozen=True)
class Strategy:
    """One window kind: its policy, its hook, the batch demand beside web, and the window
    it is judged against (None: it is a baseline)."""

    key: str
    label: str
    #: (node CPU waterline, wait line) -> the policy manifests
    rules: Callable[[float, float], list[dict[str, Any]]]
    #: what the strategy changes in the engine's context (``engine.decide.Strategy``)
    hook: EngineStrategy | None = None
    demand: tuple[float, float, float] = CONTENDED
    baseline: str | None = "alone"
    #: The batch-capacity pods' demand (cap-1..3), cores; they exist on the real node only.
    cap_demand: tuple[float, float, float] = ALONE
    #: Runs on the real node only (the in-process tree refuses it).
    real_only: bool = False

    @property
    def batch_cores(self) -> float:
        return sum(self.demand) + sum(self.cap_demand)

    def brain(self) -> NodeBrain:
        return NodeBrain(strategy=self.hook)


MIN_RATIO, STEP_RATIO = 5, 10


def _cpu(line: float, _wait: float) -> list[dict[str, Any]]:
    return rules("cpu_total_usage", line, MIN_RATIO, STEP_RATIO)


def _wait(_line: float, wait: float) -> list[dict[str, Any]]:
    return rules("lc_cpu_wait_ratio", wait, MIN_RATIO, STEP_RATIO)


#: The batch pods of the benchmark: every pod not labelled latency-critical (nor a
#: batch-capacity pod: those are the ``batch-capacity`` window's).
BATCH_SCOPE = {"qosClasses": ["BestEffort", "Burstable"], "podSelector": {"matchExpressions": NOT_LC_NOR_CAP}}


def isolation(burst: bool) -> list[dict[str, Any]]:
    """A policy with no rule: the batch pods in the idle class, and with ``burst`` the
    latency-critical pod given burst of 100% of its quota (the default scope: the pods
    labelled latency-critical)."""
    section: dict[str, Any] = {"idle": {"scope": BATCH_SCOPE}}
    if burst:
        section["burst"] = {"quotaPercent": 100}
    return [{"apiVersion": QOS, "kind": "NodeQOSEnsurancePolicy", "metadata": {"name": "bench"},
             "spec": {"cpuIsolation": section}}]  # fmt: skip


def _burst_only(_line: float, _wait: float) -> list[dict[str, Any]]:
    return [{"apiVersion": QOS, "kind": "NodeQOSEnsurancePolicy", "metadata": {"name": "bench"},
             "spec": {"cpuIsolation": {"burst": {"quotaPercent": 100}}}}]  # fmt: skip


#: How far web's quota rises above its limit while it breathes: twice its limit. Web near
#: its limit uses 85% of it on average and twice that in its bursts (a request's CPU
#: arrives in clumps); koordinator's default (``cfsQuotaBurstPercent`` 300) is 200.
BREATHE_PERCENT = 100


def breathing() -> dict[str, Any]:
    """The ``burst`` section that lets web's quota breathe: burst of its whole quota and
    the quota itself raised ``BREATHE_PERCENT`` above the limit (the default scope: the
    pods labelled latency-critical; raised only where every container has a CPU limit)."""
    return {"quotaPercent": 100, "quotaAboveLimitPercent": BREATHE_PERCENT}


def _breathe_only(_line: float, _wait: float) -> list[dict[str, Any]]:
    return [{"apiVersion": QOS, "kind": "NodeQOSEnsurancePolicy", "metadata": {"name": "bench"},
             "spec": {"cpuIsolation": {"burst": breathing()}}}]  # fmt: skip


def _capacity_breathing(_line: float, _wait: float) -> list[dict[str, Any]]:
    """``capacity_policy`` and web's quota breathing, in the one policy (the section
    applies to the node either way; one object is one apply and one delete)."""
    [policy] = capacity_policy()
    policy["spec"]["cpuIsolation"] = {"burst": breathing()}
    return [policy]


def _nothing(_line: float, _wait: float) -> list[dict[str, Any]]:
    return []


#: The batch-capacity pods' memory (``waterline.io/batch-memory``, their limit: the
#: agent writes it): a pod's Python and its worker use about 15 MiB.
CAP_MEMORY_BYTES = 64 * 1024 * 1024


def capacity_policy(demand: tuple[float, ...] = CONTENDED) -> list[dict[str, Any]]:
    """A policy with only a ``batchCapacity`` section: the node publishes batch capacity,
    its batch pods are in the idle class, and squeezed when it falls under what they hold.

    Chosen for the bench: no window, no interval and a small hysteresis (the figure
    follows the node at once: nothing of a previous window carries over), a small margin,
    and ``min`` at what the cap pods hold (``demand``: 1.5 cores, their memory). The real
    node is this host: 2 CPUs allocatable (its kubelet reserves none), with the control
    plane, the kubelet, the agent and the load generator on it, while the bench's pods
    share one CPU. 2 cores minus that non-batch use (0.5-1 core as the windows run) minus
    the margin often falls under 1.5: without the floor the kubelet could refuse the cap
    pods (it admits extended resources against the node's allocatable) and the squeeze
    would cap them mid-window for the other CPU's load, which the no-agent window never
    has, so the window would measure the control plane, not the protection. The floor is
    the section's own knob ("an operator may promise batch a floor"); each window still
    records what the node published and any squeeze cap (``bench.colocation_real``)."""
    cpu_m = round(sum(demand) * 1000)
    memory = CAP_MEMORY_BYTES * len(demand)
    return [{"apiVersion": QOS, "kind": "NodeQOSEnsurancePolicy", "metadata": {"name": "bench"},
             "spec": {"batchCapacity": {
                 "marginPercent": 5, "windowSeconds": 0, "hysteresisPercent": 1, "minIntervalSeconds": 0,
                 "min": {"cpu": f"{cpu_m}m", "memory": str(memory)}, "idle": True}}}]  # fmt: skip


STRATEGIES: tuple[Strategy, ...] = (
    Strategy("none", "no agent", _nothing),
    Strategy("waterline-cpu", "Waterline, node CPU line", _cpu),
    Strategy("waterline-lc", "Waterline, lc_cpu_wait_ratio", _wait),
    Strategy("floor-all", "every candidate to its floor", _cpu, floor_all),
    Strategy("one-per-tick", "one pod per tick (to floor)", _cpu, one_per_tick),
    Strategy("idle", "batch idle", lambda _l, _w: isolation(burst=False)),
    Strategy("idle-burst", "batch idle + burst for web", lambda _l, _w: isolation(burst=True),
             baseline="alone-burst"),
    Strategy("batch-capacity", "batch pods on batch capacity", lambda _l, _w: capacity_policy(),
             demand=ALONE, cap_demand=CONTENDED, real_only=True),
    Strategy("batch-capacity-breathe", "batch capacity + breathing", _capacity_breathing,
             demand=ALONE, cap_demand=CONTENDED, real_only=True, baseline="alone-breathe"),
)
#: The strategies of a full run (the ones the goal is about, and the no-agent run every
#: batch figure is measured against): a full run must fit about two hours.
FULL_STRATEGIES = ("none", "idle", "idle-burst")
BASELINES: tuple[Strategy, ...] = (
    Strategy("alone", "web alone", _nothing, demand=ALONE, baseline=None),
    Strategy("alone-burst", "web alone, burst", _burst_only, demand=ALONE, baseline=None),
    Strategy("alone-breathe", "web alone, quota breathing", _breathe_only, demand=ALONE, baseline=None),
    Strategy("busy-alone", "web beside an idle spinner", lambda _l, _w: isolation(burst=False),
             demand=SPINNER, baseline="alone"),
)
WINDOWS = {s.key: s for s in (*BASELINES, *STRATEGIES)}
#: The control issue 29 asks for (``--no-control`` leaves it out).
CONTROL = "busy-alone"


def baselines(strategies: Sequence[Strategy], control: bool = True) -> list[Strategy]:
    """The baselines a run needs, in the registry's order: ``alone`` always (every
    strategy and the control are judged against it), those the strategies are judged
    against, and the busy-alone control unless left out."""
    wanted = {"alone", *(s.baseline for s in strategies if s.baseline)}
    if control:
        wanted.add(CONTROL)
    return [b for b in BASELINES if b.key in wanted]
