"""Batch capacity: what latency-critical pods reserve but do not use (DESIGN.md "Batch
capacity"), the policy section that asks for it.

A NodeQOSEnsurancePolicy may carry a ``batchCapacity`` section for the nodes it selects.
On those nodes the agent publishes, in the Node's status, the extended resources
``waterline.io/batch-cpu`` (millicores) and ``waterline.io/batch-memory`` (bytes): the
node's allocatable minus what its non-batch pods and the system use (the high-water
mark over ``windowSeconds``, not the last sample) minus ``marginPercent`` of
allocatable, clipped at 0 and kept within ``min`` / ``max``. A batch pod requests those
resources and no ``cpu`` / ``memory``: to Kubernetes it is BestEffort, and the stock
scheduler places it by what is really spare.

Why these knobs, with these defaults:

* ``marginPercent`` (10): room kept for non-batch use to rise between two publications
  before batch pods are throttled;
* ``windowSeconds`` (300): a latency-critical pod that peaks every few minutes keeps its
  peak reserved; the last sample alone would hand its room out between peaks;
* ``hysteresisPercent`` (5, of allocatable) and ``minIntervalSeconds`` (60): every change
  is a Node status write that every scheduler and watcher of Nodes sees; a figure that
  moves with each sample would churn them for nothing;
* ``min`` (0) and ``max`` (none: allocatable bounds it): an operator may promise batch a
  floor, or keep part of the node out of its reach;
* ``idle`` (true): batch pods run in the kernel's idle CPU class, so they take only what
  nobody else wants at the instant, whatever was published.

Several policies selecting one node: the first by name that has the section decides
(``PolicySet.batch_capacity_for_node``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent.model.fields import Fields
from agent.model.objects import Pod
from agent.model.quantity import parse_quantity

#: The extended resources a node publishes and batch pods request.
BATCH_CPU = "waterline.io/batch-cpu"
BATCH_MEMORY = "waterline.io/batch-memory"

DEFAULT_MARGIN_PERCENT = 10.0
DEFAULT_WINDOW_SECONDS = 300.0
DEFAULT_HYSTERESIS_PERCENT = 5.0
DEFAULT_MIN_INTERVAL_SECONDS = 60.0
#: A day: a longer window would keep one spike reserved for longer than any workload cycle.
MAX_WINDOW_SECONDS = 86400.0
#: An hour: a node must follow its load at least this often.
MAX_MIN_INTERVAL_SECONDS = 3600.0

FIELDS = ("marginPercent", "windowSeconds", "hysteresisPercent", "minIntervalSeconds",
          "min", "max", "idle")


def is_batch_pod(pod: Pod) -> bool:
    """A pod that requests batch resources and no cpu or memory: BestEffort to Kubernetes,
    limited by the agent from its batch limits."""
    requests = pod.requests
    asks = requests.get(BATCH_CPU, 0.0) > 0 or requests.get(BATCH_MEMORY, 0.0) > 0
    return asks and not requests.get("cpu") and not requests.get("memory")


@dataclass(frozen=True, slots=True)
class BatchLimits:
    """A batch pod's limits from its batch resources, as the agent enforces them: per
    container (``containers``, by name) and for the pod (``pod``), CPU in cores (the
    ``batch-cpu`` limit is in millicores) and memory in bytes; None: no limit on that
    resource there.

    The pod's own limit follows the kubelet's rule for ``cpu`` / ``memory``: the sum of
    its containers' limits, at least its largest init container's, and none at all when
    one container (init containers included) has none for that resource (that container
    may use anything, so the pod may too)."""

    containers: Mapping[str, Amounts]
    pod: Amounts

    @property
    def cpu(self) -> float | None:
        return self.pod.cpu

    @property
    def memory(self) -> float | None:
        return self.pod.memory


def _container_amounts(limits: Mapping[str, float]) -> Amounts:
    cpu, memory = limits.get(BATCH_CPU), limits.get(BATCH_MEMORY)
    return Amounts(None if not cpu else cpu / 1000.0, None if not memory else float(memory))


def _pod_amount(app: list[float | None], init: list[float | None]) -> float | None:
    if any(v is None for v in (*app, *init)) or not app:
        return None
    total = sum(v for v in app if v is not None)
    return max([total, *(v for v in init if v is not None)])


def batch_limits(pod: Pod) -> BatchLimits | None:
    """The limits the agent enforces on a batch pod (None: not a batch pod, or one with
    no batch limit at all)."""
    if not is_batch_pod(pod):
        return None
    app = {c.name: _container_amounts(c.limits) for c in pod.containers}
    init = [_container_amounts(c.limits) for c in pod.init_containers]
    whole = Amounts(
        _pod_amount([a.cpu for a in app.values()], [a.cpu for a in init]),
        _pod_amount([a.memory for a in app.values()], [a.memory for a in init]),
    )
    if all(a.cpu is None and a.memory is None for a in app.values()):
        return None
    return BatchLimits(app, whole)


def cpu_limit(pod: Pod) -> float | None:
    """The pod's CPU limit in cores: its ``cpu`` limit, or for a batch pod the limit the
    agent enforces from its ``batch-cpu`` (None: unlimited). What a pod's CPU figure is
    read within, and the cap a throttled pod returns to."""
    limit = pod.limits.get("cpu")
    if limit:
        return limit
    limits = batch_limits(pod)
    return None if limits is None else limits.cpu


@dataclass(frozen=True, slots=True)
class Amounts:
    """CPU in cores and memory in bytes; None: no bound on that resource."""

    cpu: float | None = None
    memory: float | None = None


@dataclass(frozen=True, slots=True)
class BatchCapacity:
    margin_percent: float = DEFAULT_MARGIN_PERCENT
    window_seconds: float = DEFAULT_WINDOW_SECONDS
    hysteresis_percent: float = DEFAULT_HYSTERESIS_PERCENT
    min_interval_seconds: float = DEFAULT_MIN_INTERVAL_SECONDS
    #: The least published (0 where omitted) and the most (None: allocatable bounds it).
    minimum: Amounts = Amounts(0.0, 0.0)
    maximum: Amounts = Amounts()
    #: Batch pods are in the idle class on the policy's nodes.
    idle: bool = True


def parse_batch_capacity(raw: object, spec: Fields) -> BatchCapacity:
    """``spec.batchCapacity`` (``spec``: the fields of the policy's spec); every field
    optional, defaults in the module docstring."""
    section = spec.mapping(raw, "batchCapacity")
    at = spec.child("batchCapacity")
    at.only(section, FIELDS)
    minimum = _amounts(section.get("min"), at, "min", Amounts(0.0, 0.0))
    maximum = _amounts(section.get("max"), at, "max", Amounts())
    for resource in ("cpu", "memory"):
        low, high = getattr(minimum, resource), getattr(maximum, resource)
        if low is not None and high is not None and low > high:
            shown = at.mapping(section.get("min")).get(resource)
            raise at.child("max").bad(resource, f"must be >= min.{resource} ({shown})",
                                      at.mapping(section.get("max")).get(resource))
    return BatchCapacity(
        margin_percent=_percent(at, section, "marginPercent", DEFAULT_MARGIN_PERCENT),
        window_seconds=_seconds(at, section, "windowSeconds", DEFAULT_WINDOW_SECONDS,
                                MAX_WINDOW_SECONDS),
        hysteresis_percent=_percent(at, section, "hysteresisPercent", DEFAULT_HYSTERESIS_PERCENT),
        min_interval_seconds=_seconds(at, section, "minIntervalSeconds",
                                      DEFAULT_MIN_INTERVAL_SECONDS, MAX_MIN_INTERVAL_SECONDS),
        minimum=minimum,
        maximum=maximum,
        idle=at.boolean(section.get("idle", True), "idle"),
    )


def _percent(at: Fields, section: Mapping[str, Any], key: str, default: float) -> float:
    value = section.get(key)
    return default if value is None else at.percent(value, key)


def _seconds(at: Fields, section: Mapping[str, Any], key: str, default: float,
             most: float) -> float:
    value = section.get(key)
    return default if value is None else at.number(value, key, minimum=0, maximum=most)


def _amounts(raw: object, at: Fields, key: str, default: Amounts) -> Amounts:
    if raw is None:
        return default
    body = at.mapping(raw, key)
    fields = at.child(key)
    fields.only(body, ("cpu", "memory"))
    return Amounts(
        cpu=_quantity(fields, body.get("cpu"), "cpu", default.cpu),
        memory=_quantity(fields, body.get("memory"), "memory", default.memory),
    )


def _quantity(fields: Fields, raw: object, key: str, default: float | None) -> float | None:
    if raw is None:
        return default
    try:
        value = parse_quantity(raw)
    except ValueError:
        raise fields.bad(key, 'must be a quantity like "2", "500m" or "8Gi"', raw) from None
    if not math.isfinite(value) or value < 0:
        raise fields.bad(key, "must be a finite quantity >= 0", raw)
    return value
