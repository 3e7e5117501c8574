"""The node agent's access table: every API call it makes (``agent.kube.access``).

* watches: ``agent.kube.nodeview.node_watches`` (its node's pods, its node, namespaces,
  PodDisruptionBudgets, the policies and actions), list + watch each, cluster-wide (RBAC
  cannot name one node per agent: the field selectors narrow what is sent, not what is
  allowed), and the cluster brake ConfigMap (get, list, watch; only that one, in the
  Waterline namespace);
* the interference taint: get and patch of nodes (``agent.node.incluster.set_taint``;
  deploy/ also ships an admission policy that limits the patch to the agent's own node
  and to that taint);
* its node's batch capacity: patch of nodes/status (``agent.node.batch_status``; the same
  admission policy limits it to the agent's own node and to the two batch resources);
* evictions (pods/eviction create) and the Events of its actions (create, patch);
* its own DaemonSet (get, list, watch; only that one, in the Waterline namespace): on
  SIGTERM/SIGHUP, gone or being deleted means an uninstall, and the agent releases every
  cap; the watch remembers a deletion it saw, for when the uninstall has already taken
  the agent's own RBAC and the get is refused.

``tests/unit/test_rbac.py`` compares this table with deploy/rbac.yaml both ways, and
``tests/integration/test_access_tables.py`` with what the real API server's RBAC grants
the agent's ServiceAccount (``kubectl auth can-i --list``).
"""

from __future__ import annotations

from agent.defaults import AGENT_DAEMONSET, BRAKE_CONFIGMAP, NAMESPACE
from agent.kube.access import AccessTable, grant, watches
from agent.kube.nodeview import node_watches
from agent.kube.resources import CONFIGMAPS, DAEMONSETS, EVENTS, NODES, PODS

PROGRAM = "waterline-agent"


def agent_access() -> AccessTable:
    return AccessTable(
        PROGRAM,
        "agent/node/access.py",
        [
            *watches(r for r, _ in node_watches("") if r not in (CONFIGMAPS, DAEMONSETS)),
            *[
                grant(CONFIGMAPS, verb, namespace=NAMESPACE, name=BRAKE_CONFIGMAP, why="brake")
                for verb in ("get", "list", "watch")
            ],
            grant(NODES, "get", why="read the taints before patching them"),
            grant(NODES, "patch", why="the interference taint"),
            grant(NODES, "patch", "status", why="its node's batch capacity (waterline.io/batch-cpu, -memory)"),
            grant(PODS, "create", "eviction", why="evictions"),
            grant(EVENTS, "create", why="events of its actions"),
            grant(EVENTS, "patch", why="repeated events"),
            *[
                grant(DAEMONSETS, verb, namespace=NAMESPACE, name=AGENT_DAEMONSET,
                      why="its own DaemonSet: an uninstall releases every cap")
                for verb in ("get", "list", "watch")
            ],
        ],
    )


__all__ = ["PROGRAM", "agent_access"]
