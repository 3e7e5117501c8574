"""Lease timing on a fake clock (issue 11): a follower measures the lease's expiry from
the moment its GET *returned*, so a slow GET never makes two leaders."""

from __future__ import annotations

import random
from typing import Any

from agent.kube.leases import ElectionArgs, LeaderElector, MemoryLeases, MemoryLeaseView

ARGS = ElectionArgs(lease_duration=15, renew_deadline=10.0, retry_period=2.0, jitter=0.2)
TICK = 0.01


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class SlowGet:
    """A lease view whose next GET takes ``duration`` seconds of the fake clock; while
    it is in flight the other candidate keeps renewing (``during``), so the answer
    shows a renewal made near the end of the GET."""

    def __init__(self, view: MemoryLeaseView, clock: Clock) -> None:
        self.view, self.clock = view, clock
        self.slow: tuple[float, Any] | None = None

    def get(self) -> dict[str, Any] | None:
        if self.slow is not None:
            duration, during = self.slow
            self.slow = None
            end = self.clock.now + duration
            during(end - 0.1)
            self.clock.now = end
        return self.view.get()

    def create(self, lease: dict[str, Any]) -> dict[str, Any]:
        return self.view.create(lease)

    def replace(self, lease: dict[str, Any]) -> dict[str, Any]:
        return self.view.replace(lease)


def _elector(view: Any, name: str, clock: Clock, seed: int) -> LeaderElector:
    return LeaderElector(view, name, ARGS, clock=clock, wall=clock, rng=random.Random(seed))


def test_a_slow_get_never_makes_two_leaders() -> None:
    clock = Clock()
    store = MemoryLeases()
    a_view = store.view()
    b_view = SlowGet(store.view(), clock)
    a, b = _elector(a_view, "a", clock, 1), _elector(b_view, "b", clock, 2)
    a.step(clock.now)
    assert a.is_leader()
    clock.now += 0.5
    b.step(clock.now)
    assert not b.is_leader()
    for t in (1002.0, 1004.0, 1006.0, 1008.0):
        clock.now = t
        a.step(t)

    def leader_renews_during_the_get(until: float) -> None:
        t = clock.now
        while t < until:
            t = min(until, t + ARGS.retry_period)
            clock.now = t
            a.step(t)

    # b's GET starts at 1009 and returns 6.9 s later, showing a's renewal at 1015.8;
    # right after it, a is cut off from the API server and can renew no more.
    clock.now = 1009.0
    b_view.slow = (6.9, leader_renews_during_the_get)
    next_step = {"a": clock.now + ARGS.retry_period, "b": clock.now + b.step(clock.now)}
    assert not b.is_leader()
    a_view.reachable = False
    last_renewal = a.last_renew
    assert last_renewal == 1015.8

    leaders_seen: list[tuple[float, list[str]]] = []
    while clock.now < 1050.0:
        for name, elector in (("a", a), ("b", b)):
            if next_step[name] <= clock.now:
                next_step[name] = clock.now + elector.step(clock.now)
        leaders = [n for n, e in (("a", a), ("b", b)) if e.is_leader(clock.now)]
        assert len(leaders) <= 1, f"two leaders at {clock.now:.2f}"
        leaders_seen.append((clock.now, leaders))
        clock.now = round(clock.now + TICK, 6)
    # a stopped at its renew deadline; b took over once the lease, as b saw it after its
    # GET returned (1015.9), had gone unrenewed for the lease duration.
    assert not a.is_leader(clock.now) and b.is_leader(clock.now)
    took_over = next(t for t, who in leaders_seen if who == ["b"])
    assert 1015.9 + ARGS.lease_duration <= took_over <= 1015.9 + ARGS.lease_duration + 2.0
    a_stopped = next(t for t, who in leaders_seen if who != ["a"])
    assert a_stopped <= last_renewal + ARGS.renew_deadline + TICK
