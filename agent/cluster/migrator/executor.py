"""The migration executor: performs a Step's actions through ``Writes`` and writes the
resulting status, only when it changed. Tests drive it with a recording writer."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Protocol

import structlog

from agent.cluster.migrator.observe import (
    ClusterView,
    choose_target,
    observe,
    quantity,
    reservation_body,
    reservation_name,
)
from agent.cluster.migrator.steps import (
    COMPLETE_RESERVATION,
    CREATE_RESERVATION,
    EVICT,
    RELEASE_RESERVATION,
    SCHEDULE_RESERVATION,
    TARGET_NODE_ANNOTATION,
    Step,
    Tracked,
    World,
    advance,
    after_eviction,
    tracked_from_pod,
)
from agent.model import migration as m
from agent.model import reservation as r
from agent.model.eviction import EvictionResult
from agent.model.objects import Pod


class Writes(Protocol):
    """Every write the migration makes. Each returns False when nothing was written
    (dry run); a lost leadership raises instead, ending the round at once."""

    def job_status(self, name: str, status: Mapping[str, Any]) -> bool: ...

    def job_annotations(self, name: str, annotations: Mapping[str, str]) -> bool: ...

    def create_reservation(self, body: Mapping[str, Any]) -> bool: ...

    def reservation_status(self, name: str, status: Mapping[str, Any]) -> bool: ...

    def delete_reservation(self, name: str) -> bool: ...

    def evict(self, pod: Pod) -> tuple[EvictionResult, str] | None: ...


def status_of(step: Step) -> dict[str, Any]:
    return {
        "phase": step.phase,
        "reason": step.reason,
        "message": step.message,
        "nodeName": step.node_name or None,
    }


def changed(job: m.PodMigrationJob, step: Step) -> bool:
    return (job.phase or m.PENDING, job.reason, job.message, job.node_name) != (
        step.phase,
        step.reason,
        step.message,
        step.node_name,
    )


class MigrationExecutor:
    """Performs a Step's actions, then writes the resulting status (only when it changed)."""

    def __init__(self, writes: Writes, logger: Any = None) -> None:
        self.writes = writes
        self.log = logger or structlog.get_logger("waterline.cluster.migrator")

    def start(self, job: m.PodMigrationJob, pod: Pod, view: ClusterView, now: float) -> Step | None:
        """Start a job that arbitration passed: record what it moves, then take its first step."""
        tracked = tracked_from_pod(pod, now)
        annotations = tracked.annotations()
        started = Step(m.RUNNING, "Started", f"passed arbitration; moving pod {pod.key}")
        # Record first, act second: a job whose pod was evicted must never stay Pending
        # (the next arbitration would fail it as MissingPod).
        if not self.writes.job_annotations(job.name, annotations):
            return None
        if not self.writes.job_status(job.name, status_of(started)):
            return None
        running = replace(job, phase=m.RUNNING, reason=started.reason, message=started.message)
        world, _ = observe(running, annotations, view, now)
        world = replace(world, pod=pod)
        return self.run(running, annotations, view, now, world=world, tracked=tracked)

    def run(
        self,
        job: m.PodMigrationJob,
        annotations: Mapping[str, str],
        view: ClusterView,
        now: float,
        *,
        world: World | None = None,
        tracked: Tracked | None = None,
    ) -> Step | None:
        """One step of a non-terminal job; the Step written (None: nothing to do)."""
        if world is None:
            world, tracked = observe(job, annotations, view, now)
        step = advance(job, world)
        if step is None:
            return None
        pod = world.pod
        if pod is not None:
            if EVICT in step.actions:
                answer = self.writes.evict(pod)
                if answer is None:
                    return None
                step = after_eviction(job, step, *answer)
                self.log.info(
                    "migration eviction", job=job.name, pod=job.pod_key, result=answer[0].value
                )
            if CREATE_RESERVATION in step.actions:
                step = self._create_reservation(job, pod, tracked or tracked_from_pod(pod), step)
            if SCHEDULE_RESERVATION in step.actions:
                target = annotations.get(TARGET_NODE_ANNOTATION, "")
                step = self._schedule_reservation(job, pod, view, now, target, step)
        self._settle_reservation(job, world, step)
        self._write_status(job, step)
        return step

    def _create_reservation(
        self, job: m.PodMigrationJob, pod: Pod, tracked: Tracked, step: Step
    ) -> Step:
        if self.writes.create_reservation(reservation_body(job, pod, tracked)):
            return step
        return replace(
            step,
            reason=m.REASON_RESERVATION_FAILED,
            message="could not create the reservation; retrying next round",
        )

    def _schedule_reservation(
        self,
        job: m.PodMigrationJob,
        pod: Pod,
        view: ClusterView,
        now: float,
        preferred: str,
        step: Step,
    ) -> Step:
        """Stand in for the scheduler: mark the job's reservation Available on a node that
        fits the pod (the defrag target when it still fits)."""
        target = choose_target(pod, view, now, preferred)
        if target is None:
            return replace(
                step,
                reason=m.REASON_RESERVATION_UNSCHEDULABLE,
                message="no node fits the reservation yet; retrying next round",
            )
        self.writes.reservation_status(
            reservation_name(job.name),
            {
                "phase": r.AVAILABLE,
                "nodeName": target,
                "allocatable": {k: quantity(k, v) for k, v in pod.requests.items()},
                "conditions": [{"type": "Ready", "status": "True", "reason": r.AVAILABLE}],
            },
        )
        return replace(step, message=f"reservation Available on {target}", node_name=target)

    def _settle_reservation(self, job: m.PodMigrationJob, world: World, step: Step) -> None:
        """Mark the reservation Succeeded, or delete it, as the step says (when it exists)."""
        if not world.reservation_phase:
            return
        name = reservation_name(job.name)
        if COMPLETE_RESERVATION in step.actions:
            self.writes.reservation_status(name, {"phase": r.SUCCEEDED})
        if RELEASE_RESERVATION in step.actions:
            self.writes.delete_reservation(name)

    def _write_status(self, job: m.PodMigrationJob, step: Step) -> None:
        if not changed(job, step):
            return
        self.writes.job_status(job.name, status_of(step))
        if step.phase != (job.phase or m.PENDING):
            self.log.info(
                "migration job",
                job=job.name,
                phase=step.phase,
                reason=step.reason,
                message=step.message,
            )
