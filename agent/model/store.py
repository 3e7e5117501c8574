"""A snapshot of Kubernetes objects, indexed the ways the engines look them up.

The same store is filled from a scenario's ``objects``, from the local debug mode's files
and from the API adapter's caches. Core kinds (PersistentVolumes and their claims
included) and the cluster engines' custom resources (PodMigrationJob, Reservation, Queue,
and PriorityClass) are parsed into frozen records once, where they enter (``RECORD_PARSERS``: the scenario loader here, the controller's watch
cache there); other kinds (the node policies) are kept as raw dicts under ``raw[kind]``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from agent.errors import InvalidObject
from agent.model import migration, priorityclass, queue, reservation
from agent.model.fields import bad, shown
from agent.model.migration import PodMigrationJob, parse_pod_migration_job
from agent.model.objects import (
    PV_KIND,
    PVC_KIND,
    WORKLOAD_KINDS,
    Namespace,
    Node,
    PersistentVolume,
    PersistentVolumeClaim,
    Pod,
    PodDisruptionBudget,
    Workload,
    namespace_labels,
    parse_namespace,
    parse_node,
    parse_pdb,
    parse_persistent_volume,
    parse_persistent_volume_claim,
    parse_pod,
    parse_workload,
)
from agent.model.priorityclass import PriorityClass, parse_priority_class
from agent.model.queue import Queue, parse_queue
from agent.model.reservation import Reservation, parse_reservation


class _Named(Protocol):
    @property
    def name(self) -> str: ...


N = TypeVar("N", bound=_Named)

#: Kind -> parser of every kind that is parsed into a record where it enters.
RECORD_PARSERS: Mapping[str, Callable[[Mapping[str, Any]], object]] = {
    "Node": parse_node,
    "Pod": parse_pod,
    "Namespace": parse_namespace,
    "PodDisruptionBudget": parse_pdb,
    PV_KIND: parse_persistent_volume,
    PVC_KIND: parse_persistent_volume_claim,
    **dict.fromkeys(WORKLOAD_KINDS, parse_workload),
    migration.KIND: parse_pod_migration_job,
    reservation.KIND: parse_reservation,
    queue.KIND: parse_queue,
    priorityclass.KIND: parse_priority_class,
}


@dataclass
class ObjectStore:
    nodes: dict[str, Node] = field(default_factory=dict)
    pods: list[Pod] = field(default_factory=list)
    namespaces: dict[str, Namespace] = field(default_factory=dict)
    pdbs: list[PodDisruptionBudget] = field(default_factory=list)
    #: Workloads by uid (owner references point at uids).
    workloads: dict[str, Workload] = field(default_factory=dict)
    migration_jobs: list[PodMigrationJob] = field(default_factory=list)
    reservations: list[Reservation] = field(default_factory=list)
    queues: list[Queue] = field(default_factory=list)
    #: PriorityClass name -> value.
    priority_classes: dict[str, int] = field(default_factory=dict)
    #: PersistentVolumes by name and their claims by namespace/name (the evictor filters).
    volumes: dict[str, PersistentVolume] = field(default_factory=dict)
    claims: dict[str, PersistentVolumeClaim] = field(default_factory=dict)
    #: Every other kind, raw, in input order.
    raw: dict[str, list[Mapping[str, Any]]] = field(default_factory=lambda: defaultdict(list))
    #: Names seen per cluster-scoped kind (``add`` refuses a second object of one name).
    _names: dict[str, set[str]] = field(default_factory=dict, repr=False)

    @classmethod
    def from_dicts(cls, objects: Iterable[object], where: str = "objects") -> ObjectStore:
        """Parse a list of manifests. Raises InvalidObject on the first bad one."""
        store = cls()
        for index, raw in enumerate(objects):
            store.add(raw, f"{where}[{index}]")
        return store

    def add(self, raw: object, where: str = "object") -> None:
        if not isinstance(raw, dict):
            raise InvalidObject("object", where, "", f"must be a mapping, got {shown(raw)}")
        kind = raw.get("kind")
        if not isinstance(kind, str) or not kind:
            raise InvalidObject("object", where, "kind", f"must be set, got {shown(kind)}")
        parser = RECORD_PARSERS.get(kind)
        if parser is None:
            self.raw[kind].append(raw)
            return
        self._file(kind, parser(raw))

    def _file(self, kind: str, record: object) -> None:
        match record:
            case Node():
                self.nodes[record.name] = record
            case Pod():
                self.pods.append(record)
            case Namespace():
                self.namespaces[record.name] = record
            case PodDisruptionBudget():
                self.pdbs.append(record)
            case Workload():
                self.workloads[record.uid] = record
            case PodMigrationJob():
                self.migration_jobs.append(self._unique(kind, record))
            case Reservation():
                self.reservations.append(self._unique(kind, record))
            case Queue():
                self.queues.append(self._unique(kind, record))
            case PriorityClass():
                self.priority_classes[self._unique(kind, record).name] = record.value
            case PersistentVolume():
                self.volumes[record.name] = record
            case PersistentVolumeClaim():
                self.claims[record.key] = record

    def _unique(self, kind: str, record: N) -> N:
        """Custom resources and PriorityClasses are cluster-scoped: one object per name."""
        name = record.name
        seen = self._names.setdefault(kind, set())
        if name in seen:
            raise bad(kind, name, "metadata.name", "must be unique (two objects have it)", name)
        seen.add(name)
        return record

    # -- lookups -----------------------------------------------------------------------
    def pods_on(self, node_name: str) -> list[Pod]:
        return [p for p in self.pods if p.node_name == node_name]

    def pods_by_node(self) -> dict[str, list[Pod]]:
        out: dict[str, list[Pod]] = defaultdict(list)
        for pod in self.pods:
            if pod.node_name:
                out[pod.node_name].append(pod)
        return out

    def namespace_labels(self, namespace: str) -> Mapping[str, str]:
        return namespace_labels(self.namespaces, namespace)
