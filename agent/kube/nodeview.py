"""What the node agent reads: its node, the pods bound to it, namespaces, budgets, and
the QoS policies and actions, from a cache fed by six watches.

Pods are watched with ``fieldSelector=spec.nodeName=<node>`` and the node with
``metadata.name=<node>``, so an agent holds about 250 pods, not the cluster's 150,000.
Namespaces (for scope selectors), PodDisruptionBudgets and the two cluster-scoped CRs are
small and watched whole.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any, cast

from agent.kube.cache import Cache
from agent.kube.client import KubeApi
from agent.kube.fetching import Selectors
from agent.kube.resources import ACTIONS, NAMESPACES, NODES, PDBS, PODS, POLICIES, Resource
from agent.kube.watching import Informers, WatchArgs, start_watches
from agent.model.objects import Namespace, Node, Pod, PodDisruptionBudget
from agent.model.store import ObjectStore

NODE_KINDS = (PODS.kind, NODES.kind, NAMESPACES.kind, PDBS.kind, POLICIES.kind, ACTIONS.kind)


def node_watches(node_name: str) -> list[tuple[Resource, Selectors]]:
    return [
        (PODS, Selectors(field_selector=f"spec.nodeName={node_name}")),
        (NODES, Selectors(field_selector=f"metadata.name={node_name}")),
        (NAMESPACES, Selectors()),
        (PDBS, Selectors()),
        (POLICIES, Selectors()),
        (ACTIONS, Selectors()),
    ]


class NodeView:
    """Read-only snapshot accessors over the cache; every call returns fresh lists."""

    def __init__(self, cache: Cache, node_name: str) -> None:
        self.cache = cache
        self.node_name = node_name

    def pods(self) -> list[Pod]:
        pods = cast(list[Pod], self.cache.records(PODS.kind))
        return sorted((p for p in pods if p.node_name == self.node_name), key=lambda p: p.key)

    def node(self) -> Node | None:
        return cast("Node | None", self.cache.get(NODES.kind, self.node_name))

    def namespaces(self) -> dict[str, Namespace]:
        return {ns.name: ns for ns in cast(list[Namespace], self.cache.records(NAMESPACES.kind))}

    def pdbs(self) -> list[PodDisruptionBudget]:
        return sorted(
            cast(list[PodDisruptionBudget], self.cache.records(PDBS.kind)), key=lambda b: b.key
        )

    def policies(self) -> list[Mapping[str, Any]]:
        return _by_name(self.cache.records(POLICIES.kind))

    def actions(self) -> list[Mapping[str, Any]]:
        return _by_name(self.cache.records(ACTIONS.kind))

    def invalid(self) -> dict[str, dict[str, str]]:
        """Objects that did not parse, by kind then key, with the error."""
        return {kind: bad for kind in NODE_KINDS if (bad := self.cache.invalid(kind))}

    def store(self) -> ObjectStore:
        """The snapshot as the engines take it."""
        store = ObjectStore()
        node = self.node()
        if node is not None:
            store.nodes[node.name] = node
        store.pods = self.pods()
        store.namespaces = self.namespaces()
        store.pdbs = self.pdbs()
        store.raw[POLICIES.kind] = self.policies()
        store.raw[ACTIONS.kind] = self.actions()
        return store

    @property
    def synced(self) -> bool:
        """Every watch has listed at least once."""
        return self.cache.synced(NODE_KINDS)

    @property
    def api_reachable(self) -> bool:
        return self.cache.api_reachable

    @property
    def version(self) -> int:
        return self.cache.version

    def wait_for_change(self, since: int, timeout: float | None = None) -> int:
        return self.cache.wait_for_change(since, timeout)


def _by_name(items: list[object]) -> list[Mapping[str, Any]]:
    raws = cast(list[Mapping[str, Any]], items)
    return sorted(raws, key=lambda o: str((o.get("metadata") or {}).get("name") or ""))


def start_node_view(
    api: KubeApi, node_name: str, args: WatchArgs | None = None, rng: random.Random | None = None
) -> tuple[NodeView, Informers]:
    """Start the six watches of one node's agent; stop them with ``informers.stop()``."""
    cache = Cache()
    return NodeView(cache, node_name), start_watches(api, cache, node_watches(node_name), args, rng)
