"""A node's taints, read and written as one read-modify-write.

The node agent (its own taint) and the controller (the drain taint) both change one taint
of a node and keep every other: read the taints with the node's resourceVersion, write
the new list back with that version as a precondition, so a concurrent taint writer (the
node lifecycle controller, the other component) makes the write fail with 409 rather than
be overwritten. Callers decide what the list should become and what a failure means.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agent.kube.client import KubeApi
from agent.kube.patching import merge_patch
from agent.kube.resources import NODES


@dataclass(frozen=True, slots=True)
class NodeTaints:
    taints: list[dict[str, Any]]
    #: The node's resourceVersion when read ("" when the server gave none).
    version: str


def read_taints(api: KubeApi, name: str) -> NodeTaints:
    raw = api.request("GET", NODES.path(None, name))
    taints = [t for t in (raw.get("spec") or {}).get("taints") or [] if isinstance(t, dict)]
    return NodeTaints(taints, (raw.get("metadata") or {}).get("resourceVersion") or "")


def write_taints(api: KubeApi, name: str, taints: list[dict[str, Any]], read: NodeTaints) -> None:
    """Replace the node's taints, on the condition it did not change since ``read``."""
    patch: dict[str, Any] = {"spec": {"taints": taints}}
    if read.version:
        patch["metadata"] = {"resourceVersion": read.version}
    merge_patch(api, NODES, name, patch)
