"""RBAC is exactly the access tables, on the real server (issue 11, issue 20).

* What ``kubectl auth can-i --list`` says each ServiceAccount may do (cluster-wide, and in
  waterline-system), beyond what any ServiceAccount may do, is exactly its program's
  access table (agent/node/access.py, agent/cluster/access.py): nothing granted that no
  table row needs, nothing a row needs missing. tests/unit/test_rbac.py compares the same
  tables with deploy/rbac.yaml as written; this is the server's own reading of it.
* The node agent's cluster side (its watches through ``start_cluster``, the taint, an
  eviction, its Events, its DaemonSet) runs with its own token, bound to its pod on a kwok
  node as the kubelet would project it, with ``agent_access()`` enforced: every call is in
  the table and the real server grants it (RBAC and the admission policy). The
  controller's calls are checked the same way by every controller test (``Replica``).
"""

from __future__ import annotations

import pytest

from agent.cluster.access import controller_access
from agent.kube.access import AccessTable, Permission
from agent.kube.events import WARNING, EventRecorder, KubeEvents, pod_ref
from agent.kube.fetching import get_object
from agent.kube.resources import NODES
from agent.model.eviction import EvictionResult
from agent.node.access import agent_access
from agent.node.incluster import COMPONENT, set_taint, start_cluster
from devtools.harness.cluster import AGENT_SA, CONTROLLER_SA, NAMESPACE, RealCluster
from devtools.harness.waiting import wait_until
from executors.eviction import ApiEvictor
from tests.integration.controller_env import POOL_TAINT, pool_node, replicaset, wait_running

pytestmark = pytest.mark.integration

#: A ServiceAccount nothing is bound to: what every ServiceAccount may do (discovery,
#: self-reviews, ...), left out of the comparison.
UNBOUND = "default"


def can_i(kube: RealCluster, account: str, namespace: str) -> set[Permission]:
    """``kubectl auth can-i --list`` for a ServiceAccount of waterline-system, as
    Permissions (non-resource URLs left out)."""
    out = kube.kubectl("auth", "can-i", "--list", "-n", namespace,
                       "--as", f"system:serviceaccount:{NAMESPACE}:{account}").stdout  # fmt: skip
    header, *rows = out.splitlines()
    starts = [header.index(h) for h in ("Resources", "Non-Resource URLs", "Resource Names", "Verbs")]
    found: set[Permission] = set()
    for row in rows:
        resource = row[starts[0] : starts[1]].strip()
        if not resource:
            continue
        names = row[starts[2] : starts[3]].strip().strip("[]").split() or [""]
        verbs = row[starts[3] :].strip().strip("[]").split()
        base, _, sub = resource.partition("/")
        plural, _, group = base.partition(".")
        plural = f"{plural}/{sub}" if sub else plural
        found |= {Permission(group, plural, v, namespace, n) for v in verbs for n in names}
    return found


def granted(kube: RealCluster, account: str) -> set[Permission]:
    """What deploy/ grants ``account`` on the real server: cluster-wide (namespace ""), and
    what its Roles add in waterline-system."""
    everyone = {strip(p) for p in can_i(kube, UNBOUND, "default")}
    cluster = {strip(p) for p in can_i(kube, account, "default")} - everyone
    local = {strip(p) for p in can_i(kube, account, NAMESPACE)} - cluster - everyone
    return cluster | {Permission(p.group, p.resource, p.verb, NAMESPACE, p.name) for p in local}


def strip(p: Permission) -> Permission:
    return Permission(p.group, p.resource, p.verb, "", p.name)


@pytest.mark.parametrize(
    ("table", "account"),
    [(agent_access(), AGENT_SA), (controller_access(), CONTROLLER_SA)],
    ids=["agent", "controller"],
)
def test_can_i_list_is_exactly_the_access_table(
    kube: RealCluster, table: AccessTable, account: str
) -> None:
    server = granted(kube, account)
    declared = set(table.permissions)
    print(f"\nkubectl auth can-i --list --as system:serviceaccount:{NAMESPACE}:{account} "
          f"(beyond any ServiceAccount's), cluster-wide and -n {NAMESPACE}:")  # fmt: skip
    for p in sorted(server):
        print(f"  {'ok     ' if p in declared else 'UNUSED '} {p}")
    for p in sorted(declared - server):
        print(f"  MISSING {p}")
    assert not declared - server, f"{table.declared_in} calls what the server does not grant"
    assert not server - declared, f"the server grants what {table.declared_in} never calls"


def test_the_agents_cluster_calls_are_all_in_its_table_and_granted(kube: RealCluster) -> None:
    ns = kube.namespace("agent-calls")
    node = pool_node(kube, ns)
    kube.apply([replicaset(ns, "hog", ns, 1)])
    (hog_pod,) = wait_running(kube, ns, "app=hog", 1)
    table = agent_access()
    with kube.proxy() as proxy:
        api = kube.client(kube.agent_kubeconfig(node, server=proxy.url), access=table)
        parts = start_cluster(api, node)
        try:
            wait_until(parts.ready, 60, "the agent's watches in sync")
            assert set_taint(api, node, True)
            taints = get_object(kube.api, NODES, node)["spec"]["taints"]
            assert {t["key"] for t in taints} == {POOL_TAINT, "qos.waterline.io/interference"}
            wait_until(lambda: any(p.uid == hog_pod["metadata"]["uid"] for p in parts.view.pods()))
            (hog,) = [p for p in parts.view.pods() if p.uid == hog_pod["metadata"]["uid"]]
            assert ApiEvictor(api).evict(hog, 1).result is EvictionResult.EVICTED
            assert parts.uninstalled() is False  # its DaemonSet is there: not an uninstall
            recorder = EventRecorder(KubeEvents(api), COMPONENT, host=node)
            assert recorder.record(pod_ref(hog), WARNING, "Evicted", "by a test") == "created"
            assert recorder.record(pod_ref(hog), WARNING, "Evicted", "by a test") == "updated"
            assert set_taint(api, node, False)
            taints = get_object(kube.api, NODES, node)["spec"]["taints"]
            assert {t["key"] for t in taints} == {POOL_TAINT}
        finally:
            parts.stop()
            api.close()
            kube.kubectl("delete", "namespace", ns, "--wait=false")
        assert [s for s in proxy.requests if s.status in (401, 403)] == []
    assert table.refused == []


def test_the_brake_component_is_the_agents() -> None:
    """The controller counts the Events the agent reports as its own component."""
    from agent.cluster import brake

    assert brake.AGENT_COMPONENT == COMPONENT
