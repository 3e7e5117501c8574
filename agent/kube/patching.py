"""Writing existing objects: JSON merge patch (RFC 7386) and replace (PUT, optimistic
concurrency on metadata.resourceVersion: a stale one raises KubeConflict)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent.kube.client import MERGE_PATCH, KubeApi
from agent.kube.resources import Resource


def merge_patch(
    api: KubeApi,
    resource: Resource,
    name: str,
    patch: Mapping[str, Any],
    *,
    namespace: str | None = None,
    subresource: str | None = None,
) -> dict[str, Any]:
    """Merge-patch an object, or its ``status`` subresource."""
    return api.request(
        "PATCH",
        resource.path(namespace, name, subresource),
        body=dict(patch),
        content_type=MERGE_PATCH,
    )


def replace(
    api: KubeApi, resource: Resource, obj: Mapping[str, Any], *, subresource: str | None = None
) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    return api.request(
        "PUT", resource.path(meta.get("namespace"), meta["name"], subresource), body=dict(obj)
    )
