"""A hand-written object whose list or mapping field has the wrong shape is refused naming
that field, never in Python's words ("'int' object is not iterable") nor with a traceback:
the scenario exits 2 with the line, local mode skips the object and keeps the others."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from agent.errors import InvalidObject
from agent.model.store import ObjectStore

NODE: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {"name": "n1"},
    "spec": {"taints": []},
    "status": {"allocatable": {"cpu": "4"}, "conditions": []},
}
POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p", "namespace": "default", "ownerReferences": []},
    "spec": {"nodeName": "n1", "containers": [{"name": "main"}], "tolerations": []},
    "status": {"phase": "Running", "qosClass": "BestEffort", "containerStatuses": []},
}
REPLICASET: dict[str, Any] = {
    "apiVersion": "apps/v1",
    "kind": "ReplicaSet",
    "metadata": {"name": "rs", "namespace": "default", "ownerReferences": []},
    "spec": {"replicas": 2},
}


def _with(obj: dict[str, Any], path: tuple[str, ...], value: object) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    at = out
    for key in path[:-1]:
        at = at[key]
    at[path[-1]] = value
    return out


@pytest.mark.parametrize(
    ("obj", "path", "field"),
    [
        (NODE, ("spec",), "spec"),
        (NODE, ("status",), "status"),
        (NODE, ("spec", "taints"), "spec.taints"),
        (NODE, ("status", "conditions"), "status.conditions"),
        (POD, ("spec", "containers"), "spec.containers"),
        (POD, ("spec", "initContainers"), "spec.initContainers"),
        (POD, ("spec", "tolerations"), "spec.tolerations"),
        (POD, ("status", "containerStatuses"), "status.containerStatuses"),
        (POD, ("metadata", "ownerReferences"), "metadata.ownerReferences"),
        (REPLICASET, ("spec",), "spec"),
        (REPLICASET, ("metadata", "ownerReferences"), "metadata.ownerReferences"),
    ],
)
def test_a_field_of_the_wrong_shape_is_named(
    obj: dict[str, Any], path: tuple[str, ...], field: str
) -> None:
    with pytest.raises(InvalidObject) as err:
        ObjectStore.from_dicts([_with(obj, path, 5)])
    text = str(err.value)
    assert field in text and text.endswith("got 5")
    assert "object" not in text  # not Python's words


def test_a_persistent_volume_of_an_odd_shape_is_read_leniently() -> None:
    """PersistentVolumes are read leniently (a volume never stops a round): an affinity
    of the wrong shape pins it to no node rather than failing the snapshot."""
    pv = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": "pv"},
        "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": 5}]}}},
    }
    store = ObjectStore.from_dicts([pv])
    assert store.volumes["pv"].pinned == ""
