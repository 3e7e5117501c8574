"""The cluster controller runtime: warm caches on every replica, work on the leader only.

Every replica watches what ``agent/cluster/resources.py`` lists into one slim cache (each
object parsed as it enters) and runs for the Lease; a follower does nothing else, so a
fail-over starts from warm caches. The leader, every ``interval`` seconds, takes an
ObjectStore snapshot of the cache and runs one round:

1. every non-terminal job takes one migration step (``agent/cluster/migrator``): Running
   ones move on, and Pending ones may time out, be paused or aborted; then drain taints
   are set and lifted and orphaned placeholders and PriorityClasses deleted (the
   migrator's ``reconcile``: what a stopped leader left behind is collected here);
2. every engine of ``agent/cluster/registry.py`` plans on the snapshot, in order.
   Arbitration: failed jobs get phase Failed with the reason, waiting ones stay Pending
   with the retryable reason in status; passed jobs enter the rate-limited queue, which the
   loop drains at ``processQueueQPS`` between rounds, starting each job through the
   migrator (re-checked against the cache first: ``agent/cluster/starting.py``). Defragmentation, queue preemption and
   DaemonSet preemption are logged, and carried out only when enabled in the config
   (``agent/cluster/acting.py``);
3. what follows the cache rather than a plan (``agent/cluster/cachework.py``): the
   status of every NodeQOSEnsurancePolicy and AvoidanceAction, and the cluster brake.

Every write goes through ``GuardedWriter`` (``agent/cluster/writes.py``), bounded by the
time left before the lease's renew deadline. ``--dry-run`` plans and logs, and writes
nothing. A round's own writes are read back through the watches. A round that could not
read (a watch is failing: the snapshot may be stale) or could not write (an API error)
counts as failed, in the metrics and in readiness; every background thread (the
reflectors, the elector) reports to the ``ThreadBoard`` that ``/healthz`` shows.

Where DESIGN.md is silent: the queue holds the latest round's passed jobs only
(``agent/cluster/starting.py``); status writes happen only when phase, reason, message or node
changed, so thousands of waiting jobs cost no writes per round; an invalid object is
logged and left out by the cache, the others keep working, except that queue preemption
pauses while a Queue is invalid (the deserved shares of the others depend on it).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace

import structlog

from agent.cluster import arbitration, brake
from agent.cluster.acting import Act, PlanActs
from agent.cluster.cachework import CacheWork
from agent.cluster.config import ControllerConfig
from agent.cluster.leadership import ControllerDeps, build_elector
from agent.cluster.migrator import ClusterView, MigrationExecutor, PlaceholderSettings
from agent.cluster.queues.holding import HoldArgs
from agent.cluster.registry import ENGINES
from agent.cluster.resources import QUEUES, REQUIRED_KINDS, WATCHES, snapshot
from agent.cluster.starting import JobStarter
from agent.cluster.writes import GuardedEvents, GuardedWriter, NotLeader
from agent.kube.cache import Cache
from agent.kube.events import EventRecorder
from agent.kube.health import ThreadBoard
from agent.kube.watching import Informers, start_watches
from agent.model import migration as m
from agent.model.fields import bad
from agent.model.store import ObjectStore

#: Engines that pause while an object of a kind they plan on is invalid.
PAUSED_BY_INVALID = {"queues": QUEUES.kind}
#: The controller's Events: source.component and reportingComponent.
COMPONENT = "waterline-controller"


class Controller:
    """One replica: its cache, its elector, and the leader's rounds (``run``)."""

    def __init__(
        self,
        deps: ControllerDeps,
        config: ControllerConfig | None = None,
        *,
        interval: float = 60.0,
        dry_run: bool = False,
    ) -> None:
        if interval <= 0:
            raise bad("Controller", deps.identity, "interval", "must be > 0", interval)
        config = config or ControllerConfig()
        # The round period is the interval: n = qps x interval x ratio must match it.
        args = replace(config.args(arbitration.ENGINE), interval=interval).validate()
        self.config = config.with_args(arbitration.ENGINE, args)
        self.deps, self.interval, self.dry_run = deps, interval, dry_run
        self.api, self.identity, self.metrics = deps.api, deps.identity, deps.metrics
        self.clock, self.wall = deps.clock, deps.wall
        self.log = structlog.get_logger("waterline.cluster.controller").bind(identity=self.identity)
        self.cache = Cache()
        self.board = ThreadBoard(deps.clock)
        self.elector = build_elector(deps, self.board, self._started_leading, self._stopped_leading)
        self.writer = GuardedWriter(deps.api, self.elector.time_left, dry_run, self.metrics)
        self.writer.recorder = EventRecorder(
            GuardedEvents(self.writer), COMPONENT, host=self.identity, clock=deps.wall
        )
        self.cache_work = CacheWork(self.cache, self.writer, self.metrics, self.config.brake)
        self.executor = MigrationExecutor(
            self.writer,
            placeholders=PlaceholderSettings(
                deps.lease_namespace, self.config.migration.placeholder_image
            ),
            metrics=self.metrics,
        )
        qps = self.config.args(arbitration.ENGINE).process_queue_qps
        self.starter = JobStarter(self.cache, self.executor, qps, self.clock, self.wall)
        holds = HoldArgs(
            deps.lease_namespace, self.config.migration.placeholder_image
        ).for_interval(interval)
        self.plan_acts = PlanActs(self.writer, self.metrics, self.log, self.starter.replace, holds)
        self.acts: dict[str, Act] = self.plan_acts.table()
        self.view: ClusterView | None = None
        self.rounds = 0  # leader rounds completed (tests, logs)
        self.last_round_ok = False
        self._wake = threading.Event()
        self._next_round = 0.0
        self._waiting_logged = False
        self.informers: Informers | None = None

    # -- leadership -------------------------------------------------------------------------
    def is_leader(self) -> bool:
        return self.elector.is_leader()

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
            self.api, self.cache, list(WATCHES), self.deps.watch_args, board=self.board
        )

    @property
    def synced(self) -> bool:
        return self.cache.synced(REQUIRED_KINDS)

    def snapshot(self) -> ObjectStore:
        return snapshot(self.cache)

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
        self.board.register(self.elector.thread_name, elector)

        def wake_on_stop() -> None:
            stop.wait()
            self._wake.set()

        threading.Thread(target=wake_on_stop, name="controller-waker", daemon=True).start()
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
                    self.starter.drain(self.view)
                wait = self._next_round - self.clock()
                ready = self.starter.next_ready_in() if self.is_leader() else None
                self._wake.wait(max(0.005, wait if ready is None else min(wait, ready)))
                self._wake.clear()
        finally:
            elector_stop.set()
            elector.join(10.0)
            if self.informers is not None:
                self.informers.stop()
            self.log.info("controller stopped", rounds=self.rounds)

    def tick(self) -> bool:
        """One interval: a round when leading and in sync; followers only keep caches. The
        policies' status and the brake need only their own kinds in sync, so they do not
        wait for the engines' (a workload watch refused by RBAC stops no brake)."""
        self.metrics.brake.set(1 if self.brake_state().paused else 0)
        if not self.is_leader():
            return True
        synced = self.synced
        if not synced and not self._waiting_logged:
            self.log.info("leading, waiting for the caches to sync before the engines act")
            self._waiting_logged = True
        started = self.clock()
        self.writer.take_failures()
        try:
            now = self.wall()
            if synced:
                self.round(self.snapshot(), now)
            self.status_round(now)
        except NotLeader as err:
            self.metrics.rounds.labels("lost_lease").inc()
            self.log.warning("lost the lease mid-round; stopped before writing", write=str(err))
            self.starter.forget()
            return True
        except Exception:
            self.metrics.rounds.labels("failed").inc()
            self.log.exception("round failed")
            self.last_round_ok = False
            return False
        if not synced:
            return True  # no engine round yet: nothing to count
        self.metrics.round_seconds.observe(self.clock() - started)
        self.rounds += 1
        why = self._round_trouble()
        self.last_round_ok = why is None
        if why is not None:
            self.metrics.rounds.labels("failed").inc()
            self.log.warning("round could not read or write", why=why)
            return False
        self.metrics.rounds.labels("ok").inc()
        return True

    def _round_trouble(self) -> str | None:
        """Why the round just done does not count as a success (None: it does)."""
        failed_writes = self.writer.take_failures()
        if failed_writes:
            return f"{failed_writes} write(s) failed"
        if not self.cache.api_reachable:
            failing = ", ".join(s.name for s in self.board.failing()) or "a watch"
            return f"the API server cannot be read ({failing} failing): the snapshot may be stale"
        return None

    def round(self, store: ObjectStore, now: float) -> None:
        """One migration step per job in flight, then every engine's plan, acted on."""
        view = self.view = ClusterView.build(store)
        jobs = list(store.migration_jobs)
        for i, job in enumerate(jobs):
            if job.phase in m.TERMINAL_PHASES:
                continue
            step = self.executor.run(job, job.annotations, view, now)
            if step is not None:
                jobs[i] = replace(
                    job,
                    phase=step.phase,
                    reason=step.reason,
                    message=step.message,
                    node_name=step.node_name,
                    target_node=step.target_node,
                    landed_node=step.landed_node,
                )
        stepped = replace(store, migration_jobs=jobs)
        self.executor.reconcile(jobs, view, now)  # drain taints, orphaned placeholders
        for engine in ENGINES:
            invalid_kind = PAUSED_BY_INVALID.get(engine.key)
            invalid = self.cache.invalid(invalid_kind) if invalid_kind else {}
            if invalid:
                self.log.warning(f"{engine.key} skipped: invalid {invalid_kind}", code="engine-skipped",
                                 engine=engine.key, invalid=invalid)
                continue
            plan = engine.plan(stepped, self.config.args(engine), now)
            self.acts[engine.key](plan, stepped, view, now, self.config.acts_on(engine))

    # -- policies' status and the cluster brake ----------------------------------------------
    def status_round(self, now: float) -> None:
        """The leader's writes that follow the cache rather than the engines
        (``agent/cluster/cachework.py``): the policies' status and the cluster brake."""
        self.cache_work.run(now)

    def brake_state(self) -> brake.BrakeState:
        return self.cache_work.brake_state()


__all__ = ["Controller", "ControllerDeps"]
