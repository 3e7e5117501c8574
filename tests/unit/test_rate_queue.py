"""The token-bucket work queue, driven by a fake clock."""

from __future__ import annotations

import pytest

from agent.cluster.rate_queue import RateLimitedQueue, release_schedule
from agent.errors import InvalidObject


class FakeClock:
    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def test_drains_at_qps_in_fifo_order() -> None:
    clock = FakeClock()
    queue: RateLimitedQueue[str] = RateLimitedQueue(2.0, clock)
    for item in "abcde":
        queue.add(item)
    assert queue.drain() == ["a"]  # a full bucket of one token
    assert queue.pop() is None
    assert queue.next_ready_in() == pytest.approx(0.5)
    clock.advance(0.25)
    assert queue.pop() is None
    clock.advance(0.25)
    assert queue.drain() == ["b"]
    clock.advance(1.0)
    assert queue.drain() == ["c"]  # idle time never banks more than the burst
    clock.advance(10.0)
    assert queue.drain() == ["d"]
    assert len(queue) == 1


def test_burst_allows_that_many_at_once_then_steady_rate() -> None:
    clock = FakeClock()
    queue: RateLimitedQueue[int] = RateLimitedQueue(1.0, clock, burst=3)
    for i in range(6):
        queue.add(i)
    assert queue.drain() == [0, 1, 2]
    assert queue.next_ready_in() == pytest.approx(1.0)
    clock.advance(2.0)
    assert queue.drain() == [3, 4]
    clock.advance(100.0)
    assert queue.drain() == [5]
    assert queue.next_ready_in() is None
    assert queue.tokens == pytest.approx(2.0)


def test_empty_queue_keeps_its_tokens() -> None:
    clock = FakeClock()
    queue: RateLimitedQueue[str] = RateLimitedQueue(1.0, clock)
    assert queue.pop() is None
    assert queue.next_ready_in() is None
    queue.add("a")
    assert queue.pop() == "a"


def test_duplicates_wait_once_and_discard_forgets() -> None:
    queue: RateLimitedQueue[str] = RateLimitedQueue(1.0, FakeClock())
    assert queue.add("a") is True
    assert queue.add("b") is True
    assert queue.add("a") is False
    assert len(queue) == 2 and "a" in queue
    queue.discard("a")
    queue.discard("zzz")
    assert queue.pop() == "b"


def test_clock_stepping_back_refills_nothing() -> None:
    clock = FakeClock(50.0)
    queue: RateLimitedQueue[str] = RateLimitedQueue(1.0, clock)
    queue.add("a")
    queue.add("b")
    assert queue.pop() == "a"
    clock.now = 10.0
    assert queue.pop() is None
    clock.now = 50.5
    assert queue.pop() is None
    clock.now = 51.0
    assert queue.pop() == "b"


@pytest.mark.parametrize(
    ("qps", "burst", "field"), [(0, 1, "qps"), (-1, 1, "qps"), (True, 1, "qps"), (1, 0, "burst")]
)
def test_bad_arguments_name_the_field(qps: float, burst: int, field: str) -> None:
    with pytest.raises(InvalidObject) as err:
        RateLimitedQueue(qps, FakeClock(), burst)
    assert err.value.field == field


def test_release_schedule() -> None:
    assert release_schedule(["a", "b", "c"], 3.0) == pytest.approx(
        {"a": 0.0, "b": 1 / 3, "c": 2 / 3}
    )
    assert release_schedule(["a", "b", "c"], 1.0, burst=2) == pytest.approx(
        {"a": 0.0, "b": 0.0, "c": 1.0}
    )
    assert release_schedule([], 1.0) == {}
