"""Deleting objects (never used on pods: a pod leaves through ``evicting``)."""

from __future__ import annotations

from typing import Any

from agent.kube.client import KubeApi
from agent.kube.resources import Resource


def delete(
    api: KubeApi, resource: Resource, name: str, namespace: str | None = None
) -> dict[str, Any]:
    return api.request("DELETE", resource.path(namespace, name))
