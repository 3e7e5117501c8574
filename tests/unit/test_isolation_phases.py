"""The CPU isolation classes, decided (engine.phases.isolation, engine.cpu_classes):
who is idle and who gets burst, when a mark is lifted for a resize and put back, what is
released and why, read from plain data with no fakes (``assume_done``) or with the
simulated isolator."""

from __future__ import annotations

from typing import Any

import pytest

from agent.model.isolation import IsolationSupport
from agent.model.objects import parse_node, parse_pod
from agent.model.policy import load_policies
from agent.model.usage import PodUsage
from agent.node.tick import NodeBrain
from agent.simulate.actuators import SimulatedEvictionAPI, SimulatedIsolator, SimulatedThrottler
from engine.decide import TickInput, decide
from engine.intents import MarkIdle, ReleaseBurst, SetBurst, WriteCap
from engine.state import NodeState
from executors.drive import assume_done
from tests.builders import NOW, action, node, pod, rule

NODE = parse_node(node("n1", cpu="4", labels={"pool": "colocated"}))
LC = {"qos.waterline.io/latency-critical": "true"}
GUARANTEED = {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}


def isolation_policy(name: str = "iso", idle: dict | None = None, burst: dict | None = None,
                     rules: list[dict] | None = None, pool: str = "colocated") -> dict[str, Any]:
    section: dict[str, Any] = {}
    if idle is not None:
        section["idle"] = idle
    if burst is not None:
        section["burst"] = burst
    spec: dict[str, Any] = {"nodeSelector": {"matchLabels": {"pool": pool}}, "cpuIsolation": section}
    if rules:
        spec["objectiveEnsurances"] = rules
    return {"apiVersion": "qos.waterline.io/v1alpha1", "kind": "NodeQOSEnsurancePolicy",
            "metadata": {"name": name}, "spec": spec}


def pods(**overrides: dict) -> list[dict]:
    """web (Guaranteed, latency-critical), be-1 and be-2 (BestEffort), bu (Burstable)."""
    base = {
        "web": pod("web", qos="Guaranteed", labels=LC, **GUARANTEED),
        "be-1": pod("be-1", qos="BestEffort"),
        "be-2": pod("be-2", qos="BestEffort"),
        "bu": pod("bu", qos="Burstable", requests={"cpu": "500m"}),
    }
    for name, raw in overrides.items():
        base[name] = raw
    return list(base.values())


def tick(raw_pods: list[dict], *raw_policies: dict, actions: list[dict] | None = None,
         metrics: dict | None = None, usage: dict | None = None,
         support: IsolationSupport | None = None, now: float = NOW) -> TickInput:
    return TickInput(now=now, node=NODE, pods=[parse_pod(p) for p in raw_pods],
                     metrics=metrics or {"cpu_total_usage": 1.0}, usage=usage or {},
                     policies=load_policies(list(raw_policies), actions or []),
                     support=support or IsolationSupport())


def classes(state: NodeState) -> dict[str, list[str]]:
    return state.isolated()


def test_the_idle_class_takes_besteffort_pods_by_default_and_burst_the_latency_critical():
    decision = assume_done(decide(tick(pods(), isolation_policy(idle={}, burst={})), NodeState()))
    assert classes(decision.state) == {"idle": ["default/be-1", "default/be-2"], "burst": ["default/web"]}
    assert [(c.kind, c.change, c.pod, c.policy, c.reason) for c in decision.report.isolation] == [
        ("idle", "marked", "default/be-1", "iso", "scope"),
        ("idle", "marked", "default/be-2", "iso", "scope"),
        ("burst", "marked", "default/web", "iso", "scope"),
    ]
    assert decision.report.to_report()["isolation"][0] == {
        "class": "idle", "change": "marked", "pod": "default/be-1", "policy": "iso", "reason": "scope"}


def test_never_members_whatever_the_scope_says():
    """DaemonSet, protected, system-critical and not-running pods are never in a class; a
    latency-critical pod is never idle; a pod without a CPU limit gets no burst."""
    every = {"qosClasses": ["BestEffort", "Burstable", "Guaranteed"], "maxPriority": 1_000_000_000}
    raw = pods(
        ds=pod("ds", qos="BestEffort", owner_kind="DaemonSet"),
        prot=pod("prot", qos="BestEffort", annotations={"qos.waterline.io/protected": "true"}),
        crit=pod("crit", qos="BestEffort", priority=2_000_000_000),
        pending=pod("pending", qos="BestEffort", phase="Pending"),
        lcbe=pod("lcbe", qos="BestEffort", labels=LC),
    )
    decision = assume_done(decide(tick(raw, isolation_policy(idle={"scope": every},
                                                             burst={"scope": every})), NodeState()))
    # burst: every pod with a CPU limit (web only); idle: the rest but the labelled one
    assert classes(decision.state) == {"idle": ["default/be-1", "default/be-2", "default/bu"],
                                       "burst": ["default/web"]}


def test_a_scope_picks_by_class_priority_and_labels_and_the_first_policy_sets_the_burst():
    raw = pods(low=pod("low", qos="Burstable", requests={"cpu": "100m"}, labels={"tier": "batch"}),
               lc2=pod("lc2", qos="Burstable", labels=LC, requests={"cpu": "200m"},
                       limits={"cpu": "400m"}))
    idle = {"scope": {"qosClasses": ["Burstable"], "podSelector": {"matchLabels": {"tier": "batch"}}}}
    decision = assume_done(decide(tick(raw, isolation_policy("b-pol", idle=idle, burst={"quotaPercent": 30}),
                                       isolation_policy("a-pol", burst={"quotaPercent": 60})),
                                  NodeState()))  # fmt: skip
    assert classes(decision.state) == {"idle": ["default/low"], "burst": ["default/lc2", "default/web"]}
    assert {k: (m.policy, m.percent) for k, m in decision.state.burst.items()} == {
        "default/lc2": ("a-pol", 60.0), "default/web": ("a-pol", 60.0)}


def test_a_policy_of_another_pool_leaves_the_node_alone():
    decision = assume_done(decide(tick(pods(), isolation_policy(idle={}, pool="batch")), NodeState()))
    assert classes(decision.state) == {"idle": [], "burst": []} and not decision.report.isolation


def _run(brain: NodeBrain, iso: SimulatedIsolator, t: TickInput) -> Any:
    return brain.tick(now=t.now, node=t.node, pods=t.pods, metrics=t.metrics, usage=t.usage,
                      policies=t.policies, namespace_labels=t.namespace_labels,
                      evictor=SimulatedEvictionAPI(t.pods, []), throttler=SimulatedThrottler(),
                      isolator=iso)


def test_marks_are_checked_every_tick_and_released_when_the_pod_leaves_or_the_policy_goes():
    brain, iso = NodeBrain(), SimulatedIsolator()
    policy = isolation_policy(idle={}, burst={})
    _run(brain, iso, tick(pods(), policy))
    plan = decide(tick(pods(), policy), brain.state)
    asked = [type(i).__name__ for i in [next(plan)]]
    assert asked == ["MarkIdle"]  # asked again: a reverted mark is written again
    # be-2 is labelled out of the class (now latency-critical): released
    relabelled = pods(**{"be-2": pod("be-2", qos="BestEffort", labels=LC)})
    report = _run(brain, iso, tick(relabelled, policy))
    assert [(c.change, c.pod, c.reason) for c in report.isolation] == [
        ("released", "default/be-2", "left the scope")]
    assert iso.idle == {"default/be-1"}
    # the policy deleted: every mark released
    report = _run(brain, iso, tick(pods()))
    assert sorted((c.kind, c.change, c.pod, c.reason) for c in report.isolation) == [
        ("burst", "released", "default/web", "class removed"),
        ("idle", "released", "default/be-1", "class removed"),
    ]
    assert iso.idle == set() and iso.burst == {} and brain.isolated() == {"idle": [], "burst": []}


def test_a_saved_copy_of_the_objects_releases_no_mark_for_a_policy_or_label_it_does_not_show():
    """An agent started before the API server answers acts on the copy the last run saved
    (provisional): older than the policy or the pods' labels maybe, so the marks held stay
    as they are, none released and none granted; the live objects decide."""
    brain, iso = NodeBrain(), SimulatedIsolator()
    policy = isolation_policy(idle={}, burst={})
    _run(brain, iso, tick(pods(), policy))
    held = brain.isolated()
    relabelled = pods(**{"be-2": pod("be-2", qos="BestEffort", labels=LC)})
    # be-1 latency-critical and Guaranteed in the copy, a newcomer be-3: no burst for the
    # pod held idle, no mark for the newcomer
    other = pods(**{"be-1": pod("be-1", qos="Guaranteed", labels=LC, **GUARANTEED),
                    "be-3": pod("be-3", qos="BestEffort")})
    for stale in (tick(pods()), tick(relabelled, policy), tick(other, policy)):
        report = brain.tick(now=stale.now, node=stale.node, pods=stale.pods, metrics=stale.metrics,
                            usage=stale.usage, policies=stale.policies,
                            namespace_labels=stale.namespace_labels,
                            evictor=SimulatedEvictionAPI(stale.pods, []),
                            throttler=SimulatedThrottler(), isolator=iso, provisional=True)
        assert report.isolation == []
        assert brain.isolated() == held and iso.idle == {"default/be-1", "default/be-2"}
        assert iso.burst.keys() == {"default/web"}
    report = _run(brain, iso, tick(pods()))  # live: the policy is gone
    assert sorted((c.kind, c.change, c.reason) for c in report.isolation) == [
        ("burst", "released", "class removed"), ("idle", "released", "class removed"),
        ("idle", "released", "class removed")]


def test_a_resize_lifts_the_mark_until_the_kubelet_is_done():
    """While the kubelet resizes a pod in place, its idle mark is lifted (the kernel would
    refuse the kubelet's cpu.shares write), and its burst too (a quota below it would be
    refused); both come back once the resize is done."""
    brain, iso = NodeBrain(), SimulatedIsolator()
    policy = isolation_policy(idle={"scope": {"qosClasses": ["Burstable"]}}, burst={})
    _run(brain, iso, tick(pods(), policy))
    assert iso.idle == {"default/bu"} and set(iso.burst) == {"default/web"}
    resizing = {"conditions": [{"type": "PodResizeInProgress", "status": "True"}]}
    during = pods(bu=pod("bu", qos="Burstable", requests={"cpu": "700m"}),
                  web=pod("web", qos="Guaranteed", labels=LC, **GUARANTEED))
    for raw in during:
        if raw["metadata"]["name"] in ("bu", "web"):
            raw["status"].update(resizing)
    report = _run(brain, iso, tick(during, policy))
    assert sorted((c.kind, c.change, c.pod, c.reason) for c in report.isolation) == [
        ("burst", "lifted", "default/web", "resize"), ("idle", "lifted", "default/bu", "resize")]
    assert iso.idle == set() and iso.burst == {}
    report = _run(brain, iso, tick(during, policy))  # still resizing: nothing asked
    assert report.isolation == [] and iso.idle == set()
    after = pods(bu=pod("bu", qos="Burstable", requests={"cpu": "700m"}))
    report = _run(brain, iso, tick(after, policy))
    assert sorted((c.kind, c.change, c.pod) for c in report.isolation) == [
        ("burst", "marked", "default/web"), ("idle", "marked", "default/bu")]
    assert iso.idle == {"default/bu"}


def test_a_deferred_resize_keeps_the_mark():
    brain, iso = NodeBrain(), SimulatedIsolator()
    policy = isolation_policy(idle={"scope": {"qosClasses": ["Burstable"]}})
    _run(brain, iso, tick(pods(), policy))
    deferred = pods(bu=pod("bu", qos="Burstable", requests={"cpu": "3"}))
    deferred[3]["status"]["conditions"] = [{"type": "PodResizePending", "status": "True",
                                            "reason": "Deferred"}]
    deferred[3]["status"]["containerStatuses"] = [{"name": "main", "allocatedResources": {"cpu": "500m"}}]
    assert _run(brain, iso, tick(deferred, policy)).isolation == [] and iso.idle == {"default/bu"}


def test_a_pod_being_deleted_keeps_its_mark_and_a_pod_gone_is_forgotten():
    brain, iso = NodeBrain(), SimulatedIsolator()
    policy = isolation_policy(idle={})
    _run(brain, iso, tick(pods(), policy))
    deleting = pods(**{"be-1": pod("be-1", qos="BestEffort", deleting=True)})
    assert _run(brain, iso, tick(deleting, policy)).isolation == []
    assert iso.idle == {"default/be-1", "default/be-2"}
    gone = [p for p in pods() if p["metadata"]["name"] != "be-1"]
    report = _run(brain, iso, tick(gone, policy))
    assert report.isolation == [] and brain.isolated()["idle"] == ["default/be-2"]


def test_a_class_the_kernel_lacks_is_never_asked_for():
    decision = assume_done(decide(tick(pods(), isolation_policy(idle={}, burst={}),
                                       support=IsolationSupport(idle=False, burst=True)), NodeState()))
    assert classes(decision.state) == {"idle": [], "burst": ["default/web"]}
    # a burst member stays out of the idle class where only idle is offered
    decision = assume_done(decide(tick(pods(), isolation_policy(
        idle={"scope": {"qosClasses": ["Guaranteed"], "podSelector": {}}}, burst={"scope": {"podSelector": {}}}),
        support=IsolationSupport(idle=True, burst=False)), NodeState()))  # fmt: skip
    assert classes(decision.state) == {"idle": [], "burst": []}


def test_a_mark_not_written_is_not_held_and_says_failed():
    plan = decide(tick(pods(), isolation_policy(idle={"scope": {"qosClasses": ["Burstable"]}})), NodeState())
    intent = next(plan)
    assert isinstance(intent, MarkIdle) and intent.pod.key == "default/bu" and intent.owner == "iso"
    with pytest.raises(StopIteration) as done:
        plan.send(False)
    decision = done.value.value
    assert classes(decision.state)["idle"] == []
    assert [(c.change, c.result) for c in decision.report.isolation] == [("marked", "failed")]


def test_burst_is_taken_back_before_a_cap_and_not_given_to_a_capped_pod():
    """The kernel refuses a quota below the burst: a pod about to be capped loses its
    burst first; while capped it gets none."""
    act = action("t", throttle={"minCPURatio": 0},
                 scope={"qosClasses": ["Burstable"], "podSelector": {"matchLabels": LC}})
    policy = isolation_policy(burst={}, rules=[rule("r", "cpu_total_usage", "2", "t")])
    raw = [pod("lc", qos="Burstable", labels=LC, requests={"cpu": "200m"}, limits={"cpu": "1"})]
    state = assume_done(decide(tick(raw, policy, actions=[act]), NodeState())).state
    assert state.isolated()["burst"] == ["default/lc"]
    hot = tick(raw, policy, actions=[act], metrics={"cpu_total_usage": 3.0},
               usage={"default/lc": PodUsage(cpu=1.0)})
    plan = decide(hot, state)
    first = next(plan)
    assert isinstance(first, ReleaseBurst) and first.pod.key == "default/lc"
    second = plan.send(True)
    assert isinstance(second, WriteCap)
    with pytest.raises(StopIteration) as done:
        plan.send(True)
    decision = done.value.value
    assert decision.state.caps() == {"default/lc": pytest.approx(0.2)}
    assert decision.state.isolated()["burst"] == []
    assert [(c.change, c.reason) for c in decision.report.isolation] == [("released", "capped")]
    # still capped next tick: no burst asked for
    intents = []
    plan = decide(tick(raw, policy, actions=[act], metrics={"cpu_total_usage": 2.5},
                       usage={"default/lc": PodUsage(cpu=0.2)}), decision.state)
    try:
        intents.append(next(plan))
        while True:
            intents.append(plan.send(True))
    except StopIteration:
        pass
    assert not [i for i in intents if isinstance(i, SetBurst)]


def test_simulate_reports_the_classes_only_where_they_apply(tmp_path):
    import json
    import subprocess
    import sys

    import yaml

    scenario = {
        "now": "2026-01-01T00:00:00Z",
        "objects": [node("n1", cpu="4", labels={"pool": "colocated"}),
                    node("n2", cpu="4", labels={"pool": "batch"}),
                    *pods(), pod("other", node_name="n2", qos="BestEffort"),
                    isolation_policy(idle={}, burst={})],
        "samples": [{"at": 0, "node": "n1", "metrics": {"cpu_total_usage": 4.0}},
                    {"at": 0, "node": "n2", "metrics": {"cpu_total_usage": 4.0}}],
    }  # fmt: skip
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(scenario))
    out = subprocess.run([sys.executable, "-m", "agent", "simulate", str(path)],
                         capture_output=True, text=True, check=True)  # fmt: skip
    nodes = json.loads(out.stdout)["nodes"]
    assert nodes["n1"]["idle"] == ["default/be-1", "default/be-2"] and nodes["n1"]["burst"] == ["default/web"]
    assert "idle" not in nodes["n2"] and "burst" not in nodes["n2"]
