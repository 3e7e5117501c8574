"""The co-location benchmark's strategies do what their names say, with the product's
analyzer and engine: every candidate to its floor at once, or one more pod to its floor a
tick (never a pod a cap would not lower); the batch pods idle, with or without burst for
the latency-critical pod. The reference strategies are hooks on the product's decide(),
not copies of it."""

from __future__ import annotations

from typing import Any

from agent.model.policy import load_policies
from agent.model.store import ObjectStore
from agent.model.usage import PodUsage
from agent.node.dryrun import ReportingEvictor
from agent.node.tick import NodeBrain
from agent.simulate.actuators import SimulatedIsolator, SimulatedThrottler
from bench.colocation_strategies import (
    STRATEGIES,
    WINDOWS,
    floor_all,
    one_per_tick,
    rules,
)
from tests import builders as b

OBJECTS = [
    b.node("n1", cpu="1"),
    b.pod("web", qos="Burstable", requests={"cpu": "200m"}, limits={"cpu": "600m"},
          labels={"qos.waterline.io/latency-critical": "true"}),
    b.pod("batch-1", qos="Burstable", requests={"cpu": "150m"}),
    b.pod("batch-2", qos="Burstable", requests={"cpu": "150m"}),
    b.pod("batch-3", qos="BestEffort"),
]  # fmt: skip
USAGE = {"default/web": 0.35, "default/batch-1": 0.30, "default/batch-2": 0.25,
         "default/batch-3": 0.02}  # fmt: skip


def run(brain: NodeBrain, ticks: int) -> list[dict[str, float]]:
    store = ObjectStore.from_dicts(OBJECTS)
    manifests = rules("cpu_total_usage", 0.8, 5, 10)
    policies = load_policies([manifests[0]], [manifests[1]])
    throttler = SimulatedThrottler()
    caps = []
    for tick in range(ticks):
        brain.tick(
            now=float(tick), node=store.nodes["n1"], pods=store.pods,
            metrics={"cpu_total_usage": 0.92}, usage={k: PodUsage(cpu=v) for k, v in USAGE.items()},
            policies=policies, namespace_labels=lambda ns: {}, evictor=ReportingEvictor("t"),
            throttler=throttler,
        )  # fmt: skip
        caps.append({k: round(v, 3) for k, v in brain.caps().items()})
    return caps


def isolated(policies: Any, node_cpu: float) -> tuple[NodeBrain, SimulatedIsolator]:
    """One tick of the product's NodeBrain on OBJECTS with a simulated isolator."""
    store = ObjectStore.from_dicts(OBJECTS)
    brain, isolator = NodeBrain(), SimulatedIsolator()
    brain.tick(
        now=0.0, node=store.nodes["n1"], pods=store.pods, metrics={"cpu_total_usage": node_cpu},
        usage={k: PodUsage(cpu=v) for k, v in USAGE.items()}, policies=policies,
        namespace_labels=lambda ns: {}, evictor=ReportingEvictor("t"),
        throttler=SimulatedThrottler(), isolator=isolator,
    )  # fmt: skip
    return brain, isolator


def test_waterline_takes_the_gap_from_the_first_candidates_only() -> None:
    assert run(NodeBrain(), 1) == [{"default/batch-1": 0.18}]  # 0.12 above the line


def test_floor_all_caps_every_candidate_at_its_floor_at_once() -> None:
    assert run(NodeBrain(strategy=floor_all), 1) == [
        {"default/batch-1": 0.15, "default/batch-2": 0.15}  # batch-3 is below its floor
    ]


def test_one_per_tick_caps_one_more_pod_a_tick_never_the_latency_critical_one() -> None:
    assert run(NodeBrain(strategy=one_per_tick), 3) == [
        {"default/batch-1": 0.15},
        {"default/batch-1": 0.15, "default/batch-2": 0.15},
        {"default/batch-1": 0.15, "default/batch-2": 0.15},
    ]


def test_the_idle_strategies_hold_the_batch_pods_idle_and_give_web_burst_and_cap_nothing() -> None:
    """Through the product's NodeBrain and its simulated isolator: the idle strategies are
    policies with a class and no rule (so nothing is ever capped, whatever the node uses)."""
    from bench.colocation_strategies import isolation

    for burst, bursting in ((False, {}), (True, {"default/web": 100.0})):
        manifests = isolation(burst)
        policies = load_policies(manifests, [])
        assert not policies.errors, policies.errors
        brain, isolator = isolated(policies, node_cpu=1.0)
        assert isolator.idle == {"default/batch-1", "default/batch-2", "default/batch-3"}
        assert isolator.burst == bursting and brain.caps() == {}


def test_every_window_has_a_distinct_key_a_baseline_and_the_hooked_brains_take_an_isolator() -> None:
    keys = [s.key for s in STRATEGIES]
    assert len(set(keys)) == len(keys) == 9 and {"idle", "idle-burst", "batch-capacity"} <= set(keys)
    # every window is judged against a baseline that exists, with web's own settings alike
    assert all(w.baseline is None or w.baseline in WINDOWS for w in WINDOWS.values())
    assert WINDOWS["idle-burst"].baseline == "alone-burst" and WINDOWS["idle"].baseline == "alone"
    assert WINDOWS["batch-capacity-breathe"].baseline == "alone-breathe"
    store = ObjectStore.from_dicts(OBJECTS)
    manifests = rules("cpu_total_usage", 0.8, 5, 10)
    from agent.simulate.actuators import SimulatedIsolator

    report = NodeBrain(strategy=floor_all).tick(  # the loop passes the isolator to every brain
        now=0.0, node=store.nodes["n1"], pods=store.pods, metrics={"cpu_total_usage": 0.92},
        usage={k: PodUsage(cpu=v) for k, v in USAGE.items()},
        policies=load_policies([manifests[0]], [manifests[1]]), namespace_labels=lambda ns: {},
        evictor=ReportingEvictor("t"), throttler=SimulatedThrottler(), isolator=SimulatedIsolator(),
    )  # fmt: skip
    assert [a.pod for a in report.actions] == ["default/batch-1", "default/batch-2"]


def test_the_breathing_windows_raise_webs_quota_above_its_limit_and_the_capacity_one_keeps_its_section() -> None:
    """``alone-breathe`` and ``batch-capacity-breathe`` are valid policies whose burst
    section raises a latency-critical pod's quota above its limit while no line is in force
    (the product's own isolator, through NodeBrain); the capacity window also publishes
    batch capacity (the section ``batch-capacity`` has) and leaves web out of the idle class."""
    from bench.colocation_strategies import BREATHE_PERCENT, capacity_policy

    for key in ("alone-breathe", "batch-capacity-breathe"):
        manifests = WINDOWS[key].rules(0.8, 20.0)
        policies = load_policies(manifests, [])
        assert not policies.errors, (key, policies.errors)
        brain, isolator = isolated(policies, node_cpu=0.5)
        assert isolator.quota == {"default/web": BREATHE_PERCENT} and isolator.burst == {"default/web": 100.0}, key
        assert "default/web" not in isolator.idle and brain.caps() == {}
    [with_capacity] = WINDOWS["batch-capacity-breathe"].rules(0.8, 20.0)
    assert with_capacity["spec"]["batchCapacity"] == capacity_policy()[0]["spec"]["batchCapacity"]
