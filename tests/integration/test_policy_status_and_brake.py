"""The controller's cache-driven writes over real HTTP against the dev server, with its
access table enforced: NodeQOSEnsurancePolicy and AvoidanceAction status (validity with
the field named, matched nodes, one Event per change of validity), and the cluster brake
(set from the agents' eviction Events, lifted after 5 quiet minutes, a person's deletion
obeyed). The agent's side of the access table: its cluster calls make none outside it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from agent import defaults
from agent.cluster.access import controller_access
from agent.cluster.controller import Controller, ControllerDeps
from agent.cluster.resources import BRAKE_KINDS, POLICY_KINDS
from agent.kube.client import build_api
from agent.kube.creating import create
from agent.kube.deleting import delete
from agent.kube.errors import KubeNotFound
from agent.kube.fetching import get_object, list_objects
from agent.kube.patching import merge_patch
from agent.kube.resources import ACTIONS, CONFIGMAPS, EVENTS, POLICIES
from agent.kube.watching import WatchArgs
from agent.model.timeutil import format_time
from devtools.apiserver.testing import Running, serve
from tests.integration.controller_env import crds
from tests.waiting import wait_until

pytestmark = pytest.mark.integration

NOW = time.time()


def node(name: str, pool: str = "batch") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"pool": pool}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}],
                       "allocatable": {"cpu": "8", "memory": "32Gi"}}}  # fmt: skip


def action(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "qos.waterline.io/v1alpha1", "kind": "AvoidanceAction",
            "metadata": {"name": name}, "spec": spec}  # fmt: skip


def policy(name: str, value: Any, action_name: str = "throttle") -> dict[str, Any]:
    return {"apiVersion": "qos.waterline.io/v1alpha1", "kind": "NodeQOSEnsurancePolicy",
            "metadata": {"name": name},
            "spec": {"nodeSelector": {"matchLabels": {"pool": "batch"}},
                     "objectiveEnsurances": [{"name": "cpu", "actionName": action_name,
                                              "metricRule": {"name": "cpu_total_usage", "value": value}}]}}  # fmt: skip


def eviction_event(i: int, node_name: str, at: float) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"hog-{i}.{i:x}", "namespace": "demo"},
            "involvedObject": {"kind": "Pod", "name": f"hog-{i}", "namespace": "demo"},
            "type": "Warning", "reason": "Evicted", "message": "Evicted by rule guard/cpu",
            "count": 1, "firstTimestamp": format_time(at), "lastTimestamp": format_time(at),
            "source": {"component": "waterline-agent", "host": node_name},
            "reportingComponent": "waterline-agent", "reportingInstance": node_name}  # fmt: skip


@pytest.fixture
def running() -> Iterator[tuple[Running, Controller]]:
    nodes = [node("n1"), node("n2"), node("n3", pool="web")]
    objects = [*crds(), *nodes, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "demo"}}]
    with serve(objects) as env:
        api = build_api(str(env.kubeconfig), access=controller_access())
        deps = ControllerDeps(api, "solo", watch_args=WatchArgs(watch_timeout_seconds=5))
        ctl = Controller(deps, interval=60)
        ctl.writer.time_left = lambda: 10.0  # type: ignore[method-assign]  # leading
        ctl.start_watches()
        try:
            # (the dev server serves no workloads here: those watches keep retrying)
            wait_until(lambda: ctl.cache.synced((*POLICY_KINDS, *BRAKE_KINDS)))
            yield env, ctl
        finally:
            assert ctl.informers is not None
            ctl.informers.stop()
            assert api.access is not None and api.access.refused == []
            api.close()


def status(env: Running, resource: Any, name: str) -> dict[str, Any]:
    return get_object(env.api, resource, name).get("status") or {}


def events(env: Running, reason: str) -> list[dict[str, Any]]:
    return [e for e in list_objects(env.api, EVENTS).items if e["reason"] == reason]


def test_policies_and_actions_tell_their_state(running: tuple[Running, Controller]) -> None:
    env, ctl = running
    create(env.api, ACTIONS, action("throttle", {"throttle": {"cpuThrottle": {"minCPURatio": 10}}}))
    create(env.api, ACTIONS, action("empty", {"coolDownSeconds": 5}))  # neither throttle nor eviction
    create(env.api, POLICIES, policy("good", "6"))
    create(env.api, POLICIES, policy("negative", "-1"))
    wait_until(lambda: len(ctl.cache.records("NodeQOSEnsurancePolicy")) == 2
               and len(ctl.cache.records("AvoidanceAction")) == 2)  # fmt: skip
    ctl.status_round(NOW)

    good = status(env, POLICIES, "good")
    assert good["matchedNodes"] == 2 and good["observedGeneration"] == 1
    (cond,) = good["conditions"]
    assert (cond["type"], cond["status"], cond["reason"]) == ("Valid", "True", "Valid")
    (cond,) = status(env, POLICIES, "negative")["conditions"]
    assert (cond["status"], cond["reason"]) == ("False", "Invalid")
    assert cond["message"].startswith(
        "NodeQOSEnsurancePolicy negative: spec.objectiveEnsurances[0].metricRule.value must be >= 0"
    )
    assert status(env, ACTIONS, "throttle")["matchedNodes"] == 2  # through the valid policy
    (cond,) = status(env, ACTIONS, "empty")["conditions"]
    assert cond["status"] == "False" and "AvoidanceAction empty: spec" in cond["message"]
    invalid = events(env, "InvalidPolicy")
    assert [(e["involvedObject"]["name"], e["source"]["component"]) for e in invalid] == [
        ("negative", "waterline-controller")
    ]
    assert len(events(env, "InvalidAction")) == 1

    # A status decided on a stale version is refused, not written over a newer object.
    stale = {"matchedNodes": 99}
    assert not ctl.writer.policy_status("NodeQOSEnsurancePolicy", "good", stale, "1")
    assert status(env, POLICIES, "good")["matchedNodes"] == 2

    # Nothing changed: no write, no event. Then the policy is fixed: Valid, one event.
    writes_before = sum(1 for m, _ in env.server.requests if m == "PATCH")
    wait_until(lambda: (ctl.cache.get("NodeQOSEnsurancePolicy", "negative") or {}).get("status"))
    ctl.status_round(NOW + 60)
    assert sum(1 for m, _ in env.server.requests if m == "PATCH") == writes_before
    merge_patch(env.api, POLICIES, "negative", {"spec": policy("negative", "3")["spec"]})
    wait_until(lambda: (ctl.cache.get("NodeQOSEnsurancePolicy", "negative") or {})
               .get("metadata", {}).get("generation") == 2)  # fmt: skip
    ctl.status_round(NOW + 120)
    fixed = status(env, POLICIES, "negative")
    assert fixed["conditions"][0]["status"] == "True" and fixed["observedGeneration"] == 2
    assert [e["involvedObject"]["name"] for e in events(env, "Valid")] == ["negative"]
    assert len(events(env, "InvalidPolicy")) == 1


def test_the_brake_is_set_lifted_and_a_persons_deletion_obeyed(
    running: tuple[Running, Controller],
) -> None:
    env, ctl = running
    # 2 of 3 Ready nodes evicting is above 10% (never below one node): the brake is set.
    for i, where in enumerate(["n1", "n2", "n1"]):
        create(env.api, EVENTS, eviction_event(i, where, NOW - 10))
    wait_until(lambda: len(ctl.cache.records("Event")) == 3)
    ctl.status_round(NOW)
    brake = get_object(env.api, CONFIGMAPS, defaults.BRAKE_CONFIGMAP, defaults.NAMESPACE)
    assert brake["data"]["evictionsPaused"] == "true"
    assert brake["data"]["reason"] == "2 of 3 Ready nodes evicting (budget 10% = 1)"
    assert [e["reason"] for e in list_objects(env.api, EVENTS).items
            if e["involvedObject"]["kind"] == "ConfigMap"] == ["BrakeSet"]  # fmt: skip
    wait_until(lambda: ctl.brake_state().paused)
    ctl.tick()
    assert ctl.metrics.registry.get_sample_value("waterline_cluster_brake") == 1

    # Quiet, but not for 5 minutes yet: kept. After 5 quiet minutes: lifted (deleted).
    ctl.status_round(NOW + 200)
    get_object(env.api, CONFIGMAPS, defaults.BRAKE_CONFIGMAP, defaults.NAMESPACE)
    ctl.status_round(NOW + 301)
    with pytest.raises(KubeNotFound):
        get_object(env.api, CONFIGMAPS, defaults.BRAKE_CONFIGMAP, defaults.NAMESPACE)
    wait_until(lambda: not ctl.brake_state().present)

    # A new storm sets it again; a person deletes it: the storm already seen is forgiven.
    for i in range(3, 105):
        create(env.api, EVENTS, eviction_event(i, "n1", NOW + 400))
    wait_until(lambda: len(ctl.cache.records("Event")) == 105)
    ctl.status_round(NOW + 401)
    wait_until(lambda: ctl.brake_state().paused)
    assert "102 evictions by the node agents in 60s (budget 100)" in ctl.brake_state().reason
    delete(env.api, CONFIGMAPS, defaults.BRAKE_CONFIGMAP, defaults.NAMESPACE)
    wait_until(lambda: not ctl.brake_state().present)
    ctl.status_round(NOW + 402)
    with pytest.raises(KubeNotFound):
        get_object(env.api, CONFIGMAPS, defaults.BRAKE_CONFIGMAP, defaults.NAMESPACE)
