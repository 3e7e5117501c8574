"""What the controller does with each engine's plan: count it, log it, and carry it out.

Arbitration writes its verdicts into the jobs' status and hands the passed jobs to the
controller's rate-limited queue. The switchable engines act only when their config section
says ``enabled: true``: defrag creates ReservationFirst PodMigrationJobs and stamps the
nodes it empties; queue and DaemonSet preemption evict their victims."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from agent.cluster.arbitration import ArbitrationPlan, Verdict
from agent.cluster.daemonset import DaemonSetPlan
from agent.cluster.defrag import LAST_DEFRAG_ANNOTATION, DefragPlan, Migration
from agent.cluster.metrics import ControllerMetrics
from agent.cluster.migrator import CREATED_BY_LABEL, TARGET_NODE_ANNOTATION, ClusterView
from agent.cluster.queues import QueuePlan
from agent.cluster.writes import GuardedWriter
from agent.model import migration as m
from agent.model.store import ObjectStore
from agent.model.timeutil import format_time

DEFRAG_CREATOR = "defrag"
#: How long a pending pod that queue preemption evicted victims for gets no new victims
#: (its nomination is renewed instead). The scheduler clears an external nomination when
#: a retry fails while the victims are still leaving and it can preempt nothing itself
#: (victims of equal priority): without this hold, every round would pick a new set for
#: the same pod while the victims' replacements take the room (measured on the real
#: scheduler: 179-209 victims for one 2-slot pod in three runs).
RECLAIM_HOLD_SECONDS = 60.0

#: What the controller does with a plan: (plan, snapshot, view, now, enabled).
Act = Callable[[Any, ObjectStore, ClusterView, float, bool], None]


class PlanActs:
    """One act per engine (``table``), over the controller's writer; ``queue_passed`` takes
    arbitration's passed jobs and says how many are queued."""

    def __init__(
        self,
        writer: GuardedWriter,
        metrics: ControllerMetrics,
        log: Any,
        queue_passed: Callable[[tuple[str, ...]], int],
    ) -> None:
        self.writer, self.metrics, self.log = writer, metrics, log
        self.queue_passed = queue_passed
        #: Pending pod -> (node, when) of the victims queue preemption evicted for it.
        self.reclaimed: dict[str, tuple[str, float]] = {}

    def table(self) -> dict[str, Act]:
        return {
            "arbitration": self.arbitration,
            "defrag": self.defrag,
            "queues": self.queues,
            "daemonset": self.daemonset,
        }

    def arbitration(
        self,
        plan: ArbitrationPlan,
        snapshot: ObjectStore,
        view: ClusterView,
        now: float,
        enabled: bool,
    ) -> None:
        """Failed and waiting verdicts into the jobs' status; passed jobs into the queue."""
        by_name = {j.name: j for j in snapshot.migration_jobs}
        for name, verdict in plan.failed.items():
            self._verdict(by_name[name], m.FAILED, verdict)
        for name, verdict in plan.waiting.items():
            if verdict.reason != m.REASON_PAUSED:  # the migrator wrote that one
                self._verdict(by_name[name], m.PENDING, verdict)
        queued = self.queue_passed(plan.passed)
        counts = {"passed": len(plan.passed), "waiting": len(plan.waiting), "failed": len(plan.failed)}
        for verdict_name, count in counts.items():
            self.metrics.arbitration.labels(verdict_name).inc(count)
        self.log.info("arbitration round", **counts, queued=queued)

    def _verdict(self, job: m.PodMigrationJob, phase: str, verdict: Verdict) -> None:
        """Written only when phase, reason or message changed: waiting jobs cost no writes.
        The write is preconditioned on the job's resourceVersion: a verdict on a job that
        changed since the snapshot is refused (409) and decided again next round."""
        status = {"phase": phase, "reason": verdict.reason, "message": verdict.message}
        if ((job.phase or m.PENDING), job.reason, job.message) != tuple(status.values()):
            self.writer.job_status(job.name, status, job.resource_version,
                                   transition=phase != (job.phase or m.PENDING))

    def defrag(
        self, plan: DefragPlan, snapshot: ObjectStore, view: ClusterView, now: float, enabled: bool
    ) -> None:
        self.metrics.planned.labels("defrag").set(len(plan.migrations))
        if plan.migrations:
            self.log.info(
                "defrag plan",
                migrations=len(plan.migrations),
                sources=list(plan.freed_nodes),
                enabled=enabled,
            )
        if enabled:
            self.create_defrag_jobs(plan, snapshot, now)

    def create_defrag_jobs(
        self, plan: DefragPlan, snapshot: ObjectStore, now: float, **spec: Any
    ) -> int:
        """One job a planned move whose pod has no unfinished job yet; the plan's time
        stamped on each source that got one, and, when any did, on the plan's sources
        with nothing to move (drained with the plan: tainted with it, else the emptiest
        nodes take its replacements). ``spec`` overrides the job's (bench/defrag_real.py
        drains with EvictDirectly jobs). Returns how many jobs were created."""
        busy = {j.pod_key for j in snapshot.migration_jobs if j.phase not in m.TERMINAL_PHASES}
        stamped: set[str] = set()
        created = 0
        for mig in plan.migrations:
            if mig.pod.key in busy or not self.writer.create_job(defrag_job(mig, **spec)):
                continue
            created += 1
            self.metrics.moves.labels("planned").inc()
            stamped.add(mig.source)
        if stamped:
            stamped |= set(plan.freed_nodes) - {mig.source for mig in plan.migrations}
        for source in sorted(stamped):
            self.writer.annotate_node(source, {LAST_DEFRAG_ANNOTATION: format_time(now)})
        return created

    def queues(
        self, plan: QueuePlan, snapshot: ObjectStore, view: ClusterView, now: float, enabled: bool
    ) -> None:
        self.metrics.planned.labels("queues").set(len(plan.victims))
        if plan.victims:
            self.log.info(
                "queue preemption",
                starving=list(plan.starving),
                victims=list(plan.victims),
                reclaims=[f"{r.pod}->{r.node}: {', '.join(r.victims)}" for r in plan.reclaims],
                enabled=enabled,
            )
        if not enabled:
            return
        self.reclaimed = {k: v for k, v in self.reclaimed.items() if now - v[1] < RECLAIM_HOLD_SECONDS}
        for r in plan.reclaims:
            pending = view.pods.get(r.pod)
            if pending is None:
                continue  # gone since the snapshot: nothing to make room for
            held = self.reclaimed.get(r.pod)
            if held is not None:
                # victims already went for it: renew its nomination, take no new ones
                if pending.nominated_node != held[0]:
                    self.writer.nominate(pending, held[0], "queues")
                continue
            # nominated first, so that the scheduler holds the room for it against the
            # victims' own replacements (as for DaemonSet preemption)
            self.writer.nominate(pending, r.node, "queues")
            self._evict(r.victims, view, "queues")
            self.reclaimed[r.pod] = (r.node, now)

    def daemonset(
        self,
        plan: DaemonSetPlan,
        snapshot: ObjectStore,
        view: ClusterView,
        now: float,
        enabled: bool,
    ) -> None:
        self.metrics.planned.labels("daemonset").set(len(plan.victims))
        for p in plan.preemptions:
            self.log.info(
                "daemonset preemption",
                pod=p.pod,
                node=p.node,
                strategy=p.strategy,
                victims=list(p.victims),
                enabled=enabled,
            )
        if not enabled:
            return
        for p in plan.preemptions:
            pending = view.pods.get(p.pod)
            if p.victims and pending is not None:  # its room held for it, then made
                self.writer.nominate(pending, p.node, "daemonset")
            self._evict(p.victims, view, "daemonset")

    def _evict(self, keys: Iterable[str], view: ClusterView, source: str) -> None:
        for key in keys:
            pod = view.pods.get(key)
            if pod is not None and not pod.is_terminating:
                self.writer.evict(pod, source)


def defrag_job(mig: Migration, **spec: Any) -> dict[str, Any]:
    """A ReservationFirst PodMigrationJob for one planned move, its target as a hint
    (``spec``: fields over these, such as another mode or a ttl)."""
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
            **spec,
        },
    }
