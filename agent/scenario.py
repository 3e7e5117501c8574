"""Scenario files for `waterline simulate` (the contract is ../shared/SIMULATE.md).

A scenario is parsed once into plain data: the clock, the raw config sections (each engine
parses and validates its own section), the object store, and the node samples.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.documents import DocumentError, load_json, load_yaml
from agent.errors import InvalidObject
from agent.model.bulk import bulk_load
from agent.model.fields import shown
from agent.model.schema import check_known_fields
from agent.model.store import ObjectStore
from agent.model.timeutil import parse_time
from agent.model.usage import ContainerUsage, NodeSample, PodUsage

EPOCH = 0.0
#: The keys a scenario may have; any other is refused (a ``sampels:`` typo must not
#: silently drop every sample).
TOP_LEVEL_KEYS = ("now", "config", "objects", "samples")
#: ``config`` sections: the node agent's and one per cluster engine (a test checks them
#: against ``agent.cluster.registry``). Each section refuses its own unknown keys.
CONFIG_SECTIONS = ("agent", "arbitration", "defrag", "daemonset", "queues")


@dataclass
class Scenario:
    now: float = EPOCH
    config: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    store: ObjectStore = field(default_factory=ObjectStore)
    samples: list[NodeSample] = field(default_factory=list)
    name: str = "scenario"

    def config_section(self, key: str) -> Mapping[str, Any] | None:
        """The raw config section, or None when the scenario does not give it."""
        return self.config.get(key)


def _bad(field_path: str, message: str, name: str = "") -> InvalidObject:
    return InvalidObject("Scenario", name, field_path, message)


def read_document(path: Path) -> object:
    """Read YAML, or JSON when the file ends in .json (the standard library is fastest);
    nesting and aliases are bounded before the document is built (``agent.documents``)."""
    data = path.read_bytes()
    if path.suffix == ".json":
        return load_json(data)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise DocumentError(f"not UTF-8 text ({err.reason} at byte {err.start})") from None
    return load_yaml(text)


def load_scenario(path: str | Path) -> Scenario:
    path = Path(path)
    with bulk_load():
        try:
            doc = read_document(path)
        except OSError as err:
            raise _bad("", f"cannot read {path}: {err.strerror or err}", path.name) from None
        except DocumentError as err:
            raise _bad("", f"cannot read {path}: {err}", path.name) from None
        return parse_scenario(doc, path.name)


def _short(value: object) -> str:
    """A value for an error line, as YAML writes it; a whole samples list would not be
    one line (abbreviated: ``agent.model.fields.shown``)."""
    return shown(value)


def _only(raw: Mapping[Any, Any], known: tuple[str, ...], where: str, what: str, name: str) -> None:
    """Refuse the first unknown key (sorted), naming it, the known ones and its value."""
    unknown = sorted(str(k) for k in raw if k not in known)
    if unknown:
        key = unknown[0]
        value = next(v for k, v in raw.items() if str(k) == key)
        raise _bad(
            f"{where}{key}",
            f"is not a known {what} (known: {', '.join(known)}), got {_short(value)}",
            name,
        )


def parse_scenario(doc: object, name: str = "scenario") -> Scenario:
    if not isinstance(doc, dict):
        raise _bad("", f"expected a mapping at the top level, got {_short(doc)}", name)
    _only(doc, TOP_LEVEL_KEYS, "", "key", name)
    try:
        now = parse_time(doc.get("now")) or EPOCH
    except ValueError:
        raise _bad("now", f"must be an RFC 3339 time, got {_short(doc.get('now'))}", name) from None
    config = doc.get("config") or {}
    if not isinstance(config, dict):
        raise _bad("config", f"must be a mapping, got {_short(config)}", name)
    _only(config, CONFIG_SECTIONS, "config.", "section", name)
    for key, section in config.items():
        if section is not None and not isinstance(section, dict):
            raise _bad(f"config.{key}", f"must be a mapping, got {_short(section)}", name)
    objects = doc.get("objects") or []
    if not isinstance(objects, list):
        raise _bad("objects", f"must be a list, got {_short(objects)}", name)
    for raw in objects:
        if isinstance(raw, Mapping):
            check_known_fields(raw)  # Waterline's kinds: no field their CRD would refuse
    store = ObjectStore.from_dicts(objects)
    samples_raw = doc.get("samples") or []
    if not isinstance(samples_raw, list):
        raise _bad("samples", f"must be a list, got {_short(samples_raw)}", name)
    samples = [parse_sample(s, f"samples[{i}]", now, name) for i, s in enumerate(samples_raw)]
    return Scenario(
        now=now or EPOCH,
        config={k: (v or {}) for k, v in config.items()},
        store=store,
        samples=samples,
        name=name,
    )


def _number(value: object, where: str, name: str, allow_none: bool = True) -> float | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _bad(where, f"must be a number, got {shown(value)}", name)
    if not math.isfinite(value) or value < 0:
        raise _bad(where, f"must be a finite non-negative number, got {shown(value)}", name)
    return float(value)


def _container_usage(raw: object, where: str, name: str) -> ContainerUsage:
    if not isinstance(raw, dict):
        raise _bad(where, f"must be a mapping, got {_short(raw)}", name)
    return ContainerUsage(
        cpu=_number(raw.get("cpu"), f"{where}.cpu", name),
        memory=_number(raw.get("memory"), f"{where}.memory", name),
        ext_cpu=_number(raw.get("extCpu"), f"{where}.extCpu", name),
    )


def _sum_known(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def parse_pod_usage(raw: object, where: str, name: str = "scenario") -> PodUsage:
    if not isinstance(raw, dict):
        raise _bad(where, f"must be a mapping, got {_short(raw)}", name)
    containers_raw = raw.get("containers")
    if containers_raw is None:
        total = _container_usage(raw, where, name)
        return PodUsage(total.cpu, total.memory, total.ext_cpu)
    if not isinstance(containers_raw, dict):
        raise _bad(f"{where}.containers", f"must be a mapping, got {_short(containers_raw)}", name)
    containers = {
        str(c): _container_usage(u, f"{where}.containers.{c}", name) for c, u in containers_raw.items()
    }
    parts = list(containers.values())
    return PodUsage(
        cpu=_sum_known([c.cpu for c in parts]),
        memory=_sum_known([c.memory for c in parts]),
        ext_cpu=_sum_known([c.ext_cpu for c in parts]),
        containers=containers,
    )


def parse_sample(raw: object, where: str, now: float, name: str = "scenario") -> NodeSample:
    if not isinstance(raw, dict):
        raise _bad(where, f"must be a mapping, got {_short(raw)}", name)
    at = _number(raw.get("at", 0), f"{where}.at", name, allow_none=False)
    node = raw.get("node")
    if not isinstance(node, str) or not node:
        raise _bad(f"{where}.node", f"must name a node, got {_short(node)}", name)
    metrics_raw = raw.get("metrics") or {}
    if not isinstance(metrics_raw, dict):
        raise _bad(f"{where}.metrics", f"must be a mapping, got {_short(metrics_raw)}", name)
    metrics = {}
    for metric, value in metrics_raw.items():
        number = _number(value, f"{where}.metrics.{metric}", name)
        if number is not None:
            metrics[str(metric)] = number
    pods_raw = raw.get("pods") or {}
    if not isinstance(pods_raw, dict):
        raise _bad(f"{where}.pods", f"must be a mapping of namespace/name to usage, got {_short(pods_raw)}", name)
    pods = {}
    capped: dict[str, float | None] = {}
    for key, usage in pods_raw.items():
        if not isinstance(key, str) or key.count("/") != 1:
            raise _bad(f"{where}.pods", f"keys must be namespace/name, got {shown(key)}", name)
        pods[key] = parse_pod_usage(usage, f"{where}.pods.{key}", name)
        if _is_capped(usage, f"{where}.pods.{key}", name):
            capped[key] = _number(usage.get("cpuCap"), f"{where}.pods.{key}.cpuCap", name)
    return NodeSample(at=now + (at or 0.0), node=node, metrics=metrics, pods=pods, capped=capped)


def _is_capped(raw: Mapping[str, Any], where: str, name: str) -> bool:
    """``capped: true`` (written by `waterline capture`) marks a figure measured under a
    cap; ``cpuCap`` is the cap then in force and means nothing without it."""
    flag = raw.get("capped", False)
    if not isinstance(flag, bool):
        raise _bad(f"{where}.capped", f"must be true or false, got {shown(flag)}", name)
    if not flag and raw.get("cpuCap") is not None:
        raise _bad(f"{where}.cpuCap", "is the cap of a capped figure: give it with capped: true, "
                   f"got capped: {flag!r}", name)
    return flag
