"""What the controller watches, and the ObjectStore snapshot it takes of its cache.

Every watched kind that the model has a record for is parsed as it enters the cache
(``agent.kube.cache``), so an invalid object is named, logged and left out there, once, and
the snapshot holds only valid records.
"""

from __future__ import annotations

from typing import TypeVar, cast

from agent.cluster.brake import CONFIGMAP as BRAKE_CONFIGMAP
from agent.cluster.brake import EVENT_SELECTOR
from agent.defaults import NAMESPACE
from agent.kube.cache import Cache
from agent.kube.fetching import Selectors
from agent.kube.resources import (
    ACTIONS,
    CONFIGMAPS,
    EVENTS,
    NAMESPACES,
    NODES,
    PDBS,
    PODS,
    POLICIES,
    QOS_GROUP,
    QOS_VERSION,
    Resource,
)
from agent.model import migration, priorityclass, queue, reservation
from agent.model.migration import PodMigrationJob
from agent.model.objects import (
    PV_KIND,
    PVC_KIND,
    Namespace,
    Node,
    PersistentVolume,
    PersistentVolumeClaim,
    Pod,
    PodDisruptionBudget,
    Workload,
)
from agent.model.priorityclass import PriorityClass
from agent.model.queue import Queue
from agent.model.reservation import Reservation
from agent.model.store import ObjectStore

DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment", True, True)
REPLICASETS = Resource("apps", "v1", "replicasets", "ReplicaSet", True, True)
STATEFULSETS = Resource("apps", "v1", "statefulsets", "StatefulSet", True, True)
JOBS = Resource("batch", "v1", "jobs", "Job", True, True)
PRIORITY_CLASSES = Resource(
    "scheduling.k8s.io", "v1", "priorityclasses", priorityclass.KIND, False
)
MIGRATION_JOBS = Resource(QOS_GROUP, QOS_VERSION, "podmigrationjobs", migration.KIND, False, True)
RESERVATIONS = Resource(QOS_GROUP, QOS_VERSION, "reservations", reservation.KIND, False, True)
QUEUES = Resource(QOS_GROUP, QOS_VERSION, "queues", queue.KIND, False, True)
#: The evictor filters: is a pod's claim bound to a volume tied to its node?
PERSISTENT_VOLUMES = Resource("", "v1", "persistentvolumes", PV_KIND, False, True)
PERSISTENT_VOLUME_CLAIMS = Resource("", "v1", "persistentvolumeclaims", PVC_KIND, True, True)

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
    PERSISTENT_VOLUMES,
    PERSISTENT_VOLUME_CLAIMS,
)
#: Watched for the snapshot but not required before the leader acts: no cluster engine
#: reads them today (budgets are enforced by the Eviction API itself; priorityClassName
#: counts as 0 without them), and deploy/rbac.yaml does not grant them yet.
OPTIONAL = (PRIORITY_CLASSES, NAMESPACES, PDBS)
#: Kinds that must have listed once before the leader acts.
REQUIRED_KINDS = tuple(r.kind for r in WATCHED if r not in OPTIONAL)

#: Watched for the policies' status and the cluster brake, each with its selector: the
#: node policies and actions (raw: validated by the node agent's parsers), the agents'
#: eviction Events, and the brake ConfigMap itself.
STATUS_WATCHES: tuple[tuple[Resource, Selectors], ...] = (
    (POLICIES, Selectors()),
    (ACTIONS, Selectors()),
    (EVENTS, Selectors(field_selector=EVENT_SELECTOR)),
    (CONFIGMAPS, Selectors(namespace=NAMESPACE, field_selector=f"metadata.name={BRAKE_CONFIGMAP}")),
)
#: Every watch of the controller.
WATCHES: tuple[tuple[Resource, Selectors], ...] = (
    *((r, Selectors()) for r in WATCHED),
    *STATUS_WATCHES,
)
#: Must have listed before policy statuses are written / the brake is decided.
POLICY_KINDS = (POLICIES.kind, ACTIONS.kind, NODES.kind)
BRAKE_KINDS = (EVENTS.kind, CONFIGMAPS.kind, NODES.kind)


T = TypeVar("T")


def _records(cache: Cache, resource: Resource, record: type[T]) -> list[T]:
    """The cache's records of ``resource``, which its parser made ``record``s."""
    return cast(list[T], cache.records(resource.kind))


def snapshot(cache: Cache) -> ObjectStore:
    """The cache's records as one ObjectStore (one consistent list per kind)."""
    store = ObjectStore()
    store.nodes = {n.name: n for n in _records(cache, NODES, Node)}
    store.pods = _records(cache, PODS, Pod)
    store.namespaces = {ns.name: ns for ns in _records(cache, NAMESPACES, Namespace)}
    store.pdbs = _records(cache, PDBS, PodDisruptionBudget)
    for res in WORKLOADS:
        for w in _records(cache, res, Workload):
            store.workloads[w.uid] = w
    store.migration_jobs = _records(cache, MIGRATION_JOBS, PodMigrationJob)
    store.reservations = _records(cache, RESERVATIONS, Reservation)
    store.queues = _records(cache, QUEUES, Queue)
    store.priority_classes = {
        pc.name: pc.value for pc in _records(cache, PRIORITY_CLASSES, PriorityClass)
    }
    store.volumes = {v.name: v for v in _records(cache, PERSISTENT_VOLUMES, PersistentVolume)}
    store.claims = {
        c.key: c for c in _records(cache, PERSISTENT_VOLUME_CLAIMS, PersistentVolumeClaim)
    }
    return store
