"""PersistentVolumes and their claims, kept to what the evictor filters read: which claim a
pod's volume is bound to, and whether that volume is tied to one node.

A volume is tied to one node (``pinned``) when it is a ``local`` or ``hostPath`` volume, or
when its required node affinity admits exactly one node (every term names the same node by
``kubernetes.io/hostname`` or ``metadata.name`` with operator In and one value). A pod on
such a volume cannot run anywhere else: moving it would leave it Pending, or lose its data.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent.errors import InvalidObject
from agent.model.fields import shown
from agent.model.objects.common import metadata
from agent.model.objects.nodes import HOSTNAME_LABEL

PV_KIND = "PersistentVolume"
PVC_KIND = "PersistentVolumeClaim"


@dataclass(frozen=True, slots=True)
class PersistentVolume:
    name: str
    #: Why the volume is tied to one node (``local volume on n1``); "" when it is not.
    pinned: str = ""


@dataclass(frozen=True, slots=True)
class PersistentVolumeClaim:
    namespace: str
    name: str
    #: spec.volumeName: the PersistentVolume it is bound to ("" while unbound).
    volume_name: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _single_node(affinity: object) -> str:
    """The one node a PV's required node affinity admits, else ""."""
    if not isinstance(affinity, dict):
        return ""
    required = affinity.get("required")
    terms = required.get("nodeSelectorTerms") if isinstance(required, dict) else None
    if not isinstance(terms, list) or not terms:
        return ""
    nodes: set[str] = set()
    for term in terms:
        if not isinstance(term, dict):
            return ""
        named = [
            req["values"][0]
            for key, field in (
                ("matchExpressions", HOSTNAME_LABEL),
                ("matchFields", "metadata.name"),
            )
            for req in _list(term.get(key))
            if isinstance(req, dict)
            and req.get("key") == field
            and req.get("operator") == "In"
            and isinstance(req.get("values"), list)
            and len(req["values"]) == 1
        ]
        if not named:
            return ""
        nodes.update(str(n) for n in named)
    return nodes.pop() if len(nodes) == 1 else ""


def parse_persistent_volume(raw: Mapping[str, Any]) -> PersistentVolume:
    name = str(metadata(raw).get("name") or "")
    if not name:
        raise InvalidObject(PV_KIND, "", "metadata.name", f"must be set, got {shown(name)}")
    spec = raw.get("spec")
    spec = spec if isinstance(spec, dict) else {}
    node = _single_node(spec.get("nodeAffinity"))
    where = f" on {node}" if node else ""
    if spec.get("local") is not None:
        return PersistentVolume(name, f"local volume{where}")
    if spec.get("hostPath") is not None:
        return PersistentVolume(name, f"hostPath volume{where}")
    return PersistentVolume(name, f"volume bound to node {node}" if node else "")


def parse_persistent_volume_claim(raw: Mapping[str, Any]) -> PersistentVolumeClaim:
    meta = metadata(raw)
    name = str(meta.get("name") or "")
    namespace = str(meta.get("namespace") or "default")
    if not name:
        raise InvalidObject(PVC_KIND, "", "metadata.name", f"must be set, got {shown(name)}")
    spec = raw.get("spec")
    volume = spec.get("volumeName") if isinstance(spec, dict) else None
    return PersistentVolumeClaim(namespace, name, str(volume or ""))
