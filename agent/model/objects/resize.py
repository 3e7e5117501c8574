"""Is the kubelet about to rewrite a pod's CPU cgroup files? (an in-place resize)

While a pod-level cgroup has ``cpu.idle = 1`` the kernel refuses writes to its
``cpu.shares`` / ``cpu.weight`` (EINVAL), and a container quota below the burst the agent
set is refused too: a resize the kubelet actuates then fails. So the agent lifts its
marks while a CPU resize of the pod is under way (``engine.phases.isolation``) and
puts them back once it is done. A resize is seen on the pod object, the agent's only
view of the kubelet's intent:

* Kubernetes 1.33+: the condition ``PodResizeInProgress`` (status True, whatever its
  reason, ``Error`` included: the retry must find the mark gone);
* 1.27-1.32: ``status.resize`` ``Proposed`` or ``InProgress``;
* any version: a container whose CPU request in the spec differs from the request the
  kubelet allocated (``status.containerStatuses[].allocatedResources``), or whose CPU
  limit differs from the one it reports in force (``...resources.limits``): the spec was
  patched and the kubelet has not caught up.

Not a resize under way: one the kubelet cannot admit now (``PodResizePending``,
``status.resize`` ``Deferred`` or ``Infeasible``). It may wait for hours, and lifting
the mark for that long would undo the class; when the kubelet does admit it, it says
``PodResizeInProgress`` and the mark is lifted then.

The window: the kubelet learns of the resize from its own watch, as fast as the agent
does, and may write before the agent's next tick; that first write then fails with
EINVAL, and the kubelet retries it (its pod worker resyncs the pod, and 1.33+ retries a
resize that reported an error), by which time the mark is lifted. Lenient: a status it
cannot read is no resize.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent.model.quantity import parse_quantity

IN_PROGRESS = "PodResizeInProgress"
PENDING = "PodResizePending"
#: The 1.27-1.32 ``status.resize`` values of a resize the kubelet is carrying out.
UNDER_WAY = frozenset({"Proposed", "InProgress"})


def _cpu(resources: object, kind: str) -> float | None:
    if not isinstance(resources, Mapping):
        return None
    section = resources.get(kind)
    if not isinstance(section, Mapping) or section.get("cpu") is None:
        return None
    try:
        return parse_quantity(section["cpu"])
    except (ValueError, TypeError):
        return None


def _condition(status: Mapping[str, Any], kind: str) -> bool:
    conditions = status.get("conditions")
    return isinstance(conditions, list) and any(
        isinstance(c, Mapping) and c.get("type") == kind and c.get("status") == "True"
        for c in conditions
    )


def _differs(spec: float | None, status: float | None) -> bool:
    return status is not None and abs((spec or 0.0) - status) > 1e-9


def _spec_cpu(container: Mapping[str, Any]) -> tuple[float | None, float | None]:
    """(request, limit) of a spec container, the request defaulted to the limit."""
    resources = container.get("resources")
    limit = _cpu(resources, "limits")
    request = _cpu(resources, "requests")
    return (limit if request is None else request), limit


def resize_under_way(spec: Mapping[str, Any], status: Mapping[str, Any]) -> bool:
    """Whether the kubelet is (about to be) rewriting the pod's CPU cgroup files."""
    if _condition(status, IN_PROGRESS) or status.get("resize") in UNDER_WAY:
        return True
    if _condition(status, PENDING) or status.get("resize") in ("Deferred", "Infeasible"):
        return False
    containers = spec.get("containers")
    statuses = status.get("containerStatuses")
    if not isinstance(containers, list) or not isinstance(statuses, list):
        return False
    by_name = {s.get("name"): s for s in statuses if isinstance(s, Mapping)}
    for container in containers:
        if not isinstance(container, Mapping):
            continue
        seen = by_name.get(container.get("name"))
        if seen is None:
            continue
        request, limit = _spec_cpu(container)
        allocated = seen.get("allocatedResources")
        allocated_cpu = _cpu({"requests": allocated}, "requests")
        if _differs(request, allocated_cpu) or _differs(limit, _cpu(seen.get("resources"), "limits")):
            return True
    return False
