"""What the controller does with each engine's plan: count it, log it, and carry it out.

Arbitration writes its verdicts into the jobs' status and hands the passed jobs to the
controller's rate-limited queue. The switchable engines act only when their config section
says ``enabled: true``: defrag creates ReservationFirst PodMigrationJobs and stamps the
nodes it empties; DaemonSet preemption nominates its pod and evicts its victims; queue
preemption holds the room its victims free with a placeholder pod and hands it to the
pending pod (``agent/cluster/queues/holding.py``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from agent.cluster.arbitration import ArbitrationPlan, Verdict
from agent.cluster.daemonset import DaemonSetPlan
from agent.cluster.defrag import LAST_DEFRAG_ANNOTATION, DefragPlan, Migration
from agent.cluster.metrics import ControllerMetrics
from agent.cluster.migrator import CREATED_BY_LABEL, TARGET_NODE_ANNOTATION, ClusterView
from agent.cluster.queues import QueuePlan, Reclaim
from agent.cluster.queues import holding as h
from agent.cluster.queues.victims import UNREADABLE_COST
from agent.cluster.writes import GuardedWriter
from agent.kube.events import WARNING, pod_ref
from agent.model import migration as m
from agent.model.objects import Pod
from agent.model.queue import QUEUE_LABEL
from agent.model.store import ObjectStore
from agent.model.timeutil import format_time

DEFRAG_CREATOR = "defrag"

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
        hold_args: h.HoldArgs | None = None,
    ) -> None:
        self.writer, self.metrics, self.log = writer, metrics, log
        self.queue_passed = queue_passed
        self.hold_args = hold_args or h.HoldArgs()
        #: Pending pod -> the reclaim whose room is being held for it (``holding``).
        self.holds: dict[str, h.Hold] = {}
        #: Pods queue preemption left out of every queue last round (reported once each).
        self.skipped: set[str] = set()
        #: (pod, annotation, value) of the unreadable costs reported (once each).
        self.bad_costs: set[tuple[str, str, str]] = set()

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
        counts = {
            "passed": len(plan.passed),
            "waiting": len(plan.waiting),
            "failed": len(plan.failed),
        }
        for verdict_name, count in counts.items():
            self.metrics.arbitration.labels(verdict_name).inc(count)
        self.log.info("arbitration round", **counts, queued=queued)

    def _verdict(self, job: m.PodMigrationJob, phase: str, verdict: Verdict) -> None:
        """Written only when phase, reason or message changed: waiting jobs cost no writes.
        The write is preconditioned on the job's resourceVersion: a verdict on a job that
        changed since the snapshot is refused (409) and decided again next round."""
        status = {"phase": phase, "reason": verdict.reason, "message": verdict.message}
        if ((job.phase or m.PENDING), job.reason, job.message) != tuple(status.values()):
            self.writer.job_status(
                job.name, status, job.resource_version, transition=phase != (job.phase or m.PENDING)
            )

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
        """The round's figures (the ``planned`` gauge, the ``queue preemption`` log line)
        count the victims evicted this round, as simulate's ``queues.victims`` does: those
        of the holds ``holding.step`` starts, not a deferred reclaim's (``NodeHeld``: its
        victims stay, and the next plan chooses again) nor a held pod's (no new victims).
        Not enabled: what would be evicted, and the holds under way still end (their
        placeholders go); none starts."""
        self._report_skipped(plan.skipped, view)
        self._report_unreadable_costs(plan.unreadable_costs, view)
        intents = self._step(plan.reclaims, snapshot, view, now)
        deferred = intents.deferred
        if enabled:
            starts = self.hold(intents, view)
        else:
            starts = list(intents.starts)
            self.hold(self._step((), snapshot, view, now), view)
        victims = [v for s in starts for v in s.hold.victims]
        self.metrics.planned.labels("queues").set(len(victims))
        if victims or deferred:
            self.log.info(
                "queue preemption",
                starving=list(plan.starving),
                victims=victims,
                reclaims=[f"{s.hold.pod}->{s.hold.node}: {', '.join(s.hold.victims)}"
                          for s in starts],  # fmt: skip
                deferred=dict(deferred),
                enabled=enabled,
            )

    def _step(
        self, reclaims: Sequence[Reclaim], snapshot: ObjectStore, view: ClusterView, now: float
    ) -> h.Intents:
        return h.step(self.holds, reclaims, view.pods, snapshot.priority_classes, now, self.hold_args)

    def hold(self, intents: h.Intents, view: ClusterView) -> list[h.Start]:
        """Carry out one round of ``holding.step``: the PriorityClass, then each new hold's
        placeholder, its nomination and only then its victims; hand-overs (the pod
        nominated before its placeholder is deleted); leftovers deleted; Events. Returns
        the holds started, whose victims were evicted (a placeholder not created evicts
        nothing)."""
        planned = intents.handing
        intents = h.confirmed(intents, self._fresh(planned, view))
        for key in sorted(set(planned) - set(intents.handing)):
            self.log.info("queue hand-over put off: the pod's nomination is not standing",
                          pod=key, node=intents.holds[key].node)  # fmt: skip
        holds = dict(intents.holds)
        for body in intents.priority_classes:
            self.writer.create_priority_class(body)
        for key, node in intents.nominate:
            if (pod := view.pods.get(key)) is not None:
                self.writer.nominate(pod, node, "queues")
        for pod in intents.hand_over:  # after the pods' nominations
            self.writer.delete_placeholder(pod.namespace, pod.name, pod.uid, grace_seconds=0)
        for key in intents.handing:  # a try begun before the deletion clears the claim after it
            hold = holds[key]
            namespace, name = key.split("/", 1)
            read, pod = self.writer.read_pod(namespace, name)
            if read and h.renominate(hold, pod) and pod is not None:
                self.log.info("queue hand-over: the pod's nomination cleared at the deletion, "
                              "renewed", pod=key, node=hold.node)  # fmt: skip
                self.writer.nominate(pod, hold.node, "queues")
        for pod in intents.delete:
            self.writer.delete_placeholder(pod.namespace, pod.name, pod.uid)
        for cls in intents.delete_classes:
            self.writer.delete_priority_class(cls)
        started: list[h.Start] = []
        for start in intents.starts:
            namespace, name = start.hold.placeholder.split("/", 1)
            if not self.writer.create_placeholder(start.body) and not self.writer.dry_run:
                holds.pop(start.hold.pod, None)  # no room held: no victim goes
                continue
            started.append(start)
            # nominated before the victims go: the room is held from the first one's exit
            self.writer.nominate(Pod(namespace, name, ""), start.hold.node, "queues")
            self._evict(start.hold.victims, view, "queues")
        for note in intents.notes:
            if (pod := view.pods.get(note.pod)) is not None:
                self.writer.event(pod_ref(pod), note.type, note.reason, note.message)
        for end in intents.ended:
            self.metrics.reclaims.labels(end.outcome).inc()
            self.log.info("queue reclaim ended", pod=end.hold.pod, node=end.hold.node,
                          outcome=end.outcome, bound=end.node, victims=list(end.hold.victims))  # fmt: skip
        self.holds = holds
        return started

    def _fresh(self, keys: Iterable[str], view: ClusterView) -> dict[str, Pod | None]:
        """The pods about to be handed their room, re-read from the API server now (the
        snapshot is a round old); in a dry run, the snapshot's (nothing is deleted)."""
        out: dict[str, Pod | None] = {}
        for key in keys:
            if self.writer.dry_run:
                out[key] = view.pods.get(key)
                continue
            namespace, name = key.split("/", 1)
            read, pod = self.writer.read_pod(namespace, name)
            if read:
                out[key] = pod
        return out

    def _report_skipped(self, skipped: Mapping[str, str], view: ClusterView) -> None:
        """A pod in no queue (its label names no Queue): one warning and one Warning Event
        on the pod when it becomes so, not one a round; again if it comes back later.
        Whether queue preemption acts or not: the label is wrong either way."""
        for key, why in skipped.items():
            if key in self.skipped:
                continue
            self.log.warning("pod in no queue: left out of queue preemption",
                             code="queue-pod-skipped", pod=key, reason=why)  # fmt: skip
            pod = view.pods.get(key)
            if pod is not None:
                reason, _, queue = why.partition(" ")
                self.writer.event(pod_ref(pod), WARNING, reason,
                                  f"label {QUEUE_LABEL} names queue {queue}, which does not exist: "
                                  "the pod belongs to no queue, queue preemption neither "
                                  "serves it nor takes it as a victim")  # fmt: skip
        self.skipped = set(skipped)

    def _report_unreadable_costs(
        self, bad: Mapping[str, Mapping[str, str]], view: ClusterView
    ) -> None:
        """A queue pod's cost annotation that is not an integer, read as 0 (the pod among
        the cheapest victims): one warning and one Warning Event on the pod when it is
        first seen so, not one a round; again if the value changes or comes back later."""
        seen: set[tuple[str, str, str]] = set()
        for key, costs in bad.items():
            for annotation, value in costs.items():
                seen.add((key, annotation, value))
                if (key, annotation, value) in self.bad_costs:
                    continue
                self.log.warning("unreadable cost annotation: read as 0", code="queue-cost-unreadable",
                                 pod=key, annotation=annotation, value=value)  # fmt: skip
                pod = view.pods.get(key)
                if pod is not None:
                    self.writer.event(pod_ref(pod), WARNING, UNREADABLE_COST,
                                      f"annotation {annotation}={value!r} is not an integer: read "
                                      "as 0, so queue preemption may take this pod before others "
                                      "of its priority that have a cost")  # fmt: skip
        self.bad_costs = seen

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
