"""The controller's cache-driven writes against the real cluster, with its own token and
access table: NodeQOSEnsurancePolicy and AvoidanceAction status (validity with the field
named, matched nodes, one Event per change of validity), and the cluster brake (set from
the agents' eviction Events, lifted after 5 quiet minutes, a person's deletion obeyed).
What the CRDs' own validation refuses never reaches the controller: that is
tests/integration/test_install.py.

Rounds are driven by hand (``status_round(now)``) on the controller's watched cache, so
the brake's clock can run ahead: its rounds are a month ahead of the wall clock, where
the only agent Events are the test's own (the run's agent tests evicted for real)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from agent import defaults
from agent.cluster.access import controller_access
from agent.cluster.brake import BrakeBudget
from agent.cluster.controller import Controller, ControllerDeps
from agent.cluster.resources import BRAKE_KINDS, POLICY_KINDS
from agent.kube.creating import create
from agent.kube.deleting import delete
from agent.kube.errors import KubeNotFound
from agent.kube.fetching import Selectors, get_object, list_objects
from agent.kube.patching import merge_patch
from agent.kube.resources import ACTIONS, CONFIGMAPS, EVENTS, POLICIES, Resource
from agent.kube.watching import WatchArgs
from agent.model.timeutil import format_time
from devtools.harness.cluster import RealCluster, unique
from devtools.harness.faultproxy import FaultProxy
from devtools.harness.waiting import wait_until
from tests import builders
from tests.integration.controller_env import Made, clear_brake

pytestmark = pytest.mark.integration

NOW = time.time()
AHEAD = NOW + 30 * 86400  # the brake's rounds: a month ahead


def policy(name: str, pool: str, value: Any, action_name: str) -> dict[str, Any]:
    return builders.policy(name, [builders.rule("cpu", "cpu_total_usage", value, action_name)], pool=pool)


def eviction_event(ns: str, i: int, node_name: str, at: float) -> dict[str, Any]:
    """An eviction Event as the node agent records it."""
    return {"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"hog-{i}.{i:x}", "namespace": ns},
            "involvedObject": {"kind": "Pod", "name": f"hog-{i}", "namespace": ns},
            "type": "Warning", "reason": "Evicted", "message": "Evicted by rule guard/cpu",
            "count": 1, "firstTimestamp": format_time(at), "lastTimestamp": format_time(at),
            "source": {"component": "waterline-agent", "host": node_name},
            "reportingComponent": "waterline-agent", "reportingInstance": node_name}  # fmt: skip


@dataclass
class Running:
    kube: RealCluster
    ctl: Controller
    proxy: FaultProxy
    ns: str
    pool: str

    def status(self, resource: Resource, name: str) -> dict[str, Any]:
        return get_object(self.kube.api, resource, name).get("status") or {}

    def events(self, reason: str, names: set[str]) -> list[dict[str, Any]]:
        items = list_objects(self.kube.api, EVENTS).items
        return [e for e in items if e["reason"] == reason and e["involvedObject"]["name"] in names]

    def patches(self) -> int:
        return len(self.proxy.seen("PATCH"))


@pytest.fixture
def running(kube: RealCluster, made: Made) -> Iterator[Running]:
    ns = kube.namespace("brake")
    pool = ns
    for labels in ({"pool": pool}, {"pool": pool}, {"pool": f"{pool}-other"}):
        kube.node(labels=labels)
    with kube.proxy() as proxy:
        table = controller_access()
        api = kube.client(kube.controller_kubeconfig(server=proxy.url), access=table)
        deps = ControllerDeps(api, unique("solo"), watch_args=WatchArgs(watch_timeout_seconds=30))
        ctl = Controller(deps, interval=60)
        ctl.writer.time_left = lambda: 10.0  # type: ignore[method-assign]  # leading
        ctl.start_watches()
        try:
            wait_until(lambda: ctl.cache.synced((*POLICY_KINDS, *BRAKE_KINDS)), 60, "synced")
            yield Running(kube, ctl, proxy, ns, pool)
        finally:
            assert ctl.informers is not None
            ctl.informers.stop()
            api.close()
            clear_brake(kube)
            kube.kubectl("delete", "namespace", ns, "--wait=false")
        assert table.refused == []
        assert [s for s in proxy.requests if s.status in (401, 403)] == []


def test_policies_and_actions_tell_their_state(running: Running, made: Made) -> None:
    """What the CRDs' schemas cannot refuse (a rule naming an action that does not exist:
    the real server admits it) the status tells, with the field named."""
    env, ctl = running, running.ctl
    throttle, missing = unique("throttle"), unique("no-such-action")
    good, dangling = unique("good"), unique("dangling")
    made.add(ACTIONS, builders.action(throttle, throttle={"minCPURatio": 10}))
    made.add(POLICIES, policy(good, env.pool, "6", throttle))
    made.add(POLICIES, policy(dangling, env.pool, "6", missing))
    ours = {throttle, good, dangling}
    wait_until(lambda: ours <= cached_names(ctl), 30, "cached")
    ctl.status_round(NOW)

    good_status = env.status(POLICIES, good)
    assert good_status["matchedNodes"] == 2 and good_status["observedGeneration"] == 1
    (cond,) = good_status["conditions"]
    assert (cond["type"], cond["status"], cond["reason"]) == ("Valid", "True", "Valid")
    dangling_status = env.status(POLICIES, dangling)
    assert dangling_status["matchedNodes"] == 2  # what it would act on once fixed
    (cond,) = dangling_status["conditions"]
    assert (cond["status"], cond["reason"]) == ("False", "Invalid")
    assert cond["message"] == (
        f"NodeQOSEnsurancePolicy {dangling}: spec.objectiveEnsurances[0].actionName must name "
        f"an AvoidanceAction that exists and is valid, got '{missing}'"
    )
    assert env.status(ACTIONS, throttle)["matchedNodes"] == 2  # through the valid policy
    (cond,) = env.status(ACTIONS, throttle)["conditions"]
    assert cond["status"] == "True"
    invalid = env.events("InvalidPolicy", ours)
    assert [(e["involvedObject"]["name"], e["source"]["component"]) for e in invalid] == [
        (dangling, "waterline-controller")
    ]

    # A status decided on a stale version is refused (409), not written over a newer one.
    stale = {"matchedNodes": 99}
    assert not ctl.writer.policy_status("NodeQOSEnsurancePolicy", good, stale, "1")
    assert env.status(POLICIES, good)["matchedNodes"] == 2

    # Nothing changed: no write, no event. Then the policy is fixed: Valid, one event.
    wait_until(lambda: cached_status(ctl, dangling), 30, "its status in the cache")
    writes_before = env.patches()
    ctl.status_round(NOW + 60)
    assert env.patches() == writes_before
    merge_patch(env.kube.api, POLICIES, dangling, {"spec": policy(dangling, env.pool, "6", throttle)["spec"]})
    wait_until(lambda: cached_generation(ctl, dangling) == 2, 30, "generation 2 in the cache")
    ctl.status_round(NOW + 120)
    fixed = env.status(POLICIES, dangling)
    assert fixed["conditions"][0]["status"] == "True" and fixed["observedGeneration"] == 2
    assert [e["involvedObject"]["name"] for e in env.events("Valid", ours)] == [dangling]
    assert len(env.events("InvalidPolicy", ours)) == 1


def cached_names(ctl: Controller) -> set[str]:
    """The policies and actions in the controller's cache (raw objects)."""
    kinds = ("NodeQOSEnsurancePolicy", "AvoidanceAction")
    return {o["metadata"]["name"] for kind in kinds for o in ctl.cache.records(kind)}


def cached_status(ctl: Controller, name: str) -> Any:
    return (ctl.cache.get("NodeQOSEnsurancePolicy", name) or {}).get("status")


def cached_generation(ctl: Controller, name: str) -> Any:
    return (ctl.cache.get("NodeQOSEnsurancePolicy", name) or {}).get("metadata", {}).get("generation")


def test_the_brake_is_set_lifted_and_a_persons_deletion_obeyed(running: Running) -> None:
    env, ctl, api = running, running.ctl, running.kube.api
    # More nodes evicting than the budget of the cluster's Ready nodes: the brake is set.
    ready = sum(1 for n in ctl.cache.records("Node") if n.ready)
    limit = BrakeBudget().node_limit(ready)
    hosts = [f"{env.pool}-host-{i}" for i in range(limit + 1)]
    for i, where in enumerate([*hosts, hosts[0]]):
        create(api, EVENTS, eviction_event(env.ns, i, where, AHEAD - 10))
    wait_until(lambda: len(agent_events(ctl, env.ns)) == len(hosts) + 1, 30, "events cached")
    ctl.status_round(AHEAD)
    brake = get_object(api, CONFIGMAPS, defaults.BRAKE_CONFIGMAP, defaults.NAMESPACE)
    assert brake["data"]["evictionsPaused"] == "true"
    assert brake["data"]["reason"] == f"{limit + 1} of {ready} Ready nodes evicting (budget 10% = {limit})"
    told = [e["reason"] for e in list_objects(api, EVENTS, Selectors(defaults.NAMESPACE)).items
            if e["involvedObject"]["kind"] == "ConfigMap" and e["lastTimestamp"] >= format_time(NOW - 5)]  # fmt: skip
    assert "BrakeSet" in told
    wait_until(lambda: ctl.brake_state().paused, 30, "the brake seen")
    ctl.tick()
    assert ctl.metrics.registry.get_sample_value("waterline_cluster_brake") == 1

    # Quiet, but not for 5 minutes yet: kept. After 5 quiet minutes: lifted (deleted).
    ctl.status_round(AHEAD + 200)
    get_object(api, CONFIGMAPS, defaults.BRAKE_CONFIGMAP, defaults.NAMESPACE)
    ctl.status_round(AHEAD + 301)
    with pytest.raises(KubeNotFound):
        get_object(api, CONFIGMAPS, defaults.BRAKE_CONFIGMAP, defaults.NAMESPACE)
    wait_until(lambda: not ctl.brake_state().present, 30, "the lift seen")

    # A new storm sets it again; a person deletes it: the storm already seen is forgiven.
    start = len(hosts) + 1
    for i in range(start, start + 102):
        create(api, EVENTS, eviction_event(env.ns, i, hosts[0], AHEAD + 400))
    wait_until(lambda: len(agent_events(ctl, env.ns)) == start + 102, 60, "storm cached")
    ctl.status_round(AHEAD + 401)
    wait_until(lambda: ctl.brake_state().paused, 30, "the brake seen")
    assert "102 evictions by the node agents in 60s (budget 100)" in ctl.brake_state().reason
    delete(api, CONFIGMAPS, defaults.BRAKE_CONFIGMAP, defaults.NAMESPACE)
    wait_until(lambda: not ctl.brake_state().present, 30, "the deletion seen")
    ctl.status_round(AHEAD + 402)
    with pytest.raises(KubeNotFound):
        get_object(api, CONFIGMAPS, defaults.BRAKE_CONFIGMAP, defaults.NAMESPACE)


def agent_events(ctl: Controller, ns: str) -> list[Any]:
    """The agents' eviction Events of ``ns`` in the controller's cache."""
    return [e for e in ctl.cache.records("Event") if (e.get("metadata") or {}).get("namespace") == ns]
