"""scheduling.k8s.io/v1 PriorityClass: a name and the priority value it stands for (a
PodMigrationJob's ``spec.priorityClassName`` reads it)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent.errors import InvalidObject
from agent.model.fields import Fields, shown

KIND = "PriorityClass"


@dataclass(frozen=True, slots=True)
class PriorityClass:
    name: str
    value: int


def parse_priority_class(raw: Mapping[str, Any]) -> PriorityClass:
    meta = raw.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    if not isinstance(name, str) or not name:
        raise InvalidObject(KIND, "", "metadata.name", f"must be set, got {shown(name)}")
    return PriorityClass(name, Fields(KIND, name).integer(raw.get("value"), "value"))
