"""The cluster controller against the real cluster, with its own ServiceAccount token: two
replicas, one acts; arbitration writes Failed and waiting statuses; an EvictDirectly job
evicts through the Eviction API and ends Succeeded once the real ReplicaSet controller's
replacement, placed by the real scheduler, runs; a leader stopped cleanly releases the
Lease and the other replica takes over and goes on working; a dry run writes nothing.

The evicted web pod carries a finalizer, as a pod with a long graceful shutdown would: it
stays Terminating, holding its room on a full node, so its replacement waits Pending (and
the job with it) until the test lets the finalizer go."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import structlog

from agent.cluster.resources import MIGRATION_JOBS
from devtools.harness.cluster import RealCluster, unique
from devtools.harness.waiting import wait_until
from tests.integration.controller_env import (
    Made,
    Replica,
    bare_pod,
    job_status,
    leader_of,
    lease,
    live_pods,
    migration_job,
    pod_or_none,
    pool_node,
    release,
    replicas,
    replicaset,
    wait_running,
)

pytestmark = pytest.mark.integration

HOLD = "waterline.test/hold"


@dataclass
class World:
    """Two nodes of the test's pool, three ReplicaSets, a bare pod, and four jobs."""

    ns: str
    web_node: str
    other_node: str
    web: list[str]  # the web pods, the first one the job moves
    api: str
    db: str
    jobs: dict[str, str]  # role -> the job's (cluster-unique) name


@pytest.fixture
def world(kube: RealCluster, made: Made) -> Iterator[World]:
    ns = kube.namespace("ctl")
    # web's node holds its two pods and the agent's, not a third: a replacement waits
    # for the evicted pod to be gone.
    web_node = pool_node(kube, ns, {"cpu": "1200m"}, labels={"role": "web"})
    other_node = pool_node(kube, ns, labels={"role": "other"})
    on_web, on_other = {"pool": ns, "role": "web"}, {"pool": ns, "role": "other"}
    kube.apply([
        replicaset(ns, "web", ns, 2, {"cpu": "500m"}, finalizers=[HOLD], node_selector=on_web),
        # (one replica of one would be all of it: ExpectedReplicas)
        replicaset(ns, "api", ns, 2, node_selector=on_other),
        replicaset(ns, "db", ns, 2, node_selector=on_other),
        bare_pod(ns, "lonely", ns, node_selector=on_other),
    ])  # fmt: skip
    web = sorted(p["metadata"]["name"] for p in wait_running(kube, ns, "app=web", 2))
    api = wait_running(kube, ns, "app=api", 2)[0]["metadata"]["name"]
    db = wait_running(kube, ns, "app=db", 2)[0]["metadata"]["name"]
    wait_running(kube, ns, "app=lonely", 1)
    jobs = {role: f"{ns}-{role}" for role in ("evict", "wait", "ghost", "lonely")}
    # job-evict passes first (higher migration priority); the namespace limit (1) holds
    # job-wait back while it runs.
    for role, pod, priority in (("evict", web[0], 1), ("wait", api, 0),
                                ("ghost", "ghost", 0), ("lonely", "lonely", 0)):  # fmt: skip
        made.add(MIGRATION_JOBS, migration_job(jobs[role], ns, pod, priority=priority))
    try:
        yield World(ns, web_node, other_node, web, api, db, jobs)
    finally:
        for p in live_pods(kube, ns) + [p for p in [pod_or_none(kube, ns, web[0])] if p]:
            if HOLD in (p["metadata"].get("finalizers") or []):
                release(kube, ns, p["metadata"]["name"])
        kube.kubectl("delete", "namespace", ns, "--wait=false")


def evictions(running: list[Replica]) -> dict[str, list[str]]:
    """The pods each replica asked the Eviction API to evict, read from its proxy."""
    return {
        r.identity: [s.path.split("?")[0].rsplit("/", 2)[-2] for s in r.sent("POST", "/eviction")]
        for r in running
    }


def test_two_replicas_one_acts_arbitrates_migrates_and_hands_over(
    kube: RealCluster, world: World, made: Made
) -> None:
    ns, jobs = world.ns, world.jobs
    config = {"arbitration": {"maxMigratingPerNamespace": 1}}
    with replicas(kube, 2, config=config) as running:
        wait_until(lambda: sum(r.controller.is_leader() for r in running) == 1, what="one leader")
        leader = leader_of(running)
        follower = next(r for r in running if r is not leader)
        assert lease(kube)["spec"]["holderIdentity"] == leader.identity

        # arbitration: non-retryable failures are Failed, the namespace limit keeps
        # job-wait Pending while job-evict runs
        wait_until(lambda: job_status(kube, jobs["ghost"]).get("phase") == "Failed")
        assert job_status(kube, jobs["ghost"])["reason"] == "MissingPod"
        wait_until(lambda: job_status(kube, jobs["lonely"]).get("phase") == "Failed")
        assert job_status(kube, jobs["lonely"])["reason"] == "ForbiddenMigratePod"
        # evicted, the pod is Terminating (held by its finalizer); the ReplicaSet's
        # replacement appeared and waits Pending for the room
        wait_until(lambda: "appeared" in job_status(kube, jobs["evict"]).get("message", ""))
        evicting = job_status(kube, jobs["evict"])
        assert (evicting["phase"], evicting["reason"]) == ("Running", "WaitForReplacementReady")
        moved = pod_or_none(kube, ns, world.web[0])
        assert moved is not None and moved["metadata"].get("deletionTimestamp")
        replacement = [p for p in live_pods(kube, ns, "app=web") if p["metadata"]["name"] not in world.web]
        assert [p["status"]["phase"] for p in replacement] == ["Pending"]
        wait_until(lambda: job_status(kube, jobs["wait"]).get("reason") == "MaxMigratingPerNamespace")
        rounds = leader.controller.rounds
        wait_until(lambda: leader.controller.rounds >= rounds + 3)  # rounds go by: still held
        assert job_status(kube, jobs["wait"]) == {
            "phase": "Pending",
            "reason": "MaxMigratingPerNamespace",
            "message": f"namespace {ns} already has 1 pods migrating (max 1)",
        }
        # the eviction went through the subresource, and only the leader acted
        assert evictions(running) == {leader.identity: [world.web[0]], follower.identity: []}
        assert leader.evictions() == 1 and follower.evictions() == 0
        assert leader.controller.rounds > 0 and follower.controller.rounds == 0

        # the pod goes: the scheduler places the replacement in its room, kwok runs it, the
        # job succeeds where it runs; then job-wait passes and moves the api pod
        release(kube, ns, world.web[0])
        wait_until(lambda: job_status(kube, jobs["evict"]).get("phase") == "Succeeded")
        done = job_status(kube, jobs["evict"])
        assert (done["reason"], done["nodeName"]) == ("MigrationCompleted", world.web_node)
        wait_until(lambda: job_status(kube, jobs["wait"]).get("phase") == "Succeeded")
        assert job_status(kube, jobs["wait"])["nodeName"] == world.other_node
        assert pod_or_none(kube, ns, world.api) is None and leader.evictions() == 2
        wait_running(kube, ns, "app=api", 2)  # the ReplicaSet's replacement

        # clean stop: the lease is released, the follower takes over and goes on
        leader.halt()
        assert lease(kube)["spec"].get("holderIdentity") in (None, follower.identity)
        wait_until(follower.controller.is_leader, 10, "the follower leads")
        rounds_before = leader.controller.rounds
        late = made.add(MIGRATION_JOBS, migration_job(f"{ns}-late", ns, world.db))
        wait_until(lambda: job_status(kube, late["metadata"]["name"]).get("phase") == "Succeeded")
        assert follower.evictions() == 1 and pod_or_none(kube, ns, world.db) is None
        assert leader.controller.rounds == rounds_before  # the stopped one did nothing more
        assert evictions([leader, follower]) == {
            leader.identity: [world.web[0], world.api],
            follower.identity: [world.db],
        }


def test_dry_run_plans_and_writes_nothing(kube: RealCluster, world: World) -> None:
    with replicas(kube, 1, dry_run=True) as (replica,):
        wait_until(lambda: replica.controller.rounds >= 3, what="three dry rounds")
        for name in world.jobs.values():
            assert job_status(kube, name) == {}
        assert all(pod_or_none(kube, world.ns, p) for p in world.web)
        # it elects (the Lease is its only write) and writes nothing else
        writes = {(s.method, s.path.split("?")[0]) for s in replica.proxy.writes()}
        assert writes and all("/leases/" in p or p.endswith("/leases") for _, p in writes), writes


def test_bad_config_exits_2_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from agent.cli import main

    for text, field_name in (
        ("arbitration: {maxMigratingPerNode: 0}\n", "config arbitration: maxMigratingPerNode"),
        ("defrag: {enabled: yes-please}\n", "config defrag: enabled"),
        ("defrag: {lowThreshold: 10}\n", "config defrag: lowThreshold"),
        ("daemonset: {strategy: [single, never]}\n", "config daemonset: strategy[1]"),
        ("reservations: {}\n", "config: reservations"),
    ):
        path = tmp_path / "config.yaml"
        path.write_text(text)
        try:
            assert main(["controller", "--config", str(path), "--metrics-addr", "off"]) == 2
        finally:
            structlog.reset_defaults()  # it logged into capsys's stream, closed after the test
        assert field_name in capsys.readouterr().err


def test_command_runs_leads_and_releases_on_sigterm(
    kube: RealCluster, made: Made, tmp_path: Path
) -> None:
    """``waterline controller`` with the controller's token: it leads under --identity,
    its rounds fail a job for a pod that does not exist, and SIGTERM releases the Lease."""
    ghost = made.add(MIGRATION_JOBS, migration_job(unique("ghost"), "default", "no-such-pod"))
    name, identity = ghost["metadata"]["name"], unique("cli")
    config = tmp_path / "config.yaml"
    config.write_text("arbitration: {processQueueQPS: 5}\ndefrag: {enabled: false}\n")
    log = tmp_path / "controller.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(  # noqa: S603
            [sys.executable, "-m", "agent", "controller",
             "--kubeconfig", str(kube.controller_kubeconfig()), "--interval", "0.3",
             "--identity", identity, "--config", str(config),
             "--metrics-addr", "127.0.0.1:0", "--log-format", "json"],
            stdout=subprocess.DEVNULL, stderr=out,
        )  # fmt: skip
    try:
        wait_until(lambda: job_status(kube, name).get("phase") == "Failed", 60, "the job failed")
        assert job_status(kube, name)["reason"] == "MissingPod"
        assert lease(kube)["spec"]["holderIdentity"] == identity
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    text = log.read_text(errors="replace")
    assert proc.returncode == 0, text[-3000:]
    assert not lease(kube)["spec"].get("holderIdentity")  # released for the next replica
    lines = [json.loads(x) for x in text.splitlines() if x.startswith("{")]
    refused = [e for e in lines if e.get("status") == 403 or "Forbidden" in str(e.get("error", ""))]
    assert refused == [], refused  # (a port number with 403 in it is not a refusal)
