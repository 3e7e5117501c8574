"""The controller's access table: every API call it makes, from the code's own lists.

* watches: ``agent.cluster.resources.WATCHES`` (list + watch each, in the namespace and
  under the name its selector pins);
* the Lease: get and update of the one Lease, create in its namespace (create cannot be
  restricted by name);
* writes: the ``@calls`` rows of ``agent.cluster.writes`` (``WRITE_CALLS``).

The controller's ``KubeApi`` carries this table (an undeclared call is refused before it
is sent) and ``tests/unit/test_rbac.py`` compares it with deploy/rbac.yaml both ways.
"""

from __future__ import annotations

from agent.cluster import writes
from agent.cluster.resources import WATCHES
from agent.defaults import CONTROLLER_LEASE_NAME, CONTROLLER_LEASE_NAMESPACE
from agent.kube.access import AccessTable, Permission, grant, watches
from agent.kube.resources import LEASES

PROGRAM = "waterline-controller"


def _watch_permissions() -> list[Permission]:
    out: list[Permission] = []
    for resource, selectors in WATCHES:
        name = ""
        if selectors.field_selector.startswith("metadata.name="):
            name = selectors.field_selector.removeprefix("metadata.name=")
        out += watches([resource], namespace=selectors.namespace or "", name=name)
    return out


def controller_access(
    lease_namespace: str = CONTROLLER_LEASE_NAMESPACE, lease_name: str = CONTROLLER_LEASE_NAME
) -> AccessTable:
    lease = [
        grant(LEASES, "get", namespace=lease_namespace, name=lease_name, why="election"),
        grant(LEASES, "update", namespace=lease_namespace, name=lease_name, why="election"),
        grant(LEASES, "create", namespace=lease_namespace, why="first election"),
    ]
    return AccessTable(
        PROGRAM, "agent/cluster/access.py", [*_watch_permissions(), *lease, *writes.WRITE_CALLS]
    )


__all__ = ["PROGRAM", "controller_access"]
