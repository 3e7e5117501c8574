"""One arbitration round: which pending PodMigrationJobs may start migrating now.

The round fails the jobs that can never run, orders the rest (``ORDER``, then a batch Job's
pods pulled up together) and walks the order letting a job pass while the disruption it
adds stays within the node, namespace and workload budgets (``_Budget``).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from agent.cluster.arbitration.args import ArbitrationArgs, resolve_workload_limit
from agent.cluster.arbitration.index import (
    ClusterIndex,
    WorkloadState,
    batch_job_key,
    is_available,
    workload_ref,
)
from agent.model import migration as m
from agent.model.migration import PodMigrationJob
from agent.model.objects import EVICTABLE_ANNOTATION, QOS_RANK, Pod
from agent.model.ordering import By, Order, ordered_by
from agent.model.store import ObjectStore


@dataclass(frozen=True, slots=True)
class Verdict:
    """Why a job did not pass: the reason constant and a sentence for status.message."""

    reason: str
    message: str = ""


@dataclass(frozen=True, slots=True)
class ArbitrationPlan:
    #: Job names in the order they passed (the order they enter the queue).
    passed: tuple[str, ...]
    #: Retryable: arbitrated again next round.
    waiting: Mapping[str, Verdict]
    #: Non-retryable: the job is marked Failed.
    failed: Mapping[str, Verdict]


@dataclass(frozen=True, slots=True)
class JobCandidate:
    """A pending job whose pod exists and may be migrated, with its sort inputs."""

    job: PodMigrationJob
    pod: Pod
    migration_priority: int
    batch_job: str | None
    batch_job_migrating: bool
    workload: str


#: The ordering, primary key first.
ORDER: Order[JobCandidate] = ordered_by(
    By("its batch Job already has pods migrating", lambda c: not c.batch_job_migrating),
    By("higher migration priority", lambda c: -c.migration_priority),
    By("lower pod priority", lambda c: c.pod.priority),
    By("BestEffort, then Burstable, then Guaranteed", lambda c: QOS_RANK[c.pod.qos_class]),
    By("newer job",
       lambda c: -c.job.creation_time if c.job.creation_time is not None else math.inf),
    By("job name (deterministic tie-break)", lambda c: c.job.name),
)


def order_candidates(candidates: Sequence[JobCandidate]) -> list[JobCandidate]:
    """Sort by ORDER, then pull every job of a batch Job up to the best rank among them
    so a Job's pods move together (a gang half-migrated is worse than not started)."""
    ranked = ORDER.sort(candidates)
    best: dict[str, int] = {}
    for index, cand in enumerate(ranked):
        if cand.batch_job is not None:
            best.setdefault(cand.batch_job, index)
    group_rank = [
        (best[c.batch_job] if c.batch_job is not None else i, i) for i, c in enumerate(ranked)
    ]
    return [ranked[i] for i in sorted(range(len(ranked)), key=group_rank.__getitem__)]


def migration_priority(job: PodMigrationJob, priority_classes: Mapping[str, int]) -> int:
    """spec.priority, else the value of spec.priorityClassName, else 0."""
    if job.priority is not None:
        return job.priority
    if job.priority_class_name:
        return priority_classes.get(job.priority_class_name, 0)
    return 0


#: Pods that must never be migrated (the job fails ForbiddenMigratePod), in the order
#: checked: (applies, why).
FORBIDDEN: tuple[tuple[Callable[[Pod], bool], str], ...] = (
    (lambda p: not p.owners, "has no owner to recreate it"),
    (
        lambda p: p.is_daemonset or getattr(workload_ref(p), "kind", "") == "DaemonSet",
        "belongs to a DaemonSet",
    ),
    (lambda p: p.is_mirror, "is a mirror (static) pod"),
    (lambda p: p.is_protected, "is annotated qos.waterline.io/protected: \"true\""),
    (
        lambda p: p.is_system_critical,
        "is system-critical (priority >= 2000000000)",
    ),
)


def _non_retryable(job: PodMigrationJob, pod: Pod | None) -> Verdict | None:
    if pod is None or (job.pod_uid and job.pod_uid != pod.uid):
        return Verdict(m.REASON_MISSING_POD, f"pod {job.pod_key} does not exist")
    for applies, why in FORBIDDEN:
        if applies(pod):
            return Verdict(m.REASON_FORBIDDEN_MIGRATE_POD, f"pod {pod.key} {why}")
    return None


class _Budget:
    """The migrating counts the retryable limits read, updated as jobs pass."""

    def __init__(self, index: ClusterIndex, running: Iterable[PodMigrationJob]) -> None:
        self.index = index
        self.pods: set[str] = set()
        self.per_node: Counter[str] = Counter()
        self.per_namespace: Counter[str] = Counter()
        self.per_workload: Counter[str] = Counter()
        #: Migrating pods of a workload that are otherwise available (ready, not deleting):
        #: |unavailable or migrating| = len(unavailable) + this.
        self.available_migrating: Counter[str] = Counter()
        self.batch_jobs: set[str] = set()
        #: Running jobs cluster-wide, plus those passed this round.
        self.total = 0
        for job in running:
            self.total += 1
            pod = index.pods.get(job.pod_key)
            if pod is not None and job.pod_uid and job.pod_uid != pod.uid:
                pod = None  # the pod was replaced; the old one is what is migrating
            if job.pod_key in self.pods:
                continue
            if pod is None:
                self.pods.add(job.pod_key)
                self.per_namespace[job.pod_namespace] += 1
                if job.source_node:
                    self.per_node[job.source_node] += 1
                continue
            self.add(pod, index.workload_of.get(pod.key))
            batch = batch_job_key(pod)
            if batch is not None:
                self.batch_jobs.add(batch)

    def passed(self, pod: Pod, workload: str | None) -> None:
        """A job passed this round: it counts as migrating from now on."""
        self.total += 1
        self.add(pod, workload)

    def add(self, pod: Pod, workload: str | None) -> None:
        self.pods.add(pod.key)
        if pod.node_name:
            self.per_node[pod.node_name] += 1
        self.per_namespace[pod.namespace] += 1
        if workload is not None:
            self.per_workload[workload] += 1
            if is_available(pod):
                self.available_migrating[workload] += 1

    def unavailable_or_migrating(self, workload: WorkloadState, candidate: Pod) -> int:
        count = len(workload.unavailable) + self.available_migrating[workload.key]
        return count - 1 if candidate.key in workload.unavailable else count


def _expected_replicas(cand: JobCandidate, budget: _Budget, args: ArbitrationArgs) -> Verdict | None:
    """A workload of one replica, or whose unavailable limit equals its replicas (read
    literally), would lose all it may lose at once: it waits unless the pod is annotated
    evictable."""
    if cand.pod.marked_evictable:
        return None
    workload = budget.index.workloads[cand.workload]
    replicas = workload.replicas
    limit = resolve_workload_limit(args.max_unavailable_per_workload, replicas)
    if replicas == 1 or limit == replicas:
        return Verdict(
            m.REASON_EXPECTED_REPLICAS,
            f"{workload.key} has {replicas} replica(s) and may have {limit} unavailable; "
            f'annotate the pod {EVICTABLE_ANNOTATION}: "true" to migrate it anyway',
        )
    return None


def _retryable(cand: JobCandidate, budget: _Budget, args: ArbitrationArgs) -> Verdict | None:
    """The first retryable check the candidate fails, in DESIGN's order:
    PodAlreadyMigrating, ExpectedReplicas, MaxMigratingTotal, then the node, namespace and
    workload limits (counts never include the candidate)."""
    pod = cand.pod
    if pod.key in budget.pods:
        return Verdict(m.REASON_POD_ALREADY_MIGRATING, f"pod {pod.key} is already being migrated")
    verdict = _expected_replicas(cand, budget, args)
    if verdict is not None:
        return verdict
    limit = args.max_migrating_total
    if limit is not None and budget.total >= limit:
        return Verdict(
            m.REASON_MAX_MIGRATING_TOTAL,
            f"{budget.total} jobs already migrating cluster-wide (max {limit})",
        )
    limit = args.max_migrating_per_node
    if limit is not None and pod.node_name and budget.per_node[pod.node_name] >= limit:
        return Verdict(
            m.REASON_MAX_MIGRATING_PER_NODE,
            f"node {pod.node_name} already has {budget.per_node[pod.node_name]} pods migrating (max {limit})",
        )
    limit = args.max_migrating_per_namespace
    if limit is not None and budget.per_namespace[pod.namespace] >= limit:
        return Verdict(
            m.REASON_MAX_MIGRATING_PER_NAMESPACE,
            f"namespace {pod.namespace} already has {budget.per_namespace[pod.namespace]} pods migrating (max {limit})",
        )
    workload = budget.index.workloads[cand.workload]
    limit = resolve_workload_limit(args.max_migrating_per_workload, workload.replicas)
    if budget.per_workload[workload.key] >= limit:
        return Verdict(
            m.REASON_MAX_MIGRATING_PER_WORKLOAD,
            f"{workload.key} already has {budget.per_workload[workload.key]} pods migrating (max {limit})",
        )
    limit = resolve_workload_limit(args.max_unavailable_per_workload, workload.replicas)
    down = budget.unavailable_or_migrating(workload, pod)
    if down >= limit:
        return Verdict(
            m.REASON_MAX_UNAVAILABLE_PER_WORKLOAD,
            f"{workload.key} already has {down} pods unavailable or migrating (max {limit})",
        )
    return None


def _candidate(
    job: PodMigrationJob, pod: Pod, index: ClusterIndex, budget: _Budget, classes: Mapping[str, int]
) -> JobCandidate:
    batch = batch_job_key(pod)
    return JobCandidate(
        job=job,
        pod=pod,
        migration_priority=migration_priority(job, classes),
        batch_job=batch,
        batch_job_migrating=batch is not None and batch in budget.batch_jobs,
        workload=index.workload_of[pod.key],
    )


def plan(snapshot: ObjectStore, args: ArbitrationArgs, now: float) -> ArbitrationPlan:
    """One round over every pending job of the snapshot (other phases: Running ones count
    as migrating, terminal ones are ignored). Pure: reads, never writes; ``now`` is not
    read (a round depends on the jobs' phases, not on the clock)."""
    index = ClusterIndex(snapshot)
    jobs = snapshot.migration_jobs
    budget = _Budget(index, (j for j in jobs if j.is_running))
    waiting: dict[str, Verdict] = {}
    failed: dict[str, Verdict] = {}
    candidates: list[JobCandidate] = []
    for job in jobs:
        if not job.is_pending:
            continue
        if job.paused:
            waiting[job.name] = Verdict(m.REASON_PAUSED, "spec.paused is true")
            continue
        pod = index.pods.get(job.pod_key)
        verdict = _non_retryable(job, pod)
        if verdict is not None:
            failed[job.name] = verdict
        elif pod is not None:
            candidates.append(_candidate(job, pod, index, budget, snapshot.priority_classes))
    passed = _walk(order_candidates(candidates), budget, args, waiting)
    return ArbitrationPlan(tuple(passed), waiting, failed)


def _walk(
    ordered: Iterable[JobCandidate],
    budget: _Budget,
    args: ArbitrationArgs,
    waiting: dict[str, Verdict],
) -> list[str]:
    """Pass candidates in order while they fit the budgets and the select limit; the
    others wait with the first limit they hit (into ``waiting``)."""
    passed: list[str] = []
    select = args.select_count
    for cand in ordered:
        verdict = _retryable(cand, budget, args)
        if verdict is None and len(passed) >= select:
            verdict = Verdict(m.REASON_SELECT_LIMIT, f"{select} jobs already passed this round")
        if verdict is not None:
            waiting[cand.job.name] = verdict
            continue
        passed.append(cand.job.name)
        budget.passed(cand.pod, cand.workload)
    return passed
