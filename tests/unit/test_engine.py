"""The precise executor: unit cases and properties (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.model.objects import parse_node, parse_pod
from agent.model.policy import load_policies, never_candidate_reason
from agent.model.usage import ContainerUsage, PodUsage
from agent.node.tick import NodeBrain
from agent.simulate.actuators import SimulatedEvictionAPI, SimulatedThrottler
from tests.builders import NOW, action, node, pod, policy, rule

NODE = parse_node(node("n1", cpu="8", memory="32Gi"))


def _tick(brain, pods, metrics, usage, policies, api=None, throttler=None, now=NOW):
    api = api or SimulatedEvictionAPI(pods, [])
    throttler = throttler or SimulatedThrottler()
    report = brain.tick(now=now, node=NODE, pods=pods, metrics=metrics, usage=usage, policies=policies,
                        namespace_labels=lambda ns: {}, evictor=api, throttler=throttler)
    return report, api, throttler


def _policies(metric, value, act, **rule_extra):
    return load_policies([policy("p", [rule("r", metric, value, act["metadata"]["name"], **rule_extra)])], [act])


def test_throttle_down_caps_at_usage_minus_gap_and_respects_floor():
    pods = [parse_pod(pod("a", requests={"cpu": "1"})), parse_pod(pod("b"))]
    usage = {"default/a": PodUsage(cpu=1.5), "default/b": PodUsage(cpu=1.0)}
    pols = _policies("cpu_total_usage", "6", action("t", throttle={"minCPURatio": 50}))
    report, _, throttler = _tick(NodeBrain(), pods, {"cpu_total_usage": 7.5}, usage, pols)
    # b (BestEffort) first: floor = 50% of node cores (4) > its usage: cannot be throttled.
    # a (Burstable): floor = max(request 1, 50% of 8 = 4) = 4 > usage: nothing either.
    assert report.actions == []
    pols = _policies("cpu_total_usage", "6", action("t", throttle={"minCPURatio": 5}))
    report, _, throttler = _tick(NodeBrain(), pods, {"cpu_total_usage": 7.5}, usage, pols)
    # b: floor 0.4, cap max(0.4, 1.0 - 1.5) = 0.4 releases 0.6; a: floor 1 (request), cap max(1, 1.5 - 0.9) = 1
    assert [(a.pod, round(a.cpu_cap, 6)) for a in report.actions] == [("default/b", 0.4), ("default/a", 1.0)]
    assert throttler.pod_cap("default/a") == pytest.approx(1.0)


def test_cap_is_split_across_containers_by_usage():
    raw = pod("m", containers=[{"name": "x", "resources": {}}, {"name": "y", "resources": {}}])
    pods = [parse_pod(raw)]
    usage = {"default/m": PodUsage(cpu=3.0, containers={"x": ContainerUsage(cpu=2.0), "y": ContainerUsage(cpu=1.0)})}
    pols = _policies("cpu_total_usage", "6", action("t", throttle={}))
    _, _, throttler = _tick(NodeBrain(), pods, {"cpu_total_usage": 7.5}, usage, pols)
    assert throttler.caps["default/m"] == pytest.approx({"x": 1.0, "y": 0.5})


def test_throttle_up_restores_exactly_when_reaching_the_ceiling():
    pods = [parse_pod(pod("a", limits={"cpu": "2"}, requests={"cpu": "100m"}))]
    pols = _policies("cpu_total_usage", "6", action("t", throttle={"stepCPURatio": 100}))
    brain = NodeBrain()
    _, _, throttler = _tick(brain, pods, {"cpu_total_usage": 7.0}, {"default/a": PodUsage(cpu=2.0)}, pols)
    assert throttler.pod_cap("default/a") == pytest.approx(1.0)
    report, _, throttler = _tick(brain, pods, {"cpu_total_usage": 3.0}, {"default/a": PodUsage(cpu=1.0)},
                                 pols, throttler=throttler)
    restore = report.actions[0]
    assert (restore.action, restore.cpu_cap) == ("restore", None)
    assert throttler.caps == {}
    assert brain.caps() == {}


def test_deleted_policy_restores_what_it_throttled():
    pods = [parse_pod(pod("a"))]
    pols = _policies("cpu_total_usage", "6", action("t", throttle={}))
    brain = NodeBrain()
    _, _, throttler = _tick(brain, pods, {"cpu_total_usage": 7.0}, {"default/a": PodUsage(cpu=2.0)}, pols)
    assert "default/a" in throttler.caps
    report, _, _ = _tick(brain, pods, {"cpu_total_usage": 7.0}, {"default/a": PodUsage(cpu=2.0)},
                         load_policies([], []), throttler=throttler)
    assert [(a.action, a.reason) for a in report.actions] == [("restore", "action removed")]
    assert throttler.caps == {}


def test_cool_down_blocks_the_next_round_but_not_throttling():
    pods = [parse_pod(pod(f"p{i}")) for i in range(4)]
    usage = {f"default/p{i}": PodUsage(cpu=1.0, memory=1e9) for i in range(4)}
    pols = _policies("memory_total_usage", "1000", action("e", eviction={}, cool_down=60))
    brain = NodeBrain()
    api = SimulatedEvictionAPI(pods, [])
    report, _, _ = _tick(brain, pods, {"memory_total_usage": 1000 + 0.5e9}, usage, pols, api=api)
    assert len(report.actions) == 1
    left = [p for p in pods if p.key != report.actions[0].pod]
    report, _, _ = _tick(brain, left, {"memory_total_usage": 1000 + 0.5e9}, usage, pols, api=api, now=NOW + 59)
    assert report.actions == []
    report, _, _ = _tick(brain, left, {"memory_total_usage": 1000 + 0.5e9}, usage, pols, api=api, now=NOW + 60)
    assert len(report.actions) == 1


def test_missing_metric_never_evicts():
    pods = [parse_pod(pod("a"))]
    pols = _policies("memory_total_usage", "1", action("e", eviction={}))
    report, api, _ = _tick(NodeBrain(), pods, {}, {"default/a": PodUsage(memory=5.0)}, pols)
    assert report.actions == [] and api.calls == []
    assert report.missing == ["memory_total_usage"]


def test_terminating_evicted_pod_counts_as_released():
    pods = [parse_pod(pod("a")), parse_pod(pod("b"))]
    usage = {"default/a": PodUsage(memory=3.0), "default/b": PodUsage(memory=1.0)}
    pols = _policies("memory_total_usage", "10", action("e", eviction={}, cool_down=0))
    brain = NodeBrain()
    api = SimulatedEvictionAPI(pods, [])
    report, _, _ = _tick(brain, pods, {"memory_total_usage": 12.0}, usage, pols, api=api)
    assert [a.pod for a in report.actions] == ["default/a"]
    # a is still running out its grace period and measured: its 3 bytes are on their way out
    report, _, _ = _tick(brain, pods, {"memory_total_usage": 12.0}, usage, pols, api=api, now=NOW + 1)
    assert report.actions == []


# -- properties -----------------------------------------------------------------------------

NEVER = [
    {"annotations": {"kubernetes.io/config.mirror": "x"}},
    {"owner_kind": "DaemonSet"},
    {"deleting": True},
    {"annotations": {"qos.waterline.io/protected": "true"}},
    {"priority": 2_000_000_001},
]

pod_strategy = st.fixed_dictionaries({
    "cpu": st.one_of(st.none(), st.floats(min_value=0.0, max_value=4.0, allow_nan=False)),
    "memory": st.one_of(st.none(), st.floats(min_value=0.0, max_value=8e9, allow_nan=False)),
    "never": st.one_of(st.none(), st.sampled_from(range(len(NEVER)))),
    "priority": st.integers(min_value=0, max_value=10),
    "burstable": st.booleans(),
})


def _build(specs):
    pods, usage = [], {}
    for i, spec in enumerate(specs):
        kwargs = dict(NEVER[spec["never"]]) if spec["never"] is not None else {}
        kwargs.setdefault("priority", spec["priority"])
        if spec["burstable"]:
            kwargs["requests"] = {"memory": "1Mi"}
        p = parse_pod(pod(f"p{i:02d}", **kwargs))
        pods.append(p)
        usage[p.key] = PodUsage(cpu=spec["cpu"], memory=spec["memory"])
    return pods, usage


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=st.lists(pod_strategy, min_size=1, max_size=12),
       excess=st.floats(min_value=0.01e9, max_value=20e9, allow_nan=False))
def test_eviction_is_precise(specs, excess):
    pods, usage = _build(specs)
    waterline = 10e9
    pols = _policies("memory_total_usage", str(int(waterline)), action("e", eviction={}))
    report, _, _ = _tick(NodeBrain(), pods, {"memory_total_usage": waterline + excess}, usage, pols)
    by_key = {p.key: p for p in pods}
    acted = [a for a in report.actions if a.action == "evict"]
    # 1. never a never-candidate
    assert all(never_candidate_reason(by_key[a.pod]) is None for a in acted)
    released = [usage[a.pod].memory or 0.0 for a in acted if usage[a.pod].memory is not None]
    gap = excess
    eligible = [p for p in pods if never_candidate_reason(p) is None and p.qos_class != "Guaranteed"]
    available = sum(usage[p.key].memory or 0.0 for p in eligible)
    known_acted = [a for a in acted if usage[a.pod].memory is not None]
    # 2. never releases less than the gap when enough candidates exist
    if available >= gap + 1e-6:
        assert sum(released) >= gap - 1e-6
    # 3. never more pods than needed: without the last known-usage pod the gap stays open
    if known_acted:
        assert sum(released) - (usage[known_acted[-1].pod].memory or 0.0) < gap + 1e-6
    # at most one pod of unknown size, and only after every pod with a figure
    unknown = [a for a in acted if usage[a.pod].memory is None]
    assert len(unknown) <= 1
    if unknown:
        assert acted[-1] is unknown[0]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=st.lists(pod_strategy, min_size=1, max_size=12),
       excess=st.floats(min_value=0.01, max_value=10.0, allow_nan=False))
def test_throttling_is_precise(specs, excess):
    pods, usage = _build(specs)
    pols = _policies("cpu_total_usage", "6", action("t", throttle={"minCPURatio": 5}))
    report, _, throttler = _tick(NodeBrain(), pods, {"cpu_total_usage": 6.0 + excess}, usage, pols)
    by_key = {p.key: p for p in pods}
    acted = report.actions
    assert all(never_candidate_reason(by_key[a.pod]) is None for a in acted)
    assert all(usage[a.pod].cpu is not None for a in acted)  # no figure: never throttled
    floor = 0.05 * 8
    releases = [usage[a.pod].cpu - a.cpu_cap for a in acted]
    assert all(a.cpu_cap >= floor - 1e-9 for a in acted)
    eligible = [p for p in pods if never_candidate_reason(p) is None and usage[p.key].cpu is not None]
    available = sum(max(0.0, usage[p.key].cpu - max(floor, p.request("cpu"))) for p in eligible)
    if available >= excess + 1e-6:
        assert sum(releases) == pytest.approx(excess, abs=1e-6)
    if acted:
        assert sum(releases[:-1]) < excess + 1e-9
    assert {a.pod for a in acted} == set(throttler.caps)


class _RefusingThrottler(SimulatedThrottler):
    """Refuses writes for some pods, like a cgroup that is not found."""

    def __init__(self, refuse: set[str]) -> None:
        super().__init__()
        self.refuse = refuse

    def apply(self, pod, container_caps, owner=""):
        if pod.key in self.refuse:
            return False
        return super().apply(pod, container_caps)


def test_a_cap_that_could_not_be_written_is_neither_recorded_nor_credited():
    pods = [parse_pod(pod("a")), parse_pod(pod("b"))]
    usage = {"default/a": PodUsage(cpu=3.0), "default/b": PodUsage(cpu=2.0)}
    pols = _policies("cpu_total_usage", "6", action("t", throttle={}))
    brain = NodeBrain()
    report, _, throttler = _tick(brain, pods, {"cpu_total_usage": 7.0}, usage, pols,
                                 throttler=_RefusingThrottler({"default/a"}))
    assert [(a.pod, a.result) for a in report.actions] == [("default/a", "failed"), ("default/b", None)]
    assert report.actions[1].gap_before == pytest.approx(1.0)  # a released nothing
    assert brain.caps() == {"default/b": pytest.approx(1.0)}
    assert set(throttler.caps) == {"default/b"}


def test_a_changed_action_raises_caps_below_its_new_floor():
    """Issue 15 item 5: minCPURatio 5 -> 20 on a running action lifts a cap held below the
    new floor to it (and no lower cap is written meanwhile, the rule still triggered)."""
    pods = [parse_pod(pod("a"))]
    usage = {"default/a": PodUsage(cpu=3.0)}
    brain = NodeBrain()
    low = _policies("cpu_total_usage", "4", action("t", throttle={"minCPURatio": 5}))
    _, _, throttler = _tick(brain, pods, {"cpu_total_usage": 7.0}, usage, low)
    assert brain.caps() == {"default/a": pytest.approx(0.4)}  # 5% of 8 cores
    high = _policies("cpu_total_usage", "4", action("t", throttle={"minCPURatio": 20}))
    report, _, _ = _tick(brain, pods, {"cpu_total_usage": 7.0}, usage, high, throttler=throttler)
    assert [(a.action, a.reason, a.cpu_cap) for a in report.actions] == [
        ("restore", "floor raised", pytest.approx(1.6))
    ]
    assert brain.caps() == {"default/a": pytest.approx(1.6)}
    assert throttler.pod_cap("default/a") == pytest.approx(1.6)
    # A floor at or above the ceiling hands the original back.
    full = _policies("cpu_total_usage", "4", action("t", throttle={"minCPURatio": 100}))
    report, _, _ = _tick(brain, pods, {"cpu_total_usage": 7.0}, usage, full, throttler=throttler)
    assert [(a.action, a.cpu_cap) for a in report.actions] == [("restore", None)]
    assert brain.caps() == {} and throttler.caps == {}


def test_an_action_that_stops_throttling_hands_its_caps_back():
    pods = [parse_pod(pod("a"))]
    usage = {"default/a": PodUsage(cpu=3.0)}
    brain = NodeBrain()
    _, _, throttler = _tick(brain, pods, {"cpu_total_usage": 7.0}, usage,
                            _policies("cpu_total_usage", "4", action("t", throttle={})))
    assert brain.caps()
    evict_only = _policies("cpu_total_usage", "4", action("t", eviction={}))
    report, _, _ = _tick(brain, pods, {"cpu_total_usage": 3.0}, usage, evict_only, throttler=throttler)
    assert [(a.action, a.reason) for a in report.actions] == [("restore", "action removed")]
    assert brain.caps() == {} and throttler.caps == {}


def test_a_gone_pod_is_forgotten_by_the_throttler_too():
    pods = [parse_pod(pod("a"))]
    brain = NodeBrain()
    pols = _policies("cpu_total_usage", "4", action("t", throttle={}))
    _, _, throttler = _tick(brain, pods, {"cpu_total_usage": 7.0}, {"default/a": PodUsage(cpu=3.0)}, pols)
    assert "default/a" in throttler.caps
    report, _, _ = _tick(brain, [], {"cpu_total_usage": 7.0}, {}, pols, throttler=throttler)
    assert report.actions == [] and brain.caps() == {} and throttler.caps == {}


def test_a_saved_copy_of_the_objects_hands_no_cap_back_for_an_action_it_does_not_show():
    """An agent started before the API server answers acts on the copy the last run saved
    (provisional): it can predate the action a held cap came from, its floor and its
    lines, so the cap stays as it is (not handed back, not raised to a floor or step by
    step) until the live objects say so."""
    pods = [parse_pod(pod("a"))]
    usage = {"default/a": PodUsage(cpu=2.0)}
    brain = NodeBrain()
    _, _, throttler = _tick(brain, pods, {"cpu_total_usage": 7.0}, usage,
                            _policies("cpu_total_usage", "6", action("t", throttle={})))
    held = brain.caps()
    assert held
    same = _policies("cpu_total_usage", "6", action("t", throttle={"stepCPURatio": 100}))
    stale_copies = [
        (load_policies([], []), 7.0),  # the action is not in the copy
        (_policies("cpu_total_usage", "6", action("t", throttle={"minCPURatio": 100})), 7.0),  # an old floor
        (_policies("cpu_total_usage", "8", action("t", throttle={"stepCPURatio": 100})), 7.0),  # an old line
        (same, 3.0),  # cool under the copy's line: the live line may be lower by now
    ]
    for at, (stale, used) in enumerate(stale_copies, start=1):
        for _ in range(3):  # restoreThreshold and step counts would have been met
            report = brain.tick(now=NOW + at, node=NODE, pods=pods, metrics={"cpu_total_usage": used},
                                usage=usage, policies=stale, namespace_labels=lambda ns: {},
                                evictor=SimulatedEvictionAPI(pods, []), throttler=throttler,
                                provisional=True)
            assert [a for a in report.actions if a.action == "restore"] == [], at
        assert brain.caps() == held and "default/a" in throttler.caps
    # The live objects without the action: handed back.
    report, _, _ = _tick(brain, pods, {"cpu_total_usage": 7.0}, usage, load_policies([], []),
                         throttler=throttler, now=NOW + 2)
    assert [(a.action, a.reason) for a in report.actions] == [("restore", "action removed")]
    assert brain.caps() == {} and throttler.caps == {}
