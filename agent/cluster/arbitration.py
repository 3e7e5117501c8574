"""Arbitration of PodMigrationJobs: which pending jobs may start migrating this round.

One round (every ``interval`` seconds) takes the pending jobs, fails those that can never
run, orders the rest, and walks the order letting a job pass while the disruption it adds
stays within the per-node, per-namespace and per-workload budgets. Jobs that are Running
count as migrating, and so does every job passed earlier in the same round. At most
``select_count`` jobs pass a round; they go to a queue drained at ``processQueueQPS``.

Decisions made where DESIGN.md is silent (what an SRE on a large cluster would expect):

* "A batch Job already has pods migrating" is read at the start of the round (Running
  jobs); jobs passing during the round do not reorder it.
* Non-retryable failures are decided before the ordering: a failed job counts against no
  limit, so where it would have sat in the walk changes nothing.
* ``spec.paused`` jobs are left alone and reported waiting as ``Paused``; a second job for
  a pod already migrating (Running, or passed earlier this round) waits as
  ``PodAlreadyMigrating`` rather than evicting the pod twice.
* A pod is *ownerless* when it has no ownerReferences. Its workload is its controller
  owner, or its first owner when none is marked controller.
* Workloads are counted at the Deployment when a ReplicaSet's Deployment is known, so
  the old and new ReplicaSets of a rollout share one budget. The Deployment is found via
  the ReplicaSet object's controller owner (by uid, else by name); when the ReplicaSet
  object is absent, a Deployment in the pod's namespace named exactly like the
  ReplicaSet, else like the ReplicaSet minus its last ``-hash`` suffix, is taken.
* Replicas come from that object's ``spec.replicas`` (a Job's ``parallelism``); when the
  object is unknown or gives none, the number of the workload's live pods is used.
* Unavailable pods are the workload's live pods (not Succeeded/Failed) that are not
  ready or are being deleted; the candidate itself is never counted, so a crash-looping
  pod can still be moved off a bad node.
* A Running job whose pod is gone (evicted, replacement not ready yet) still counts in
  its pod's namespace, and on the node it left when the migrator recorded it (annotation
  ``migration.qos.waterline.io/source-node``); ``status.nodeName`` is where the pod goes.
* ``spec.priorityClassName`` naming no known PriorityClass counts as priority 0.
* Workload limits accept an integer or a percentage of replicas (``"20%"``, rounded down,
  never below 1); node and namespace limits are integers, ``null`` meaning no limit.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent.cluster import migration as m
from agent.cluster.migration import PodMigrationJob
from agent.cluster.rate_queue import release_schedule
from agent.errors import InvalidObject
from agent.model.objects import QOS_RANK, OwnerRef, Pod, Workload
from agent.model.store import ObjectStore
from agent.scenario import Scenario

ARGS_KIND = "ArbitrationArgs"
CONFIG_PATH = "config.arbitration"

# ---------------------------------------------------------------------------------------
# Arguments: defaults, parsing and validation
# ---------------------------------------------------------------------------------------

WorkloadLimit = int | str | None  # an integer, a percentage of replicas ("10%"), or unset

_CONFIG_FIELDS = {
    "interval": "interval",
    "processQueueQPS": "process_queue_qps",
    "jobSelectRatio": "job_select_ratio",
    "maxMigratingPerNode": "max_migrating_per_node",
    "maxMigratingPerNamespace": "max_migrating_per_namespace",
    "maxMigratingPerWorkload": "max_migrating_per_workload",
    "maxUnavailablePerWorkload": "max_unavailable_per_workload",
}


@dataclass(frozen=True, slots=True)
class ArbitrationArgs:
    """The ``arbitration`` config section. Durations in seconds."""

    interval: float = 60.0
    process_queue_qps: float = 3.0
    job_select_ratio: float = 1.2
    max_migrating_per_node: int | None = 2
    max_migrating_per_namespace: int | None = None
    #: None: 10% of replicas above 10, 2 for 4..10, else 1.
    max_migrating_per_workload: WorkloadLimit = None
    #: None: as max_migrating_per_workload.
    max_unavailable_per_workload: WorkloadLimit = None

    @property
    def select_count(self) -> int:
        """n = ceil(processQueueQPS x interval x jobSelectRatio): what the queue drains in
        one interval, plus headroom. The epsilon keeps 3 x 60 x 1.2 at 216, not 217."""
        return max(
            1, math.ceil(self.process_queue_qps * self.interval * self.job_select_ratio - 1e-9)
        )

    def validate(self) -> ArbitrationArgs:
        _positive_number(self.interval, "interval")
        _positive_number(self.process_queue_qps, "processQueueQPS")
        _positive_number(self.job_select_ratio, "jobSelectRatio")
        _count_limit(self.max_migrating_per_node, "maxMigratingPerNode")
        _count_limit(self.max_migrating_per_namespace, "maxMigratingPerNamespace")
        _workload_limit(self.max_migrating_per_workload, "maxMigratingPerWorkload")
        _workload_limit(self.max_unavailable_per_workload, "maxUnavailablePerWorkload")
        return self

    @classmethod
    def from_config(cls, raw: Mapping[str, Any] | None) -> ArbitrationArgs:
        """Parse the camelCase config section; unknown or bad fields are named."""
        if raw is None:
            return cls()
        if not isinstance(raw, Mapping):
            raise _bad("", "must be a mapping")
        values: dict[str, Any] = {}
        for key, value in raw.items():
            attr = _CONFIG_FIELDS.get(str(key))
            if attr is None:
                raise _bad(str(key), f"is not a known field (known: {sorted(_CONFIG_FIELDS)})")
            values[attr] = value
        defaults = cls()
        for key in ("interval", "processQueueQPS", "jobSelectRatio"):
            attr = _CONFIG_FIELDS[key]
            if attr in values and values[attr] is None:
                values[attr] = getattr(defaults, attr)  # null = the default
        return cls(**values).validate()


def _bad(fieldname: str, message: str) -> InvalidObject:
    path = f"{CONFIG_PATH}.{fieldname}" if fieldname else CONFIG_PATH
    return InvalidObject(ARGS_KIND, "", path, message)


def _positive_number(value: object, name: str) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value <= 0
    ):
        raise _bad(name, f"must be a number > 0, got {value!r}")


def _count_limit(value: object, name: str) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _bad(name, f"must be an integer >= 1 or null (no limit), got {value!r}")


def _workload_limit(value: object, name: str) -> None:
    if value is None:
        return
    if isinstance(value, str) and value.endswith("%"):
        digits = value[:-1]
        if digits.isdigit() and 1 <= int(digits) <= 100:
            return
    elif not isinstance(value, bool) and isinstance(value, int) and value >= 1:
        return
    raise _bad(
        name,
        f'must be an integer >= 1, a percentage of replicas like "10%", or null (default), got {value!r}',
    )


def default_workload_limit(replicas: int) -> int:
    """Unset workload limits: 10% of replicas above 10 (rounded down), 2 for 4..10, else 1."""
    if replicas > 10:
        return max(1, replicas // 10)
    if replicas >= 4:
        return 2
    return 1


def resolve_workload_limit(limit: WorkloadLimit, replicas: int) -> int:
    if limit is None:
        return default_workload_limit(replicas)
    if isinstance(limit, str):
        return max(1, int(limit[:-1]) * replicas // 100)
    return limit


# ---------------------------------------------------------------------------------------
# The cluster as arbitration sees it, indexed once per round
# ---------------------------------------------------------------------------------------


@dataclass(slots=True)
class WorkloadState:
    """A workload's size and availability; ``unavailable`` is computed on first use."""

    key: str
    replicas_from_object: int | None
    pods: list[Pod] = field(default_factory=list)
    _unavailable: frozenset[str] | None = None

    @property
    def replicas(self) -> int:
        if self.replicas_from_object is not None:
            return self.replicas_from_object
        return len(self.pods)

    @property
    def unavailable(self) -> frozenset[str]:
        if self._unavailable is None:
            self._unavailable = frozenset(p.key for p in self.pods if not _available(p))
        return self._unavailable


def _live(pod: Pod) -> bool:
    return pod.phase not in ("Succeeded", "Failed")


def _available(pod: Pod) -> bool:
    return pod.ready and not pod.is_terminating


def workload_ref(pod: Pod) -> OwnerRef | None:
    """The pod's controller owner, else its first owner, else None (ownerless)."""
    ctl = pod.controller
    if ctl is not None:
        return ctl
    return pod.owners[0] if pod.owners else None


def batch_job_key(pod: Pod) -> str | None:
    """The batch Job the pod belongs to: its first ownerReference of kind Job."""
    for owner in pod.owners:
        if owner.kind == "Job":
            return owner.uid or f"Job/{pod.namespace}/{owner.name}"
    return None


class ClusterIndex:
    """Pods by key and workloads by their root owner, built in one pass over the pods so
    the walk never scans the cluster per job."""

    def __init__(self, store: ObjectStore) -> None:
        self.pods: dict[str, Pod] = {}
        self._by_name: dict[tuple[str, str, str], Workload] = {}
        self._store = store
        for w in store.workloads.values():
            self._by_name[(w.kind, w.namespace, w.name)] = w
        self.workloads: dict[str, WorkloadState] = {}
        #: pod key -> workload key
        self.workload_of: dict[str, str] = {}
        roots: dict[tuple[str, str], WorkloadState] = {}  # (namespace, owner uid) -> state
        for pod in store.pods:
            self.pods[pod.key] = pod
            ref = workload_ref(pod)
            if ref is None:
                continue
            ident = (pod.namespace, ref.uid or f"{ref.kind}/{ref.name}")
            state = roots.get(ident)
            if state is None:
                key, replicas = self._root(ref, pod.namespace)
                state = self.workloads.get(key)
                if state is None:
                    state = self.workloads[key] = WorkloadState(key, replicas)
                roots[ident] = state
            if _live(pod):
                state.pods.append(pod)
            self.workload_of[pod.key] = state.key

    def _root(self, ref: OwnerRef, namespace: str) -> tuple[str, int | None]:
        """The workload a controller reference counts under, and its replicas if known."""
        workloads = self._store.workloads
        obj = workloads.get(ref.uid) if ref.uid else None
        if obj is None:
            obj = self._by_name.get((ref.kind, namespace, ref.name))
        if ref.kind == "ReplicaSet":
            deployment: Workload | None = None
            if obj is not None:
                if obj.owner is not None and obj.owner.kind == "Deployment":
                    deployment = workloads.get(obj.owner.uid) or self._by_name.get(
                        ("Deployment", namespace, obj.owner.name)
                    )
                    if deployment is None:  # the RS mirrors its Deployment's replicas
                        return _key("Deployment", namespace, obj.owner.name), obj.replicas
            else:
                deployment = self._by_name.get(("Deployment", namespace, ref.name))
                if deployment is None and "-" in ref.name:
                    base = ref.name.rsplit("-", 1)[0]
                    deployment = self._by_name.get(("Deployment", namespace, base))
            if deployment is not None:
                return _key("Deployment", namespace, deployment.name), deployment.replicas
        if obj is not None:
            return _key(obj.kind, namespace, obj.name), obj.replicas
        return _key(ref.kind, namespace, ref.name), None


def _key(kind: str, namespace: str, name: str) -> str:
    return f"{kind}/{namespace}/{name}"


# ---------------------------------------------------------------------------------------
# The round
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Verdict:
    """Why a job did not pass: the reason constant and a sentence for status.message."""

    reason: str
    message: str = ""


@dataclass(frozen=True, slots=True)
class ArbitrationResult:
    #: Job names in the order they passed (the order they enter the queue).
    passed: tuple[str, ...]
    #: Retryable: arbitrated again next round.
    waiting: Mapping[str, Verdict]
    #: Non-retryable: the job is marked Failed.
    failed: Mapping[str, Verdict]


@dataclass(frozen=True, slots=True)
class Candidate:
    """A pending job whose pod exists and may be migrated, with its sort inputs."""

    job: PodMigrationJob
    pod: Pod
    migration_priority: int
    batch_job: str | None
    batch_job_migrating: bool
    workload: str


SortKey = Callable[[Candidate], Any]

#: The ordering, primary key first. Each entry is (what it means, key: smaller first).
ORDER: tuple[tuple[str, SortKey], ...] = (
    ("its batch Job already has pods migrating", lambda c: not c.batch_job_migrating),
    ("higher migration priority", lambda c: -c.migration_priority),
    ("lower pod priority", lambda c: c.pod.priority),
    ("BestEffort, then Burstable, then Guaranteed", lambda c: QOS_RANK[c.pod.qos_class]),
    (
        "newer job",
        lambda c: -c.job.creation_time if c.job.creation_time is not None else math.inf,
    ),
    ("job name (deterministic tie-break)", lambda c: c.job.name),
)


def order_candidates(candidates: Sequence[Candidate]) -> list[Candidate]:
    """Sort by ORDER, then pull every job of a batch Job up to the best rank among them
    so a Job's pods move together (a gang half-migrated is worse than not started)."""
    ranked = sorted(candidates, key=lambda c: tuple(fn(c) for _, fn in ORDER))
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


def _non_retryable(job: PodMigrationJob, pod: Pod | None) -> Verdict | None:
    if pod is None or (job.pod_uid and job.pod_uid != pod.uid):
        return Verdict(m.REASON_MISSING_POD, f"pod {job.pod_key} does not exist")
    if not pod.owners:
        return Verdict(m.REASON_FORBIDDEN_MIGRATE_POD, f"pod {pod.key} has no owner to recreate it")
    ref = workload_ref(pod)
    if pod.is_daemonset or (ref is not None and ref.kind == "DaemonSet"):
        return Verdict(m.REASON_FORBIDDEN_MIGRATE_POD, f"pod {pod.key} belongs to a DaemonSet")
    if pod.is_mirror:
        return Verdict(m.REASON_FORBIDDEN_MIGRATE_POD, f"pod {pod.key} is a mirror (static) pod")
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
        for job in running:
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

    def add(self, pod: Pod, workload: str | None) -> None:
        self.pods.add(pod.key)
        if pod.node_name:
            self.per_node[pod.node_name] += 1
        self.per_namespace[pod.namespace] += 1
        if workload is not None:
            self.per_workload[workload] += 1
            if _available(pod):
                self.available_migrating[workload] += 1

    def unavailable_or_migrating(self, workload: WorkloadState, candidate: Pod) -> int:
        count = len(workload.unavailable) + self.available_migrating[workload.key]
        return count - 1 if candidate.key in workload.unavailable else count


def _retryable(cand: Candidate, budget: _Budget, args: ArbitrationArgs) -> Verdict | None:
    """The first retryable limit the candidate hits (counts never include the candidate)."""
    pod = cand.pod
    if pod.key in budget.pods:
        return Verdict(m.REASON_POD_ALREADY_MIGRATING, f"pod {pod.key} is already being migrated")
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


def arbitrate(
    jobs: Iterable[PodMigrationJob],
    store: ObjectStore,
    args: ArbitrationArgs,
    priority_classes: Mapping[str, int] | None = None,
    index: ClusterIndex | None = None,
) -> ArbitrationResult:
    """One arbitration round over every pending job of ``jobs`` (other phases: Running
    ones count as migrating, terminal ones are ignored). Pure: reads, never writes."""
    classes = priority_classes or {}
    index = index or ClusterIndex(store)
    all_jobs = list(jobs)
    budget = _Budget(index, (j for j in all_jobs if j.is_running))
    waiting: dict[str, Verdict] = {}
    failed: dict[str, Verdict] = {}
    candidates: list[Candidate] = []
    for job in all_jobs:
        if not job.is_pending:
            continue
        if job.paused:
            waiting[job.name] = Verdict(m.REASON_PAUSED, "spec.paused is true")
            continue
        pod = index.pods.get(job.pod_key)
        verdict = _non_retryable(job, pod)
        if verdict is not None:
            failed[job.name] = verdict
            continue
        assert pod is not None
        batch = batch_job_key(pod)
        candidates.append(
            Candidate(
                job=job,
                pod=pod,
                migration_priority=migration_priority(job, classes),
                batch_job=batch,
                batch_job_migrating=batch is not None and batch in budget.batch_jobs,
                workload=index.workload_of[pod.key],
            )
        )

    passed: list[str] = []
    select = args.select_count
    for cand in order_candidates(candidates):
        verdict = _retryable(cand, budget, args)
        if verdict is None and len(passed) >= select:
            verdict = Verdict(m.REASON_SELECT_LIMIT, f"{select} jobs already passed this round")
        if verdict is not None:
            waiting[cand.job.name] = verdict
            continue
        passed.append(cand.job.name)
        budget.add(cand.pod, cand.workload)
    return ArbitrationResult(tuple(passed), waiting, failed)


# ---------------------------------------------------------------------------------------
# `waterline simulate`
# ---------------------------------------------------------------------------------------


def simulate_section(scenario: Scenario) -> dict[str, Any] | None:
    """One round at ``now`` over the scenario's PodMigrationJobs; None when there are none.

    ``dequeueAt`` adds when the executor would start each passed job (seconds after the
    round), through the real rate-limited queue."""
    raw_jobs = scenario.store.raw.get(m.KIND) or []
    if not raw_jobs:
        return None
    args = ArbitrationArgs.from_config(scenario.config_section("arbitration"))
    jobs = m.parse_pod_migration_jobs(raw_jobs)
    classes = m.parse_priority_classes(scenario.store.raw.get(m.PRIORITY_CLASS_KIND) or [])
    result = arbitrate(jobs, scenario.store, args, classes)
    schedule = release_schedule(list(result.passed), args.process_queue_qps)
    return {
        "passed": list(result.passed),
        "waiting": {name: v.reason for name, v in result.waiting.items()},
        "failed": {name: v.reason for name, v in result.failed.items()},
        "dequeueAt": {name: round(at, 6) for name, at in schedule.items()},
    }


__all__ = [
    "ORDER",
    "ArbitrationArgs",
    "ArbitrationResult",
    "Candidate",
    "ClusterIndex",
    "Verdict",
    "arbitrate",
    "default_workload_limit",
    "order_candidates",
    "simulate_section",
]
