"""Safe by default, against `waterline dev-apiserver` (issue 10): the blast radius of one bad
policy is bounded, API faults never multiply, a slow API server never delays throttling,
the cluster brake pauses every agent's evictions, and an agent started while the API
server is down acts on the objects it saved.

The agents run in-process (``build_agent``) on fake cgroup trees (tests/unit/fake_cgroups):
CPU seconds are added to a pod's counters between ticks, so the load is exact.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from agent.kube.creating import create
from agent.kube.deleting import delete
from agent.kube.patching import merge_patch
from agent.kube.resources import CONFIGMAPS, DAEMONSETS, PODS
from agent.node.lifecycle import Agent
from agent.node.loop import TickOutcome
from agent.node.release import release
from agent.node.wiring import build_agent
from devtools.apiserver.server import Fault
from devtools.apiserver.testing import serve
from executors.limits import backoff_delay
from tests.integration.test_agent_cluster import (
    FAST_WATCHES,
    Load,
    action,
    agent_args,
    events,
    fake_pod,
    node,
    policy,
    tick_until,
)

pytestmark = pytest.mark.integration
NAMES = [f"batch-{i:02d}" for i in range(13)]
EVICTIONS = "/eviction"


def namespace() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "demo"}}


def evict_everything(**eviction: Any) -> list[dict[str, Any]]:
    """The new user's policy of issue 10: no selector, a waterline of 0, any priority."""
    spec = {"coolDownSeconds": 0, "eviction": eviction,
            "scope": {"qosClasses": ["BestEffort", "Burstable", "Guaranteed"],
                      "maxPriority": 1000000000}}  # fmt: skip
    everything = policy("everything", "evict-all", value="0")
    everything["spec"].pop("nodeSelector")
    return [everything, action("evict-all", spec)]


def eviction_posts(running: Any) -> list[str]:
    return [p for m, p in running.server.requests if m == "POST" and p.endswith(EVICTIONS)]


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def start(running: Any, tmp: Path, *extra: str, node_name: str = "node-1") -> Agent:
    args = agent_args(running.kubeconfig, tmp, *extra)
    args.node_name = node_name
    return build_agent(args, FAST_WATCHES)


def busy(names: list[str]) -> dict[str, float]:
    return dict.fromkeys(names, 5.0)


def test_a_policy_that_would_evict_everything_evicts_at_most_the_budget(tmp_path: Path) -> None:
    load = Load(tmp_path / "cg", NAMES)
    objects = [node("node-1"), namespace(), *(fake_pod(n) for n in NAMES), *evict_everything()]
    with serve(objects) as running:
        agent = start(running, tmp_path)
        clock = [1_767_225_600.0]

        def tick_clock() -> float:  # 0.1 s of agent time a tick: the bucket gets no token
            return clock[0]

        agent.loop.clock = tick_clock
        try:
            seen: list[TickOutcome] = []
            for _ in range(60):
                clock[0] += 0.1
                load.run(**busy(NAMES))
                seen.append(agent.loop.tick())
                rate_limited = [o for o in seen if o.report and o.report.limited == "evictionRateLimit"]
                if len(rate_limited) >= 5:
                    break
                time.sleep(0.02)
        finally:
            agent.stop_source and agent.stop_source()
        evicted = [a.pod for o in seen if o.report for a in o.report.actions
                   if a.result == "evicted"]  # fmt: skip
        # The default bucket: a burst of 5, 10 a minute: five pods of the thirteen, then
        # every round stops on the empty bucket (the brake may hold the very first ticks,
        # before its ConfigMap is read).
        assert len(evicted) == 5, evicted
        assert len(eviction_posts(running)) == 5
        assert len(running.api.request("GET", PODS.path("demo"))["items"]) == 8
        limited = [o.report.limited for o in seen if o.report and o.report.limited]
        assert limited.count("evictionRateLimit") >= 5
        assert set(limited) <= {"evictionRateLimit", "clusterBrake"}
        text = agent.metrics.render().decode()
        assert 'waterline_eviction_rounds_limited_total{limit="evictionRateLimit"} 5.0' in text


def test_a_failing_eviction_endpoint_gets_one_request_a_round_then_backoff(tmp_path: Path) -> None:
    load = Load(tmp_path / "cg", NAMES[:5])
    objects = [node("node-1"), namespace(), *(fake_pod(n) for n in NAMES[:5]),
               *evict_everything()]  # fmt: skip
    with serve(objects) as running:
        running.server.inject(Fault(EVICTIONS, method="POST", status=500, times=10_000))
        agent = start(running, tmp_path)
        clock = [1_767_225_600.0]
        agent.loop.clock = lambda: clock[0]  # one tick a second of agent time, run fast
        sent: list[tuple[float, int]] = []
        try:
            for second in range(60):
                clock[0] += 1.0
                load.run(**busy(NAMES[:5]))
                agent.loop.tick()
                sent.append((float(second), len(eviction_posts(running))))
                time.sleep(0.01)
        finally:
            agent.stop_source and agent.stop_source()
        # Before: one request per candidate per tick (5 a tick, 300 a minute). Now: the
        # first failure ends the round and the next waits 5 s, 10 s, 20 s, ... (+-20%).
        counts = [n for _, n in sent]
        steps = [b - a for a, b in zip([0, *counts], counts, strict=False)]
        assert max(steps) == 1  # never more than one request a tick
        at = [t for (t, _), step in zip(sent, steps, strict=True) if step]
        waits = [b - a for a, b in zip(at, at[1:], strict=False)]
        expected = [backoff_delay("node-1", k, None) for k in range(1, len(at))]
        assert len(at) == 4, (at, expected)  # 0 s, ~5 s, ~15 s, ~35 s
        for waited, delay in zip(waits, expected, strict=True):
            assert delay <= waited < delay + 1.0 + 1e-6


def wrote_caps(outcome: TickOutcome) -> bool:
    report = outcome.report
    return report is not None and any(
        a.action in ("throttle", "restore") and a.result is None for a in report.actions
    )


def test_a_hanging_eviction_endpoint_never_delays_throttling(tmp_path: Path) -> None:
    """The live loop, default settings (budget 5 s, evictionAnswerSeconds 1 s), the load
    hot and cool in turn so that every tick has caps to write (down, then up)."""
    names = NAMES[:3]
    load = Load(tmp_path / "cg", names)
    both = {"coolDownSeconds": 0, "eviction": {},
            "throttle": {"cpuThrottle": {"minCPURatio": 10, "stepCPURatio": 10}}}  # fmt: skip
    objects = [node("node-1"), namespace(), *(fake_pod(n) for n in names),
               policy("guard", "evict-and-throttle"), action("evict-and-throttle", both)]  # fmt: skip
    with serve(objects) as running:
        running.server.inject(Fault(EVICTIONS, method="POST", status=0, delay=600.0,
                                    times=10_000))  # fmt: skip
        agent = start(running, tmp_path)
        try:
            tick_until(agent, load, {}, lambda s: s[-1].ok)  # in sync, first sample taken
            hot = [False]

            def alternate() -> None:
                hot[0] = not hot[0]
                load.run(**(busy(names) if hot[0] else {}))

            seen: list[tuple[float, TickOutcome]] = []
            agent.loop.before_tick.append(alternate)
            agent.loop.publishers.append(lambda o: seen.append((time.monotonic(), o)))
            agent.loop.run(ticks=10)
        finally:
            agent.stop_source and agent.stop_source()
    outcomes = [o for _, o in seen]
    faults = [o for o in outcomes if o.report and any(a.result == "failed" for a in o.report.actions)]
    assert faults, "no eviction was attempted"
    assert [wrote_caps(o) for o in outcomes] == [True] * len(outcomes)  # every tick, faults too
    # A tick waits 1 s for the eviction's answer, never the 5 s budget, let alone 600 s.
    starts = [at - o.duration for at, o in seen]
    gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
    assert max(gaps) <= agent.loop.interval + 1.5, gaps
    # Never more than one request open: one per fault tick that sent one, and the
    # requests a tick gave up on are not repeated while in flight.
    assert 1 <= len(eviction_posts(running)) <= len(faults)


def test_a_late_eviction_answer_counts_once_the_pod_terminates(tmp_path: Path) -> None:
    """The eviction endpoint answers after 2 s (the tick waits 1 s): the pod is evicted
    all the same; the agent sees it terminating, counts it as its eviction (with its
    Evicted Event) and never asks for it again."""
    names = NAMES[:3]
    load = Load(tmp_path / "cg", names)
    objects = [node("node-1"), namespace(), *(fake_pod(n) for n in names), *evict_everything()]
    with serve(objects, grace_cap=60.0) as running:
        running.server.inject(Fault(EVICTIONS, method="POST", status=0, delay=2.0, times=1))
        agent = start(running, tmp_path)
        clock = [1_767_225_600.0]
        agent.loop.clock = lambda: clock[0]
        try:
            seen = tick_until(agent, load, busy(names),
                              lambda s: any(a.result == "failed" for o in s if o.report
                                            for a in o.report.actions))  # fmt: skip
            first = next(a.pod for a in seen[-1].report.actions if a.action == "evict")
            brain = agent.loop.brain  # its memory is a new value after every tick
            assert first in brain.state.awaiting_answer()  # nothing known yet
            for _ in range(100):  # the late answer, then the watch (agent time stands still)
                load.run(**busy(names))
                agent.loop.tick()
                if first in brain.state.terminating():
                    break
                time.sleep(0.05)
            assert first in brain.state.terminating() and first not in brain.state.awaiting_answer()
            for _ in range(20):  # past the backoff: the round goes on with the others
                clock[0] += 1.0
                load.run(**busy(names))
                agent.loop.tick()
                time.sleep(0.02)
        finally:
            agent.stop_source and agent.stop_source()
        posts = [p.split("/")[-2] for p in eviction_posts(running)]
        assert posts.count(first.split("/")[1]) == 1, posts
        assert len(posts) == 3  # the other two were evicted when the backoff ended
        deleting = [p["metadata"]["name"] for p in running.api.request("GET", PODS.path("demo"))["items"]
                    if p["metadata"].get("deletionTimestamp")]  # fmt: skip
        assert sorted(deleting) == sorted(names)
        # Its Evicted Event (the cluster brake counts them) came when the watch settled it.
        late = [m for n, r, m in events(running.api, "demo") if (n, r) == (first.split("/")[1], "Evicted")]
        assert len(late) == 1 and "answered after its tick" in late[0], late


def test_the_brake_configmap_stops_evictions_on_every_agent(tmp_path: Path) -> None:
    loads = {n: Load(tmp_path / n / "cg", [f"{n}-pod"]) for n in ("node-1", "node-2")}
    objects = [node("node-1"), node("node-2"), namespace(),
               fake_pod("node-1-pod", node="node-1"), fake_pod("node-2-pod", node="node-2"),
               *evict_everything()]  # fmt: skip
    brake = {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": "waterline-brake", "namespace": "waterline-system"},
             "data": {"evictionsPaused": "true", "reason": "120 evictions in 60 s"}}  # fmt: skip
    with serve(objects) as running:
        create(running.api, CONFIGMAPS, brake)
        agents = {n: start(running, tmp_path / n, node_name=n) for n in loads}
        try:
            for name, agent in agents.items():
                braked = tick_until(agent, loads[name], {f"{name}-pod": 5.0},
                                    lambda s: sum(o.report is not None and o.report.limited
                                                  == "clusterBrake" for o in s) >= 3)  # fmt: skip
                assert not [a for o in braked if o.report for a in o.report.actions]
            assert eviction_posts(running) == []
            delete(running.api, CONFIGMAPS, "waterline-brake", "waterline-system")
            for name, agent in agents.items():
                tick_until(agent, loads[name], {f"{name}-pod": 5.0},
                           lambda s: any(a.result == "evicted" for o in s if o.report
                                         for a in o.report.actions))  # fmt: skip
        finally:
            for agent in agents.values():
                agent.stop_source and agent.stop_source()
        assert len(eviction_posts(running)) == 2


def test_an_agent_started_with_the_api_server_down_throttles_from_saved_objects(
    tmp_path: Path,
) -> None:
    load = Load(tmp_path / "cg", ["batch-a"])
    throttle = action("throttle", {"throttle": {"cpuThrottle": {"minCPURatio": 10}},
                                   "scope": {"qosClasses": ["BestEffort"]}})  # fmt: skip
    objects = [node("node-1"), namespace(), fake_pod("batch-a"), policy("guard", "throttle"),
               throttle]  # fmt: skip
    with serve(objects) as running:
        first = start(running, tmp_path)
        try:
            tick_until(first, load, {}, lambda s: s[-1].ok)
        finally:
            first.stop_source and first.stop_source()
        kubeconfig = running.kubeconfig.read_text()
    assert (tmp_path / "state" / "objects.json").exists()
    # The server is gone (its port closed); a new agent starts and acts all the same.
    dead = write(tmp_path / "kubeconfig", kubeconfig)
    second = build_agent(agent_args(dead, tmp_path), FAST_WATCHES)
    try:
        seen = tick_until(second, load, {"batch-a": 5.0},
                          lambda s: any(a.action == "throttle" for o in s if o.report
                                        for a in o.report.actions))  # fmt: skip
    finally:
        second.stop_source and second.stop_source()
    assert load.quota("batch-a") == 20000  # 10% of the node's 2 cores, 100 ms period
    assert all(o.ok for o in seen[1:])
    assert not second.health.ready()[0]  # honest: not in sync with the API


def test_stopping_keeps_caps_unless_the_agents_daemonset_is_gone_or_being_deleted(
    tmp_path: Path,
) -> None:
    load = Load(tmp_path / "cg", ["batch-a"])
    throttle = action("throttle", {"throttle": {"cpuThrottle": {"minCPURatio": 10}},
                                   "scope": {"qosClasses": ["BestEffort"]}})  # fmt: skip
    daemonset = {"apiVersion": "apps/v1", "kind": "DaemonSet",
                 "metadata": {"name": "waterline-agent", "namespace": "waterline-system"}}  # fmt: skip
    objects = [node("node-1"), namespace(), fake_pod("batch-a"), policy("guard", "throttle"),
               throttle, daemonset]  # fmt: skip
    with serve(objects) as running:
        agent = start(running, tmp_path)
        try:
            tick_until(agent, load, {"batch-a": 5.0}, lambda s: bool(agent.loop.brain.caps()))
            assert agent.uninstalled is not None and agent.uninstalled() is False
            agent.on_exit()  # a restart (rolling update, node reboot): the cap stays
            assert load.quota("batch-a") == 20000
            assert '"uid-batch-a"' in (tmp_path / "state" / "cpu-quota.json").read_text()
            merge_patch(running.api, DAEMONSETS, "waterline-agent",
                        {"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}},
                        namespace="waterline-system")  # fmt: skip
            assert agent.uninstalled() is True  # being deleted: an uninstall
            delete(running.api, DAEMONSETS, "waterline-agent", "waterline-system")
            assert agent.uninstalled() is True  # gone
            agent.on_exit()
            assert load.quota("batch-a") == -1  # every cap released, exactly
            assert agent.loop.brain.caps() == {}
        finally:
            agent.stop_source and agent.stop_source()
    assert agent.uninstalled() is None  # no API: cannot tell, so caps would be kept


def test_agent_release_hands_every_cap_back_by_hand(tmp_path: Path) -> None:
    load = Load(tmp_path / "cg", ["batch-a", "batch-b"])
    throttle = action("throttle", {"throttle": {"cpuThrottle": {"minCPURatio": 10}},
                                   "scope": {"qosClasses": ["BestEffort"]}})  # fmt: skip
    objects = [node("node-1"), namespace(), fake_pod("batch-a"), fake_pod("batch-b"),
               policy("guard", "throttle"), throttle]  # fmt: skip
    with serve(objects) as running:
        agent = start(running, tmp_path)
        try:
            tick_until(agent, load, {"batch-a": 5.0, "batch-b": 5.0},
                       lambda s: len(agent.loop.brain.caps()) == 2)  # fmt: skip
        finally:
            agent.stop_source and agent.stop_source()  # killed: no clean-up
        assert load.quota("batch-a") == 20000 and load.quota("batch-b") == 20000
        args = agent_args(running.kubeconfig, tmp_path)
        assert release(args) == 0
    assert load.quota("batch-a") == -1 and load.quota("batch-b") == -1
    assert '"pods": {}' in (tmp_path / "state" / "cpu-quota.json").read_text()
