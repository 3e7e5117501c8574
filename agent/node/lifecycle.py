"""A built agent and what happens to its caps and CPU isolation marks when it stops.

Restarts resume, they do not reset (DESIGN.md "Executor" 7): caps and marks (idle,
burst) are released all at once only when the agent is uninstalled (it stops and finds
its own DaemonSet gone or being deleted), in local mode on every exit, and by `waterline
agent release`. When the API does not answer, they are kept for the next agent to adopt.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import structlog

from agent.metrics import AgentMetrics
from agent.node.loop import NodeLoop
from agent.serving import Health, MetricsServer
from executors.actuators import Holder


@dataclass
class Agent:
    """A built agent: the loop and what must be started and stopped around it."""

    loop: NodeLoop
    #: The writers that hold caps and marks on the host (none in a dry run).
    holders: Sequence[Holder]
    metrics: AgentMetrics
    health: Health
    server: MetricsServer | None = None
    stop_source: Callable[[], None] | None = None
    #: In a cluster: is the agent's own DaemonSet gone or being deleted? (None: unknown)
    uninstalled: Callable[[], bool | None] | None = None

    def restore_all(self, why: str) -> None:
        """Hand every cap and mark of the state files back (the originals, exactly)."""
        for holder in self.holders:
            released = holder.release_all()
            holder.forget_all(self.loop.brain.state)
            if released:
                structlog.get_logger().info(holder.released, code=holder.released_code, why=why,
                                            pods=len(released))

    def on_exit(self) -> None:
        """Local mode releases every cap; in a cluster only an uninstall does, and a
        restart leaves them for the next agent to adopt."""
        log = structlog.get_logger()
        if self.uninstalled is None:
            self.restore_all("local mode: the agent exits")
            return
        held = len(self.loop.brain.caps())
        marked = sum(len(pods) for pods in self.loop.brain.isolated().values())
        uninstalled = self.uninstalled()
        if uninstalled:
            self.restore_all("the agent's DaemonSet is gone or being deleted: uninstall")
        elif uninstalled is None:
            log.warning("could not tell a restart from an uninstall (API unreachable): caps "
                        "and marks kept for the next agent; `waterline agent release` hands "
                        "them back", code="caps-kept-unsure", pods=held, marks=marked)
        elif held or marked:
            log.info("caps and marks kept for the next agent to adopt (a restart, not an "
                     "uninstall)", code="caps-kept", pods=held, marks=marked)
