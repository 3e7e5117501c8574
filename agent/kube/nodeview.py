"""What the node agent reads: its node, the pods bound to it, namespaces, budgets, and
the QoS policies and actions, from a cache fed by six watches.

Pods are watched with ``fieldSelector=spec.nodeName=<node>`` and the node with
``metadata.name=<node>``, so an agent holds about 250 pods, not the cluster's 150,000.
Namespaces (for scope selectors), PodDisruptionBudgets and the two cluster-scoped CRs are
small and watched whole. A seventh watch follows the cluster brake, the ConfigMap
``waterline-brake`` in Waterline's namespace that the controller sets to pause every
agent's evictions. It does not hold back readiness (throttling needs no brake), but
evictions wait until it has listed once: an agent that may not read it (RBAC) keeps
evictions paused and its watch says why in the log, once. An eighth watch follows the
agent's own DaemonSet (``metadata.name=waterline-agent`` in that namespace): its deletion,
once seen, is remembered (:class:`OwnDaemonSet`), because an uninstall removes the
agent's ServiceAccount and RBAC in the same pass, and a stopping agent's own question
("is my DaemonSet gone?") is then refused; an established watch still hears the answer.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any, cast

from agent.defaults import AGENT_DAEMONSET, BRAKE_CONFIGMAP, NAMESPACE
from agent.kube.cache import Cache
from agent.kube.client import KubeApi
from agent.kube.fetching import Selectors
from agent.kube.resources import (
    ACTIONS,
    CONFIGMAPS,
    DAEMONSETS,
    NAMESPACES,
    NODES,
    PDBS,
    PODS,
    POLICIES,
    Resource,
)
from agent.kube.watching import Informers, WatchArgs, start_watches
from agent.model.objects import Namespace, Node, Pod, PodDisruptionBudget
from agent.model.store import ObjectStore

NODE_KINDS = (PODS.kind, NODES.kind, NAMESPACES.kind, PDBS.kind, POLICIES.kind, ACTIONS.kind)
#: The ConfigMap of the cluster brake and its keys (the controller writes them).
BRAKE_NAME = BRAKE_CONFIGMAP
BRAKE_PAUSED = "evictionsPaused"
BRAKE_REASON = "reason"
#: Kinds whose manifests the view keeps, to save them (policies and actions are raw).
SAVED_KINDS = (NODES.kind, PODS.kind, NAMESPACES.kind)


def node_watches(
    node_name: str, namespace: str = NAMESPACE, daemonset: str = AGENT_DAEMONSET
) -> list[tuple[Resource, Selectors]]:
    return [
        (PODS, Selectors(field_selector=f"spec.nodeName={node_name}")),
        (NODES, Selectors(field_selector=f"metadata.name={node_name}")),
        (NAMESPACES, Selectors()),
        (PDBS, Selectors()),
        (POLICIES, Selectors()),
        (ACTIONS, Selectors()),
        (CONFIGMAPS, Selectors(namespace=namespace, field_selector=f"metadata.name={BRAKE_NAME}")),
        (DAEMONSETS, Selectors(namespace=namespace, field_selector=f"metadata.name={daemonset}")),
    ]


class OwnDaemonSet:
    """What the watch last saw of the agent's own DaemonSet: ``deleted`` once it was there
    and then is being deleted or gone; a DaemonSet made again (a reinstall) clears it. Fed
    by the cache's change listener (under its lock: short work)."""

    def __init__(self, cache: Cache) -> None:
        self.cache = cache
        self.seen = False
        self.deleted = False
        cache.add_listener(self._changed)

    def _changed(self, kind: str) -> None:
        if kind != DAEMONSETS.kind:
            return
        raws = self.cache.raws(DAEMONSETS.kind)
        if raws:
            self.seen = True
            self.deleted = any((r.get("metadata") or {}).get("deletionTimestamp") for r in raws)
        elif self.seen:
            self.deleted = True


def brake_reason(configmap: Mapping[str, Any] | None) -> str | None:
    """Why evictions are paused, when the brake ConfigMap says they are; else None."""
    data = (configmap or {}).get("data")
    if not isinstance(data, Mapping) or data.get(BRAKE_PAUSED) != "true":
        return None
    return str(data.get(BRAKE_REASON) or "the cluster brake is set")


class NodeView:
    """Read-only snapshot accessors over the cache; every call returns fresh lists."""

    def __init__(self, cache: Cache, node_name: str, namespace: str = NAMESPACE) -> None:
        self.cache = cache
        self.node_name = node_name
        self.namespace = namespace
        self.own_daemonset: OwnDaemonSet | None = None

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

    def brake(self) -> str | None:
        """The cluster brake's reason while it is set (evictions paused), else None.
        Until its watch has listed once the brake is unknown, which pauses evictions too:
        an agent never evicts on a start that has not read the brake yet."""
        if not self.cache.synced((CONFIGMAPS.kind,)):
            return f"the cluster brake (ConfigMap {self.namespace}/{BRAKE_NAME}) is not read yet"
        raw = self.cache.get(CONFIGMAPS.kind, f"{self.namespace}/{BRAKE_NAME}")
        return brake_reason(cast("Mapping[str, Any] | None", raw))

    def manifests(self) -> list[Mapping[str, Any]]:
        """The node, its pods, the namespaces, policies and actions as slim manifests:
        what a restarted agent needs to act before the API server answers."""
        out: list[Mapping[str, Any]] = []
        for kind in SAVED_KINDS:
            out.extend(self.cache.raws(kind))
        return out + self.policies() + self.actions()

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
    api: KubeApi,
    node_name: str,
    args: WatchArgs | None = None,
    rng: random.Random | None = None,
    namespace: str = NAMESPACE,
    daemonset: str = AGENT_DAEMONSET,
) -> tuple[NodeView, Informers]:
    """Start the watches of one node's agent (``namespace``: Waterline's, where the brake
    ConfigMap and the agent's DaemonSet ``daemonset`` live); stop them with
    ``informers.stop()``."""
    cache = Cache(keep_raw=(*SAVED_KINDS, DAEMONSETS.kind))
    view = NodeView(cache, node_name, namespace)
    view.own_daemonset = OwnDaemonSet(cache)
    watches = node_watches(node_name, namespace, daemonset)
    return view, start_watches(api, cache, watches, args, rng)
