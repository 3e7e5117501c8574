"""A time budget for the API calls of one tick of the node agent.

The agent's writes (evictions, events, the taint) are synchronous inside its tick, so a
slow API server would delay the next tick's local throttling by as long as its requests
hang: before this budget, a hanging eviction endpoint stalled a tick for 90 s (three
candidates, 30 s read timeout each). Every request of a tick is now bounded by what is
left of the budget (default 5 s, agent setting ``apiTimeBudgetSeconds``), and none is sent
once it is spent: it fails at once as ``KubeUnreachable``, which the callers already
handle (an eviction fails and ends the round, an event is dropped).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from agent.kube.client import JSON, KubeApi, Query
from agent.kube.errors import KubeUnreachable


class TickBudget:
    """Seconds the current tick's API calls may still take (unbounded before ``start``)."""

    def __init__(self, seconds: Callable[[], float], clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self.clock = clock
        self.deadline = float("inf")

    def start(self) -> None:
        self.deadline = self.clock() + self.seconds()

    def remaining(self) -> float:
        return self.deadline - self.clock()


class BudgetedApi(KubeApi):
    """The same client, every request bounded by the tick's budget."""

    def __init__(self, api: KubeApi, budget: TickBudget) -> None:
        super().__init__(api.api_client, api.args)
        self.budget = budget

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Query | None = None,
        body: object = None,
        content_type: str = JSON,
        timeout: tuple[float, float] | None = None,
    ) -> dict[str, Any]:
        left = self.budget.remaining()
        if left <= 0:
            raise KubeUnreachable(f"{method} {path}: not sent, the tick's API time budget is spent")
        connect, read = timeout or (self.args.connect_timeout, self.args.read_timeout)
        return super().request(method, path, query=query, body=body, content_type=content_type,
                               timeout=(min(connect, left), min(read, left)))
