"""`python -m bench defrag-e2e --real` at a tiny size, so that it cannot rot: the
controller's own code (its ServiceAccount's token) carries a defrag plan out on kwok
nodes, the real scheduler and ReplicaSet controller place the replacements, and nothing
of the bench's is left behind. The figures are printed (``-s``), never asserted on time."""

from __future__ import annotations

import pytest

from agent.kube.fetching import Selectors, list_objects
from agent.kube.resources import NODES
from bench import defrag_real
from devtools.harness.cluster import RealCluster

pytestmark = pytest.mark.integration


def test_every_strategy_runs_on_the_real_scheduler_and_leaves_no_placeholder_or_taint(
    kube: RealCluster,
) -> None:
    results = defrag_real.run(kube, 7, cases=("as built",))
    assert [r.strategy for r in results] == list(defrag_real.STRATEGIES)
    for r in results:
        planned = len(r.defrag.migrations)
        assert planned > 0, "the tiny cluster has a source to drain"
        assert not r.real.timed_out, r.strategy
        assert r.real.moved == planned, r.strategy  # every planned pod was evicted
        assert r.real.on_target + r.real.elsewhere + r.real.on_source + r.real.pending == planned
        assert (r.real.placeholders_left, r.real.taints_left) == (0, 0), r.strategy
    drained = [r for r in results if r.strategy != defrag_real.PLAIN]
    for r in drained:  # room enough elsewhere: the taints keep every replacement off the source
        assert r.real.on_source == 0 and r.real.pending == 0, r.strategy
        assert r.real.freed == len(r.defrag.freed_nodes), r.strategy
    left = list_objects(kube.api, NODES, Selectors(label_selector=defrag_real.RUN_KEY)).items
    assert left == []  # each run's nodes went with it
