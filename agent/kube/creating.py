"""Creating objects (one verb a file: ``deleting`` deletes, ``evicting`` evicts pods)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent.kube.client import KubeApi
from agent.kube.resources import Resource


def create(
    api: KubeApi, resource: Resource, obj: Mapping[str, Any], namespace: str | None = None
) -> dict[str, Any]:
    body = {"apiVersion": resource.api_version, "kind": resource.kind, **obj}
    ns = namespace or (obj.get("metadata") or {}).get("namespace")
    return api.request("POST", resource.path(ns if resource.namespaced else None), body=body)

