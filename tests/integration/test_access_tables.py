"""The code makes no call outside its access table (issue 11): the node agent's cluster
side (its watches through ``start_cluster``, the taint, an eviction, its Events) runs
against the dev server with ``agent_access()`` enforced, as the controller's integration
tests run with ``controller_access()``. With tests/unit/test_rbac.py (tables = RBAC), a
call added to the code without a table row fails here, naming it; a row without RBAC, or
RBAC without a row, fails there."""

from __future__ import annotations

import time

import pytest

from agent.kube.client import build_api
from agent.kube.events import WARNING, EventRecorder, KubeEvents, pod_ref
from agent.kube.fetching import get_object
from agent.kube.resources import NODES
from agent.model.eviction import EvictionResult
from agent.node.access import agent_access
from agent.node.incluster import COMPONENT, set_taint, start_cluster
from devtools.apiserver.testing import pod, serve
from executors.eviction import ApiEvictor

pytestmark = pytest.mark.integration


def test_the_agents_cluster_calls_are_all_in_its_table() -> None:
    objects = [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"}},
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}},
        pod("hog"),
    ]
    with serve(objects) as env:
        table = agent_access()
        api = build_api(str(env.kubeconfig), access=table)
        parts = start_cluster(api, "node-1")
        try:
            deadline = time.monotonic() + 10
            while not parts.ready():
                assert time.monotonic() < deadline, "the agent's watches did not sync"
                time.sleep(0.02)
            assert set_taint(api, "node-1", True)
            taints = get_object(env.api, NODES, "node-1")["spec"]["taints"]
            assert [t["key"] for t in taints] == ["qos.waterline.io/interference"]
            hog = parts.view.pods()[0]
            assert ApiEvictor(api).evict(hog, 1).result is EvictionResult.EVICTED
            assert parts.uninstalled() is True  # its DaemonSet (none here) is read by name
            recorder = EventRecorder(KubeEvents(api), COMPONENT, host="node-1")
            assert recorder.record(pod_ref(hog), WARNING, "Evicted", "by a test") == "created"
            assert recorder.record(pod_ref(hog), WARNING, "Evicted", "by a test") == "updated"
        finally:
            parts.stop()
            api.close()
        assert table.refused == []


def test_the_brake_component_is_the_agents() -> None:
    """The controller counts the Events the agent reports as its own component."""
    from agent.cluster import brake

    assert brake.AGENT_COMPONENT == COMPONENT
