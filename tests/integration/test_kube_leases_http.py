"""Leader election over real HTTP against the dev server, on real (short) clocks: one
leader among three, and a clean shutdown releases the lease to a follower. The timing
bounds are proven on a fake clock in tests/unit/test_kube_leases.py."""

from __future__ import annotations

import threading
import time

import pytest

from agent.kube.fetching import get_object
from agent.kube.leases import ElectionArgs, KubeLeases, LeaderElector
from agent.kube.resources import LEASES
from devtools.apiserver.testing import serve
from tests.waiting import wait_until

pytestmark = pytest.mark.integration

ARGS = ElectionArgs(lease_duration=2, renew_deadline=1.5, retry_period=0.1, jitter=0.2)




def test_three_electors_over_http_release_and_failover() -> None:
    with serve() as env:
        electors, stops, threads = [], [], []
        for i in range(3):
            elector = LeaderElector(
                KubeLeases(env.api, "kube-system", "waterline", timeout=1.0),
                f"c{i}",
                ARGS,
                namespace="kube-system",
                name="waterline",
            )
            stop = threading.Event()
            thread = threading.Thread(target=elector.run, args=(stop,), daemon=True)
            electors.append(elector)
            stops.append(stop)
            threads.append(thread)
            thread.start()

        def leaders() -> list[int]:
            return [i for i, e in enumerate(electors) if e.is_leader() and not stops[i].is_set()]

        wait_until(lambda: len(leaders()) == 1, 5)
        for _ in range(30):  # stays exactly one while all are healthy
            assert len(leaders()) == 1
            time.sleep(0.01)
        (first,) = leaders()
        lease = get_object(env.api, LEASES, "waterline", "kube-system")
        assert (
            lease["spec"]["holderIdentity"] == f"c{first}"
            and lease["spec"]["leaseTransitions"] == 0
        )

        # clean shutdown: the lease is released and another takes over well before expiry
        stops[first].set()
        threads[first].join(3)
        assert not electors[first].leading.is_set()
        wait_until(lambda: len(leaders()) == 1, 3 * ARGS.lease_duration)
        (second,) = leaders()
        assert second != first
        lease = get_object(env.api, LEASES, "waterline", "kube-system")
        assert (
            lease["spec"]["holderIdentity"] == f"c{second}"
            and lease["spec"]["leaseTransitions"] == 1
        )

        for stop in stops:
            stop.set()
        for thread in threads:
            thread.join(3)
        assert not any(e.leading.is_set() for e in electors)
        assert not get_object(env.api, LEASES, "waterline", "kube-system")["spec"].get(
            "holderIdentity"
        )
