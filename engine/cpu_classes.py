"""Which pods of a node belong in each CPU isolation class this tick (pure).

The policies selecting the node name the classes and their scopes
(``agent.model.isolation``); this reads them against the node's pods:

* never a member, whatever a scope says: the pods that are never candidates (mirror and
  static pods, DaemonSet pods, pods being deleted or not running, pods annotated
  protected, system-critical pods: ``never_candidate_reason``);
* burst: the first policy by name whose burst scope admits the pod sets its percent;
  a pod with no CPU limit on any container has no quota to borrow from and is left out;
* quota burst: the policy that gives a pod burst raises its quota when its burst section
  sets ``quotaAboveLimitPercent``; only a pod whose containers all have a CPU limit (the
  kubelet gives the pod's cgroup a quota only then: there is nothing to raise otherwise);
* idle: any idle scope admits the pod (or it is a batch pod and the node's batch
  capacity section keeps batch pods idle), and it is neither given burst nor labelled
  latency-critical (a latency-critical pod in the idle class would be the victim).

A member whose kubelet is resizing it is still a member: the phase lifts its mark for
the resize (``engine.phases.isolation``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from agent.model.batch import is_batch_pod
from agent.model.isolation import CpuIsolation
from agent.model.latency import is_labelled
from agent.model.objects import Pod
from agent.model.policy import never_candidate_reason
from agent.model.registry import CPU
from engine.records import IsolationMark

Labels = Callable[[str], Mapping[str, str]]
Sections = tuple[tuple[str, CpuIsolation], ...]


def has_quota(pod: Pod) -> bool:
    return any(CPU in c.limits for c in pod.containers)


def burst_members(pods: Mapping[str, Pod], sections: Sections, labels: Labels) -> dict[str, IsolationMark]:
    out: dict[str, IsolationMark] = {}
    for key, pod in pods.items():
        if never_candidate_reason(pod) is not None or not has_quota(pod):
            continue
        for policy, section in sections:
            burst = section.burst
            if burst is not None and burst.scope.admits(pod, labels(pod.namespace)):
                out[key] = IsolationMark(policy, pod.uid, burst.quota_percent)
                break
    return out


def quota_members(pods: Mapping[str, Pod], sections: Sections, labels: Labels) -> dict[str, IsolationMark]:
    """The pods whose quota may rise above their limit, with the percent (the node being
    under its lines is the phase's to check: ``engine.phases.isolation``)."""
    out: dict[str, IsolationMark] = {}
    for key, pod in pods.items():
        if never_candidate_reason(pod) is not None or pod.limits.get(CPU) is None:
            continue
        for policy, section in sections:
            burst = section.burst
            if burst is not None and burst.scope.admits(pod, labels(pod.namespace)):
                if burst.above_limit_percent is not None:
                    out[key] = IsolationMark(policy, pod.uid, burst.above_limit_percent)
                break
    return out


def idle_members(pods: Mapping[str, Pod], sections: Sections, labels: Labels,
                 bursting: Mapping[str, IsolationMark]) -> dict[str, IsolationMark]:
    out: dict[str, IsolationMark] = {}
    for key, pod in pods.items():
        if never_candidate_reason(pod) is not None or key in bursting or is_labelled(pod):
            continue
        for policy, section in sections:
            idle = section.idle
            if idle is None:
                continue
            admitted = is_batch_pod(pod) if idle.batch_pods else idle.scope.admits(pod, labels(pod.namespace))
            if admitted:
                out[key] = IsolationMark(policy, pod.uid)
                break
    return out


def classes_in_force(sections: Sections) -> tuple[str, ...]:
    """The classes some policy of the node names (``idle``, ``burst``, ``quotaBurst``)."""
    kinds = []
    if any(s.idle is not None for _, s in sections):
        kinds.append("idle")
    if any(s.burst is not None for _, s in sections):
        kinds.append("burst")
    if any(s.burst is not None and s.burst.above_limit_percent is not None for _, s in sections):
        kinds.append("quotaBurst")
    return tuple(kinds)
