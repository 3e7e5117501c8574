"""What the controller does with the plans of the switchable engines: count and log each
plan, and carry it out only when its config section says ``enabled: true`` (defrag creates
ReservationFirst PodMigrationJobs and stamps the nodes it empties; queue and DaemonSet
preemption evict their victims). Arbitration's plan is carried out by the controller itself
(its passed jobs feed the rate-limited queue)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from agent.cluster.daemonset import DaemonSetPlan
from agent.cluster.defrag import LAST_DEFRAG_ANNOTATION, DefragPlan, Migration
from agent.cluster.metrics import ControllerMetrics
from agent.cluster.migrator import CREATED_BY_LABEL, TARGET_NODE_ANNOTATION, ClusterView
from agent.cluster.queues import QueuePlan
from agent.cluster.writes import GuardedWriter
from agent.model import migration as m
from agent.model.store import ObjectStore

DEFRAG_CREATOR = "defrag"

#: What the controller does with a plan: (plan, snapshot, view, now, enabled).
Act = Callable[[Any, ObjectStore, ClusterView, float, bool], None]


class PlanActs:
    """One act per switchable engine (``table``), over the controller's writer."""

    def __init__(self, writer: GuardedWriter, metrics: ControllerMetrics, log: Any) -> None:
        self.writer, self.metrics, self.log = writer, metrics, log

    def table(self) -> dict[str, Act]:
        return {"defrag": self.defrag, "queues": self.queues, "daemonset": self.daemonset}

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
        if not enabled:
            return
        busy = {j.pod_key for j in snapshot.migration_jobs if j.phase not in m.TERMINAL_PHASES}
        stamped: set[str] = set()
        for mig in plan.migrations:
            if (
                mig.pod.key not in busy
                and self.writer.create_job(defrag_job(mig))
                and mig.source not in stamped
            ):
                stamped.add(mig.source)
                self.writer.annotate_node(mig.source, {LAST_DEFRAG_ANNOTATION: _stamp(now)})

    def queues(
        self, plan: QueuePlan, snapshot: ObjectStore, view: ClusterView, now: float, enabled: bool
    ) -> None:
        self.metrics.planned.labels("queues").set(len(plan.victims))
        if plan.victims:
            self.log.info(
                "queue preemption",
                starving=list(plan.starving),
                victims=list(plan.victims),
                enabled=enabled,
            )
        if enabled:
            self._evict(plan.victims, view, "queues")

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
        if enabled:
            self._evict(plan.victims, view, "daemonset")

    def _evict(self, keys: Iterable[str], view: ClusterView, source: str) -> None:
        for key in keys:
            pod = view.pods.get(key)
            if pod is not None and not pod.is_terminating:
                self.writer.evict(pod, source)


def defrag_job(mig: Migration) -> dict[str, Any]:
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


def _stamp(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
