"""The cluster controller over real HTTP against the dev server: two replicas, one acts;
arbitration writes Failed and waiting statuses; an EvictDirectly job evicts through the
eviction subresource and ends Succeeded once a replacement runs; a leader stopped cleanly
releases the lease and the other replica takes over and goes on working."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
import yaml

from agent.cluster.access import controller_access
from agent.cluster.config import parse_config
from agent.cluster.controller import Controller, ControllerDeps
from agent.cluster.resources import WATCHED
from agent.kube.client import ClientArgs, build_api
from agent.kube.creating import create
from agent.kube.errors import KubeNotFound
from agent.kube.fetching import get_object
from agent.kube.leases import ElectionArgs
from agent.kube.resources import LEASES, NODES, PODS
from agent.kube.watching import WatchArgs
from agent.model.timeutil import format_time
from devtools.apiserver.testing import Running, serve
from tests.integration.controller_env import crds
from tests.waiting import wait_until

pytestmark = pytest.mark.integration

ELECTION = ElectionArgs(lease_duration=2, renew_deadline=1.5, retry_period=0.1, jitter=0.2)
INTERVAL = 0.3
LEASE_NS, LEASE_NAME = "waterline-system", "waterline-controller"


def node(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "status": {
            "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def replicaset(name: str, replicas: int = 4) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": name, "namespace": "default", "uid": f"rs-{name}"},
        "spec": {"replicas": replicas},
    }


def pod(name: str, owner: str | None, node_name: str = "n1", age: float = 0.0) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "default", "labels": {"app": owner or name}}
    if age:
        meta["creationTimestamp"] = format_time(time.time() - age)
    if owner:
        meta["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": owner,
                "uid": f"rs-{owner}",
                "controller": True,
            }
        ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "nodeName": node_name,
            "containers": [{"name": "main", "resources": {"requests": {"cpu": "500m"}}}],
        },
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }


def job(name: str, pod_name: str, created: float) -> dict[str, Any]:
    return {
        "apiVersion": "qos.waterline.io/v1alpha1",
        "kind": "PodMigrationJob",
        "metadata": {"name": name, "creationTimestamp": format_time(created)},
        "spec": {"podRef": {"namespace": "default", "name": pod_name}, "mode": "EvictDirectly"},
    }


class Replica:
    def __init__(
        self,
        env: Running,
        identity: str,
        config: dict[str, Any] | None = None,
        dry_run: bool = False,
    ) -> None:
        # The controller's access table enforced: an undeclared call fails the test.
        self.access = controller_access(LEASE_NS, LEASE_NAME)
        self.api = build_api(str(env.kubeconfig), args=ClientArgs(pool_size=32), access=self.access)
        deps = ControllerDeps(
            self.api,
            identity,
            lease_namespace=LEASE_NS,
            lease_name=LEASE_NAME,
            election=ELECTION,
            watch_args=WatchArgs(watch_timeout_seconds=30),
        )
        self.controller = Controller(
            deps,
            parse_config(config or {"arbitration": {"maxMigratingPerNamespace": 1}}),
            interval=INTERVAL,
            dry_run=dry_run,
        )
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.controller.run, args=(self.stop,), daemon=True)
        self.thread.start()

    def evictions(self) -> float:
        value = self.controller.metrics.registry.get_sample_value(
            "waterline_controller_evictions_total", {"source": "migration", "result": "evicted"}
        )
        return value or 0.0

    def halt(self) -> None:
        self.stop.set()
        self.thread.join(15)
        assert not self.thread.is_alive()
        self.api.close()
        assert self.access.refused == [], "calls outside agent/cluster/access.py"


@pytest.fixture
def cluster() -> Iterator[Running]:
    now = time.time()
    objects: list[dict[str, Any]] = crds()
    objects += [
        node("n1"),
        node("n2"),
        replicaset("web"),
        replicaset("api"),
        replicaset("db"),
        pod("web-1", "web", age=3600),
        pod("web-2", "web", age=3600),
        pod("api-1", "api", node_name="n2", age=3600),
        pod("db-1", "db", node_name="n2", age=3600),
        pod("lonely", None, age=3600),
        job("job-evict", "web-1", now - 10),  # newer than job-wait: passes first
        job("job-wait", "api-1", now - 20),
        job("job-ghost", "ghost", now - 30),
        job("job-lonely", "lonely", now - 40),
    ]
    with serve(objects) as env:
        for resource in WATCHED:
            env.server.store.register(resource)
        yield env


def status(env: Running, name: str) -> dict[str, Any]:
    raw = env.api.request("GET", f"/apis/qos.waterline.io/v1alpha1/podmigrationjobs/{name}")
    return raw.get("status") or {}


def pod_exists(env: Running, name: str) -> bool:
    try:
        get_object(env.api, PODS, name, "default")
        return True
    except KubeNotFound:
        return False


def test_two_replicas_one_acts_arbitrates_migrates_and_hands_over(cluster: Running) -> None:
    env = cluster
    replicas = [Replica(env, "c1"), Replica(env, "c2")]
    try:
        wait_until(lambda: sum(r.controller.is_leader() for r in replicas) == 1)
        leader = next(r for r in replicas if r.controller.is_leader())
        follower = next(r for r in replicas if r is not leader)

        # arbitration: non-retryable failures are Failed, the namespace limit keeps job-wait
        # Pending while job-evict runs
        wait_until(lambda: status(env, "job-ghost").get("phase") == "Failed")
        assert status(env, "job-ghost")["reason"] == "MissingPod"
        wait_until(lambda: status(env, "job-lonely").get("phase") == "Failed")
        assert status(env, "job-lonely")["reason"] == "ForbiddenMigratePod"
        wait_until(lambda: status(env, "job-evict").get("reason") == "WaitForReplacementReady")
        assert status(env, "job-evict")["phase"] == "Running"
        time.sleep(3 * INTERVAL)  # a few more rounds: still waiting, nothing else evicted
        assert status(env, "job-wait") == {
            "phase": "Pending",
            "reason": "MaxMigratingPerNamespace",
            "message": "namespace default already has 1 pods migrating (max 1)",
        }

        # the eviction went through the subresource, and only the leader acted
        assert not pod_exists(env, "web-1") and pod_exists(env, "api-1")
        evictions = [
            p.split("?")[0]
            for meth, p in env.server.requests
            if meth == "POST" and p.split("?")[0].endswith("/eviction")
        ]
        assert [p.rsplit("/", 2)[-2] for p in evictions] == ["web-1"]
        assert leader.evictions() == 1 and follower.evictions() == 0
        assert leader.controller.rounds > 0 and follower.controller.rounds == 0
        for _ in range(10):  # exactly one leader all along
            assert sum(r.controller.is_leader() for r in replicas) == 1
            time.sleep(0.02)

        # the ReplicaSet's replacement runs: the job succeeds, and job-wait goes next
        create(env.api, PODS, pod("web-1-x7k2p", "web", node_name="n2"))
        wait_until(lambda: status(env, "job-evict").get("phase") == "Succeeded")
        assert status(env, "job-evict")["reason"] == "MigrationCompleted"
        assert status(env, "job-evict")["nodeName"] == "n2"
        wait_until(lambda: status(env, "job-wait").get("reason") == "WaitForReplacementReady")
        assert not pod_exists(env, "api-1") and leader.evictions() == 2

        # clean stop: the lease is released and the follower takes over and goes on
        leader.halt()
        lease = get_object(env.api, LEASES, LEASE_NAME, LEASE_NS)
        assert lease["spec"].get("holderIdentity") in (None, follower.controller.identity)
        wait_until(lambda: follower.controller.is_leader(), timeout=5)
        rounds_before = leader.controller.rounds
        create(env.api, PODS, pod("api-1-r8t5w", "api", node_name="n1"))
        wait_until(lambda: status(env, "job-wait").get("phase") == "Succeeded")
        env.api.request(
            "POST",
            "/apis/qos.waterline.io/v1alpha1/podmigrationjobs",
            body=job("job-late", "db-1", time.time()),
        )
        wait_until(lambda: status(env, "job-late").get("reason") == "WaitForReplacementReady")
        assert follower.evictions() == 1 and not pod_exists(env, "db-1")
        assert leader.controller.rounds == rounds_before  # the stopped one did nothing more
    finally:
        for r in replicas:
            r.stop.set()
        for r in replicas:
            r.halt()


def test_dry_run_plans_and_writes_nothing(cluster: Running) -> None:
    env = cluster
    replica = Replica(env, "dry", dry_run=True)
    try:
        wait_until(lambda: replica.controller.rounds >= 3)
        for name in ("job-evict", "job-wait", "job-ghost", "job-lonely"):
            assert status(env, name) == {}
        assert pod_exists(env, "web-1") and pod_exists(env, "web-2")
        assert not any(p.split("?")[0].endswith("/eviction") for _, p in env.server.requests)
    finally:
        replica.halt()


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


def test_command_runs_leads_and_releases_on_sigterm(cluster: Running, tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys

    config = tmp_path / "config.yaml"
    config.write_text("arbitration: {processQueueQPS: 5}\ndefrag: {enabled: false}\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "agent", "controller", "--kubeconfig", str(cluster.kubeconfig)]
        + ["--interval", "0.3", "--identity", "cli", "--config", str(config)]
        + ["--metrics-addr", "127.0.0.1:0", "--log-format", "json"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_until(lambda: status(cluster, "job-ghost").get("phase") == "Failed", timeout=20)
        lease = get_object(cluster.api, LEASES, LEASE_NAME, LEASE_NS)
        assert lease["spec"]["holderIdentity"] == "cli"
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err.decode()[-2000:]
    lease = get_object(cluster.api, LEASES, LEASE_NAME, LEASE_NS)
    assert not lease["spec"].get("holderIdentity")  # released for the next replica


SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"


@pytest.mark.parametrize("enabled", [True, False])
@pytest.mark.parametrize(
    ("scenario", "section", "evicted"),
    [
        ("defrag-basic", "defrag", []),
        ("queues-basic", "queues", ["q1-low"]),
        ("daemonset-single", "daemonset", ["r3"]),
    ],
)
def test_planners_act_only_when_enabled(
    scenario: str, section: str, evicted: list[str], enabled: bool
) -> None:
    from agent.model.store import ObjectStore
    from agent.model.timeutil import parse_time

    doc = yaml.safe_load((SCENARIOS / f"{scenario}.yaml").read_text())
    config = dict(doc.get("config") or {})
    config[section] = {**(config.get(section) or {}), "enabled": enabled}
    with serve(crds() + doc["objects"]) as env:
        deps = ControllerDeps(env.api, "solo", election=ELECTION)
        ctl = Controller(deps, parse_config(config), interval=60)
        ctl.writer.time_left = lambda: 10.0  # a round without the election threads
        now = parse_time(doc["now"])
        assert now is not None
        ctl.round(ObjectStore.from_dicts(doc["objects"]), now)
        jobs = env.api.request("GET", "/apis/qos.waterline.io/v1alpha1/podmigrationjobs")["items"]
        for name in evicted:
            assert pod_exists(env, name) is not enabled
        if section != "defrag":
            assert jobs == []
            return
        moved = {
            (
                j["spec"]["podRef"]["name"],
                j["metadata"]["annotations"]["migration.qos.waterline.io/target-node"],
            )
            for j in jobs
        }
        assert moved == ({("p3a", "n1"), ("p3b", "n2")} if enabled else set())
        assert all(
            j["metadata"]["labels"] == {"qos.waterline.io/created-by": "defrag"} for j in jobs
        )
        source = get_object(env.api, NODES, "n3")
        stamped = (source["metadata"].get("annotations") or {}).get(
            "qos.waterline.io/last-defrag-time"
        )
        assert (stamped == "2026-01-01T00:00:00Z") if enabled else stamped is None
