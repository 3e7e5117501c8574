"""DefragArgs: the ``defrag`` config section, its defaults and validation."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent.model.fields import Fields, config_values, is_number

KEY = "defrag"
_CONFIG = Fields("config", KEY)
#: camelCase config key -> field (evictableNamespaces fills the two namespace fields).
CONFIG_KEYS = {
    "resourceType": "resource_type",
    "lowThresholds": "low_threshold",
    "defragmentThresholds": "defragment_threshold",
    "protectionThresholds": "protection_threshold",
    "numberOfNodes": "number_of_nodes",
    "coolDownTime": "cool_down_seconds",
    "evictableNamespaces": "evictable_namespaces",
}
_NATIVE_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage"})


@dataclass(frozen=True, slots=True)
class DefragArgs:
    """Thresholds in percent of allocatable; the cool-down in seconds."""

    resource_type: str = "cpu"
    low_threshold: float = 30.0
    defragment_threshold: float = 70.0
    protection_threshold: float = 90.0
    number_of_nodes: int = 0
    cool_down_seconds: float = 0.0
    #: evictableNamespaces.include (None: not given) and .exclude.
    include_namespaces: tuple[str, ...] | None = None
    exclude_namespaces: tuple[str, ...] = ("kube-system",)

    def namespace_allowed(self, namespace: str) -> bool:
        if self.include_namespaces is not None:
            return namespace in self.include_namespaces
        return namespace not in self.exclude_namespaces

    @classmethod
    def from_config(cls, raw: Mapping[str, Any] | None) -> DefragArgs:
        values = config_values(KEY, raw, CONFIG_KEYS)
        if "cool_down_seconds" in values:
            values["cool_down_seconds"] = _CONFIG.duration(values["cool_down_seconds"], "coolDownTime")
        if "evictable_namespaces" in values:
            values.update(_evictable(values.pop("evictable_namespaces")))
        return cls(**values).validate()

    def validate(self) -> DefragArgs:
        if not isinstance(self.resource_type, str) or not _valid_resource_name(self.resource_type):
            raise _CONFIG.bad(
                "resourceType",
                "must be cpu, memory, ephemeral-storage, hugepages-* or an extended resource "
                "such as nvidia.com/gpu",
                self.resource_type,
            )
        _CONFIG.percent(self.low_threshold, "lowThresholds")
        _CONFIG.percent(self.defragment_threshold, "defragmentThresholds")
        _CONFIG.percent(self.protection_threshold, "protectionThresholds")
        _CONFIG.integer(self.number_of_nodes, "numberOfNodes", minimum=0)
        if not is_number(self.cool_down_seconds) or not self.cool_down_seconds >= 0:
            raise _CONFIG.bad("coolDownTime", "must be a duration >= 0", self.cool_down_seconds)
        if self.include_namespaces is not None:
            _names(self.include_namespaces, "include")
        _names(self.exclude_namespaces, "exclude")
        if self.low_threshold > self.defragment_threshold:
            raise _CONFIG.bad(
                "lowThresholds",
                f"must be <= defragmentThresholds ({self.defragment_threshold:g})",
                self.low_threshold,
            )
        if self.defragment_threshold >= self.protection_threshold:
            raise _CONFIG.bad(
                "defragmentThresholds",
                f"must be < protectionThresholds ({self.protection_threshold:g})",
                self.defragment_threshold,
            )
        return self


def _valid_resource_name(name: str) -> bool:
    if name in _NATIVE_RESOURCES or name.startswith("hugepages-"):
        return True
    domain, slash, rest = name.partition("/")
    return bool(slash and domain and rest and "." in domain and "/" not in rest)


def _evictable(raw: object) -> dict[str, Any]:
    """The two namespace fields from ``evictableNamespaces: {include | exclude: [..]}``;
    an empty mapping excludes nothing."""
    section = _CONFIG.mapping(raw or {}, "evictableNamespaces")
    _CONFIG.child("evictableNamespaces").only(section, ("include", "exclude"))
    if "include" in section and "exclude" in section:
        raise _CONFIG.bad("evictableNamespaces", "must set include or exclude, not both", raw)
    if "include" in section:
        return {"include_namespaces": _names(section["include"], "include"), "exclude_namespaces": ()}
    return {"exclude_namespaces": _names(section.get("exclude", []), "exclude")}


def _names(raw: object, key: str) -> tuple[str, ...]:
    if not isinstance(raw, (list, tuple)) or not all(isinstance(n, str) and n for n in raw):
        raise _CONFIG.bad(f"evictableNamespaces.{key}", "must be a list of namespace names", raw)
    return tuple(raw)
