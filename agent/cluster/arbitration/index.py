"""The cluster as arbitration sees it, indexed once per round: pods by key, and every pod's
workload by its root owner (a ReplicaSet counts at its Deployment), with its size and the
pods that are unavailable."""

from __future__ import annotations

from dataclasses import dataclass, field

from agent.model.objects import OwnerRef, Pod, Workload
from agent.model.store import ObjectStore


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
            self._unavailable = frozenset(p.key for p in self.pods if not is_available(p))
        return self._unavailable


def _live(pod: Pod) -> bool:
    return pod.phase not in ("Succeeded", "Failed")


def is_available(pod: Pod) -> bool:
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
