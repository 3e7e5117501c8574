"""ReservationFirst on the real cluster: the stock kube-scheduler, the ReplicaSet and
StatefulSet controllers, the garbage collector and kwok nodes, the controller with its
own token.

A defrag drain's job moves a pod off its source to a target: the placeholder is made by
the controller and bound to the target by the scheduler (a required node affinity), with
the pod's requests, a priority just below the pod's and its Reservation as owner; once it
runs the source is tainted and the pod evicted; the ReplicaSet's replacement finds no
room (the source is tainted, the target held), the placeholder goes, and the scheduler
puts the replacement on the target: ``status.landedNode``, ``LandedOnTarget``, the taint
lifted. Abort, TTL and a restart with the job deleted meanwhile leave no placeholder,
PriorityClass or taint behind. Events tell each step on job, pod and node; the figures
(who removed the placeholder, seconds from job to landing) are printed.

Each pool has three nodes that hold one moving pod each (its workload's two pods keep
apart by anti-affinity, the agent's pod takes its 100m): ``source``, ``other`` (the
workload's other pod) and, made last and empty, ``target``. For abort, TTL and restart
the pods are a StatefulSet's, held Terminating by a finalizer once evicted: its
replacement (the same name) waits for the old pod to be gone, so the job waits too.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from agent.cluster.resources import MIGRATION_JOBS, PRIORITY_CLASSES, RESERVATIONS
from agent.kube.errors import KubeNotFound
from agent.kube.fetching import Selectors, get_object, list_objects
from agent.kube.patching import merge_patch
from agent.kube.resources import EVENTS, NODES, PODS
from devtools.harness.cluster import RealCluster, unique
from devtools.harness.waiting import wait_until
from tests.integration.controller_env import (
    LEASE_NS,
    POOL_TAINT,
    Made,
    Replica,
    job_status,
    live_pods,
    migration_job,
    pod_spec,
    pool_node,
    priority_class,
    release,
    replicas,
    wait_running,
)

pytestmark = pytest.mark.integration

DRAIN_TAINT = "qos.waterline.io/draining"
PRIORITY = 100  # the moving pods': the placeholder's class is just below it
HOLD = "waterline.test/hold"
NODE = {"cpu": "2", "memory": "4Gi"}  # one moving pod (1500m) and the agent's (100m)
REQUESTS = {"cpu": "1500m", "memory": "1Gi"}


@dataclass
class Pool:
    ns: str
    source: str
    other: str
    target: str
    moving: str  # the pod the job moves, on source
    kind: str  # its workload's kind


def workload(kind: str, ns: str, pc: str) -> dict[str, Any]:
    """Two pods of ``app=web`` that keep apart (one a node), at priority ``PRIORITY``; a
    StatefulSet's pods carry a finalizer that holds them Terminating once evicted."""
    spec = pod_spec(ns, REQUESTS, priority_class=pc)
    spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname",
         "labelSelector": {"matchLabels": {"app": "web"}}}]}}  # fmt: skip
    meta: dict[str, Any] = {"labels": {"app": "web"}}
    body: dict[str, Any] = {
        "replicas": 2, "selector": {"matchLabels": {"app": "web"}},
        "template": {"metadata": meta, "spec": spec},
    }  # fmt: skip
    if kind == "StatefulSet":
        meta["finalizers"] = [HOLD]
        body.update(serviceName="web", podManagementPolicy="Parallel")
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": "web", "namespace": ns},
            "spec": body}  # fmt: skip


def make_pool(kube: RealCluster, made: Made, kind: str) -> Pool:
    ns = kube.namespace("mig")
    pc = made.add(PRIORITY_CLASSES, priority_class(unique("prio"), PRIORITY))["metadata"]["name"]
    first, second = pool_node(kube, ns, NODE), pool_node(kube, ns, NODE)
    kube.apply([workload(kind, ns, pc)])
    running = wait_running(kube, ns, "app=web", 2)
    target = pool_node(kube, ns, NODE)  # last, so it is empty
    moving = next(p for p in running if p["spec"]["nodeName"] == first)["metadata"]["name"]
    return Pool(ns, first, second, target, moving, kind)


@pytest.fixture
def rs_pool(kube: RealCluster, made: Made) -> Iterator[Pool]:
    pool = make_pool(kube, made, "ReplicaSet")
    yield pool
    kube.kubectl("delete", "namespace", pool.ns, "--wait=false")


@pytest.fixture
def sts_pool(kube: RealCluster, made: Made) -> Iterator[Pool]:
    pool = make_pool(kube, made, "StatefulSet")
    yield pool
    for pod in live_pods(kube, pool.ns) + [
        p for p in pods_being_deleted(kube, pool.ns) if HOLD in p["metadata"].get("finalizers", [])
    ]:
        release(kube, pool.ns, pod["metadata"]["name"])
    kube.kubectl("delete", "namespace", pool.ns, "--wait=false")


def pods_being_deleted(kube: RealCluster, ns: str) -> list[dict[str, Any]]:
    items = list_objects(kube.api, PODS, Selectors(ns)).items
    return [p for p in items if p["metadata"].get("deletionTimestamp")]


def drain_job(made: Made, pool: Pool, ttl: str | None = None) -> str:
    """A defrag drain's job (as defrag creates it): the moving pod off source, to target."""
    body = migration_job(
        unique("move"), pool.ns, pool.moving, "ReservationFirst", ttl=ttl,
        labels={"qos.waterline.io/created-by": "defrag"},
        annotations={"migration.qos.waterline.io/target-node": pool.target},
    )  # fmt: skip
    return str(made.add(MIGRATION_JOBS, body)["metadata"]["name"])


# -- reading the cluster as a user would ------------------------------------------------------


def placeholders(kube: RealCluster) -> list[dict[str, Any]]:
    selectors = Selectors(LEASE_NS, label_selector="qos.waterline.io/reservation")
    return list_objects(kube.api, PODS, selectors).items


def placeholder_classes(kube: RealCluster) -> list[str]:
    names = [p["metadata"]["name"] for p in list_objects(kube.api, PRIORITY_CLASSES).items]
    return [n for n in names if n.startswith("waterline-reservation-")]


def drain_tainted(kube: RealCluster, node: str) -> bool:
    taints = get_object(kube.api, NODES, node).get("spec", {}).get("taints") or []
    assert any(t["key"] == POOL_TAINT for t in taints)  # other taints: never touched
    return any(t["key"] == DRAIN_TAINT for t in taints)


def events_about(kube: RealCluster, name: str) -> list[dict[str, Any]]:
    """Events on any object named ``name`` (cluster-unique names here)."""
    return [e for e in list_objects(kube.api, EVENTS).items if e["involvedObject"]["name"] == name]


def scheduled_to(kube: RealCluster, pod: str) -> list[str]:
    """Where the default scheduler said it bound ``pod`` (its Scheduled Events)."""
    return [
        e["message"].rsplit(" to ", 1)[-1]
        for e in events_about(kube, pod)
        if e["reason"] == "Scheduled" and "default-scheduler" in
        (e.get("reportingComponent"), (e.get("source") or {}).get("component"))
    ]  # fmt: skip


def evicted_and_tainted(kube: RealCluster, pool: Pool, job: str) -> None:
    wait_until(lambda: job_status(kube, job).get("reason") == "WaitForReplacementReady", 90,
               f"{job} evicted its pod")  # fmt: skip
    assert drain_tainted(kube, pool.source)


def nothing_left(kube: RealCluster, pool: Pool) -> None:
    """No placeholder, no placeholder PriorityClass, no drain taint on the pool's nodes."""
    wait_until(
        lambda: not placeholders(kube)
        and not placeholder_classes(kube)
        and not any(drain_tainted(kube, n) for n in (pool.source, pool.other, pool.target)),
        60, "nothing left behind",
    )  # fmt: skip


# -- the tests ---------------------------------------------------------------------------------


def test_placeholder_scheduled_onto_the_target_replacement_lands_there(
    kube: RealCluster, rs_pool: Pool, made: Made
) -> None:
    pool = rs_pool
    with replicas(kube, 1) as (leader,):
        wait_until(leader.controller.is_leader, 30, "leading")
        started = time.monotonic()
        job = drain_job(made, pool)
        wait_until(lambda: job_status(kube, job).get("phase") == "Succeeded", 120, f"{job} done")
        took = time.monotonic() - started

        # the placeholder the controller asked for: the target only (the scheduler
        # binds it), the pod's requests, just below its priority, owned by the Reservation
        (created,) = created_placeholders(leader)
        spec = created["spec"]
        assert "nodeName" not in spec
        assert target_of(created) == pool.target
        assert spec["containers"][0]["resources"]["requests"] == {"cpu": "1500m", "memory": "1073741824"}
        assert spec["containers"][0]["image"] == "registry.k8s.io/pause:3.10"
        assert (spec["priorityClassName"], spec["priority"]) == (f"waterline-reservation-{PRIORITY - 1}", PRIORITY - 1)
        # the pod's tolerations (the pool's taint; the admission's defaults)
        assert {"key": POOL_TAINT, "operator": "Equal", "value": pool.ns,
                "effect": "NoSchedule"} in spec["tolerations"]  # fmt: skip
        reservation = get_object(kube.api, RESERVATIONS, f"pmj-{job}")
        assert created["metadata"]["ownerReferences"] == [{
            "apiVersion": "qos.waterline.io/v1alpha1", "kind": "Reservation",
            "name": f"pmj-{job}", "uid": reservation["metadata"]["uid"], "controller": True,
        }]  # fmt: skip
        holder = created["metadata"]["name"]
        # the scheduler bound it to the target; the reservation was used there
        assert scheduled_to(kube, holder) == [pool.target]
        assert (reservation["status"]["phase"], reservation["status"]["nodeName"]) == ("Succeeded", pool.target)

        # the pod was evicted (the Eviction API) once the placeholder ran; the
        # ReplicaSet's replacement was bound to the target by the scheduler and runs
        assert [s.path.split("?")[0].rsplit("/", 2)[-2] for s in leader.sent("POST", "/eviction")] == [pool.moving]
        status = job_status(kube, job)
        assert (status["landedNode"], status["targetNode"], status["nodeName"]) == (pool.target,) * 3
        landed = [c for c in status["conditions"] if c["type"] == "LandedOnTarget"]
        assert [(c["status"], c["reason"]) for c in landed] == [("True", "LandedOnTarget")]
        (replacement,) = [p for p in live_pods(kube, pool.ns) if p["spec"].get("nodeName") == pool.target]
        assert scheduled_to(kube, replacement["metadata"]["name"]) == [pool.target]
        nothing_left(kube, pool)

        # Events on the job, the pod and the nodes
        about = {(e["involvedObject"]["kind"], e["involvedObject"]["name"], e["reason"])
                 for name in (job, pool.moving, pool.source, pool.target)
                 for e in events_about(kube, name)}  # fmt: skip
        assert {
            ("PodMigrationJob", job, "WaitForReplacementReady"),
            ("PodMigrationJob", job, "MigrationSucceeded"),
            ("Pod", pool.moving, "WaitForReplacementReady"),
            ("Node", pool.source, "Draining"),
            ("Node", pool.source, "DrainDone"),
            ("Node", pool.target, "MigrationCompleted"),
        } <= about
        samples = leader.controller.metrics.registry.get_sample_value
        assert samples("waterline_controller_moves_total", {"stage": "landed_on_target"}) == 1
        assert samples("waterline_controller_nodes_freed_total") == 1
        removed_by = "the controller" if leader.sent("DELETE", f"/pods/{holder}") else "the scheduler"
        preempted = any(e["reason"] == "Preempted" for e in events_about(kube, holder))
        print(f"\nReservationFirst on the real scheduler: landed on target in {took:.1f}s; "
              f"placeholder removed by {removed_by}"
              f"{' (preempted by the replacement)' if preempted else ''}")  # fmt: skip


def created_placeholders(replica: Replica) -> list[dict[str, Any]]:
    import json

    return [
        json.loads(s.body or b"{}") for s in replica.sent("POST", f"/namespaces/{LEASE_NS}/pods")
        if s.status == 201
    ]  # fmt: skip


def target_of(placeholder: dict[str, Any]) -> str:
    (term,) = placeholder["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]  # fmt: skip
    (field,) = term["matchFields"]
    assert (field["key"], field["operator"]) == ("metadata.name", "In")
    (node,) = field["values"]
    return str(node)


def test_abort_mid_drain_leaves_nothing_behind(kube: RealCluster, sts_pool: Pool, made: Made) -> None:
    with replicas(kube, 1) as (leader,):
        wait_until(leader.controller.is_leader, 30, "leading")
        job = drain_job(made, sts_pool)
        evicted_and_tainted(kube, sts_pool, job)
        merge_patch(kube.api, MIGRATION_JOBS, job,
                    {"metadata": {"annotations": {"qos.waterline.io/abort": "true"}}})  # fmt: skip
        wait_until(lambda: job_status(kube, job).get("phase") == "Aborted", 60, "aborted")
        nothing_left(kube, sts_pool)
        with pytest.raises(KubeNotFound):
            get_object(kube.api, RESERVATIONS, f"pmj-{job}")


def test_ttl_leaves_nothing_behind(kube: RealCluster, sts_pool: Pool, made: Made) -> None:
    with replicas(kube, 1) as (leader,):
        wait_until(leader.controller.is_leader, 30, "leading")
        job = drain_job(made, sts_pool, ttl="20s")
        evicted_and_tainted(kube, sts_pool, job)  # and no replacement comes in time
        wait_until(lambda: job_status(kube, job).get("reason") == "Timeout", 60, "timed out")
        assert job_status(kube, job)["phase"] == "Failed"
        nothing_left(kube, sts_pool)


def test_a_restart_mid_job_collects_what_the_old_leader_left(
    kube: RealCluster, sts_pool: Pool, made: Made
) -> None:
    """The leader stops mid-job and the job is deleted meanwhile, its dependents orphaned
    (``kubectl delete --cascade=orphan``: the garbage collector leaves the Reservation and
    its placeholder): the next leader's own cleanup lifts the taint and deletes the
    placeholder and its PriorityClass."""
    with replicas(kube, 1) as (first,):
        wait_until(first.controller.is_leader, 30, "leading")
        job = drain_job(made, sts_pool)
        evicted_and_tainted(kube, sts_pool, job)
        first.halt()  # the leader stops mid-job ...
    kube.kubectl("delete", "podmigrationjob", job, "--cascade=orphan")  # ... the job goes
    assert len(placeholders(kube)) == 1 and placeholder_classes(kube)
    assert drain_tainted(kube, sts_pool.source)
    with replicas(kube, 1) as (second,):
        wait_until(second.controller.is_leader, 30, "leading")
        nothing_left(kube, sts_pool)
    kube.kubectl("delete", "reservation", f"pmj-{job}", "--ignore-not-found")
