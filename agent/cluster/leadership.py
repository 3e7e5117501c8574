"""What a controller replica runs on (``ControllerDeps``) and its leader elector.

A lease request may take half the renew deadline: a slow API server must not cost
leadership, a hung one must not outlive it (the elector's watchdog stops us anyway).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from agent.cluster.metrics import ControllerMetrics
from agent.defaults import CONTROLLER_LEASE_NAME, CONTROLLER_LEASE_NAMESPACE
from agent.kube.client import KubeApi
from agent.kube.health import ThreadBoard
from agent.kube.leases import ElectionArgs, KubeLeases, LeaderElector
from agent.kube.watching import WatchArgs


@dataclass(frozen=True, slots=True)
class ControllerDeps:
    """What a controller runs on: the API, its lease, its metrics and its clocks."""

    api: KubeApi
    identity: str
    lease_namespace: str = CONTROLLER_LEASE_NAMESPACE
    lease_name: str = CONTROLLER_LEASE_NAME
    election: ElectionArgs = field(default_factory=ElectionArgs)
    watch_args: WatchArgs | None = None
    metrics: ControllerMetrics = field(default_factory=ControllerMetrics)
    clock: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time


def build_elector(
    deps: ControllerDeps,
    board: ThreadBoard,
    on_started_leading: Callable[[], None],
    on_stopped_leading: Callable[[], None],
) -> LeaderElector:
    election = deps.election.validate()
    lease_timeout = max(election.retry_period, election.renew_deadline / 2)
    return LeaderElector(
        KubeLeases(deps.api, deps.lease_namespace, deps.lease_name, timeout=lease_timeout),
        deps.identity,
        election,
        namespace=deps.lease_namespace,
        name=deps.lease_name,
        clock=deps.clock,
        wall=deps.wall,
        on_started_leading=on_started_leading,
        on_stopped_leading=on_stopped_leading,
        board=board,
    )


__all__ = ["ControllerDeps", "build_elector"]
