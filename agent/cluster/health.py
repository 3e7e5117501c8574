"""The controller's ``/healthz`` and ``/readyz``: the loop's heartbeats (``agent.metrics
.Health``) plus every background thread's state (``agent.kube.health.ThreadBoard``).

* live: the loop finishes iterations and no background thread is dead (a reflector or
  the elector that ended would leave a replica that answers probes and does nothing);
  the body lists every thread (``watch-pods: failing for 40s: KubeUnreachable: ...``);
* ready: the caches are in sync and a round succeeded recently (a round that could not
  read or write does not count), as ``Health`` says; a follower, which runs no rounds,
  is ready once in sync and its threads are healthy.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from agent.kube.health import ThreadBoard
from agent.serving import Health


class ControllerHealth(Health):
    def __init__(
        self,
        board: ThreadBoard,
        stale_after: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        source_ready: Callable[[], bool] | None = None,
        leading: Callable[[], bool] = lambda: True,
    ) -> None:
        super().__init__(stale_after, clock, source_ready)
        self.board = board
        self.leading = leading

    def live(self) -> tuple[bool, str]:
        ok, why = super().live()
        dead = self.board.dead()
        if dead:
            ok, why = False, f"background thread(s) dead: {', '.join(dead)}"
        return ok, f"{why}\n{self.board.report()}"

    def ready(self) -> tuple[bool, str]:
        if self.leading():
            ok, why = super().ready()
        elif self._source_ready is not None and not self._source_ready():
            ok, why = False, "objects not in sync yet"
        else:
            failing = [s.name for s in self.board.failing()]
            ok, why = (False, f"failing: {', '.join(failing)}") if failing else (True, "ok")
        return ok, f"{why}\n{self.board.report()}"


__all__ = ["ControllerHealth"]
