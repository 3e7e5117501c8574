"""The Evictor on the real API: policy/v1 Eviction, never a direct delete.

Maps the adapter's outcomes onto ``EvictionAnswer`` (the result, and the server's
Retry-After when it refused for its own sake) and logs the ones an operator must see: an
API failure (a 5xx, among them a pod with several disruption budgets, which the API
refuses to choose between; a throttling 429; a timeout) ends the node's eviction round,
which then backs off (``engine.limits``).

The tick evicts before it throttles, so a slow Eviction API must not hold the throttling
back. Each request is sent on one background worker and the tick waits for its answer at
most ``evictionAnswerSeconds`` (default 1 s, never beyond what is left of the tick's API
budget). No answer by then is a fault like a timeout: ``failed`` (marked ``unanswered``),
the round ends and the node backs off, and the tick goes on to throttle. The request goes
on in the background, bounded by the budget of the tick that sent it; its late answer is
logged (a pod it evicted shows up terminating through the watch, and the engine counts
it then). One request is in flight at a time: while it runs no other eviction is sent
(``failed`` at once), so a hanging server never holds more than one from this agent.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any

import structlog

from agent.kube import evicting
from agent.kube.client import KubeApi
from agent.kube.evicting import EvictionOutcome
from agent.model.eviction import EvictionResult
from agent.model.objects import Pod
from agent.model.settings import DEFAULT_EVICTION_ANSWER_SECONDS
from executors.actuators import EvictionAnswer, Evictor

#: What a late answer means, logged beside it.
LATE_MEANING = {
    EvictionResult.EVICTED: "the pod was evicted after the round gave up waiting; it "
    "terminates and counts as this node's eviction once the watch shows it",
    EvictionResult.BLOCKED_BY_PDB: "refused by a disruption budget: the pod stays",
    EvictionResult.GONE: "the pod was already gone",
    EvictionResult.FAILED: "the API failed or did not answer at all: the pod stays",
}


@dataclass(frozen=True, slots=True)
class InFlight:
    """The eviction request still running on the worker after its tick gave up on it."""

    pod: str
    sent: float  # clock() when sent
    future: Future[EvictionOutcome]


def answer_wait(answer_seconds: float, budget_left: float) -> float:
    """Seconds the tick waits for one answer: the setting, within the budget left."""
    return max(0.0, min(answer_seconds, budget_left))


class ApiEvictor(Evictor):
    """``answer_seconds`` and ``budget_left`` are read at each eviction (live settings,
    the current tick's budget); ``worker`` runs the requests (one at a time), ``clock``
    times them; both are injected by tests."""

    def __init__(
        self,
        api: KubeApi,
        logger: Any = None,
        *,
        answer_seconds: Callable[[], float] = lambda: DEFAULT_EVICTION_ANSWER_SECONDS,
        budget_left: Callable[[], float] = lambda: math.inf,
        worker: Executor | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api
        self.log = logger or structlog.get_logger("waterline.executors.eviction")
        self.answer_seconds = answer_seconds
        self.budget_left = budget_left
        self.worker = worker or ThreadPoolExecutor(1, thread_name_prefix="waterline-eviction")
        self.clock = clock
        self.in_flight: InFlight | None = None

    def evict(self, pod: Pod, grace_seconds: int | None) -> EvictionAnswer:
        running = self.in_flight
        if running is not None and not running.future.done():
            return self._failed(pod, "not sent: the previous eviction is still in flight",
                                in_flight=running.pod,
                                in_flight_seconds=round(self.clock() - running.sent, 1))  # fmt: skip
        left = self.budget_left()
        if left <= 0:
            return self._failed(pod, "not sent: the tick's API time budget is spent")
        args = self.api.args
        timeout = (min(args.connect_timeout, left), min(args.read_timeout, left))
        uid = pod.uid if pod.uid != pod.key else ""  # records built without a uid use the key
        sent = self.clock()
        future = self.worker.submit(
            evicting.evict, self.api, pod.namespace, pod.name, grace_seconds, uid, timeout
        )
        wait = answer_wait(self.answer_seconds(), left)
        try:
            outcome = future.result(timeout=wait)
        except TimeoutError:
            self.in_flight = InFlight(pod.key, sent, future)
            future.add_done_callback(partial(self._late, pod.key, sent))
            self._failed(pod, f"no answer within {round(wait, 2):g} s: the round ends, the request goes "
                         f"on in the background for at most {min(left, args.read_timeout):.1f} s")  # fmt: skip
            return EvictionAnswer(EvictionResult.FAILED, unanswered=True)
        return self._answered(pod, outcome)

    def close(self) -> None:
        """Stop the worker (a request in flight runs out its own timeout)."""
        self.worker.shutdown(wait=False, cancel_futures=True)

    def _answered(self, pod: Pod, outcome: EvictionOutcome) -> EvictionAnswer:
        result = outcome.result
        if result is EvictionResult.FAILED:
            self.log.warning(
                "eviction failed: the API answered with an error or not at all; "
                "this node's eviction round ends here",
                pod=pod.key,
                status=outcome.status,
                error=outcome.message,
                retry_after=outcome.retry_after,
            )
        elif result is EvictionResult.BLOCKED_BY_PDB:
            self.log.info(
                "eviction refused by a disruption budget; trying the next pod",
                pod=pod.key,
                detail=outcome.message,
            )
        return EvictionAnswer(result, outcome.retry_after)

    def _failed(self, pod: Pod, why: str, **fields: Any) -> EvictionAnswer:
        self.log.warning(
            "eviction failed: the API answered with an error or not at all; "
            "this node's eviction round ends here",
            pod=pod.key,
            error=why,
            **fields,
        )
        return EvictionAnswer(EvictionResult.FAILED)

    def _late(self, pod: str, sent: float, future: Future[EvictionOutcome]) -> None:
        """The answer to a request its tick gave up on (runs on the worker)."""
        seconds = round(self.clock() - sent, 2)
        try:
            outcome = future.result()
        except Exception as err:  # noqa: BLE001 - a late answer must not kill the worker
            self.log.error("late eviction answer: the request raised", pod=pod,
                           seconds=seconds, error=repr(err))  # fmt: skip
            return
        self.log.warning(
            "late eviction answer",
            pod=pod,
            result=outcome.result.value,
            meaning=LATE_MEANING[outcome.result],
            seconds=seconds,
            status=outcome.status,
            error=outcome.message or None,
        )
