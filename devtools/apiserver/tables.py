"""The Table format (``Accept: application/json;as=Table;g=meta.k8s.io;v=v1``) that
``kubectl get`` asks for: the server decides the columns.

Custom resources get Name plus their CRD's ``additionalPrinterColumns`` (Age when it has
none), evaluated with ``jsonpath``; ``date`` columns are rendered as ages ("5m10s") as
the real server does. Built-in kinds get the columns of kubectl's usual output, reduced to
what this server's objects carry (``COLUMNS``), and NAME / AGE for the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from devtools.apiserver import jsonpath
from devtools.apiserver.catalog import ApiResource, PrinterColumn

NAME_DESCRIPTION = "Name must be unique within a namespace."
AGE_DESCRIPTION = (
    "CreationTimestamp is a timestamp representing the server time when this object was created."
)


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    cell: Callable[[Mapping[str, Any], float], Any]
    priority: int = 0
    format: str = ""
    description: str = ""

    def definition(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type,
            "format": self.format,
            "description": self.description,
            "priority": self.priority,
        }


def human_duration(seconds: float) -> str:
    """Kubernetes' ``duration.HumanDuration``: "45s", "3m12s", "5h2m", "3d4h", "2y"."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes, hours = s // 60, s // 3600
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y{days}d" if days else f"{hours // 24 // 365}y"
    return f"{hours // 24 // 365}y"


def age(timestamp: Any, now: float) -> str:
    if not isinstance(timestamp, str) or not timestamp:
        return "<unknown>"
    try:
        then = datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return "<invalid>"
    return human_duration(now - then)


def _get(obj: Any, *path: str) -> Any:
    for part in path:
        obj = obj.get(part) if isinstance(obj, dict) else None
    return obj


def _name(obj: Mapping[str, Any], _now: float) -> Any:
    return _get(obj, "metadata", "name")


def _age(obj: Mapping[str, Any], now: float) -> Any:
    return age(_get(obj, "metadata", "creationTimestamp"), now)


NAME = Column("Name", "string", _name, format="name", description=NAME_DESCRIPTION)
AGE = Column("Age", "string", _age, description=AGE_DESCRIPTION)


def _at(*path: str, default: Any = "") -> Callable[[Mapping[str, Any], float], Any]:
    def cell(obj: Mapping[str, Any], _now: float) -> Any:
        found = _get(obj, *path)
        return default if found is None else found

    return cell


def _pod_ready(obj: Mapping[str, Any], _now: float) -> str:
    statuses = _get(obj, "status", "containerStatuses") or []
    total = len(_get(obj, "spec", "containers") or []) or len(statuses)
    return f"{sum(1 for c in statuses if c.get('ready'))}/{total}"


def _pod_status(obj: Mapping[str, Any], _now: float) -> str:
    if _get(obj, "metadata", "deletionTimestamp"):
        return "Terminating"
    reason = _get(obj, "status", "reason") or _get(obj, "status", "phase") or "Pending"
    for status in _get(obj, "status", "containerStatuses") or []:
        state = status.get("state") or {}
        for phase in ("waiting", "terminated"):
            if (state.get(phase) or {}).get("reason"):
                reason = state[phase]["reason"]
    return str(reason)


def _pod_restarts(obj: Mapping[str, Any], _now: float) -> int:
    return sum(
        int(c.get("restartCount") or 0) for c in _get(obj, "status", "containerStatuses") or []
    )


def _node_status(obj: Mapping[str, Any], _now: float) -> str:
    ready = [c for c in _get(obj, "status", "conditions") or [] if c.get("type") == "Ready"]
    status = "Unknown" if not ready else "Ready" if ready[0].get("status") == "True" else "NotReady"
    return status + (",SchedulingDisabled" if _get(obj, "spec", "unschedulable") else "")


def _node_roles(obj: Mapping[str, Any], _now: float) -> str:
    labels = _get(obj, "metadata", "labels") or {}
    prefix = "node-role.kubernetes.io/"
    roles = sorted(k[len(prefix) :] for k in labels if k.startswith(prefix))
    return ",".join(roles) or "<none>"


def _ratio(
    ready: tuple[str, ...], total: tuple[str, ...]
) -> Callable[[Mapping[str, Any], float], str]:
    return lambda obj, _now: f"{_get(obj, *ready) or 0}/{_get(obj, *total) or 0}"


def _claim(obj: Mapping[str, Any], _now: float) -> str:
    ref = _get(obj, "spec", "claimRef") or {}
    return f"{ref.get('namespace')}/{ref.get('name')}" if ref.get("name") else ""


def _event_object(obj: Mapping[str, Any], _now: float) -> str:
    ref = obj.get("involvedObject") or obj.get("regarding") or {}
    return f"{str(ref.get('kind', '')).lower()}/{ref.get('name', '')}"


def _last_seen(obj: Mapping[str, Any], now: float) -> str:
    stamp = (
        obj.get("lastTimestamp")
        or obj.get("eventTime")
        or _get(obj, "metadata", "creationTimestamp")
    )
    return age(stamp, now)


#: Columns after NAME for built-in kinds, by (group, plural); AGE is appended where absent.
COLUMNS: Mapping[tuple[str, str], tuple[Column, ...]] = {
    ("", "pods"): (
        Column("Ready", "string", _pod_ready),
        Column("Status", "string", _pod_status),
        Column("Restarts", "integer", _pod_restarts),
        AGE,
        Column("IP", "string", _at("status", "podIP", default="<none>"), priority=1),
        Column("Node", "string", _at("spec", "nodeName", default="<none>"), priority=1),
    ),
    ("", "nodes"): (
        Column("Status", "string", _node_status),
        Column("Roles", "string", _node_roles),
        AGE,
        Column("Version", "string", _at("status", "nodeInfo", "kubeletVersion"), priority=0),
    ),
    ("", "namespaces"): (Column("Status", "string", _at("status", "phase", default="Active")),),
    ("", "configmaps"): (Column("Data", "integer", lambda o, _n: len(o.get("data") or {})),),
    ("", "persistentvolumes"): (
        Column("Capacity", "string", _at("spec", "capacity", "storage")),
        Column("Status", "string", _at("status", "phase")),
        Column("Claim", "string", _claim),
    ),
    ("", "persistentvolumeclaims"): (
        Column("Status", "string", _at("status", "phase")),
        Column("Volume", "string", _at("spec", "volumeName")),
        Column("Capacity", "string", _at("status", "capacity", "storage")),
    ),
    ("apps", "deployments"): (
        Column("Ready", "string", _ratio(("status", "readyReplicas"), ("spec", "replicas"))),
        Column("Up-to-date", "integer", _at("status", "updatedReplicas", default=0)),
        Column("Available", "integer", _at("status", "availableReplicas", default=0)),
    ),
    ("apps", "replicasets"): (
        Column("Desired", "integer", _at("spec", "replicas", default=0)),
        Column("Current", "integer", _at("status", "replicas", default=0)),
        Column("Ready", "integer", _at("status", "readyReplicas", default=0)),
    ),
    ("apps", "statefulsets"): (
        Column("Ready", "string", _ratio(("status", "readyReplicas"), ("spec", "replicas"))),
    ),
    ("apps", "daemonsets"): (
        Column("Desired", "integer", _at("status", "desiredNumberScheduled", default=0)),
        Column("Current", "integer", _at("status", "currentNumberScheduled", default=0)),
        Column("Ready", "integer", _at("status", "numberReady", default=0)),
    ),
    ("batch", "jobs"): (
        Column("Completions", "string", _ratio(("status", "succeeded"), ("spec", "completions"))),
    ),
    ("policy", "poddisruptionbudgets"): (
        Column("Min Available", "string", _at("spec", "minAvailable", default="N/A")),
        Column("Max Unavailable", "string", _at("spec", "maxUnavailable", default="N/A")),
        Column("Allowed Disruptions", "integer", _at("status", "disruptionsAllowed", default=0)),
    ),
    ("scheduling.k8s.io", "priorityclasses"): (
        Column("Value", "integer", _at("value", default=0)),
        Column("Global-Default", "boolean", _at("globalDefault", default=False)),
    ),
    ("coordination.k8s.io", "leases"): (Column("Holder", "string", _at("spec", "holderIdentity")),),
    ("apiextensions.k8s.io", "customresourcedefinitions"): (
        Column("Created At", "date", _at("metadata", "creationTimestamp")),
    ),
    ("", "events"): (
        Column("Type", "string", _at("type")),
        Column("Reason", "string", _at("reason")),
        Column("Object", "string", _event_object),
        Column("Message", "string", _at("message")),
    ),
}


def _printer_cell(column: PrinterColumn) -> Callable[[Mapping[str, Any], float], Any]:
    jsonpath.compile_path(column.json_path)  # a bad path is refused when the CRD is made

    def cell(obj: Mapping[str, Any], now: float) -> Any:
        found = jsonpath.find(obj, column.json_path)
        if not found:
            return None
        if column.type == "date":
            return age(found[0], now)
        if len(found) == 1 and not isinstance(found[0], dict | list):
            return found[0]
        return ",".join(_text(v) for v in found)

    return cell


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def columns(info: ApiResource) -> tuple[Column, ...]:
    if info.crd:
        extra = tuple(
            Column(
                c.name,
                "string" if c.type == "date" else c.type,
                _printer_cell(c),
                c.priority,
                c.format,
                c.description,
            )
            for c in info.columns
        )
        return (NAME, *(extra or (AGE,)))
    r = info.resource
    if (r.group, r.plural) == ("", "events"):
        return (Column("Last Seen", "string", _last_seen), *COLUMNS[("", "events")])
    rest = COLUMNS.get((r.group, r.plural), ())
    if AGE in rest or r.kind == "CustomResourceDefinition":
        return (NAME, *rest)
    return (NAME, *rest, AGE)


def partial_metadata(obj: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata") or {},
    }


def table(
    info: ApiResource,
    objects: Iterable[Mapping[str, Any]],
    now: float,
    *,
    include_object: str = "Metadata",
    with_definitions: bool = True,
    metadata: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A meta.k8s.io/v1 Table of ``objects``; ``include_object`` as the query parameter
    ``includeObject`` (None, Metadata or Object)."""
    cols = columns(info)
    rows = []
    for obj in objects:
        row: dict[str, Any] = {"cells": [c.cell(obj, now) for c in cols]}
        if include_object == "Object":
            row["object"] = obj
        elif include_object != "None":
            row["object"] = partial_metadata(obj)
        rows.append(row)
    out: dict[str, Any] = {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": dict(metadata or {}),
        "rows": rows,
    }
    if with_definitions:
        out["columnDefinitions"] = [c.definition() for c in cols]
    return out
