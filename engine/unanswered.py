"""Evictions the API did not answer in time, settled through the watch.

When the tick stops waiting for an eviction's answer (``executors.eviction``) the request
goes on in the background and may still evict the pod. The engine remembers such a pod
here; once the pod shows up terminating (the watch brought its deletionTimestamp), it is
counted as this node's eviction, as an answer in time would have been: its usage is on its
way out (``NodeState.evicting``, so it is released once from the gaps and never picked
again), it takes a token from the node's bucket and starts its action's cool-down. A pod
that is gone or replaced (another uid) before a tick saw it terminating counts the same
(the safe side for the limits: see ``settle``); a later answer for the same pod replaces
the entry. A failed late request leaves the pod running: its entry stays until
the pod is evicted again or goes (one entry a pod, only after API faults). The node state
applies it (``NodeState.settle_late_evictions``, ``engine.state``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from agent.model.objects import Pod


@dataclass(frozen=True, slots=True)
class Unanswered:
    """An eviction sent for a pod and not answered in its tick."""

    action: str
    uid: str


def settle(pending: dict[str, Unanswered], pods: Mapping[str, Pod]) -> list[tuple[str, Unanswered]]:
    """Remove the entries that are settled; return those whose pod now terminates or is
    gone (a successor holding its name included): a pod deleted before any tick saw it
    terminating (grace 0, a slow watch) was most likely taken by the eviction we sent,
    and the cluster brake and the node's bucket must rather count one eviction too many
    than miss one."""
    evicted = []
    for key, entry in list(pending.items()):
        pod = pods.get(key)
        if pod is None or (entry.uid and pod.uid != entry.uid) or pod.is_terminating:
            del pending[key]
            evicted.append((key, entry))
    return evicted
