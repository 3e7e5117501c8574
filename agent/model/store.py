"""A snapshot of Kubernetes objects, indexed the ways the engines look them up.

The same store is filled from a scenario's ``objects``, from the local debug mode's files
and from the API adapter's caches. Core kinds are parsed into records; other kinds (the
CRs each engine owns) are kept as raw dicts under ``raw[kind]`` for their engine to parse.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agent.errors import InvalidObject
from agent.model.objects import (
    WORKLOAD_KINDS,
    Namespace,
    Node,
    Pod,
    PodDisruptionBudget,
    Workload,
    parse_namespace,
    parse_node,
    parse_pdb,
    parse_pod,
    parse_workload,
)


@dataclass
class ObjectStore:
    nodes: dict[str, Node] = field(default_factory=dict)
    pods: list[Pod] = field(default_factory=list)
    namespaces: dict[str, Namespace] = field(default_factory=dict)
    pdbs: list[PodDisruptionBudget] = field(default_factory=list)
    #: Workloads by uid (owner references point at uids).
    workloads: dict[str, Workload] = field(default_factory=dict)
    #: Every other kind, raw, in input order.
    raw: dict[str, list[Mapping[str, Any]]] = field(default_factory=lambda: defaultdict(list))

    @classmethod
    def from_dicts(cls, objects: Iterable[object], where: str = "objects") -> ObjectStore:
        """Parse a list of manifests. Raises InvalidObject on the first bad one."""
        store = cls()
        for index, raw in enumerate(objects):
            store.add(raw, f"{where}[{index}]")
        return store

    def add(self, raw: object, where: str = "object") -> None:
        if not isinstance(raw, dict):
            raise InvalidObject("object", where, "", f"expected a mapping, got {type(raw).__name__}")
        kind = raw.get("kind")
        if not isinstance(kind, str) or not kind:
            raise InvalidObject("object", where, "kind", "must be set")
        parser = _CORE_PARSERS.get(kind)
        if parser is not None:
            parser(self, raw)
        elif kind in WORKLOAD_KINDS:
            workload = parse_workload(raw)
            self.workloads[workload.uid] = workload
        else:
            self.raw[kind].append(raw)

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
        ns = self.namespaces.get(namespace)
        return ns.labels if ns else {"kubernetes.io/metadata.name": namespace}


def _add_node(store: ObjectStore, raw: Mapping[str, Any]) -> None:
    node = parse_node(raw)
    store.nodes[node.name] = node


def _add_pod(store: ObjectStore, raw: Mapping[str, Any]) -> None:
    store.pods.append(parse_pod(raw))


def _add_namespace(store: ObjectStore, raw: Mapping[str, Any]) -> None:
    ns = parse_namespace(raw)
    store.namespaces[ns.name] = ns


def _add_pdb(store: ObjectStore, raw: Mapping[str, Any]) -> None:
    store.pdbs.append(parse_pdb(raw))


_CORE_PARSERS = {
    "Node": _add_node,
    "Pod": _add_pod,
    "Namespace": _add_namespace,
    "PodDisruptionBudget": _add_pdb,
}
