"""Who owns a pod: owner references and the slim workload records behind them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent.errors import InvalidObject
from agent.model.fields import shown
from agent.model.objects.common import metadata


@dataclass(frozen=True, slots=True)
class OwnerRef:
    kind: str
    name: str
    uid: str
    controller: bool = False
    api_version: str = ""


def parse_owner(raw: object, path: str) -> OwnerRef:
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: must be a mapping, got {shown(raw)}")
    return OwnerRef(
        str(raw.get("kind") or ""),
        str(raw.get("name") or ""),
        str(raw.get("uid") or ""),
        bool(raw.get("controller")),
        str(raw.get("apiVersion") or ""),
    )


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
    meta = metadata(raw)
    kind = str(raw.get("kind") or "")
    name = str(meta.get("name") or "")
    namespace = str(meta.get("namespace") or "default")
    spec = raw.get("spec") or {}
    if not isinstance(spec, dict):
        raise InvalidObject(kind, f"{namespace}/{name}", "spec", f"must be a mapping, got {shown(spec)}")
    owners = meta.get("ownerReferences") or []
    if not isinstance(owners, list):
        raise InvalidObject(
            kind, f"{namespace}/{name}", "metadata.ownerReferences", f"must be a list, got {shown(owners)}"
        )
    replicas = spec.get("replicas")
    if kind == "Job":
        replicas = spec.get("parallelism", replicas)
    if replicas is not None and (isinstance(replicas, bool) or not isinstance(replicas, int)):
        raise InvalidObject(kind, f"{namespace}/{name}", "spec.replicas", f"must be an integer, got {shown(replicas)}")
    owner = None
    for i, o in enumerate(owners):
        if not isinstance(o, dict):
            raise InvalidObject(kind, f"{namespace}/{name}", f"metadata.ownerReferences[{i}]", f"must be a mapping, got {shown(o)}")
        ref = parse_owner(o, f"metadata.ownerReferences[{i}]")
        if ref.controller:
            owner = ref
    return Workload(kind, namespace, name, str(meta.get("uid") or f"{kind}/{namespace}/{name}"), replicas, owner)
