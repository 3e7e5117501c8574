"""A first-in first-out work queue drained through a token bucket.

Arbitration may pass a burst of jobs at once; the migration executor must still start them
at no more than ``qps`` per second, so the API server and the scheduler see a steady trickle.
The bucket holds at most ``burst`` tokens and refills at ``qps`` tokens per second; taking
an item costs one token. The structure never sleeps and never reads the wall clock: the
caller passes ``clock`` (seconds, monotonic) and asks ``next_ready_in()`` how long to wait,
so tests drive it with a fake clock.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from agent.errors import InvalidObject
from agent.model.numbers import EPSILON

T = TypeVar("T", bound=Hashable)


class RateLimitedQueue(Generic[T]):
    """FIFO of distinct items; ``pop``/``drain`` release items only as tokens allow.

    Adding an item already queued is a no-op (a job passed twice waits once, in its first
    place). A clock that steps backwards refills nothing rather than draining the bucket.
    """

    __slots__ = ("_burst", "_clock", "_items", "_last", "_qps", "_tokens")

    def __init__(self, qps: float, clock: Callable[[], float], burst: int = 1) -> None:
        if (
            isinstance(qps, bool)
            or not isinstance(qps, (int, float))
            or not math.isfinite(qps)
            or qps <= 0
        ):
            raise InvalidObject("RateLimitedQueue", "", "qps", f"must be a number > 0, got {qps!r}")
        if isinstance(burst, bool) or not isinstance(burst, int) or burst < 1:
            raise InvalidObject(
                "RateLimitedQueue", "", "burst", f"must be an integer >= 1, got {burst!r}"
            )
        self._qps = float(qps)
        self._burst = burst
        self._clock = clock
        self._tokens = float(burst)  # a fresh bucket is full
        self._last = clock()
        self._items: OrderedDict[T, None] = OrderedDict()

    # -- queue ----------------------------------------------------------------------------
    def add(self, item: T) -> bool:
        """Append ``item``; False when it is already waiting."""
        if item in self._items:
            return False
        self._items[item] = None
        return True

    def discard(self, item: T) -> None:
        """Forget a waiting item (its job was deleted or aborted)."""
        self._items.pop(item, None)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, item: object) -> bool:
        return item in self._items

    # -- bucket ---------------------------------------------------------------------------
    def _refill(self) -> None:
        now = self._clock()
        if now > self._last:
            self._tokens = min(float(self._burst), self._tokens + (now - self._last) * self._qps)
            self._last = now

    @property
    def tokens(self) -> float:
        self._refill()
        return self._tokens

    def pop(self) -> T | None:
        """The oldest item if a token is available now, else None (nothing consumed)."""
        if not self._items:
            return None
        self._refill()
        if self._tokens < 1.0 - EPSILON:
            return None
        self._tokens = max(0.0, self._tokens - 1.0)
        item, _ = self._items.popitem(last=False)
        return item

    def drain(self) -> list[T]:
        """Every item the bucket allows right now, oldest first."""
        out: list[T] = []
        while (item := self.pop()) is not None:
            out.append(item)
        return out

    def next_ready_in(self) -> float | None:
        """Seconds until ``pop`` can return an item: 0 now, None when the queue is empty."""
        if not self._items:
            return None
        self._refill()
        missing = 1.0 - self._tokens
        return 0.0 if missing <= EPSILON else missing / self._qps


def release_schedule(items: list[T], qps: float, burst: int = 1) -> dict[T, float]:
    """When each item would leave a fresh queue, in seconds after they are all added.

    Runs the real queue on a stepped clock; used by `waterline simulate` to show when the
    executor would start each passed job.
    """
    now = [0.0]
    queue: RateLimitedQueue[T] = RateLimitedQueue(qps, lambda: now[0], burst)
    for item in items:
        queue.add(item)
    out: dict[T, float] = {}
    while (wait := queue.next_ready_in()) is not None:
        now[0] += wait
        for item in queue.drain():
            out[item] = now[0]
    return out
