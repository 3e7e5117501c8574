"""ArbitrationArgs: the ``arbitration`` config section, its defaults and validation."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent.cluster.engine import EPSILON
from agent.model.fields import Fields, config_values

KEY = "arbitration"
_CONFIG = Fields("config", KEY)
#: camelCase config key -> field.
CONFIG_KEYS = {
    "interval": "interval",
    "processQueueQPS": "process_queue_qps",
    "jobSelectRatio": "job_select_ratio",
    "maxMigratingTotal": "max_migrating_total",
    "maxMigratingPerNode": "max_migrating_per_node",
    "maxMigratingPerNamespace": "max_migrating_per_namespace",
    "maxMigratingPerWorkload": "max_migrating_per_workload",
    "maxUnavailablePerWorkload": "max_unavailable_per_workload",
}
#: Keys where null is a value: no limit (node, namespace), the default by replicas (workload).
NULLABLE = (
    "maxMigratingTotal",
    "maxMigratingPerNode",
    "maxMigratingPerNamespace",
    "maxMigratingPerWorkload",
    "maxUnavailablePerWorkload",
)

WorkloadLimit = int | str | None  # an integer, a percentage of replicas ("10%"), or unset


@dataclass(frozen=True, slots=True)
class ArbitrationArgs:
    """Durations in seconds."""

    interval: float = 60.0
    process_queue_qps: float = 3.0
    job_select_ratio: float = 1.2
    #: Running jobs cluster-wide (passed ones included); None: no bound.
    max_migrating_total: int | None = None
    max_migrating_per_node: int | None = 2
    max_migrating_per_namespace: int | None = None
    #: None: 10% of replicas above 10, 2 for 4..10, else 1.
    max_migrating_per_workload: WorkloadLimit = None
    #: None: as max_migrating_per_workload.
    max_unavailable_per_workload: WorkloadLimit = None

    @property
    def select_count(self) -> int:
        """n = ceil(processQueueQPS x interval x jobSelectRatio): what the queue drains in
        one interval, plus headroom. The epsilon keeps 3 x 60 x 1.2 at 216, not 217."""
        return max(
            1, math.ceil(self.process_queue_qps * self.interval * self.job_select_ratio - EPSILON)
        )

    @classmethod
    def from_config(cls, raw: Mapping[str, Any] | None) -> ArbitrationArgs:
        return cls(**config_values(KEY, raw, CONFIG_KEYS, NULLABLE)).validate()

    def validate(self) -> ArbitrationArgs:
        _CONFIG.number(self.interval, "interval", above=0)
        _CONFIG.number(self.process_queue_qps, "processQueueQPS", above=0)
        _CONFIG.number(self.job_select_ratio, "jobSelectRatio", above=0)
        _count_limit(self.max_migrating_total, "maxMigratingTotal")
        _count_limit(self.max_migrating_per_node, "maxMigratingPerNode")
        _count_limit(self.max_migrating_per_namespace, "maxMigratingPerNamespace")
        _workload_limit(self.max_migrating_per_workload, "maxMigratingPerWorkload")
        _workload_limit(self.max_unavailable_per_workload, "maxUnavailablePerWorkload")
        return self


def _count_limit(value: object, key: str) -> None:
    if value is not None:
        _CONFIG.integer(value, key, minimum=1)


def _workload_limit(value: object, key: str) -> None:
    if value is None:
        return
    if isinstance(value, str) and value.endswith("%"):
        digits = value[:-1]
        if digits.isdigit() and 1 <= int(digits) <= 100:
            return
    elif not isinstance(value, bool) and isinstance(value, int) and value >= 1:
        return
    raise _CONFIG.bad(
        key, 'must be an integer >= 1, a percentage of replicas like "10%", or null', value
    )


def default_workload_limit(replicas: int) -> int:
    """Unset workload limits: 10% of replicas above 10 (rounded down), 2 for 4..10, else 1."""
    if replicas > 10:
        return max(1, replicas // 10)
    if replicas >= 4:
        return 2
    return 1


def resolve_workload_limit(limit: WorkloadLimit, replicas: int) -> int:
    if limit is None:
        return default_workload_limit(replicas)
    if isinstance(limit, str):
        return max(1, int(limit[:-1]) * replicas // 100)
    return limit
