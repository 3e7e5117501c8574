"""Pods and their containers, QoS class, affinity and tolerations."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agent.errors import InvalidObject
from agent.model.fields import shown
from agent.model.objects.common import (
    Resources,
    guarded,
    listed,
    metadata,
    resource_list,
    str_map,
)
from agent.model.objects.nodes import Taint
from agent.model.objects.owners import OwnerRef, parse_owner
from agent.model.objects.resize import resize_under_way
from agent.model.selectors import (
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
#: Set to "true", the pod's owner accepts its eviction where we would otherwise refuse it
#: (no controller, a workload of one replica, data kept on the node).
EVICTABLE_ANNOTATION = "qos.waterline.io/evictable"


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


PREEMPT_LOWER_PRIORITY = "PreemptLowerPriority"
PREEMPT_NEVER = "Never"
PREEMPTION_POLICIES = (PREEMPT_LOWER_PRIORITY, PREEMPT_NEVER)


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
    #: Volumes whose data lives on the node (``hostPath "logs"``, ``emptyDir "cache"``; an
    #: emptyDir in memory is not one): the evictor filters read them.
    local_volumes: tuple[str, ...] = ()
    #: The PersistentVolumeClaims the pod mounts (generic ephemeral volumes included, by
    #: the name Kubernetes gives their claim: ``<pod>-<volume>``).
    claims: tuple[str, ...] = ()
    #: Why the scheduler could not place the pod (its PodScheduled condition False with
    #: reason Unschedulable: the condition's message); "" when it did, or has not tried.
    unschedulable: str = ""
    #: The kubelet is (about to be) rewriting the pod's CPU cgroup files: an in-place
    #: resize under way (``agent.model.objects.resize``).
    resizing: bool = False
    #: ``spec.preemptionPolicy``: ``Never`` = the pod waits for room, it never has other
    #: pods evicted for it (by the scheduler, or by Waterline's queue preemption).
    preemption_policy: str = PREEMPT_LOWER_PRIORITY
    #: ``status.nominatedNodeName``: the node a preemption made (is making) room on for
    #: this pending pod.
    nominated_node: str = ""

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
    def marked_evictable(self) -> bool:
        return self.annotations.get(EVICTABLE_ANNOTATION) == "true"

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
        raise ValueError(f"{path}: must be a mapping, got {shown(raw)}")
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"{path}.name: must be a non-empty string, got {shown(name)}")
    res = raw.get("resources") or {}
    if not isinstance(res, dict):
        raise ValueError(f"{path}.resources: must be a mapping, got {shown(res)}")
    limits = resource_list(res.get("limits"), f"{path}.resources.limits")
    requests = resource_list(res.get("requests"), f"{path}.resources.requests")
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
                raise ValueError(f"{tpath}: must be a mapping, got {shown(term)}")
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


def _parse_volumes(raw: object, pod_name: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(local volumes, claim names) of ``spec.volumes``. Lenient: an entry that is not a
    mapping is skipped, so a pod is never dropped (and its capacity never lost) for it."""
    if not isinstance(raw, list):
        return (), ()
    local: list[str] = []
    claims: list[str] = []
    for volume in raw:
        if not isinstance(volume, dict):
            continue
        name = str(volume.get("name") or "")
        empty_dir = volume.get("emptyDir")
        if volume.get("hostPath") is not None:
            local.append(f'hostPath "{name}"')
        elif empty_dir is not None and (
            not isinstance(empty_dir, dict) or empty_dir.get("medium") != "Memory"
        ):
            local.append(f'emptyDir "{name}"')
        claim = volume.get("persistentVolumeClaim")
        if isinstance(claim, dict) and claim.get("claimName"):
            claims.append(str(claim["claimName"]))
        elif volume.get("ephemeral") is not None:
            claims.append(f"{pod_name}-{name}")
    return tuple(local), tuple(claims)


def _is_ready(status: Mapping[str, Any]) -> bool:
    conditions = status.get("conditions")
    if not isinstance(conditions, list):
        return status.get("phase", "Running") == "Running"
    for cond in conditions:
        if isinstance(cond, dict) and cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


def _unschedulable(status: Mapping[str, Any]) -> str:
    for cond in status.get("conditions") or ():
        if (
            isinstance(cond, dict)
            and cond.get("type") == "PodScheduled"
            and cond.get("status") == "False"
            and cond.get("reason") == "Unschedulable"
        ):
            return str(cond.get("message") or "Unschedulable")
    return ""


def _preemption_policy(raw: object) -> str:
    if raw is None:
        return PREEMPT_LOWER_PRIORITY
    if raw not in PREEMPTION_POLICIES:
        raise ValueError(f"spec.preemptionPolicy: must be one of {list(PREEMPTION_POLICIES)}, got {shown(raw)}")
    return str(raw)


def parse_pod(raw: Mapping[str, Any]) -> Pod:
    """Parse a core/v1 Pod dict."""
    meta = metadata(raw)
    name = str(meta.get("name") or "")
    namespace = str(meta.get("namespace") or "default")
    label = f"{namespace}/{name}"
    if not name:
        raise InvalidObject("Pod", label, "metadata.name", f"must be set, got {shown(meta.get('name'))}")
    spec = raw.get("spec") or {}
    status = raw.get("status") or {}
    if not isinstance(spec, dict):
        raise InvalidObject("Pod", label, "spec", f"must be a mapping, got {shown(spec)}")
    if not isinstance(status, dict):
        raise InvalidObject("Pod", label, "status", f"must be a mapping, got {shown(status)}")

    def body() -> Pod:
        containers = tuple(
            _parse_container(c, f"spec.containers[{i}]")
            for i, c in enumerate(listed(spec.get("containers"), "spec.containers"))
        )
        init = tuple(
            _parse_container(c, f"spec.initContainers[{i}]")
            for i, c in enumerate(listed(spec.get("initContainers"), "spec.initContainers"))
        )
        ids: dict[str, str] = {}
        for cs in listed(status.get("containerStatuses"), "status.containerStatuses"):
            if isinstance(cs, dict) and cs.get("containerID"):
                ids[str(cs.get("name"))] = str(cs["containerID"])
        if ids:
            containers = tuple(
                Container(c.name, c.requests, c.limits, ids.get(c.name, "")) for c in containers
            )
        overhead = resource_list(spec.get("overhead"), "spec.overhead")
        priority = spec.get("priority", 0)
        if priority is None:
            priority = 0
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise ValueError(f"spec.priority: must be an integer, got {shown(priority)}")
        qos = status.get("qosClass") or _derive_qos(containers, init)
        if qos not in QOS_RANK:
            raise ValueError(f"status.qosClass: must be one of {list(QOS_CLASSES)}, got {shown(qos)}")
        node_sel, anti = _parse_affinity(spec, "spec.affinity")
        local_volumes, claims = _parse_volumes(spec.get("volumes"), name)
        tolerations = tuple(
            Toleration(
                str(t.get("key") or ""),
                str(t.get("operator") or "Equal"),
                str(t.get("value") or ""),
                str(t.get("effect") or ""),
            )
            for t in listed(spec.get("tolerations"), "spec.tolerations")
            if isinstance(t, dict)
        )
        return Pod(
            namespace=namespace,
            name=name,
            uid=str(meta.get("uid") or label),
            node_name=str(spec.get("nodeName") or ""),
            labels=str_map(meta.get("labels")),
            annotations=str_map(meta.get("annotations")),
            owners=tuple(
                parse_owner(o, f"metadata.ownerReferences[{i}]")
                for i, o in enumerate(listed(meta.get("ownerReferences"), "metadata.ownerReferences"))
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
            node_selector=str_map(spec.get("nodeSelector")),
            node_affinity=node_sel,
            anti_affinity=anti,
            tolerations=tolerations,
            local_volumes=local_volumes,
            claims=claims,
            unschedulable="" if spec.get("nodeName") else _unschedulable(status),
            resizing=resize_under_way(spec, status),
            preemption_policy=_preemption_policy(spec.get("preemptionPolicy")),
            nominated_node=str(status.get("nominatedNodeName") or ""),
        )

    return guarded("Pod", label, "", body)
