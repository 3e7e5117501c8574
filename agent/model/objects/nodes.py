"""Nodes (with their taints) and namespaces."""

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
    mapping,
    metadata,
    resource_list,
    str_map,
)

HOSTNAME_LABEL = "kubernetes.io/hostname"
#: The label the API server gives every namespace: its name.
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str


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
    meta = metadata(raw)
    name = str(meta.get("name") or "")
    if not name:
        raise InvalidObject("Node", "", "metadata.name", f"must be set, got {shown(meta.get('name'))}")

    def body() -> Node:
        spec = mapping(raw.get("spec"), "spec")
        status = mapping(raw.get("status"), "status")
        ready = True
        for cond in listed(status.get("conditions"), "status.conditions"):
            if isinstance(cond, dict) and cond.get("type") == "Ready":
                ready = cond.get("status") == "True"
        allocatable = resource_list(status.get("allocatable"), "status.allocatable")
        capacity = resource_list(status.get("capacity"), "status.capacity")
        if not allocatable:
            allocatable = dict(capacity)
        return Node(
            name=name,
            labels=str_map(meta.get("labels")),
            annotations=str_map(meta.get("annotations")),
            allocatable=allocatable,
            capacity=capacity,
            taints=tuple(
                Taint(str(t.get("key") or ""), str(t.get("value") or ""), str(t.get("effect") or ""))
                for t in listed(spec.get("taints"), "spec.taints")
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
    #: Being deleted (deletionTimestamp set, or phase Terminating): its pods are going, and
    #: nothing new (an Event) may be created in it.
    terminating: bool = False


def parse_namespace(raw: Mapping[str, Any]) -> Namespace:
    meta = metadata(raw)
    name = str(meta.get("name") or "")
    if not name:
        raise InvalidObject("Namespace", "", "metadata.name", f"must be set, got {shown(meta.get('name'))}")
    labels = str_map(meta.get("labels"))
    labels.setdefault(NAMESPACE_NAME_LABEL, name)
    status = raw.get("status")
    phase = status.get("phase") if isinstance(status, Mapping) else None
    return Namespace(name, labels, meta.get("deletionTimestamp") is not None or phase == "Terminating")


def namespace_labels(namespaces: Mapping[str, Namespace], namespace: str) -> Mapping[str, str]:
    """The labels a namespaceSelector sees; a namespace we do not know has the one label
    every namespace has."""
    ns = namespaces.get(namespace)
    return ns.labels if ns else {NAMESPACE_NAME_LABEL: namespace}
