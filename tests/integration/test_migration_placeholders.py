"""ReservationFirst on a stock scheduler, over real HTTP against the dev server.

The dev server has no kube-scheduler, no kubelet, no ReplicaSet controller and no garbage
collector: the tests play those parts (set the placeholder Running, create and bind the
replacement), and whatever the controller leaves behind stays visible. Checked: the
placeholder lands on the target with the pod's requests, a priority just below the pod's
and its Reservation as owner; the source carries the drain taint while it drains; when the
replacement appears the placeholder goes, and when it runs the landing is recorded and the
taint lifted; abort, TTL and a restart with the job deleted meanwhile leave no
placeholder, PriorityClass or taint behind; Events tell each step on job, pod and node.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from agent.cluster.config import parse_config
from agent.cluster.controller import Controller, ControllerDeps
from agent.cluster.resources import MIGRATION_JOBS, PRIORITY_CLASSES, RESERVATIONS, WATCHED
from agent.kube.client import ClientArgs, build_api
from agent.kube.creating import create
from agent.kube.errors import KubeNotFound
from agent.kube.fetching import Selectors, get_object, list_objects
from agent.kube.leases import ElectionArgs
from agent.kube.patching import merge_patch
from agent.kube.resources import EVENTS, NODES, PODS
from agent.kube.watching import WatchArgs
from devtools.apiserver.testing import Running, serve
from tests.integration.controller_env import crds
from tests.waiting import wait_until

pytestmark = pytest.mark.integration

ELECTION = ElectionArgs(lease_duration=2, renew_deadline=1.5, retry_period=0.1, jitter=0.2)
INTERVAL = 0.3
NS = "waterline-system"
JOBS = "/apis/qos.waterline.io/v1alpha1/podmigrationjobs"
DRAIN_TAINT = {"key": "qos.waterline.io/draining", "effect": "NoSchedule"}
PRIORITY = 100  # the migrating pod's: the placeholder's class is just below it


def node(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {"taints": [{"key": "example.com/other", "effect": "PreferNoSchedule"}]},
        "status": {
            "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pod(name: str, node_name: str | None, phase: str = "Running") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "priority": PRIORITY,
        "containers": [
            {"name": "main", "resources": {"requests": {"cpu": "1500m", "memory": "1Gi"}}}
        ],
    }
    if node_name:
        spec["nodeName"] = node_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "labels": {"app": "web"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": "web",
                    "uid": "rs-web",
                    "controller": True,
                }
            ],
        },
        "spec": spec,
        "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True"}]},
    }


def drain_job(name: str, ttl: str | None = None) -> dict[str, Any]:
    """A defrag drain's job (as defrag creates it): web-1 off n1, target n2."""
    spec: dict[str, Any] = {
        "podRef": {"namespace": "default", "name": "web-1"},
        "mode": "ReservationFirst",
    }
    if ttl:
        spec["ttl"] = ttl
    return {
        "apiVersion": "qos.waterline.io/v1alpha1",
        "kind": "PodMigrationJob",
        "metadata": {
            "name": name,
            "labels": {"qos.waterline.io/created-by": "defrag"},
            "annotations": {"migration.qos.waterline.io/target-node": "n2"},
        },
        "spec": spec,
    }


class Replica:
    def __init__(self, env: Running, identity: str) -> None:
        self.api = build_api(str(env.kubeconfig), args=ClientArgs(pool_size=32))
        deps = ControllerDeps(
            self.api,
            identity,
            lease_namespace=NS,
            election=ELECTION,
            watch_args=WatchArgs(watch_timeout_seconds=30),
        )
        self.controller = Controller(deps, parse_config({}), interval=INTERVAL)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.controller.run, args=(self.stop,), daemon=True)
        self.thread.start()

    def halt(self) -> None:
        self.stop.set()
        self.thread.join(15)
        assert not self.thread.is_alive()
        self.api.close()


@pytest.fixture
def env() -> Iterator[Running]:
    objects: list[dict[str, Any]] = crds()
    objects += [
        node("n1"),
        node("n2"),
        node("n3"),
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {"name": "web", "namespace": "default", "uid": "rs-web"},
            "spec": {"replicas": 4},
        },
        pod("web-1", "n1"),
    ]
    with serve([]) as running:
        for resource in WATCHED:
            running.server.store.register(resource)
        running.server.load(objects)
        yield running


@pytest.fixture
def leader(env: Running) -> Iterator[Replica]:
    replica = Replica(env, "c1")
    try:
        wait_until(lambda: replica.controller.is_leader())
        yield replica
    finally:
        replica.halt()


# -- reading the cluster as a user would ------------------------------------------------------


def job_status(env: Running, name: str) -> dict[str, Any]:
    try:
        return env.api.request("GET", f"{JOBS}/{name}").get("status") or {}
    except KubeNotFound:
        return {}


def placeholders(env: Running) -> list[dict[str, Any]]:
    selectors = Selectors(NS, label_selector="qos.waterline.io/reservation")
    return list_objects(env.api, PODS, selectors).items


def priority_classes(env: Running) -> list[str]:
    names = [p["metadata"]["name"] for p in list_objects(env.api, PRIORITY_CLASSES).items]
    return [n for n in names if n.startswith("waterline-reservation-")]


def drain_taint(env: Running, name: str) -> bool:
    taints = get_object(env.api, NODES, name).get("spec", {}).get("taints") or []
    assert {"key": "example.com/other", "effect": "PreferNoSchedule"} in taints  # never touched
    return DRAIN_TAINT in taints


def pod_exists(env: Running, name: str, namespace: str = "default") -> bool:
    try:
        get_object(env.api, PODS, name, namespace)
        return True
    except KubeNotFound:
        return False


def run_placeholder(env: Running) -> dict[str, Any]:
    """Play the kubelet: the placeholder bound to n2 starts."""
    wait_until(lambda: len(placeholders(env)) == 1)
    holder = placeholders(env)[0]
    name = holder["metadata"]["name"]
    merge_patch(
        env.api, PODS, name, {"status": {"phase": "Running"}}, namespace=NS, subresource="status"
    )
    return holder


def evicted_and_tainted(env: Running, job: str) -> None:
    wait_until(lambda: job_status(env, job).get("reason") == "WaitForReplacementReady")
    assert not pod_exists(env, "web-1")
    assert drain_taint(env, "n1")


def nothing_left(env: Running) -> None:
    """No placeholder, no placeholder PriorityClass, no drain taint anywhere."""
    wait_until(
        lambda: (
            not placeholders(env)
            and not priority_classes(env)
            and not any(drain_taint(env, n) for n in ("n1", "n2", "n3"))
        )
    )


# -- the tests ---------------------------------------------------------------------------------


def test_placeholder_holds_the_target_taint_drains_the_source_landing_recorded(
    env: Running, leader: Replica
) -> None:
    env.api.request("POST", JOBS, body=drain_job("move-web-1"))

    # the placeholder: on the target, the pod's requests, just below its priority, owned
    # by the Reservation; the job's class exists with preemptionPolicy Never
    holder = run_placeholder(env)
    spec = holder["spec"]
    assert spec["nodeName"] == "n2"
    assert spec["containers"][0]["resources"]["requests"] == {
        "cpu": "1500m",
        "memory": "1073741824",
    }
    assert spec["containers"][0]["image"] == "registry.k8s.io/pause:3.10"
    assert (spec["priorityClassName"], spec["priority"]) == ("waterline-reservation-99", 99)
    reservation = get_object(env.api, RESERVATIONS, "pmj-move-web-1")
    assert holder["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "qos.waterline.io/v1alpha1",
            "kind": "Reservation",
            "name": "pmj-move-web-1",
            "uid": reservation["metadata"]["uid"],
            "controller": True,
        }
    ]
    assert holder["metadata"]["labels"]["qos.waterline.io/reservation"] == "pmj-move-web-1"
    pc = get_object(env.api, PRIORITY_CLASSES, "waterline-reservation-99")
    assert (pc["value"], pc["preemptionPolicy"]) == (99, "Never")
    assert not drain_taint(env, "n1")  # not before the first eviction

    # it runs: the Reservation is Available, the source is tainted, the pod evicted
    evicted_and_tainted(env, "move-web-1")
    reservation = get_object(env.api, RESERVATIONS, "pmj-move-web-1")
    assert (reservation["status"]["phase"], reservation["status"]["nodeName"]) == (
        "Available",
        "n2",
    )
    time.sleep(3 * INTERVAL)  # rounds go by, no replacement yet: the placeholder holds
    assert len(placeholders(env)) == 1 and drain_taint(env, "n1")

    # the ReplicaSet's replacement appears (unscheduled): the placeholder goes so the
    # scheduler finds the room
    create(env.api, PODS, pod("web-1-x7k2p", None, phase="Pending"))
    wait_until(lambda: not placeholders(env))
    assert drain_taint(env, "n1")  # until the replacement runs

    # the scheduler binds it to n2 and it runs: landed on target, taint lifted, class gone
    merge_patch(env.api, PODS, "web-1-x7k2p", {"spec": {"nodeName": "n2"}}, namespace="default")
    merge_patch(
        env.api,
        PODS,
        "web-1-x7k2p",
        {"status": {"phase": "Running"}},
        namespace="default",
        subresource="status",
    )
    wait_until(lambda: job_status(env, "move-web-1").get("phase") == "Succeeded")
    status = job_status(env, "move-web-1")
    assert (status["landedNode"], status["targetNode"]) == ("n2", "n2")
    landed = [c for c in status["conditions"] if c["type"] == "LandedOnTarget"]
    assert [(c["status"], c["reason"]) for c in landed] == [("True", "LandedOnTarget")]
    nothing_left(env)

    # Events on the job, the pod and the node
    events = list_objects(env.api, EVENTS).items
    about = {
        (e["involvedObject"]["kind"], e["involvedObject"]["name"], e["reason"]) for e in events
    }
    assert ("PodMigrationJob", "move-web-1", "WaitForReplacementReady") in about
    assert ("PodMigrationJob", "move-web-1", "MigrationSucceeded") in about  # the writer's
    assert ("Pod", "web-1", "WaitForReplacementReady") in about
    assert ("Node", "n1", "Draining") in about and ("Node", "n1", "DrainDone") in about
    assert ("Node", "n2", "MigrationCompleted") in about
    samples = leader.controller.metrics.registry.get_sample_value
    assert samples("waterline_controller_moves_total", {"stage": "landed_on_target"}) == 1
    assert samples("waterline_controller_nodes_freed_total") == 1


def test_abort_mid_drain_leaves_nothing_behind(env: Running, leader: Replica) -> None:
    env.api.request("POST", JOBS, body=drain_job("abort-me"))
    run_placeholder(env)
    evicted_and_tainted(env, "abort-me")
    merge_patch(
        env.api,
        MIGRATION_JOBS,
        "abort-me",
        {"metadata": {"annotations": {"qos.waterline.io/abort": "true"}}},
    )
    wait_until(lambda: job_status(env, "abort-me").get("phase") == "Aborted")
    nothing_left(env)
    with pytest.raises(KubeNotFound):
        get_object(env.api, RESERVATIONS, "pmj-abort-me")


def test_ttl_leaves_nothing_behind(env: Running, leader: Replica) -> None:
    env.api.request("POST", JOBS, body=drain_job("slow", ttl="5s"))
    run_placeholder(env)
    evicted_and_tainted(env, "slow")  # and no replacement ever comes
    wait_until(lambda: job_status(env, "slow").get("reason") == "Timeout", timeout=15)
    assert job_status(env, "slow")["phase"] == "Failed"
    nothing_left(env)


def test_a_restart_mid_job_collects_what_the_old_leader_left(env: Running) -> None:
    first = Replica(env, "c1")
    try:
        wait_until(lambda: first.controller.is_leader())
        env.api.request("POST", JOBS, body=drain_job("orphaned"))
        run_placeholder(env)
        evicted_and_tainted(env, "orphaned")
    finally:
        first.halt()  # the leader stops mid-job ...
    env.api.request("DELETE", f"{JOBS}/orphaned")  # ... and the job is deleted meanwhile
    assert len(placeholders(env)) == 1 and priority_classes(env) and drain_taint(env, "n1")

    second = Replica(env, "c2")  # no garbage collector here: its own cleanup must do it
    try:
        wait_until(lambda: second.controller.is_leader())
        nothing_left(env)
    finally:
        second.halt()
