"""Leader election on a fake clock: several electors stepping against one in-memory Lease
with the API's semantics. The invariant "at most one leader" is checked at every
simulated instant (every 10 ms), not only when electors act."""

from __future__ import annotations

import heapq
import random

import pytest

from agent.errors import InvalidObject
from agent.kube.leases import ElectionArgs, LeaderElector, MemoryLeases

ARGS = ElectionArgs(lease_duration=15, renew_deadline=10.0, retry_period=2.0, jitter=0.2)
TICK = 0.01


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Cluster:
    """Electors on one lease; ``run_until`` advances time, stepping each when due."""

    def __init__(self, n: int, seed: int = 7) -> None:
        self.clock = Clock()
        self.lease = MemoryLeases()
        self.views = [self.lease.view() for _ in range(n)]
        self.started: list[tuple[float, str]] = []
        self.stopped: list[tuple[float, str]] = []
        self.electors = [
            LeaderElector(
                view,
                f"candidate-{i}",
                ARGS,
                clock=self.clock,
                wall=self.clock,
                rng=random.Random(seed + i),
                on_started_leading=lambda i=i: self.started.append(
                    (self.clock.now, f"candidate-{i}")
                ),
                on_stopped_leading=lambda i=i: self.stopped.append(
                    (self.clock.now, f"candidate-{i}")
                ),
            )
            for i, view in enumerate(self.views)
        ]
        self.alive = [True] * n
        # stagger the first attempts a little, as processes start at different times
        self.queue = [(self.clock.now + 0.1 * i, i) for i in range(n)]
        heapq.heapify(self.queue)

    def leaders(self) -> list[int]:
        return [
            i for i, e in enumerate(self.electors) if self.alive[i] and e.is_leader(self.clock.now)
        ]

    def run_until(self, end: float, expect_leader: bool = False) -> None:
        while self.clock.now < end:
            due, i = self.queue[0]
            if due <= self.clock.now:
                heapq.heappop(self.queue)
                if self.alive[i]:
                    delay = self.electors[i].step(self.clock.now)
                    assert delay >= 0
                    heapq.heappush(self.queue, (self.clock.now + delay, i))
                self.check(expect_leader)
                continue
            self.clock.now = min(due, self.clock.now + TICK, end)
            self.check(expect_leader)

    def check(self, expect_leader: bool) -> None:
        leaders = self.leaders()
        assert len(leaders) <= 1, f"two leaders at {self.clock.now}: {leaders}"
        if expect_leader:
            assert len(leaders) == 1, f"no leader at {self.clock.now}"

    def kill(self, i: int) -> float:
        self.alive[i] = False
        return self.clock.now

    def holder(self) -> str:
        assert self.lease.lease is not None
        return str(self.lease.lease["spec"].get("holderIdentity") or "")


@pytest.mark.parametrize("n", [2, 3])
def test_exactly_one_leader_at_every_step(n: int) -> None:
    c = Cluster(n)
    c.run_until(c.clock.now + 1.0)
    assert len(c.leaders()) == 1
    c.run_until(c.clock.now + 120.0, expect_leader=True)
    assert len(c.started) == 1 and not c.stopped  # no flapping while everyone is healthy
    assert c.lease.lease is not None
    assert c.lease.lease["spec"]["leaseTransitions"] == 0


@pytest.mark.parametrize("n", [2, 3])
def test_failover_after_the_leader_dies_within_lease_duration_plus_retry_period(n: int) -> None:
    c = Cluster(n)
    c.run_until(c.clock.now + 30.0, expect_leader=True)
    (old,) = c.leaders()
    died = c.kill(old)
    c.run_until(died + ARGS.lease_duration + ARGS.retry_period + 1.0)
    takeovers = [t for t, who in c.started if who != f"candidate-{old}"]
    assert takeovers, "nobody took over"
    assert takeovers[0] - died <= ARGS.lease_duration + ARGS.retry_period
    assert c.holder() != f"candidate-{old}"
    assert c.lease.lease is not None and c.lease.lease["spec"]["leaseTransitions"] == 1


@pytest.mark.parametrize("n", [2, 3])
def test_clean_release_hands_over_at_once(n: int) -> None:
    c = Cluster(n)
    c.run_until(c.clock.now + 30.0, expect_leader=True)
    (old,) = c.leaders()
    assert c.electors[old].release() is True
    c.kill(old)
    released = c.clock.now
    assert not c.electors[old].leading.is_set()  # work stopped before the lease was handed back
    assert c.holder() == ""
    c.run_until(released + ARGS.retry_period + 0.01)
    takeovers = [t for t, who in c.started if who != f"candidate-{old}"]
    assert takeovers and takeovers[0] - released <= ARGS.retry_period


@pytest.mark.parametrize("n", [2, 3])
def test_a_leader_that_cannot_renew_stops_before_its_lease_expires(n: int) -> None:
    c = Cluster(n)
    c.run_until(c.clock.now + 30.0, expect_leader=True)
    (old,) = c.leaders()
    last_renew = c.electors[old].last_renew
    c.views[old].reachable = False  # partitioned from the API server, still running
    c.run_until(c.clock.now + 40.0)  # check() asserts no two leaders at any instant
    stops = [t for t, who in c.stopped if who == f"candidate-{old}"]
    assert stops and stops[0] <= last_renew + ARGS.renew_deadline
    assert stops[0] < last_renew + ARGS.lease_duration  # before anyone may take the lease
    takeovers = [t for t, who in c.started if who != f"candidate-{old}"]
    assert takeovers and takeovers[0] >= stops[0]
    # healed: the old leader sees the new holder and stays a follower
    c.views[old].reachable = True
    c.run_until(c.clock.now + 30.0, expect_leader=True)
    assert c.leaders() != [old]


def test_a_leader_blocked_in_a_request_is_not_leader_past_its_deadline() -> None:
    c = Cluster(2)
    c.run_until(c.clock.now + 5.0, expect_leader=True)
    (old,) = c.leaders()
    elector = c.electors[old]
    assert elector.is_leader(elector.last_renew + ARGS.renew_deadline - 0.001)
    assert not elector.is_leader(elector.last_renew + ARGS.renew_deadline)


def test_racing_candidates_on_a_missing_lease_one_wins() -> None:
    lease = MemoryLeases()
    clock = Clock()
    a = LeaderElector(lease.view(), "a", ARGS, clock=clock, wall=clock, rng=random.Random(1))
    b = LeaderElector(lease.view(), "b", ARGS, clock=clock, wall=clock, rng=random.Random(2))
    a.step()
    b.step()
    assert [e.identity for e in (a, b) if e.is_leader()] == ["a"]


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (ElectionArgs(lease_duration=10, renew_deadline=10.0), "renew_deadline"),
        (ElectionArgs(retry_period=10.0), "retry_period"),
        (ElectionArgs(jitter=1.0), "jitter"),
        (ElectionArgs(lease_duration=0), "lease_duration"),
    ],
)
def test_bad_settings_name_the_field(args: ElectionArgs, field: str) -> None:
    with pytest.raises(InvalidObject, match=field):
        args.validate()
