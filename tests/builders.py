"""The builders of Kubernetes-shaped objects every test uses (one set: a test that needs\nanother shape passes a keyword, or parses the dict into the model)."""

from __future__ import annotations

from typing import Any

from agent.model.objects import Node

NOW = 1_767_225_600.0  # 2026-01-01T00:00:00Z


def node(
    name: str = "n1",
    cpu: str = "8",
    memory: str = "32Gi",
    labels: dict | None = None,
    *,
    pods: str = "110",
    annotations: dict | None = None,
    taints: list[dict] | None = None,
    ready: bool | None = None,
    alloc: dict | None = None,
    spec: dict | None = None,
    hostname: bool = False,
) -> dict[str, Any]:
    """A Node. ``hostname``: label it ``kubernetes.io/hostname`` (what placement reads);
    ``ready``: a Ready condition (None: no condition at all)."""
    meta: dict[str, Any] = {"name": name, "labels": {**({"kubernetes.io/hostname": name} if hostname else {}),
                                                     **(labels or {})}}
    if annotations is not None:
        meta["annotations"] = annotations
    status: dict[str, Any] = {"allocatable": {"cpu": cpu, "memory": memory, "pods": pods, **(alloc or {})}}
    if ready is not None:
        status["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]
    out: dict[str, Any] = {"apiVersion": "v1", "kind": "Node", "metadata": meta, "status": status}
    node_spec = {**(spec or {}), **({"taints": taints} if taints is not None else {})}
    if node_spec:
        out["spec"] = node_spec
    return out


def owner_ref(kind: str, name: str, uid: str, controller: bool = True) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": uid, "controller": controller}


def pod(
    name: str,
    *,
    namespace: str = "default",
    node_name: str = "n1",
    qos: str | None = None,
    priority: int = 0,
    started: str | None = "2025-12-31T23:00:00Z",
    requests: dict | None = None,
    limits: dict | None = None,
    containers: list[dict] | None = None,
    container_name: str = "main",
    labels: dict | None = None,
    annotations: dict | None = None,
    owner_kind: str | None = "ReplicaSet",
    owner_name: str | None = None,
    owner_uid: str | None = None,
    controller: bool = True,
    extra_owners: list[dict] | None = None,
    uid: str | None = None,
    deleting: bool = False,
    phase: str = "Running",
    ready: bool | None = True,
    spec: dict | None = None,
    container_ids: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A Pod owned by a controller (``owner_kind`` None: no owner), one container with
    the given resources unless ``containers`` says otherwise; ``started`` sets its
    creation and start time (None: neither); ``spec`` adds fields to its spec;
    ``container_ids``: container name -> the runtime's ID (its containerStatuses)."""
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    owners = []
    if owner_kind is not None:
        owners.append(owner_ref(owner_kind, owner_name or f"{name}-owner",
                                owner_uid or f"uid-{name}-owner", controller))
    owners += extra_owners or []
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": uid or f"uid-{name}",
        "labels": labels or {},
        "annotations": annotations or {},
        "ownerReferences": owners,
    }
    status: dict[str, Any] = {"phase": phase}
    if started is not None:
        meta["creationTimestamp"] = started
        status["startTime"] = started
    if deleting:
        meta["deletionTimestamp"] = "2025-12-31T23:59:00Z"
    if ready is not None:
        status["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]
    if qos:
        status["qosClass"] = qos
    if container_ids:
        status["containerStatuses"] = [{"name": c, "containerID": i} for c, i in container_ids.items()]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"nodeName": node_name, "priority": priority,
                 "containers": containers or [{"name": container_name, "resources": resources}],
                 **(spec or {})},
        "status": status,
    }


QOS = "qos.waterline.io/v1alpha1"


def action(name: str = "throttle", *, throttle: dict | None = None, eviction: dict | None = None,
           cool_down: int | None = None, scope: dict | None = None, spec: dict | None = None,
           meta: dict | None = None) -> dict[str, Any]:
    """An AvoidanceAction; ``spec``: a whole spec as given (the keywords add to it);
    ``meta``: more metadata (a generation, a resourceVersion)."""
    out_spec: dict[str, Any] = dict(spec or {})
    if throttle is not None:
        out_spec["throttle"] = {"cpuThrottle": throttle}
    if eviction is not None:
        out_spec["eviction"] = eviction
    if cool_down is not None:
        out_spec["coolDownSeconds"] = cool_down
    if scope is not None:
        out_spec["scope"] = scope
    return {"apiVersion": QOS, "kind": "AvoidanceAction",
            "metadata": {"name": name, **(meta or {})}, "spec": out_spec}


def policy(name: str = "guard", rules: list[dict] | None = None, node_selector: dict | None = None,
           *, pool: str | None = None, spec: dict | None = None, meta: dict | None = None) -> dict[str, Any]:
    """A NodeQOSEnsurancePolicy; ``pool``: it selects the nodes labelled ``pool=<pool>``;
    ``spec``: more of its spec (``cpuIsolation``), ``rules`` None and no ``spec``: none."""
    out_spec: dict[str, Any] = dict(spec or {})
    if rules is not None or not out_spec:
        out_spec["objectiveEnsurances"] = rules or []
    if pool is not None:
        node_selector = {"matchLabels": {"pool": pool}}
    if node_selector is not None:
        out_spec["nodeSelector"] = node_selector
    return {"apiVersion": QOS, "kind": "NodeQOSEnsurancePolicy",
            "metadata": {"name": name, **(meta or {})}, "spec": out_spec}


def rule(name: str, metric: str, value: Any, action_name: str, **extra: Any) -> dict[str, Any]:
    """One objective ensurance; ``extra``: its other fields as the CRD spells them
    (``avoidanceThreshold``, ``restoreThreshold``, ``strategy``)."""
    out: dict[str, Any] = {"name": name, "metricRule": {"name": metric, "value": value}, "actionName": action_name}
    out.update(extra)
    return out


def node_object(name: str = "n1", cpu: float = 8.0, memory: float = 64e9, pods: float = 110.0,
                **fields: Any) -> Node:
    """A model Node straight from figures (cores, bytes), for the cluster planners' tests."""
    return Node(name, allocatable={"cpu": cpu, "memory": memory, "pods": pods}, **fields)
