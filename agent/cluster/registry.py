"""The cluster engines, in the order the controller runs them each round and
``waterline simulate`` reports them.

Adding an engine is one entry here: write ``agent/cluster/<name>/`` in the shape that
``agent.cluster.engine`` describes (``XArgs`` with ``from_config`` and ``validate``, a pure
``plan(snapshot, args, now) -> XPlan`` and ``ENGINE``) and list its ``ENGINE`` below. The
controller then reads its config section (with ``enabled`` when it is switchable) and plans
it every round; ``waterline simulate`` reads the same section from a scenario. What the
controller does with the plan and how the report renders it are one table entry on each
side (``agent.cluster.controller`` and ``agent.simulate.sections``); tests check that no
engine lacks either.
"""

from __future__ import annotations

from typing import Any

from agent.cluster import arbitration, daemonset, defrag, queues
from agent.cluster.engine import ClusterEngine

ENGINES: tuple[ClusterEngine[Any, Any], ...] = (
    arbitration.ENGINE,
    defrag.ENGINE,
    queues.ENGINE,
    daemonset.ENGINE,
)


def engine(key: str) -> ClusterEngine[Any, Any]:
    for e in ENGINES:
        if e.key == key:
            return e
    raise KeyError(key)
