"""Queue (``qos.waterline.io/v1alpha1``, cluster-scoped): the record queue-proportional
preemption decides on, in Volcano's shape::

    spec: {weight: 1, capability: {cpu: "8"}, guarantee: {resource: {cpu: "2"}},
           reclaimable: true}

A pod joins a queue through its label ``qos.waterline.io/queue``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agent.errors import InvalidObject
from agent.model.fields import Fields, shown
from agent.model.objects import Resources
from agent.model.quantity import parse_quantity

KIND = "Queue"
QUEUE_LABEL = "qos.waterline.io/queue"


@dataclass(frozen=True, slots=True)
class Queue:
    name: str
    weight: int = 1
    #: Upper bound per resource; a resource not listed is unbounded.
    capability: Resources = field(default_factory=dict)
    guarantee: Resources = field(default_factory=dict)
    reclaimable: bool = True


def _resources(f: Fields, path: str, raw: object) -> dict[str, float]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise f.bad(path, "must be a mapping of resources", raw)
    out: dict[str, float] = {}
    for resource, quantity in raw.items():
        key = f"{path}.{resource}"
        try:
            amount = parse_quantity(quantity)
        except ValueError:
            raise f.bad(key, "must be a Kubernetes quantity", quantity) from None
        if not amount >= 0 or math.isinf(amount):
            raise f.bad(key, "must be a finite quantity >= 0", quantity)
        out[str(resource)] = amount
    return out


def _guarantee(f: Fields, spec: Mapping[str, Any], capability: Resources) -> dict[str, float]:
    raw = spec.get("guarantee")
    if raw is not None and not isinstance(raw, dict):
        raise f.bad("spec.guarantee", "must be a mapping with a resource field", raw)
    given = (raw or {}).get("resource")
    guarantee = _resources(f, "spec.guarantee.resource", given)
    for resource, amount in guarantee.items():
        if resource in capability and amount > capability[resource]:
            raise f.bad(
                f"spec.guarantee.resource.{resource}",
                f"must be <= spec.capability.{resource} ({capability[resource]:g})",
                (given or {})[resource],
            )
    return guarantee


def parse_queue(raw: Mapping[str, Any]) -> Queue:
    """Parse one Queue dict; InvalidObject names the field."""
    meta = raw.get("metadata") if isinstance(raw.get("metadata"), dict) else {}
    name = str((meta or {}).get("name") or "")
    if not name:
        raise InvalidObject(KIND, "", "metadata.name", f"must be set, got {shown((meta or {}).get('name'))}")
    f = Fields(KIND, name)
    spec = raw.get("spec") or {}
    if not isinstance(spec, dict):
        raise f.bad("spec", "must be a mapping", spec)
    weight = spec.get("weight")
    reclaimable = spec.get("reclaimable")
    capability = _resources(f, "spec.capability", spec.get("capability"))
    return Queue(
        name,
        1 if weight is None else f.integer(weight, "spec.weight", minimum=1),
        capability,
        _guarantee(f, spec, capability),
        True if reclaimable is None else f.boolean(reclaimable, "spec.reclaimable"),
    )
