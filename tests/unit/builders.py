"""Small builders of Kubernetes-shaped dicts for tests."""

from __future__ import annotations

from typing import Any

NOW = 1_767_225_600.0  # 2026-01-01T00:00:00Z


def node(name: str = "n1", cpu: str = "8", memory: str = "32Gi", labels: dict | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels or {}},
        "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": "110"}},
    }


def pod(
    name: str,
    *,
    namespace: str = "default",
    node_name: str = "n1",
    qos: str | None = None,
    priority: int = 0,
    started: str = "2025-12-31T23:00:00Z",
    requests: dict | None = None,
    limits: dict | None = None,
    containers: list[dict] | None = None,
    labels: dict | None = None,
    annotations: dict | None = None,
    owner_kind: str = "ReplicaSet",
    deleting: bool = False,
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": f"uid-{name}",
        "creationTimestamp": started,
        "labels": labels or {},
        "annotations": annotations or {},
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": owner_kind, "name": f"{name}-owner",
                             "uid": f"uid-{name}-owner", "controller": True}],
    }
    if deleting:
        meta["deletionTimestamp"] = "2025-12-31T23:59:00Z"
    status: dict[str, Any] = {"phase": "Running", "startTime": started,
                              "conditions": [{"type": "Ready", "status": "True"}]}
    if qos:
        status["qosClass"] = qos
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"nodeName": node_name, "priority": priority,
                 "containers": containers or [{"name": "main", "resources": resources}]},
        "status": status,
    }


def action(name: str = "throttle", *, throttle: dict | None = None, eviction: dict | None = None,
           cool_down: int | None = None, scope: dict | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if throttle is not None:
        spec["throttle"] = {"cpuThrottle": throttle}
    if eviction is not None:
        spec["eviction"] = eviction
    if cool_down is not None:
        spec["coolDownSeconds"] = cool_down
    if scope is not None:
        spec["scope"] = scope
    return {"apiVersion": "qos.waterline.io/v1alpha1", "kind": "AvoidanceAction",
            "metadata": {"name": name}, "spec": spec}


def policy(name: str = "guard", rules: list[dict] | None = None, node_selector: dict | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"objectiveEnsurances": rules or []}
    if node_selector is not None:
        spec["nodeSelector"] = node_selector
    return {"apiVersion": "qos.waterline.io/v1alpha1", "kind": "NodeQOSEnsurancePolicy",
            "metadata": {"name": name}, "spec": spec}


def rule(name: str, metric: str, value: str, action_name: str, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "metricRule": {"name": metric, "value": value}, "actionName": action_name}
    out.update(extra)
    return out
