"""Queue preemption, DaemonSet preemption and defragmentation on the real cluster, with
the controller's token. Not enabled in its config, an engine plans and acts on nothing;
enabled, the controller evicts the victims through the Eviction API (defrag: creates its
PodMigrationJobs and stamps the nodes it drains), and the pending pods the victims were
evicted for are then placed by the real scheduler, or not.

A victim frees room, but the scheduler decides who takes it: the victim's own ReplicaSet
makes a replacement at once, and it competes for that room with the pod the victim was
evicted for. A victim whose room went to its own replacement let nothing run: waste.
DaemonSet preemption nominates the pending pod to the node it makes room on before its
victims go (the scheduler then holds the room for it). Queue preemption, whose pods may
need several victims of their own priority (a nominated pod that still does not fit when
the first is gone loses its nomination), holds the room with a placeholder pod and hands
it over when it is all free (``agent/cluster/queues/holding.py``). The tests print, for
each engine, the victims evicted, the pending pods that came to run and the waste.

Queue preemption plans on the whole cluster (capacity is the sum of the Ready nodes'); to
keep the test's queues to the test's node, their pods ask only for an extended resource
that only that node has (``waterline.test/<pool>``, 4 of them). The DaemonSet's pod has
the priority of the pods it must displace, so the scheduler cannot preempt for it and only
Waterline can make it room.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from agent.cluster.queues.holding import OUTCOMES
from agent.cluster.resources import QUEUES
from agent.kube.fetching import get_object
from agent.kube.resources import NODES
from devtools.harness.cluster import RealCluster, unique
from devtools.harness.waiting import wait_until
from tests.integration.controller_env import (
    Made,
    Replica,
    bare_pod,
    live_pods,
    pod_spec,
    pool_node,
    replicas,
    replicaset,
    running_pods,
    wait_running,
)

pytestmark = pytest.mark.integration

QUEUE_LABEL = "qos.waterline.io/queue"


@pytest.fixture
def ns(kube: RealCluster) -> Iterator[str]:
    name = kube.namespace("preempt")
    yield name
    kube.kubectl("delete", "namespace", name, "--wait=false")


def evicted(replica: Replica) -> list[str]:
    """The pods the controller evicted (201 from the Eviction API), in order."""
    return [s.path.split("?")[0].rsplit("/", 2)[-2] for s in replica.sent("POST", "/eviction")
            if s.status == 201]  # fmt: skip


def plans_only(kube: RealCluster, planner: str, config: dict[str, Any]) -> float:
    """A controller with the engine not enabled: what it planned (its gauge) once a few
    rounds went by, having evicted nothing and created no job."""
    with replicas(kube, 1, config=config) as (replica,):
        gauge = replica.controller.metrics.registry.get_sample_value
        wait_until(lambda: (gauge("waterline_controller_planned", {"planner": planner}) or 0) > 0,
                   90, f"a {planner} plan")  # fmt: skip
        rounds = replica.controller.rounds
        wait_until(lambda: replica.controller.rounds >= rounds + 3, 60, "three more rounds")
        assert evicted(replica) == [] and replica.sent("POST", "/podmigrationjobs") == []
        return gauge("waterline_controller_planned", {"planner": planner}) or 0.0


def pending(kube: RealCluster, ns: str, selector: str) -> list[dict[str, Any]]:
    return [p for p in live_pods(kube, ns, selector) if not p["spec"].get("nodeName")]


def test_queue_preemption_evicts_through_the_api_and_the_starving_queue_runs(
    kube: RealCluster, made: Made, ns: str
) -> None:
    slot = f"waterline.test/{ns}"
    node = pool_node(kube, ns, {slot: "4"})
    q1, q2 = queues(made)
    # q1 takes all 4 slots; then q2 asks for 2: it deserves half (2), holds none
    kube.apply([replicaset(ns, "batch-1", ns, 4, {slot: "1"}, labels={QUEUE_LABEL: q1})])
    wait_running(kube, ns, "app=batch-1", 4)
    kube.apply([replicaset(ns, "batch-2", ns, 2, {slot: "1"}, labels={QUEUE_LABEL: q2})])
    wait_until(lambda: len(pending(kube, ns, "app=batch-2")) == 2, 60, "q2 pending")

    # q2's deserved share is two of q1's pods, one for each of its pods, both on the one
    # node: the first pod's victim goes this round, the second's reclaim waits for the
    # first's hand-over (NodeHeld): the gauge counts the victims evicted this round
    planned = plans_only(kube, "queues", {"queues": {"enabled": False}})
    assert planned == 1
    run = reclaim_run(kube, ns, "app=batch-2", 2)
    victims, came, landed, quiet = run.victims, run.came, run.landed, run.quiet
    # Each victim was 1 slot for one 1-slot pod: a victim that let nothing run is waste.
    print(f"\nqueue preemption on the real scheduler: {len(victims)} victims evicted "
          f"({', '.join(victims)}); starving queue's pending pods scheduled: {came} of 2, on "
          f"{', '.join(landed) or '-'}; waste (victims that let nothing run): "
          f"{len(victims) - came}")  # fmt: skip
    assert all(v.startswith("batch-1-") for v in victims)  # only the queue above its share
    # Each pod had the room held for it by a placeholder, then handed over: no victim's
    # replacement took it (the queue-level selection, before: 2, 3 and 17 victims in three
    # runs, 0, 1 and 15 wasted).
    assert came == 2 and landed == [node, node], (victims, landed)
    assert len(victims) == 2 == quiet, victims
    assert run.outcomes == {"placed": 2.0}


def test_an_unreadable_cost_is_one_warning_event_on_the_pod(kube: RealCluster, made: Made, ns: str) -> None:
    """A queue pod whose eviction-cost is not an integer is read as 0 (docs/controller.md)
    and gets one Warning Event ``UnreadableCost`` naming the annotation and the value, not
    one a round. A pod-deletion-cost cannot be unreadable here: the API server refuses a
    pod whose value is not a 32-bit integer, naming the annotation."""
    slot = f"waterline.test/{ns}"
    pool_node(kube, ns, {slot: "4"})
    q1, _ = queues(made)

    def queue_pod(name: str, annotations: dict[str, str]) -> dict[str, Any]:
        pod = bare_pod(ns, name, ns, {slot: "1"})
        pod["metadata"]["labels"][QUEUE_LABEL] = q1
        pod["metadata"]["annotations"] = annotations
        return pod

    refused = kube.kubectl("create", "-f", "-", check=False, input=json.dumps(
        queue_pod("deletion-cost", {"controller.kubernetes.io/pod-deletion-cost": "high"})))  # fmt: skip
    assert refused.returncode != 0 and "controller.kubernetes.io/pod-deletion-cost" in refused.stderr
    kube.apply([queue_pod("eviction-cost", {"scheduling.koordinator.sh/eviction-cost": "1.5"})])
    wait_running(kube, ns, "app=eviction-cost", 1)

    def warned() -> list[dict[str, Any]]:
        return [e for e in events_of(kube, ns, "eviction-cost") if e["reason"] == "UnreadableCost"]

    with replicas(kube, 1, config={"queues": {"enabled": False}}) as (replica,):
        wait_until(warned, 90, "the UnreadableCost event")
        rounds = replica.controller.rounds
        wait_until(lambda: replica.controller.rounds >= rounds + 3, 60, "three more rounds")
    (event,) = warned()
    assert event["type"] == "Warning" and event.get("count", 1) == 1, event
    assert "scheduling.koordinator.sh/eviction-cost='1.5'" in event["message"]


@pytest.mark.parametrize("width", [2, 3])
def test_queue_preemption_holds_the_room_of_several_victims_for_the_pod_they_were_chosen_for(
    kube: RealCluster, made: Made, ns: str, width: int
) -> None:
    """Two nodes of ``width`` slots, q1 on all of them; q2's one pod asks ``width`` slots.
    Counted across the cluster, any ``width`` of q1's pods give q2 its share; only those
    of one node seat its pod, and only if the room they free one by one is not taken by
    q1's replacements or an outsider (pending, 1 slot, the same priority) before the last
    one is gone: a placeholder nominated to the node holds it, then hands it to the pod."""
    slot = f"waterline.test/{ns}"
    nodes = [pool_node(kube, ns, {slot: str(width)}) for _ in range(2)]
    q1, q2 = queues(made)
    kube.apply([replicaset(ns, "batch-1", ns, 2 * width, {slot: "1"}, labels={QUEUE_LABEL: q1})])
    running = wait_running(kube, ns, "app=batch-1", 2 * width)
    where = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in running}
    kube.apply([replicaset(ns, "wide", ns, 1, {slot: str(width)}, labels={QUEUE_LABEL: q2})])
    wait_until(lambda: len(pending(kube, ns, "app=wide")) == 1, 60, "q2 pending")
    (wide,) = pending(kube, ns, "app=wide")
    # and a pod of no queue, the same priority, 1 slot, pending before any victim goes:
    # the scheduler would give it the first victim's room
    kube.apply([replicaset(ns, "outsider", ns, 1, {slot: "1"})])
    wait_until(lambda: len(pending(kube, ns, "app=outsider")) == 1, 60, "the outsider pending")

    assert plans_only(kube, "queues", {"queues": {"enabled": False}}) == width
    run = reclaim_run(kube, ns, "app=wide", 1)
    on = sorted({where.get(v, "?") for v in run.victims})
    wasted = len(run.victims) - width * run.came
    print(f"\nqueue preemption, a {width}-slot pod, on the real scheduler: {len(run.victims)} "
          f"victims evicted ({', '.join(run.victims)}) on {', '.join(on)}; the pod scheduled: "
          f"{'on ' + run.landed[0] if run.came else 'no'}; reclaims {run.outcomes}; wasted "
          f"victims (their room went to something else): {wasted}")  # fmt: skip
    if run.came != 1:  # what the scheduler did, for whoever reads the failure
        print(kube.kubectl("get", "pods", "-n", ns, "-o", "wide").stdout)
        print(kube.kubectl("get", "events", "-n", ns, "--sort-by=.lastTimestamp").stdout)
    # one set, all on one node of the pool: the node the pod is Running on
    assert len(on) == 1 and set(on) <= set(nodes), (run.victims, where)
    assert run.came == 1 and run.landed == on, (run.victims, run.landed)
    assert len(run.victims) == width == run.quiet and wasted == 0, run.victims
    assert run.outcomes == {"placed": 1.0}
    assert running_pods(kube, ns, "app=outsider") == []  # it took no victim's room
    # what was done, on the pod: its room held, handed over, and where it was bound
    reasons = [e["reason"] for e in events_of(kube, ns, wide["metadata"]["name"])
               if e.get("reportingComponent") == "waterline-controller"]  # fmt: skip
    assert reasons[:3] == ["ReclaimHeld", "ReclaimHandedOver", "ReclaimPlaced"], reasons
    # nothing left behind: no placeholder, no placeholder PriorityClass
    wait_until(lambda: not queue_placeholders(kube), 30, "the placeholders gone")
    assert not [c for c in names(kube, "priorityclasses") if c.startswith("waterline-reclaim-")]


def events_of(kube: RealCluster, ns: str, name: str) -> list[dict[str, Any]]:
    out = kube.kubectl("get", "events", "-n", ns, "--field-selector",
                       f"involvedObject.name={name}", "-o", "json").stdout  # fmt: skip
    return sorted(json.loads(out)["items"], key=lambda e: e["metadata"]["creationTimestamp"])


def queue_placeholders(kube: RealCluster) -> list[str]:
    out = kube.kubectl("get", "pods", "-A", "-l", "qos.waterline.io/created-by=queues",
                       "-o", "json").stdout  # fmt: skip
    return [p["metadata"]["name"] for p in json.loads(out)["items"]]


def names(kube: RealCluster, kind: str) -> list[str]:
    out = kube.kubectl("get", kind, "-o", "json").stdout
    return [o["metadata"]["name"] for o in json.loads(out)["items"]]


def queues(made: Made) -> tuple[str, str]:
    q1, q2 = unique("q1"), unique("q2")
    for name in (q1, q2):
        made.add(QUEUES, {"apiVersion": "qos.waterline.io/v1alpha1", "kind": "Queue",
                          "metadata": {"name": name}, "spec": {"weight": 1}})  # fmt: skip
    return q1, q2


@dataclass(frozen=True)
class Run:
    #: Victims evicted (201 from the Eviction API), in order.
    victims: list[str]
    #: Starving pods Running at the end, and their nodes.
    came: int
    landed: list[str]
    #: Victims evicted by the time they ran.
    quiet: int
    #: Queue reclaims ended, by outcome (the controller's metric).
    outcomes: dict[str, float]


def reclaim_run(kube: RealCluster, ns: str, selector: str, count: int) -> Run:
    """Queue preemption enabled until the starving pods run (or 60 s), then five more
    rounds."""
    with replicas(kube, 1, config={"queues": {"enabled": True}}) as (replica,):
        wait_until(lambda: evicted(replica), 90, "the first victims")
        came = wait_share(kube, ns, selector, count, 60)
        quiet = len(evicted(replica))
        rounds = replica.controller.rounds
        wait_until(lambda: replica.controller.rounds >= rounds + 5, 60, "five more rounds")
        victims = evicted(replica)
        gauge = replica.controller.metrics.registry.get_sample_value
        outcomes = {o: v for o in OUTCOMES
                    if (v := gauge("waterline_controller_reclaims_total", {"outcome": o}))}  # fmt: skip
    landed = sorted(p["spec"]["nodeName"] for p in running_pods(kube, ns, selector))
    return Run(victims, came, landed, quiet, outcomes)


def wait_share(kube: RealCluster, ns: str, selector: str, count: int, timeout: float) -> int:
    """How many pods of ``selector`` run once ``count`` do or ``timeout`` passed."""
    with contextlib.suppress(AssertionError):  # fewer than count is the answer, not a failure
        wait_until(lambda: len(running_pods(kube, ns, selector)) >= count, timeout, interval=0.2)
    return len(running_pods(kube, ns, selector))


def daemonset(ns: str, name: str, pool: str, requests: dict[str, str]) -> dict[str, Any]:
    """A DaemonSet on the pool's nodes, at priority 0: the scheduler preempts nothing for it."""
    return {
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": ns},
        "spec": {"selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": pod_spec(pool, requests)}},
    }  # fmt: skip


def test_daemonset_preemption_evicts_through_the_api_and_the_daemon_runs(
    kube: RealCluster, ns: str
) -> None:
    node = pool_node(kube, ns, {"cpu": "2"})  # 1900m after the agent's pod
    kube.apply([replicaset(ns, "filler", ns, 3, {"cpu": "600m"})])
    wait_running(kube, ns, "app=filler", 3)  # 100m left
    kube.apply([daemonset(ns, "logger", ns, {"cpu": "500m"})])
    wait_until(lambda: len(pending(kube, ns, "app=logger")) == 1, 60, "the DaemonSet's pod waits")
    section = {"preemptionStartDelay": 0}
    assert plans_only(kube, "daemonset", {"daemonset": {**section, "enabled": False}}) == 1
    config = {"daemonset": {**section, "enabled": True}}
    with replicas(kube, 1, config=config) as (replica,):
        wait_until(lambda: evicted(replica), 90, "the first victim")
        came = wait_share(kube, ns, "app=logger", 1, 60)
        victims = evicted(replica)
        placed = [p["spec"]["nodeName"] for p in running_pods(kube, ns, "app=logger")]
    print(f"\nDaemonSet preemption on the real scheduler: {len(victims)} victims evicted "
          f"({', '.join(victims)}); the DaemonSet's pod scheduled: {'yes' if came else 'no'}; "
          f"waste: {len(victims) - came}")  # fmt: skip
    assert came == 1 and placed == [node], "the DaemonSet's pod did not run where room was made"
    assert all(v.startswith("filler-") for v in victims)
    # Nominated to its node before the victim went, the pod had the room held for it: the
    # victim's replacement could not take it (before the nomination, 1 run in 4 here evicted
    # 24 fillers for the one pod, 23 of them wasted).
    assert len(victims) == 1, victims


def test_defrag_creates_its_jobs_only_when_enabled(kube: RealCluster, ns: str) -> None:
    """tests/scenarios/defrag-basic.yaml made real, in an extended resource of the pool's
    nodes only (defrag's resourceType) and the test's namespace only (its
    evictableNamespaces): the source's two pods go to the two fullest nodes that stay under
    the protection threshold, and the source is stamped with the plan's time."""
    slot = f"waterline.test/{ns}"
    nodes = [pool_node(kube, ns, {slot: "20"}, labels={"slot": str(i)}) for i in range(4)]
    # (the scenario's CPU, doubled into whole slots): 75%, 80%, 20% and 50% of 20
    placed = {"a0": (0, 8), "a1": (0, 7), "b0": (1, 8), "b1": (1, 8), "p3a": (2, 3), "p3b": (2, 1),
              "d0": (3, 10)}  # fmt: skip
    kube.apply([prefer(replicaset(ns, name, ns, 1, {slot: str(n)}), i) for name, (i, n) in placed.items()])
    for name in placed:
        wait_running(kube, ns, f"app={name}", 1)
    section = {"resourceType": slot, "lowThresholds": 30, "defragmentThresholds": 70,
               "protectionThresholds": 90, "evictableNamespaces": {"include": [ns]}}  # fmt: skip
    assert plans_only(kube, "defrag", {"defrag": {**section, "enabled": False}}) == 2
    assert not stamped(kube, nodes[2])
    try:
        with replicas(kube, 1, config={"defrag": {**section, "enabled": True}}):
            wait_until(lambda: len(defrag_jobs(kube, ns)) == 2, 90, "the defrag jobs")
            wait_until(lambda: stamped(kube, nodes[2]), 30, "the source stamped")
        moves = {(j["spec"]["podRef"]["name"].rsplit("-", 1)[0],
                  j["metadata"]["annotations"]["migration.qos.waterline.io/target-node"])
                 for j in defrag_jobs(kube, ns)}  # fmt: skip
        assert moves == {("p3a", nodes[0]), ("p3b", nodes[1])}
        assert all(j["spec"]["mode"] == "ReservationFirst" for j in defrag_jobs(kube, ns))
        assert [n for n in nodes if stamped(kube, n)] == [nodes[2]]
    finally:
        for job in defrag_jobs(kube, ns):
            kube.kubectl("delete", "podmigrationjob", job["metadata"]["name"], "--ignore-not-found")


def prefer(workload: dict[str, Any], slot: int) -> dict[str, Any]:
    """Its pod goes to the pool's node ``slot`` (a preferred node affinity: the scheduler
    places it there, while defrag may move it to any node of the pool)."""
    term = {"matchExpressions": [{"key": "slot", "operator": "In", "values": [str(slot)]}]}
    workload["spec"]["template"]["spec"]["affinity"] = {"nodeAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "preference": term}]}}  # fmt: skip
    return workload


def defrag_jobs(kube: RealCluster, ns: str) -> list[dict[str, Any]]:
    out = kube.kubectl("get", "podmigrationjobs", "-l", "qos.waterline.io/created-by=defrag",
                       "-o", "json").stdout  # fmt: skip
    return [j for j in json.loads(out)["items"] if j["spec"]["podRef"]["namespace"] == ns]


def stamped(kube: RealCluster, node: str) -> bool:
    annotations = get_object(kube.api, NODES, node)["metadata"].get("annotations") or {}
    return "qos.waterline.io/last-defrag-time" in annotations
