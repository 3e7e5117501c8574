"""Leader election on the real server's Lease, with the controller's own token (deploy/'s
Role grants get and update of that one Lease, and create), on real (short) clocks: one
leader among three, and a clean shutdown releases the Lease to a follower. The timing
bounds are proven on a fake clock in tests/unit/test_kube_leases.py; takeover after a
crash is measured in tests/integration/test_controller_leadership.py."""

from __future__ import annotations

import threading

import pytest

from agent.cluster.access import controller_access
from agent.kube.leases import ElectionArgs, KubeLeases, LeaderElector
from devtools.harness.cluster import RealCluster, unique
from devtools.harness.waiting import wait_until
from tests.integration.controller_env import LEASE_NAME, LEASE_NS, lease

pytestmark = pytest.mark.integration

ARGS = ElectionArgs(lease_duration=2, renew_deadline=1.5, retry_period=0.1, jitter=0.2)


def test_three_electors_over_http_release_and_failover(kube: RealCluster) -> None:
    table = controller_access()
    api = kube.client(kube.controller_kubeconfig(), access=table)
    identities = [unique("elector") for _ in range(3)]
    electors = [
        LeaderElector(KubeLeases(api, LEASE_NS, LEASE_NAME, timeout=1.0), identity, ARGS,
                      namespace=LEASE_NS, name=LEASE_NAME)  # fmt: skip
        for identity in identities
    ]
    stops = [threading.Event() for _ in electors]
    threads = [
        threading.Thread(target=e.run, args=(s,), daemon=True)
        for e, s in zip(electors, stops, strict=True)
    ]
    try:
        for thread in threads:
            thread.start()

        def leaders() -> list[int]:
            return [i for i, e in enumerate(electors) if e.is_leader() and not stops[i].is_set()]

        wait_until(lambda: len(leaders()) == 1, 3 * ARGS.lease_duration, "one leader")
        for _ in range(30):  # stays exactly one while all are healthy
            assert len(leaders()) == 1
            threading.Event().wait(0.01)
        (first,) = leaders()
        held = lease(kube)["spec"]
        assert held["holderIdentity"] == identities[first]
        transitions = held.get("leaseTransitions", 0)

        # clean shutdown: the lease is released and another takes over well before expiry
        stops[first].set()
        threads[first].join(3)
        assert not electors[first].leading.is_set()
        wait_until(lambda: len(leaders()) == 1, 3 * ARGS.lease_duration, "a second leader")
        (second,) = leaders()
        assert second != first
        held = lease(kube)["spec"]
        assert held["holderIdentity"] == identities[second]
        assert held["leaseTransitions"] == transitions + 1
    finally:
        for stop in stops:
            stop.set()
        for thread in threads:
            thread.join(3)
        api.close()
    assert not any(e.leading.is_set() for e in electors)
    assert not lease(kube)["spec"].get("holderIdentity")
    assert table.refused == []
