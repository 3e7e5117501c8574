"""The objects a capture writes: raw manifests of what the agent decided on.

* ``LocalManifests``: the ``--objects`` files, as the agent's own source last read them;
* ``ClusterManifests``: listed from the API server: the pods of the node again whenever a
  pod the capture has not listed yet shows up in a tick, everything once more at the end.

An object seen once is kept (last version wins), also after it went: the samples taken
while it was there name it. The policies and actions written are the last ones seen.
``scenario_objects`` then keeps what a scenario of this one node needs, in a form the
simulator reads: the Node (made from the node the agent used when no manifest names it,
as local mode does from this host), the node's pods (``spec.nodeName`` filled in where a
local file left it out), the valid policies and actions, and every other object as is;
anything the simulator's store refuses is left out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import structlog

from agent.errors import InvalidObject
from agent.kube.cache import slim
from agent.kube.client import KubeApi
from agent.kube.fetching import Selectors, get_object, list_objects
from agent.kube.resources import ACTIONS, NAMESPACES, NODES, PDBS, PODS, POLICIES, Resource
from agent.model.objects import Node
from agent.model.policy import ACTION_KIND, POLICY_KIND, load_policies
from agent.model.store import ObjectStore
from agent.node.local import FileObjectSource
from agent.node.loop import TickOutcome

Key = tuple[str, str, str]  # kind, namespace, name


def object_key(raw: Mapping[str, Any]) -> Key | None:
    meta = raw.get("metadata")
    if not isinstance(meta, dict) or not isinstance(raw.get("kind"), str):
        return None
    return (raw["kind"], str(meta.get("namespace") or ""), str(meta.get("name") or ""))


class _Kept:
    def __init__(self) -> None:
        self.objects: dict[Key, dict[str, Any]] = {}

    def keep(self, items: Iterable[Any]) -> None:
        for raw in items:
            key = object_key(raw) if isinstance(raw, dict) else None
            if key is not None:
                self.objects[key] = raw


class LocalManifests(_Kept):
    """The objects the agent's ``FileObjectSource`` read: the files are read once, by the
    agent, with its reader (a file that stops parsing keeps its last content there)."""

    def __init__(self, source: FileObjectSource) -> None:
        super().__init__()
        self.source = source
        self.refresh()

    def refresh(self, _outcome: TickOutcome | None = None) -> None:
        self.keep(self.source.manifests())

    def finish(self) -> None:
        self.source()  # the files as they are now
        self.refresh()


class ClusterManifests(_Kept):
    KINDS: tuple[Resource, ...] = (NAMESPACES, PDBS, POLICIES, ACTIONS)

    def __init__(self, api: KubeApi, node_name: str) -> None:
        super().__init__()
        self.api = api
        self.node_name = node_name
        self._uids: set[str] = set()
        self.log = structlog.get_logger()

    def _pods(self) -> None:
        listing = list_objects(self.api, PODS, Selectors(field_selector=f"spec.nodeName={self.node_name}"))
        self.keep(slim(p) for p in listing.items)
        self._uids |= {str((p.get("metadata") or {}).get("uid") or "") for p in listing.items}

    def refresh(self, outcome: TickOutcome | None = None) -> None:
        """List the node's pods when a tick names one not listed yet."""
        if outcome is not None and all(p.uid in self._uids for p in outcome.pods):
            return
        try:
            self._pods()
        except Exception as err:  # noqa: BLE001 - the capture goes on; retried next tick
            self.log.warning("listing the node's pods failed", error=str(err))

    def finish(self) -> None:
        node = get_object(self.api, NODES, self.node_name)
        node.setdefault("kind", NODES.kind)
        node.setdefault("apiVersion", NODES.api_version)
        self.keep([slim(node)])
        for resource in self.KINDS:
            self.keep(slim(o) for o in list_objects(self.api, resource).items)
        self._pods()


def node_manifest(node: Node) -> dict[str, Any]:
    """A Node manifest for a node the agent made up (local mode without a Node object)."""

    def quantities(values: Mapping[str, float]) -> dict[str, str]:
        return {k: f"{v:g}" if k == "cpu" else str(round(v)) for k, v in values.items()}

    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node.name, "labels": dict(node.labels)},
        "status": {"allocatable": quantities(node.allocatable), "capacity": quantities(node.capacity)},
    }


def _on_node(raw: dict[str, Any], node_name: str) -> dict[str, Any] | None:
    found = raw.get("spec")
    spec: dict[str, Any] = found if isinstance(found, dict) else {}
    bound = spec.get("nodeName") or ""
    if bound not in ("", node_name):
        return None
    return raw if bound else {**raw, "spec": {**spec, "nodeName": node_name}}


def scenario_objects(
    objects: Mapping[Key, dict[str, Any]], node: Node | None, node_name: str
) -> tuple[list[dict[str, Any]], list[str]]:
    """The scenario's objects, and why any seen object was left out."""
    dropped: list[str] = []
    out: list[dict[str, Any]] = []
    if ("Node", "", node_name) not in objects and node is not None:
        out.append(node_manifest(node))
    policies = load_policies(
        [o for k, o in objects.items() if k[0] == POLICY_KIND],
        [o for k, o in objects.items() if k[0] == ACTION_KIND],
    )
    invalid = {(e.kind, e.name) for e in policies.errors}
    dropped += [str(e) for e in policies.errors]
    store = ObjectStore()
    for (kind, namespace, name), raw in objects.items():
        if kind == "Node" and name != node_name:
            continue
        if (kind, name) in invalid:
            continue
        if kind == "Pod":
            bound = _on_node(raw, node_name)
            if bound is None:
                continue
            raw = bound
        try:
            store.add(raw, f"{kind} {namespace}/{name}")
        except (InvalidObject, ValueError, TypeError, KeyError, AttributeError) as err:
            dropped.append(str(err))
            continue
        out.append(raw)
    return out, dropped
