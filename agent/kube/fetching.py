"""Reading: get one object, list a collection (paged) as raw dicts with its resourceVersion."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agent.kube.client import KubeApi, Query
from agent.kube.resources import Resource


@dataclass(frozen=True, slots=True)
class Selectors:
    """What to list or watch: a namespace (None = all), label and field selectors."""

    namespace: str | None = None
    label_selector: str = ""
    field_selector: str = ""

    def query(self) -> list[tuple[str, str]]:
        out = []
        if self.label_selector:
            out.append(("labelSelector", self.label_selector))
        if self.field_selector:
            out.append(("fieldSelector", self.field_selector))
        return out


@dataclass(frozen=True, slots=True)
class Listing:
    items: list[dict[str, Any]]
    resource_version: str


def get_object(
    api: KubeApi, resource: Resource, name: str, namespace: str | None = None
) -> dict[str, Any]:
    return api.request("GET", resource.path(namespace, name))


def list_objects(
    api: KubeApi,
    resource: Resource,
    selectors: Selectors = Selectors(),
    *,
    page_size: int = 500,
    timeout: tuple[float, float] | None = None,
) -> Listing:
    """All matching objects, paged with limit/continue. Items get their kind and
    apiVersion filled in (list items come without them). A continue token that expired
    raises KubeGone: the caller relists from scratch."""
    items: list[dict[str, Any]] = []
    token = ""
    version = ""
    while True:
        query: Query = selectors.query() + [("limit", str(page_size))]
        if token:
            query = [*query, ("continue", token)]
        page = api.request("GET", resource.path(selectors.namespace), query=query, timeout=timeout)
        meta: dict[str, Any] = page.get("metadata") or {}
        for item in page.get("items") or ():
            if isinstance(item, dict):
                item.setdefault("kind", resource.kind)
                item.setdefault("apiVersion", resource.api_version)
                items.append(item)
        if not version:
            version = str(meta.get("resourceVersion") or "")
        token = str(meta.get("continue") or "")
        if not token:
            return Listing(items, version)
