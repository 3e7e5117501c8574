"""The node's batch capacity in its own Node's status, through the API server
(DESIGN.md "Batch capacity"): the writer of ``PublishBatchCapacity`` and
``RemoveBatchCapacity`` (``executors.actuators.NodeStatusWriter``).

One JSON merge patch of the ``status`` subresource sets (or, with nulls, removes) the two
extended resources in both ``capacity`` and ``allocatable``: the scheduler reads
allocatable, ``kubectl describe node`` shows both, and the kubelet keeps extended
resources it does not manage. RBAC grants ``nodes/status`` patch on every node; the
admission policy in deploy/admission.yaml admits the agent's patch only on the node its
token was issued on, and only of these two resources. The agent's release (uninstall,
`waterline agent release`) removes them (``remove_batch_capacity``).
"""

from __future__ import annotations

from typing import Any

from agent.kube.client import KubeApi
from agent.kube.patching import merge_patch
from agent.kube.resources import NODES
from agent.model.batch import BATCH_CPU, BATCH_MEMORY
from engine.batch_capacity import BatchMemory
from engine.state import NodeState
from executors.actuators import NodeStatusWriter


def batch_patch(resources: dict[str, Any]) -> dict[str, Any]:
    return {"status": {"capacity": dict(resources), "allocatable": dict(resources)}}


def remove_batch_capacity(api: KubeApi, node_name: str) -> None:
    """Both resources out of the node's status (a node without them is left as it is)."""
    merge_patch(api, NODES, node_name, batch_patch({BATCH_CPU: None, BATCH_MEMORY: None}),
                subresource="status")


class ApiNodeStatus(NodeStatusWriter):
    """The writer, and a holder (``executors.actuators.Holder``): what it published is
    removed with the caps and marks on an uninstall. ``release_api``: the client the
    release uses (the tick's own is budgeted per tick)."""

    released = "batch capacity removed from the node's status"
    released_code = "batch-capacity-removed"

    def __init__(self, api: KubeApi, node_name: str, release_api: KubeApi | None = None) -> None:
        self.api = api
        self.node_name = node_name
        self.release_api = release_api or api

    def publish(self, millicores: int, bytes_: int) -> bool:
        merge_patch(self.api, NODES, self.node_name,
                    batch_patch({BATCH_CPU: str(millicores), BATCH_MEMORY: str(bytes_)}),
                    subresource="status")
        return True

    def remove(self) -> bool:
        remove_batch_capacity(self.api, self.node_name)
        return True

    def release_all(self) -> list[str]:
        """The resources out of the node's status: ``[node]`` when removed, ``[]`` when the
        API refused (logged by the caller's count; a later release can do it)."""
        try:
            remove_batch_capacity(self.release_api, self.node_name)
        except Exception:  # noqa: BLE001 - an uninstall goes on with the caps and marks
            return []
        return [self.node_name]

    def forget_all(self, state: NodeState) -> None:
        state.keep_batch(BatchMemory())


__all__ = ["ApiNodeStatus", "batch_patch", "remove_batch_capacity"]
