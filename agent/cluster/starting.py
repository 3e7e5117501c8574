"""Starting the jobs arbitration passed, at ``processQueueQPS``.

Arbitration passes a round's jobs at once; they wait in a token-bucket queue
(``agent/cluster/rate_queue.py``) that the controller's loop drains between rounds, so
the API server and the scheduler see a steady trickle. The queue holds the latest round's
passed jobs only (one passed earlier but not started yet is re-arbitrated, so limits hold
against what started in between), and each job is re-read from the cache before it starts:
a job or pod that changed since the round is left for the next round to decide again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from agent.cluster.migrator import ClusterView, MigrationExecutor
from agent.cluster.rate_queue import RateLimitedQueue
from agent.cluster.resources import PODS
from agent.cluster.writes import NotLeader
from agent.kube.cache import Cache
from agent.model import migration as m
from agent.model.objects import Pod


class JobStarter:
    """The passed jobs' queue and what starts them through the migrator."""

    def __init__(
        self,
        cache: Cache,
        executor: MigrationExecutor,
        qps: float,
        clock: Callable[[], float],
        wall: Callable[[], float],
    ) -> None:
        self.cache, self.executor = cache, executor
        self.qps, self.clock, self.wall = qps, clock, wall
        self.queue: RateLimitedQueue[str] = RateLimitedQueue(qps, clock)
        #: The names in ``queue``: the latest round's passed jobs not started yet.
        self.queued: set[str] = set()

    def replace(self, passed: tuple[str, ...]) -> int:
        """The latest round's passed jobs replace the queue's; returns its length."""
        for name in self.queued - set(passed):
            self.queue.discard(name)
        for name in passed:
            self.queue.add(name)
        self.queued = set(passed)
        return len(self.queue)

    def forget(self) -> None:
        """Leadership lost: nothing queued may start (the next leader re-arbitrates)."""
        self.queue = RateLimitedQueue(self.qps, self.clock)
        self.queued = set()

    def next_ready_in(self) -> float | None:
        return self.queue.next_ready_in()

    def drain(self, view: ClusterView | None) -> None:
        """Start every job the token bucket lets through now, each re-read from the cache."""
        while view is not None and (name := self.queue.pop()) is not None:
            self.queued.discard(name)
            job = cast("m.PodMigrationJob | None", self.cache.get(m.KIND, name))
            if job is None:
                continue
            pod = cast("Pod | None", self.cache.get(PODS.kind, job.pod_key))
            if (
                not job.is_pending
                or job.paused
                or pod is None
                or (job.pod_uid and job.pod_uid != pod.uid)
            ):
                continue  # changed since the round: the next round decides again
            try:
                self.executor.start(job, pod, view, self.wall())
            except NotLeader:
                self.forget()
                return


__all__ = ["JobStarter"]
