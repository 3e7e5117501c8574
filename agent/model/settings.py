"""Agent decision settings (``config.agent`` in a scenario, the agent's config file live)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent.errors import InvalidObject

DEFAULT_EXT_CPU_RESOURCE = "qos.waterline.io/ext-cpu"


@dataclass(frozen=True, slots=True)
class AgentSettings:
    #: Scales evict and throttle-down gaps by (1 + p/100): act a little beyond the line.
    execute_excess_percent: float = 0.0
    #: The extended resource (in cores) that the extCpuUsage sorter looks at.
    ext_cpu_resource: str = DEFAULT_EXT_CPU_RESOURCE


_FIELDS = {"executeExcessPercent", "extCpuResource"}


def parse_agent_settings(raw: Mapping[str, Any] | None, kind: str = "config", name: str = "agent") -> AgentSettings:
    raw = raw or {}
    unknown = sorted(set(raw) - _FIELDS)
    if unknown:
        raise InvalidObject(kind, name, unknown[0], f"unknown setting (known: {sorted(_FIELDS)})")
    excess = raw.get("executeExcessPercent", 0)
    if isinstance(excess, bool) or not isinstance(excess, (int, float)) or not 0 <= excess <= 100:
        raise InvalidObject(kind, name, "executeExcessPercent", f"must be a number in 0..100, got {excess!r}")
    resource = raw.get("extCpuResource", DEFAULT_EXT_CPU_RESOURCE)
    if not isinstance(resource, str) or not resource:
        raise InvalidObject(kind, name, "extCpuResource", f"must be a resource name, got {resource!r}")
    return AgentSettings(float(excess), resource)
