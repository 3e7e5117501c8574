"""The cluster controller runtime: warm caches on every replica, work on the leader only.

Every replica lists and watches nodes, pods, namespaces, PodDisruptionBudgets, workloads
(Deployments, ReplicaSets, StatefulSets, Jobs), PriorityClasses and the three CRs
(PodMigrationJobs, Reservations, Queues) into one slim cache, and runs for the Lease; a
follower does nothing else, so a fail-over starts from warm caches. The leader, every
``interval`` seconds, takes an ObjectStore snapshot of the cache and runs one round:

1. every non-terminal job takes one migration step (``agent/cluster/migrator.py``):
   Running ones move on, and Pending ones may time out, be paused or aborted;
2. one arbitration round over the jobs (``arbitrate``): failed jobs get phase Failed with
   the reason, waiting ones stay Pending with the retryable reason in status; passed jobs
   enter the rate-limited queue, which the loop drains at ``processQueueQPS`` between
   rounds, starting each job through the migrator (re-checked against the cache first);
3. defragmentation, queue preemption and DaemonSet preemption are planned and logged; their
   decisions are carried out only when enabled in the config.

Every write goes through ``GuardedWriter``, which checks ``is_leader()`` right before it:
a leader whose lease lapsed raises ``NotLeader`` on its next write and the round ends
there. ``--dry-run`` plans and logs, and writes nothing. A round's own writes (statuses,
reservations) are read back through the watches, never assumed.

Where DESIGN.md is silent: the queue holds the latest round's passed jobs only (a job
passed in an earlier round but not started yet is re-arbitrated, so limits hold against
what started in between); status writes happen only when phase, reason, message or node
changed, so thousands of waiting jobs cost no writes per round; an invalid job is logged
and skipped (the CRD schema already refuses most). PriorityClasses, namespaces and PDBs
are optional (``OPTIONAL``): without RBAC to read them their watches keep failing and
the leader acts all the same.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, cast

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from agent.cluster import daemonset, defrag, queues
from agent.cluster import migration as m
from agent.cluster.arbitration import ArbitrationArgs, arbitrate
from agent.cluster.migrator import (
    CREATED_BY_LABEL,
    TARGET_NODE_ANNOTATION,
    ClusterView,
    MigrationExecutor,
)
from agent.cluster.rate_queue import RateLimitedQueue
from agent.cluster.reservation import holds_by_node
from agent.errors import InvalidObject
from agent.kube import evicting
from agent.kube.cache import DEFAULT_PARSERS, Cache
from agent.kube.client import KubeApi
from agent.kube.creating import create, delete
from agent.kube.errors import KubeConflict, KubeError, KubeNotFound
from agent.kube.fetching import Selectors
from agent.kube.leases import ElectionArgs, KubeLeases, LeaderElector
from agent.kube.patching import merge_patch
from agent.kube.resources import NAMESPACES, NODES, PDBS, PODS, QOS_GROUP, QOS_VERSION, Resource
from agent.kube.watching import Informers, WatchArgs, start_watches
from agent.model.objects import Namespace, Node, Pod, PodDisruptionBudget, Workload, parse_workload
from agent.model.store import ObjectStore
from executors.actuators import EvictionResult

# -- what the controller reads and writes ------------------------------------------------
DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment", True, True)
REPLICASETS = Resource("apps", "v1", "replicasets", "ReplicaSet", True, True)
STATEFULSETS = Resource("apps", "v1", "statefulsets", "StatefulSet", True, True)
JOBS = Resource("batch", "v1", "jobs", "Job", True, True)
PRIORITY_CLASSES = Resource("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False)
MIGRATION_JOBS = Resource(QOS_GROUP, QOS_VERSION, "podmigrationjobs", m.KIND, False, True)
RESERVATIONS = Resource(QOS_GROUP, QOS_VERSION, "reservations", "Reservation", False, True)
QUEUES = Resource(QOS_GROUP, QOS_VERSION, "queues", "Queue", False, True)

WORKLOADS = (DEPLOYMENTS, REPLICASETS, STATEFULSETS, JOBS)
WATCHED: tuple[Resource, ...] = (
    NODES,
    PODS,
    NAMESPACES,
    PDBS,
    *WORKLOADS,
    PRIORITY_CLASSES,
    MIGRATION_JOBS,
    RESERVATIONS,
    QUEUES,
)
#: Watched for the snapshot but not required before the leader acts: no cluster engine
#: reads them today (budgets are enforced by the Eviction API itself; priorityClassName
#: counts as 0 without them), and deploy/rbac.yaml does not grant them yet.
OPTIONAL = (PRIORITY_CLASSES, NAMESPACES, PDBS)
#: Kinds that must have listed once before the leader acts.
REQUIRED_KINDS = tuple(r.kind for r in WATCHED if r not in OPTIONAL)
PARSERS = {**DEFAULT_PARSERS, **{r.kind: parse_workload for r in WORKLOADS}}

CONFIG_KIND = "ControllerConfig"
DEFRAG_CREATOR = "defrag"


# -- config --------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ControllerConfig:
    """The ``--config`` file: the engines' own sections, each with ``enabled`` for the
    three planners whose decisions the controller may carry out (off by default: a new
    install only reports what it would do)."""

    arbitration: ArbitrationArgs = field(default_factory=ArbitrationArgs)
    defrag: defrag.DefragArgs = field(default_factory=defrag.DefragArgs)
    defrag_enabled: bool = False
    queues: queues.QueueArgs = field(default_factory=queues.QueueArgs)
    queues_enabled: bool = False
    daemonset: daemonset.DaemonSetArgs = field(default_factory=daemonset.DaemonSetArgs)
    daemonset_enabled: bool = False


_PLANNERS = ("defrag", "queues", "daemonset")


def parse_config(raw: object) -> ControllerConfig:
    """Parse the config mapping; InvalidObject names the bad field."""
    if raw is None:
        return ControllerConfig()
    if not isinstance(raw, Mapping):
        raise InvalidObject(CONFIG_KIND, "", "", "must be a mapping of sections")
    unknown = sorted(set(map(str, raw)) - {"arbitration", *_PLANNERS})
    if unknown:
        raise InvalidObject(
            CONFIG_KIND,
            "",
            unknown[0],
            f"is not a known section (known: arbitration, {', '.join(_PLANNERS)})",
        )
    sections: dict[str, dict[str, Any]] = {}
    enabled: dict[str, bool] = {}
    for name in ("arbitration", *_PLANNERS):
        section = raw.get(name)
        if section is None:
            section = {}
        if not isinstance(section, Mapping):
            raise InvalidObject(CONFIG_KIND, "", name, "must be a mapping")
        section = dict(section)
        if name in _PLANNERS:
            flag = section.pop("enabled", False)
            if not isinstance(flag, bool):
                raise InvalidObject(
                    CONFIG_KIND, "", f"{name}.enabled", f"must be true or false, got {flag!r}"
                )
            enabled[name] = flag
        sections[name] = section
    return ControllerConfig(
        arbitration=ArbitrationArgs.from_config(sections["arbitration"]),
        defrag=defrag.parse_args(sections["defrag"]),
        defrag_enabled=enabled["defrag"],
        queues=queues.parse_args(sections["queues"]),
        queues_enabled=enabled["queues"],
        daemonset=daemonset.parse_args(sections["daemonset"]),
        daemonset_enabled=enabled["daemonset"],
    )


# -- metrics -------------------------------------------------------------------------------
class ControllerMetrics:
    """The controller's metrics in their own registry; ``render`` for the metrics server."""

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.leader = Gauge(
            "waterline_controller_leader", "1 while this replica holds the lease.", registry=r
        )
        self.rounds = Counter(
            "waterline_controller_rounds",
            "Leader rounds by outcome (ok, failed, lost_lease).",
            ["outcome"],
            registry=r,
        )
        self.round_seconds = Histogram(
            "waterline_controller_round_duration_seconds",
            "Time one leader round took (snapshot, migrations, arbitration, planners).",
            buckets=(0.01, 0.05, 0.1, 0.5, 1, 2, 5, 10, 30, 60),
            registry=r,
        )
        self.arbitration = Counter(
            "waterline_controller_arbitration_jobs",
            "Jobs per arbitration verdict (passed, waiting, failed).",
            ["verdict"],
            registry=r,
        )
        self.migrations = Counter(
            "waterline_controller_migration_transitions",
            "Migration job phase changes, by phase.",
            ["phase"],
            registry=r,
        )
        self.evictions = Counter(
            "waterline_controller_evictions",
            "Evictions by source (migration, queues, daemonset) and result.",
            ["source", "result"],
            registry=r,
        )
        self.planned = Gauge(
            "waterline_controller_planned",
            "Last plan size by planner (defrag migrations, queue and DaemonSet victims).",
            ["planner"],
            registry=r,
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)


# -- guarded writes ------------------------------------------------------------------------
class NotLeader(Exception):
    """The lease is not ours (any more): stop the round before the next write."""


class GuardedWriter:
    """Every write of the controller: leadership checked right before each one, nothing
    written in a dry run. API failures are logged and reported as False (the next round
    retries); a 409 AlreadyExists on create means it is there, which is what we wanted."""

    def __init__(
        self,
        api: KubeApi,
        is_leader: Callable[[], bool],
        dry_run: bool,
        metrics: ControllerMetrics,
        logger: Any = None,
    ) -> None:
        self.api, self.is_leader, self.dry_run, self.metrics = api, is_leader, dry_run, metrics
        self.log = logger or structlog.get_logger("waterline.cluster.writes")

    def _may(self, what: str, **fields: Any) -> bool:
        if not self.is_leader():
            raise NotLeader(what)
        if self.dry_run:
            self.log.info(f"dry run: would {what}", **fields)
            return False
        return True

    def _call(self, what: str, fn: Callable[[], object], **fields: Any) -> bool:
        try:
            fn()
            return True
        except KubeNotFound:
            self.log.info(f"could not {what}: not found", **fields)
        except KubeError as err:
            self.log.warning(f"could not {what}", error=str(err), status=err.status, **fields)
        return False

    # -- migration (the migrator's Writes) ------------------------------------------------
    def job_status(self, name: str, status: Mapping[str, Any]) -> bool:
        if not self._may("write job status", job=name, **status):
            return False
        ok = self._call(
            "write job status",
            lambda: merge_patch(
                self.api, MIGRATION_JOBS, name, {"status": dict(status)}, subresource="status"
            ),
            job=name,
        )
        if ok:
            self.metrics.migrations.labels(str(status.get("phase"))).inc()
        return ok

    def job_annotations(self, name: str, annotations: Mapping[str, str]) -> bool:
        if not self._may("annotate job", job=name):
            return False
        patch = {"metadata": {"annotations": dict(annotations)}}
        return self._call(
            "annotate job", lambda: merge_patch(self.api, MIGRATION_JOBS, name, patch), job=name
        )

    def create_reservation(self, body: Mapping[str, Any]) -> bool:
        name = body["metadata"]["name"]
        if not self._may("create reservation", reservation=name):
            return False
        try:
            create(self.api, RESERVATIONS, body)
            return True
        except KubeConflict:
            return True
        except KubeError as err:
            self.log.warning("could not create reservation", reservation=name, error=str(err))
            return False

    def reservation_status(self, name: str, status: Mapping[str, Any]) -> bool:
        if not self._may("write reservation status", reservation=name, phase=status.get("phase")):
            return False
        return self._call(
            "write reservation status",
            lambda: merge_patch(
                self.api, RESERVATIONS, name, {"status": dict(status)}, subresource="status"
            ),
            reservation=name,
        )

    def delete_reservation(self, name: str) -> bool:
        if not self._may("delete reservation", reservation=name):
            return False
        return self._call(
            "delete reservation", lambda: delete(self.api, RESERVATIONS, name), reservation=name
        )

    def evict(self, pod: Pod, source: str = "migration") -> tuple[EvictionResult, str] | None:
        if not self._may("evict pod", pod=pod.key, source=source):
            return None
        outcome = evicting.evict(
            self.api, pod.namespace, pod.name, None, pod.uid if pod.uid != pod.key else ""
        )
        result = _RESULTS[outcome.result]
        self.metrics.evictions.labels(source, result.value).inc()
        self.log.info(
            "eviction",
            pod=pod.key,
            source=source,
            result=result.value,
            status=outcome.status,
            detail=outcome.message,
        )
        return result, outcome.message

    # -- planners ---------------------------------------------------------------------------
    def create_job(self, body: Mapping[str, Any]) -> bool:
        if not self._may("create PodMigrationJob", pod=body["spec"]["podRef"]):
            return False
        return self._call("create PodMigrationJob", lambda: create(self.api, MIGRATION_JOBS, body))

    def annotate_node(self, name: str, annotations: Mapping[str, str]) -> bool:
        if not self._may("annotate node", node=name):
            return False
        patch = {"metadata": {"annotations": dict(annotations)}}
        return self._call(
            "annotate node", lambda: merge_patch(self.api, NODES, name, patch), node=name
        )


_RESULTS = {
    evicting.EVICTED: EvictionResult.EVICTED,
    evicting.BLOCKED: EvictionResult.BLOCKED_BY_PDB,
    evicting.GONE: EvictionResult.GONE,
    evicting.FAILED: EvictionResult.FAILED,
}


def _stamp(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


# -- the controller ------------------------------------------------------------------------
class Controller:
    def __init__(
        self,
        api: KubeApi,
        identity: str,
        config: ControllerConfig | None = None,
        *,
        interval: float = 60.0,
        lease_namespace: str = "waterline-system",
        lease_name: str = "waterline-controller",
        election: ElectionArgs | None = None,
        dry_run: bool = False,
        watch_args: WatchArgs | None = None,
        metrics: ControllerMetrics | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        if interval <= 0:
            raise InvalidObject("Controller", identity, "interval", f"must be > 0, got {interval}")
        config = config or ControllerConfig()
        # The round period is the interval: n = qps x interval x ratio must match it.
        self.config = replace(
            config, arbitration=replace(config.arbitration, interval=interval).validate()
        )
        self.api, self.identity, self.interval, self.dry_run = api, identity, interval, dry_run
        self.clock, self.wall = clock, wall
        self.watch_args = watch_args
        self.metrics = metrics or ControllerMetrics()
        self.log = structlog.get_logger("waterline.cluster.controller").bind(identity=identity)
        self.cache = Cache(PARSERS)
        election = (election or ElectionArgs()).validate()
        # A lease request may take half the renew deadline: a slow API server must not
        # cost leadership, a hung one must not outlive it (the watchdog stops us anyway).
        lease_timeout = max(election.retry_period, election.renew_deadline / 2)
        self.elector = LeaderElector(
            KubeLeases(api, lease_namespace, lease_name, timeout=lease_timeout),
            identity,
            election,
            namespace=lease_namespace,
            name=lease_name,
            clock=clock,
            wall=wall,
            on_started_leading=self._started_leading,
            on_stopped_leading=self._stopped_leading,
        )
        self.writer = GuardedWriter(api, self.is_leader, dry_run, self.metrics)
        self.executor = MigrationExecutor(self.writer)
        self.queue: RateLimitedQueue[str] = self._new_queue()
        self.view: ClusterView | None = None
        self.rounds = 0  # leader rounds completed (tests, logs)
        self.last_round_ok = False
        self._wake = threading.Event()
        self._next_round = 0.0
        self._waiting_logged = False
        #: The names in ``queue``: the latest round's passed jobs not started yet.
        self._queued: set[str] = set()
        self.informers: Informers | None = None

    # -- leadership -------------------------------------------------------------------------
    def is_leader(self) -> bool:
        return self.elector.is_leader()

    def _new_queue(self) -> RateLimitedQueue[str]:
        return RateLimitedQueue(self.config.arbitration.process_queue_qps, self.clock)

    def _started_leading(self) -> None:
        self.metrics.leader.set(1)
        self._next_round = 0.0  # act now, from warm caches
        self._wake.set()

    def _stopped_leading(self) -> None:
        self.metrics.leader.set(0)
        self._wake.set()

    # -- caches -----------------------------------------------------------------------------
    def start_watches(self) -> None:
        self.informers = start_watches(
            self.api, self.cache, [(r, Selectors()) for r in WATCHED], self.watch_args
        )

    @property
    def synced(self) -> bool:
        return self.cache.synced(REQUIRED_KINDS)

    def snapshot(self) -> ObjectStore:
        c = self.cache
        store = ObjectStore()
        store.nodes = {n.name: n for n in cast(list[Node], c.records(NODES.kind))}
        store.pods = cast(list[Pod], c.records(PODS.kind))
        store.namespaces = {ns.name: ns for ns in cast(list[Namespace], c.records(NAMESPACES.kind))}
        store.pdbs = cast(list[PodDisruptionBudget], c.records(PDBS.kind))
        for res in WORKLOADS:
            for w in cast(list[Workload], c.records(res.kind)):
                store.workloads[w.uid] = w
        for res in (MIGRATION_JOBS, RESERVATIONS, QUEUES, PRIORITY_CLASSES):
            store.raw[res.kind] = cast(list[Mapping[str, Any]], c.records(res.kind))
        return store

    # -- the loop ---------------------------------------------------------------------------
    def run(self, stop: threading.Event, on_beat: Callable[[bool], None] | None = None) -> None:
        """Watch, elect and work until ``stop``; then stop the work, release the lease (so
        a follower takes over at once) and stop the watches."""
        if self.informers is None:
            self.start_watches()
        elector_stop = threading.Event()
        elector = threading.Thread(
            target=self.elector.run, args=(elector_stop,), name="elector", daemon=True
        )
        elector.start()

        def wake_on_stop() -> None:
            stop.wait()
            self._wake.set()

        waker = threading.Thread(target=wake_on_stop, name="controller-waker", daemon=True)
        waker.start()
        self.log.info("controller started", interval=self.interval, dry_run=self.dry_run)
        try:
            while not stop.is_set():
                now = self.clock()
                if now >= self._next_round:
                    self._next_round = now + self.interval
                    ok = self.tick()
                    if on_beat is not None:
                        on_beat(ok)
                if self.is_leader():
                    self.drain_queue()
                wait = self._next_round - self.clock()
                ready = self.queue.next_ready_in() if self.is_leader() else None
                if ready is not None:
                    wait = min(wait, ready)
                self._wake.wait(max(0.005, wait))
                self._wake.clear()
        finally:
            elector_stop.set()
            elector.join(10.0)
            if self.informers is not None:
                self.informers.stop()
            self.log.info("controller stopped", rounds=self.rounds)

    def tick(self) -> bool:
        """One interval: a round when leading and in sync; followers only keep caches."""
        if not self.is_leader():
            return True
        if not self.synced:
            if not self._waiting_logged:
                self.log.info("leading, waiting for the caches to sync before acting")
                self._waiting_logged = True
            return True
        started = self.clock()
        try:
            self.round(self.snapshot(), self.wall())
        except NotLeader as err:
            self.metrics.rounds.labels("lost_lease").inc()
            self.log.warning("lost the lease mid-round; stopped before writing", write=str(err))
            self.queue = self._new_queue()
            self._queued = set()
            return True
        except Exception:
            self.metrics.rounds.labels("failed").inc()
            self.log.exception("round failed")
            self.last_round_ok = False
            return False
        self.metrics.rounds.labels("ok").inc()
        self.metrics.round_seconds.observe(self.clock() - started)
        self.rounds += 1
        self.last_round_ok = True
        return True

    def round(self, store: ObjectStore, now: float) -> None:
        view = self.view = ClusterView.build(store, self.log)
        jobs: list[m.PodMigrationJob] = []
        annotations: dict[str, Mapping[str, str]] = {}
        for raw in store.raw.get(m.KIND) or []:
            try:
                job = m.parse_pod_migration_job(raw)
            except InvalidObject as err:
                self.log.warning("invalid PodMigrationJob skipped", error=str(err))
                continue
            jobs.append(job)
            annotations[job.name] = (raw.get("metadata") or {}).get("annotations") or {}

        # 1. one migration step for every job still in flight (and abort/timeout of pending ones)
        for i, job in enumerate(jobs):
            if job.phase in m.TERMINAL_PHASES:
                continue
            step = self.executor.run(job, annotations[job.name], view, now)
            if step is not None:
                jobs[i] = replace(job, phase=step.phase, reason=step.reason, message=step.message)

        # 2. arbitration
        classes = self._priority_classes(store)
        result = arbitrate(jobs, store, self.config.arbitration, classes)
        by_name = {j.name: j for j in jobs}
        for name, verdict in result.failed.items():
            self._set_pending_verdict(by_name[name], m.FAILED, verdict.reason, verdict.message)
        for name, verdict in result.waiting.items():
            if verdict.reason != m.REASON_PAUSED:  # the migrator wrote that one
                self._set_pending_verdict(by_name[name], m.PENDING, verdict.reason, verdict.message)
        for name in self._queued - set(result.passed):
            self.queue.discard(name)
        for name in result.passed:
            self.queue.add(name)
        self._queued = set(result.passed)
        for verdict_name, count in (
            ("passed", len(result.passed)),
            ("waiting", len(result.waiting)),
            ("failed", len(result.failed)),
        ):
            self.metrics.arbitration.labels(verdict_name).inc(count)
        self.log.info(
            "arbitration round",
            passed=len(result.passed),
            waiting=len(result.waiting),
            failed=len(result.failed),
            queued=len(self.queue),
        )

        # 3. the planners
        self.defrag(store, view, now, jobs)
        self.queue_preemption(store, view, now)
        self.daemonset_preemption(store, view, now)

    def _set_pending_verdict(
        self, job: m.PodMigrationJob, phase: str, reason: str, message: str
    ) -> None:
        if ((job.phase or m.PENDING), job.reason, job.message) != (phase, reason, message):
            self.writer.job_status(job.name, {"phase": phase, "reason": reason, "message": message})

    def _priority_classes(self, store: ObjectStore) -> dict[str, int]:
        try:
            return m.parse_priority_classes(store.raw.get(m.PRIORITY_CLASS_KIND) or [])
        except InvalidObject as err:
            self.log.warning(
                "PriorityClasses unreadable; priorityClassName counts as 0", error=str(err)
            )
            return {}

    def drain_queue(self) -> None:
        """Start every job the token bucket lets through now, each re-read from the cache."""
        view = self.view
        while view is not None and (name := self.queue.pop()) is not None:
            self._queued.discard(name)
            raw = cast("Mapping[str, Any] | None", self.cache.get(m.KIND, name))
            if raw is None:
                continue
            try:
                job = m.parse_pod_migration_job(raw)
            except InvalidObject:
                continue
            pod = cast("Pod | None", self.cache.get(PODS.kind, job.pod_key))
            if (
                not job.is_pending
                or job.paused
                or pod is None
                or (job.pod_uid and job.pod_uid != pod.uid)
            ):
                continue  # changed since the round: the next round decides again
            try:
                self.executor.start(job, pod, view, self.wall())
            except NotLeader:
                self.queue = self._new_queue()
                self._queued = set()
                return

    # -- planners: plan every interval, act only when enabled --------------------------------
    def defrag(
        self, store: ObjectStore, view: ClusterView, now: float, jobs: list[m.PodMigrationJob]
    ) -> None:
        holds = holds_by_node(view.reservations.values(), now)
        plan = defrag.plan_defrag(
            store.nodes.values(), store.pods_by_node(), self.config.defrag, now, holds
        )
        self.metrics.planned.labels("defrag").set(len(plan.migrations))
        if plan.migrations:
            self.log.info(
                "defrag plan",
                migrations=len(plan.migrations),
                sources=list(plan.freed_nodes),
                enabled=self.config.defrag_enabled,
            )
        if not self.config.defrag_enabled:
            return
        busy = {j.pod_key for j in jobs if j.phase not in m.TERMINAL_PHASES}
        stamped: set[str] = set()
        for mig in plan.migrations:
            if (
                mig.pod.key not in busy
                and self.writer.create_job(defrag_job(mig))
                and mig.source not in stamped
            ):
                stamped.add(mig.source)
                self.writer.annotate_node(mig.source, {defrag.LAST_DEFRAG_ANNOTATION: _stamp(now)})

    def queue_preemption(self, store: ObjectStore, view: ClusterView, now: float) -> None:
        try:
            qs = queues.parse_queues(store.raw.get(queues.KIND) or [])
        except InvalidObject as err:
            self.log.warning("queue preemption skipped: invalid Queue", error=str(err))
            return
        if not qs:
            return
        decision = queues.decide(qs, store.nodes.values(), store.pods, now, self.config.queues)
        victims = decision.plan.victims
        self.metrics.planned.labels("queues").set(len(victims))
        if victims:
            self.log.info(
                "queue preemption",
                starving=list(decision.starving),
                victims=list(victims),
                enabled=self.config.queues_enabled,
            )
        self._evict_victims(victims, view, "queues", self.config.queues_enabled)

    def daemonset_preemption(self, store: ObjectStore, view: ClusterView, now: float) -> None:
        plans = daemonset.decide(store.nodes, store.pods, now, self.config.daemonset) or []
        victims = [v for p in plans for v in p.victims]
        self.metrics.planned.labels("daemonset").set(len(victims))
        for p in plans:
            self.log.info(
                "daemonset preemption",
                pod=p.pod,
                node=p.node,
                strategy=p.strategy,
                victims=list(p.victims),
                enabled=self.config.daemonset_enabled,
            )
        self._evict_victims(victims, view, "daemonset", self.config.daemonset_enabled)

    def _evict_victims(self, keys: Any, view: ClusterView, source: str, enabled: bool) -> None:
        if not enabled:
            return
        for key in keys:
            pod = view.pods.get(key)
            if pod is not None and not pod.is_terminating:
                self.writer.evict(pod, source)


def defrag_job(mig: defrag.Migration) -> dict[str, Any]:
    """A ReservationFirst PodMigrationJob for one planned move, its target as a hint."""
    pod = mig.pod
    return {
        "apiVersion": m.API_VERSION,
        "kind": m.KIND,
        "metadata": {
            "generateName": "defrag-",
            "labels": {CREATED_BY_LABEL: DEFRAG_CREATOR},
            "annotations": {TARGET_NODE_ANNOTATION: mig.target},
        },
        "spec": {
            "podRef": {"namespace": pod.namespace, "name": pod.name, "uid": pod.uid},
            "mode": m.RESERVATION_FIRST,
        },
    }


__all__ = [
    "WATCHED",
    "Controller",
    "ControllerConfig",
    "ControllerMetrics",
    "GuardedWriter",
    "NotLeader",
    "defrag_job",
    "parse_config",
]
