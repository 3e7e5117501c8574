"""Leadership on the real cluster's Lease, measured: the figures are printed, the
assertions are about what users rely on (one writer at a time, nothing written twice).

* Two ``waterline controller`` processes (the production election: a 15 s lease, a 10 s
  renew deadline, 2 s retries), each with the controller's token and its own fault proxy
  (so every write is attributed to the process that sent it, with the time its answer
  came back). While the test feeds them work (a job for a missing pod every half second:
  each is a status write for the leader), the leader is
  - cut off from its Lease (the proxy fails every Lease request, its other requests still
    pass: the worst partition, a leader that can still write): it must stop writing before
    its lease runs out, and the other takes over once it has;
  - then killed with SIGKILL while leading: the other takes over within the lease duration
    after its last renewal.
  Takeover seconds and the writes each old leader made after its lease ran out are
  printed.
* The kube-apiserver is restarted (kill -9, start) under a running controller: its watches
  come back (the relists are counted), it leads again, the work it had in hand goes on,
  and no write is sent twice.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from agent.cluster.resources import MIGRATION_JOBS
from agent.model.timeutil import parse_time
from devtools.harness.cluster import RealCluster, unique
from devtools.harness.faultproxy import Fault, FaultProxy, Seen
from devtools.harness.waiting import wait_until
from tests.integration.controller_env import (
    LEASE_NAME,
    Made,
    job_status,
    lease,
    migration_job,
    pool_node,
    release,
    replicas,
    replicaset,
    wait_running,
)

pytestmark = pytest.mark.integration

LEASE_PATH = f"/leases/{LEASE_NAME}"
#: The production election (agent.kube.leases.ElectionArgs's defaults, which
#: deploy/controller.yaml runs with).
LEASE_SECONDS = 15


@dataclass
class Process:
    """``waterline controller`` as a subprocess, behind its own proxy."""

    identity: str
    proxy: FaultProxy
    proc: subprocess.Popen[bytes]
    log: Path

    @classmethod
    def start(cls, kube: RealCluster, folder: Path) -> Process:
        identity = unique("proc")
        proxy = FaultProxy(kube.server, kube.ca).start()
        log = folder / f"{identity}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(  # noqa: S603
                [sys.executable, "-m", "agent", "controller",
                 "--kubeconfig", str(kube.controller_kubeconfig(server=proxy.url)),
                 "--identity", identity, "--interval", "0.5",
                 "--metrics-addr", "127.0.0.1:0", "--log-format", "json"],
                stdout=subprocess.DEVNULL, stderr=out,
            )  # fmt: skip
        return cls(identity, proxy, proc, log)

    def writes(self, after: float = 0.0) -> list[Seen]:
        """Writes the server accepted (2xx) other than the Lease's, answered after ``after``."""
        return [s for s in self.proxy.writes() if LEASE_PATH not in s.path
                and 200 <= s.status < 300 and s.at > after]  # fmt: skip

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proxy.stop()

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-2000:]


@dataclass
class LeaseLog:
    """The Lease as seen every 0.1 s: (holder, renewTime, leaseDurationSeconds)."""

    kube: RealCluster
    seen: list[tuple[str, float, int]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self.stop.wait(0.1):
            try:
                spec = lease(self.kube)["spec"]
            except Exception:  # noqa: BLE001,S112 - the server restarting: look again
                continue
            entry = (spec.get("holderIdentity") or "", parse_time(spec.get("renewTime")) or 0.0,
                     int(spec.get("leaseDurationSeconds") or 0))  # fmt: skip
            if not self.seen or self.seen[-1] != entry:
                self.seen.append(entry)

    def holder(self) -> str:
        return self.seen[-1][0] if self.seen else ""

    def last_renewal(self, holder: str) -> tuple[float, int]:
        return max((t, d) for h, t, d in self.seen if h == holder)

    def acquired(self, holder: str, after: float) -> float:
        """When ``holder`` took the Lease (its first renewal after ``after``)."""
        return min(t for h, t, _ in self.seen if h == holder and t > after)


def feed_jobs(made: Made, stop: threading.Event) -> None:
    """A job for a pod that does not exist every half second: work for whoever leads."""
    while not stop.wait(0.5):
        try:
            made.add(MIGRATION_JOBS, migration_job(unique("ghost"), "default", "no-such-pod"))
        except Exception:  # noqa: BLE001,S112 - the server restarting: next one
            continue


def test_failover_two_processes_partition_then_kill_9(
    kube: RealCluster, made: Made, tmp_path: Path
) -> None:
    leases = LeaseLog(kube)
    watcher = threading.Thread(target=leases.run, daemon=True)
    watcher.start()
    feeding = threading.Event()
    feeder = threading.Thread(target=feed_jobs, args=(made, feeding), daemon=True)
    feeder.start()
    procs = [Process.start(kube, tmp_path), Process.start(kube, tmp_path)]
    by_id = {p.identity: p for p in procs}
    figures: list[str] = []
    try:
        wait_until(lambda: leases.holder() in by_id, 60, "a leader")
        first = by_id[leases.holder()]
        second = next(p for p in procs if p is not first)
        wait_until(lambda: first.writes(), 60, "the leader at work")

        # 1. the leader loses its Lease, not the rest of the API
        cut = time.time()
        first.proxy.inject(Fault(LEASE_PATH, method="", status=503, times=10**6))
        wait_until(lambda: leases.holder() == second.identity, 3 * LEASE_SECONDS,
                   "the follower takes over")  # fmt: skip
        renewed, duration = leases.last_renewal(first.identity)
        expiry = renewed + duration
        took = leases.acquired(second.identity, renewed) - renewed
        late = first.writes(after=expiry)
        after_cut = first.writes(after=cut)
        wait_until(lambda: second.writes(after=expiry), 60, "the new leader at work")
        figures.append(
            f"partition (Lease requests of the leader fail): takeover {took:.1f}s after its "
            f"last renewal (lease {duration}s); its writes after the cut: {len(after_cut)}, "
            f"the last {max((s.at for s in after_cut), default=cut) - renewed:+.1f}s from that "
            f"renewal; after its lease ran out: {len(late)}"
        )
        assert late == [], [(s.method, s.path, s.at - expiry) for s in late]
        first.proxy.clear()  # the partition heals: the old leader follows now

        # 2. kill -9 the leader
        healed = time.time()
        wait_until(lambda: second.writes(after=healed), 30, "the leader at work")
        killed = time.time()
        second.proc.kill()
        second.proc.wait(timeout=10)
        wait_until(lambda: leases.holder() == first.identity, 3 * LEASE_SECONDS,
                   "the follower takes over")  # fmt: skip
        renewed, duration = leases.last_renewal(second.identity)
        taken = leases.acquired(first.identity, renewed)
        late = second.writes(after=renewed + duration)
        wait_until(lambda: first.writes(after=taken), 60, "the new leader at work")
        figures.append(
            f"kill -9 of the leader: takeover {taken - killed:.1f}s after the kill, "
            f"{taken - renewed:.1f}s after its last renewal (lease {duration}s); "
            f"its writes after its lease ran out: {len(late)}"
        )
        assert late == []
    finally:
        feeding.set()
        for p in procs:
            p.stop()
        leases.stop.set()
    print("\nleader election on the real Lease, two processes:\n  " + "\n  ".join(figures))
    for p in procs:
        assert not [s for s in p.proxy.requests if s.status in (401, 403)], p.tail()


def test_an_apiserver_restart_under_a_running_controller(
    kube: RealCluster, made: Made
) -> None:
    """Before the restart an eviction is in hand (its pod held Terminating by a finalizer,
    the job waits for the replacement); after it, the watches relist, the controller leads
    again, finishes that job and takes a new one, and no write was sent twice."""
    ns = kube.namespace("restart")
    pool_node(kube, ns, {"cpu": "1200m"})
    kube.apply([replicaset(ns, "web", ns, 2, {"cpu": "500m"}, finalizers=["waterline.test/hold"])])
    web = sorted(p["metadata"]["name"] for p in wait_running(kube, ns, "app=web", 2))
    before = made.add(MIGRATION_JOBS, migration_job(unique("before"), ns, web[0]))["metadata"]["name"]
    try:
        with replicas(kube, 1) as (replica,):
            wait_until(replica.controller.is_leader, 30, "leading")
            wait_until(lambda: job_status(kube, before).get("reason") == "WaitForReplacementReady",
                       60, "the eviction in hand")  # fmt: skip
            restarted = time.time()
            kube.restart_apiserver()
            back = time.time()
            release(kube, ns, web[0])  # the pod goes: its replacement can run
            wait_until(lambda: job_status(kube, before).get("phase") == "Succeeded", 90, "done")
            after = made.add(MIGRATION_JOBS, migration_job(unique("after"), ns, "no-such-pod"))
            wait_until(lambda: job_status(kube, after["metadata"]["name"]).get("phase") == "Failed",
                       60, "a job made after the restart")  # fmt: skip
            assert replica.controller.is_leader()
            seen = list(replica.proxy.requests)
            # Right after its start the server refuses every token for a moment (403: its
            # authorizer has not loaded RBAC yet, though /readyz says ok): forgiven for
            # 10 s after it is back, never later.
            refused = [s for s in seen if s.status in (401, 403)]
            replica.forgive_denied_before = back + 10
    finally:
        for pod in web:
            release(kube, ns, pod)
        kube.kubectl("delete", "namespace", ns, "--wait=false")

    lists = Counter(resource(s) for s in seen if s.method == "GET" and not s.watch
                    and s.at > restarted and s.status == 200 and is_collection(s))  # fmt: skip
    gone = Counter(resource(s) for s in seen if s.status == 410 and s.at > restarted)
    rewatched = {resource(s) for s in seen if s.watch and s.status == 200 and s.at > restarted}
    stale = sum(1 for s in seen if s.status == 409 and s.at > restarted)
    watched = {resource(s) for s in seen if s.watch}
    failed = sum(1 for s in seen if restarted < s.at and s.status >= 500)
    evictions = [s.path for s in seen if s.method == "POST" and s.path.split("?")[0].endswith("/eviction")]
    window = f"{max(s.at for s in refused) - min(s.at for s in refused):.2f}s" if refused else "none"
    print(f"\nkube-apiserver restart under the controller: back in {back - restarted:.1f}s; "
          f"{failed} requests failed meanwhile, {len(refused)} refused 403 (for {window}, "
          f"before its RBAC was loaded); relists after it: "
          + ", ".join(f"{r} {n}" for r, n in sorted(lists.items()))
          + (f"; 410 Gone: {dict(gone)}" if gone else "; no 410 Gone")
          + f"; watches open again: {len(rewatched)} of {len(watched)}"
          + (f" (not yet: {', '.join(sorted(watched - rewatched))})" if watched - rewatched else "")
          + "; writes refused as decided on a stale "
          f"snapshot (409): {stale}; evictions sent: {len(evictions)}")  # fmt: skip
    assert rewatched >= {"pods", "podmigrationjobs", "nodes"}
    assert len(evictions) == 1  # the eviction in hand was not sent again
    assert lists, "the watches relisted after the restart"
    twice = repeated_writes(seen)
    assert twice == [], [(s.method, s.path, round(s.at - restarted, 2), s.status, s.body)
                         for s in seen if (s.method, s.path.split("?")[0]) in twice]  # fmt: skip


def resource(seen: Seen) -> str:
    parts = seen.path.split("?")[0].strip("/").split("/")
    if "namespaces" in parts and len(parts) > parts.index("namespaces") + 2:
        parts = parts[: parts.index("namespaces")] + parts[parts.index("namespaces") + 2 :]
    return parts[-1]


def is_collection(seen: Seen) -> bool:
    """A list (of a collection, maybe with a field selector naming one object)."""
    path = seen.path.split("?")[0].strip("/").split("/")
    group_len = 2 if path[0] == "api" else 3
    rest = path[group_len:]
    if rest[:1] == ["namespaces"] and len(rest) >= 3:
        rest = rest[2:]
    return len(rest) == 1


def repeated_writes(seen: list[Seen]) -> list[tuple[str, str]]:
    """Writes (not the Lease's) sent twice with the same body to the same object: the
    same status, the same Event, the same eviction."""
    counts = Counter(
        (s.method, s.path.split("?")[0], s.body or b"")
        for s in seen
        if s.method != "GET" and LEASE_PATH not in s.path and 200 <= s.status < 300
    )
    return [(m, p) for (m, p, _), n in counts.items() if n > 1]

