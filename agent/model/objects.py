"""Core Kubernetes objects as slim, frozen records, parsed once from API-shaped dicts.

Only what Waterline decides on is kept: at 150,000 pods the typed models of the official
client cost gigabytes, these cost a small fraction. Every ``parse_*`` raises
``InvalidObject`` naming the object and the field.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from agent.errors import InvalidObject
from agent.model.quantity import parse_resource_list
from agent.model.selectors import (
    EVERYTHING,
    LabelSelector,
    NodeSelector,
    parse_label_selector,
    parse_node_selector,
)
from agent.model.timeutil import parse_time

BEST_EFFORT = "BestEffort"
BURSTABLE = "Burstable"
GUARANTEED = "Guaranteed"
QOS_CLASSES = (BEST_EFFORT, BURSTABLE, GUARANTEED)
#: QoS class rank: lower is less important (acted on first).
QOS_RANK = {BEST_EFFORT: 0, BURSTABLE: 1, GUARANTEED: 2}

SYSTEM_CRITICAL_PRIORITY = 2_000_000_000
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
CONFIG_SOURCE_ANNOTATION = "kubernetes.io/config.source"
PROTECTED_ANNOTATION = "qos.waterline.io/protected"
HOSTNAME_LABEL = "kubernetes.io/hostname"

Resources = Mapping[str, float]
EMPTY: Resources = {}

T = TypeVar("T")


def _meta(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = raw.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _str_map(value: object) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    return {str(k): "" if v is None else str(v) for k, v in value.items()}


def guarded(kind: str, name: str, fieldpath: str, fn: Callable[[], T]) -> T:
    """Run a parse step and turn a ValueError/TypeError into InvalidObject for kind/name."""
    try:
        return fn()
    except InvalidObject:
        raise
    except (ValueError, TypeError) as err:
        raise InvalidObject(kind, name, fieldpath, str(err)) from None


@dataclass(frozen=True, slots=True)
class OwnerRef:
    kind: str
    name: str
    uid: str
    controller: bool = False
    api_version: str = ""


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        """core/v1 Toleration.ToleratesTaint."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        return self.value == taint.value


@dataclass(frozen=True, slots=True)
class PodAffinityTerm:
    """A required (anti-)affinity term: pods matching selector within topology_key."""

    selector: LabelSelector
    topology_key: str
    namespaces: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Container:
    name: str
    requests: Resources = field(default_factory=dict)
    limits: Resources = field(default_factory=dict)
    container_id: str = ""  # "containerd://abc..." from status.containerStatuses


@dataclass(frozen=True, slots=True)
class Pod:
    namespace: str
    name: str
    uid: str
    node_name: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    owners: tuple[OwnerRef, ...] = ()
    priority: int = 0
    priority_class_name: str = ""
    qos_class: str = BEST_EFFORT
    phase: str = "Running"
    ready: bool = True
    creation_time: float | None = None
    start_time: float | None = None
    deletion_time: float | None = None
    containers: tuple[Container, ...] = ()
    init_containers: tuple[Container, ...] = ()
    #: Effective pod request per resource: max(sum of containers, largest init) + overhead.
    requests: Resources = field(default_factory=dict)
    #: Pod limit per resource, present only where every container has a limit.
    limits: Resources = field(default_factory=dict)
    node_selector: Mapping[str, str] = field(default_factory=dict)
    node_affinity: NodeSelector | None = None
    anti_affinity: tuple[PodAffinityTerm, ...] = ()
    tolerations: tuple[Toleration, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def controller(self) -> OwnerRef | None:
        for owner in self.owners:
            if owner.controller:
                return owner
        return None

    @property
    def is_daemonset(self) -> bool:
        ctl = self.controller
        return ctl is not None and ctl.kind == "DaemonSet"

    @property
    def is_mirror(self) -> bool:
        """Mirror pods (the API's copy of a static pod) and static pods themselves."""
        if MIRROR_ANNOTATION in self.annotations:
            return True
        source = self.annotations.get(CONFIG_SOURCE_ANNOTATION)
        return source is not None and source != "api"

    @property
    def is_protected(self) -> bool:
        return self.annotations.get(PROTECTED_ANNOTATION) == "true"

    @property
    def is_terminating(self) -> bool:
        return self.deletion_time is not None

    @property
    def is_system_critical(self) -> bool:
        return self.priority >= SYSTEM_CRITICAL_PRIORITY

    @property
    def is_active(self) -> bool:
        """Holds node resources: bound and neither finished nor failed."""
        return bool(self.node_name) and self.phase not in ("Succeeded", "Failed")

    def running_seconds(self, now: float) -> float:
        started = self.start_time if self.start_time is not None else self.creation_time
        return max(0.0, now - started) if started is not None else 0.0

    def request(self, resource: str) -> float:
        return self.requests.get(resource, 0.0)


def _parse_container(raw: object, path: str) -> Container:
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: expected a mapping")
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"{path}.name: must be a non-empty string")
    res = raw.get("resources") or {}
    if not isinstance(res, dict):
        raise ValueError(f"{path}.resources: expected a mapping")
    try:
        limits = parse_resource_list(res.get("limits"))
    except ValueError as err:
        raise ValueError(f"{path}.resources.limits.{err}") from None
    try:
        requests = parse_resource_list(res.get("requests"))
    except ValueError as err:
        raise ValueError(f"{path}.resources.requests.{err}") from None
    for resource, amount in limits.items():
        requests.setdefault(resource, amount)  # Kubernetes defaulting: request = limit
    return Container(name, requests, limits)


def _derive_qos(containers: tuple[Container, ...], init: tuple[Container, ...]) -> str:
    """QoS class as the API server computes it (cpu and memory only)."""
    every = containers + init
    any_set = False
    guaranteed = True
    for c in every:
        for resource in ("cpu", "memory"):
            req, lim = c.requests.get(resource), c.limits.get(resource)
            if req or lim:
                any_set = True
            if lim is None or req != lim:
                guaranteed = False
    if not any_set:
        return BEST_EFFORT
    return GUARANTEED if guaranteed else BURSTABLE


def _pod_requests(
    containers: tuple[Container, ...], init: tuple[Container, ...], overhead: Resources
) -> dict[str, float]:
    total: dict[str, float] = {}
    for c in containers:
        for r, q in c.requests.items():
            total[r] = total.get(r, 0.0) + q
    for c in init:
        for r, q in c.requests.items():
            if q > total.get(r, 0.0):
                total[r] = q
    for r, q in overhead.items():
        total[r] = total.get(r, 0.0) + q
    return total


def _pod_limits(containers: tuple[Container, ...]) -> dict[str, float]:
    if not containers:
        return {}
    names = set(containers[0].limits)
    for c in containers[1:]:
        names &= set(c.limits)
    return {r: sum(c.limits[r] for c in containers) for r in names}


def _parse_affinity(spec: Mapping[str, Any], path: str) -> tuple[NodeSelector | None, tuple[PodAffinityTerm, ...]]:
    affinity = spec.get("affinity")
    if not isinstance(affinity, dict):
        return None, ()
    node_sel = None
    node_aff = affinity.get("nodeAffinity")
    if isinstance(node_aff, dict) and node_aff.get("requiredDuringSchedulingIgnoredDuringExecution"):
        node_sel = parse_node_selector(
            node_aff["requiredDuringSchedulingIgnoredDuringExecution"],
            f"{path}.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution",
        )
    terms: list[PodAffinityTerm] = []
    anti = affinity.get("podAntiAffinity")
    if isinstance(anti, dict):
        for i, term in enumerate(anti.get("requiredDuringSchedulingIgnoredDuringExecution") or []):
            tpath = f"{path}.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[{i}]"
            if not isinstance(term, dict):
                raise ValueError(f"{tpath}: expected a mapping")
            terms.append(
                PodAffinityTerm(
                    parse_label_selector(term.get("labelSelector"), f"{tpath}.labelSelector")
                    if term.get("labelSelector") is not None
                    else LabelSelector(match_expressions=()),
                    str(term.get("topologyKey") or ""),
                    tuple(str(n) for n in term.get("namespaces") or ()),
                )
            )
    return node_sel, tuple(terms)


def _parse_owner(raw: object, path: str) -> OwnerRef:
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: expected a mapping")
    return OwnerRef(
        str(raw.get("kind") or ""),
        str(raw.get("name") or ""),
        str(raw.get("uid") or ""),
        bool(raw.get("controller")),
        str(raw.get("apiVersion") or ""),
    )


def _is_ready(status: Mapping[str, Any]) -> bool:
    conditions = status.get("conditions")
    if not isinstance(conditions, list):
        return status.get("phase", "Running") == "Running"
    for cond in conditions:
        if isinstance(cond, dict) and cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


def parse_pod(raw: Mapping[str, Any]) -> Pod:
    """Parse a core/v1 Pod dict."""
    meta = _meta(raw)
    name = str(meta.get("name") or "")
    namespace = str(meta.get("namespace") or "default")
    label = f"{namespace}/{name}"
    if not name:
        raise InvalidObject("Pod", label, "metadata.name", "must be set")
    spec = raw.get("spec") or {}
    status = raw.get("status") or {}
    if not isinstance(spec, dict):
        raise InvalidObject("Pod", label, "spec", "expected a mapping")
    if not isinstance(status, dict):
        raise InvalidObject("Pod", label, "status", "expected a mapping")

    def body() -> Pod:
        containers = tuple(
            _parse_container(c, f"spec.containers[{i}]")
            for i, c in enumerate(spec.get("containers") or [])
        )
        init = tuple(
            _parse_container(c, f"spec.initContainers[{i}]")
            for i, c in enumerate(spec.get("initContainers") or [])
        )
        ids: dict[str, str] = {}
        for cs in status.get("containerStatuses") or []:
            if isinstance(cs, dict) and cs.get("containerID"):
                ids[str(cs.get("name"))] = str(cs["containerID"])
        if ids:
            containers = tuple(
                Container(c.name, c.requests, c.limits, ids.get(c.name, "")) for c in containers
            )
        try:
            overhead = parse_resource_list(spec.get("overhead"))
        except ValueError as err:
            raise ValueError(f"spec.overhead.{err}") from None
        priority = spec.get("priority", 0)
        if priority is None:
            priority = 0
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise ValueError(f"spec.priority: must be an integer, got {priority!r}")
        qos = status.get("qosClass") or _derive_qos(containers, init)
        if qos not in QOS_RANK:
            raise ValueError(f"status.qosClass: must be one of {list(QOS_CLASSES)}, got {qos!r}")
        node_sel, anti = _parse_affinity(spec, "spec.affinity")
        tolerations = tuple(
            Toleration(
                str(t.get("key") or ""),
                str(t.get("operator") or "Equal"),
                str(t.get("value") or ""),
                str(t.get("effect") or ""),
            )
            for t in spec.get("tolerations") or []
            if isinstance(t, dict)
        )
        return Pod(
            namespace=namespace,
            name=name,
            uid=str(meta.get("uid") or label),
            node_name=str(spec.get("nodeName") or ""),
            labels=_str_map(meta.get("labels")),
            annotations=_str_map(meta.get("annotations")),
            owners=tuple(
                _parse_owner(o, f"metadata.ownerReferences[{i}]")
                for i, o in enumerate(meta.get("ownerReferences") or [])
            ),
            priority=priority,
            priority_class_name=str(spec.get("priorityClassName") or ""),
            qos_class=qos,
            phase=str(status.get("phase") or "Pending"),
            ready=_is_ready(status),
            creation_time=parse_time(meta.get("creationTimestamp")),
            start_time=parse_time(status.get("startTime")),
            deletion_time=parse_time(meta.get("deletionTimestamp")),
            containers=containers,
            init_containers=init,
            requests=_pod_requests(containers, init, overhead),
            limits=_pod_limits(containers),
            node_selector=_str_map(spec.get("nodeSelector")),
            node_affinity=node_sel,
            anti_affinity=anti,
            tolerations=tolerations,
        )

    return guarded("Pod", label, "", body)


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    allocatable: Resources = field(default_factory=dict)
    capacity: Resources = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    ready: bool = True

    @property
    def cpu_cores(self) -> float:
        return self.allocatable.get("cpu", self.capacity.get("cpu", 0.0))

    @property
    def max_pods(self) -> float:
        return self.allocatable.get("pods", self.capacity.get("pods", 110.0))


def parse_node(raw: Mapping[str, Any]) -> Node:
    meta = _meta(raw)
    name = str(meta.get("name") or "")
    if not name:
        raise InvalidObject("Node", "", "metadata.name", "must be set")
    spec = raw.get("spec") or {}
    status = raw.get("status") or {}

    def body() -> Node:
        ready = True
        for cond in status.get("conditions") or []:
            if isinstance(cond, dict) and cond.get("type") == "Ready":
                ready = cond.get("status") == "True"
        try:
            allocatable = parse_resource_list(status.get("allocatable"))
        except ValueError as err:
            raise ValueError(f"status.allocatable.{err}") from None
        try:
            capacity = parse_resource_list(status.get("capacity"))
        except ValueError as err:
            raise ValueError(f"status.capacity.{err}") from None
        if not allocatable:
            allocatable = dict(capacity)
        return Node(
            name=name,
            labels=_str_map(meta.get("labels")),
            annotations=_str_map(meta.get("annotations")),
            allocatable=allocatable,
            capacity=capacity,
            taints=tuple(
                Taint(str(t.get("key") or ""), str(t.get("value") or ""), str(t.get("effect") or ""))
                for t in spec.get("taints") or []
                if isinstance(t, dict)
            ),
            unschedulable=bool(spec.get("unschedulable")),
            ready=ready,
        )

    return guarded("Node", name, "", body)


@dataclass(frozen=True, slots=True)
class Namespace:
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)


def parse_namespace(raw: Mapping[str, Any]) -> Namespace:
    meta = _meta(raw)
    name = str(meta.get("name") or "")
    if not name:
        raise InvalidObject("Namespace", "", "metadata.name", "must be set")
    labels = _str_map(meta.get("labels"))
    labels.setdefault("kubernetes.io/metadata.name", name)
    return Namespace(name, labels)


@dataclass(frozen=True, slots=True)
class PodDisruptionBudget:
    namespace: str
    name: str
    selector: LabelSelector
    min_available: int | str | None = None  # an int or a percentage like "50%"
    max_unavailable: int | str | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def selects(self, pod: Pod) -> bool:
        # A PDB with an empty selector selects every pod of its namespace (policy/v1).
        return pod.namespace == self.namespace and self.selector.matches(pod.labels)


def _int_or_percent(value: object, fieldpath: str) -> int | str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(f"{fieldpath}: must be an integer or a percentage")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"{fieldpath}: must be >= 0, got {value}")
        return value
    if isinstance(value, str) and value.endswith("%"):
        try:
            int(value[:-1])
        except ValueError:
            raise ValueError(f"{fieldpath}: {value!r} is not a percentage") from None
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    raise ValueError(f"{fieldpath}: must be an integer or a percentage, got {value!r}")


def parse_pdb(raw: Mapping[str, Any]) -> PodDisruptionBudget:
    meta = _meta(raw)
    name = str(meta.get("name") or "")
    namespace = str(meta.get("namespace") or "default")
    label = f"{namespace}/{name}"
    spec = raw.get("spec") or {}

    def body() -> PodDisruptionBudget:
        min_av = _int_or_percent(spec.get("minAvailable"), "spec.minAvailable")
        max_un = _int_or_percent(spec.get("maxUnavailable"), "spec.maxUnavailable")
        if min_av is not None and max_un is not None:
            raise ValueError("spec: minAvailable and maxUnavailable are mutually exclusive")
        selector = spec.get("selector")
        return PodDisruptionBudget(
            namespace,
            name,
            parse_label_selector(selector, "spec.selector") if selector is not None else EVERYTHING,
            min_av,
            max_un,
        )

    return guarded("PodDisruptionBudget", label, "", body)


def _scaled(value: int | str, total: int, round_up: bool) -> int:
    if isinstance(value, int):
        return value
    percent = int(value[:-1])
    exact = percent * total
    return -(-exact // 100) if round_up else exact // 100


@dataclass(frozen=True, slots=True)
class BudgetStatus:
    """A disruption budget as the disruption controller computes it."""

    healthy: int  # ready, not terminating
    desired: int  # healthy pods the budget asks for
    allowed: int  # disruptionsAllowed: max(0, healthy - desired)


def budget_status(pdb: PodDisruptionBudget, pods: list[Pod]) -> BudgetStatus:
    """``pods`` are the pods the budget selects."""
    live = [p for p in pods if not p.is_terminating and p.phase not in ("Succeeded", "Failed")]
    expected = len(live)
    healthy = sum(1 for p in live if p.ready)
    if pdb.max_unavailable is not None:
        desired = expected - _scaled(pdb.max_unavailable, expected, round_up=True)
    elif pdb.min_available is not None:
        desired = _scaled(pdb.min_available, expected, round_up=True)
    else:
        desired = 0  # neither set: the disruption controller asks for no healthy pods
    desired = max(desired, 0)
    return BudgetStatus(healthy, desired, max(0, healthy - desired))


def disruptions_allowed(pdb: PodDisruptionBudget, pods: list[Pod]) -> int:
    """How many of the budget's pods may be evicted now (``pods``: the ones it selects)."""
    return budget_status(pdb, pods).allowed


@dataclass(frozen=True, slots=True)
class Workload:
    """A pod owner (Deployment, ReplicaSet, StatefulSet, Job, DaemonSet, ...) kept slim:
    its identity, replicas, and its own controller (a ReplicaSet's Deployment)."""

    kind: str
    namespace: str
    name: str
    uid: str
    replicas: int | None = None
    owner: OwnerRef | None = None

    @property
    def key(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}"


WORKLOAD_KINDS = frozenset({"Deployment", "ReplicaSet", "StatefulSet", "Job", "DaemonSet", "ReplicationController"})


def parse_workload(raw: Mapping[str, Any]) -> Workload:
    meta = _meta(raw)
    kind = str(raw.get("kind") or "")
    name = str(meta.get("name") or "")
    namespace = str(meta.get("namespace") or "default")
    spec = raw.get("spec") or {}
    replicas = spec.get("replicas")
    if kind == "Job":
        replicas = spec.get("parallelism", replicas)
    if replicas is not None and (isinstance(replicas, bool) or not isinstance(replicas, int)):
        raise InvalidObject(kind, f"{namespace}/{name}", "spec.replicas", f"must be an integer, got {replicas!r}")
    owner = None
    for i, o in enumerate(meta.get("ownerReferences") or []):
        if not isinstance(o, dict):
            raise InvalidObject(kind, f"{namespace}/{name}", f"metadata.ownerReferences[{i}]", "expected a mapping")
        ref = _parse_owner(o, f"metadata.ownerReferences[{i}]")
        if ref.controller:
            owner = ref
    return Workload(kind, namespace, name, str(meta.get("uid") or f"{kind}/{namespace}/{name}"), replicas, owner)
