"""Discovery documents, from the resources the store serves right now.

The legacy endpoints (``/api``, ``/apis``, ``/apis/<group>``, ``/api/v1``,
``/apis/<group>/<version>``) as every client reads them, and the aggregated form
(``apidiscovery.k8s.io/v2`` ``APIGroupDiscoveryList``, one request for everything) that
kubectl asks for first with its Accept header.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from devtools.apiserver.catalog import SUBRESOURCE_VERBS, VERBS, ApiResource
from devtools.apiserver.media import asks_for

AGGREGATED = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
_VERSION = re.compile(r"^v(\d+)(?:(alpha|beta)(\d+))?$")


def version_priority(version: str) -> tuple[int, int, int, str]:
    """Sort key putting the preferred version first, as Kubernetes orders versions:
    GA before beta before alpha, higher numbers first, odd names last by name."""
    m = _VERSION.match(version)
    if m is None:
        return (3, 0, 0, version)
    stage = {None: 0, "beta": 1, "alpha": 2}[m[2]]
    return (stage, -int(m[1]), -int(m[3] or 0), "")


def groups(catalog: Iterable[ApiResource]) -> dict[str, list[str]]:
    """{group: versions, preferred first}, core ("") included."""
    out: dict[str, set[str]] = {}
    for info in catalog:
        out.setdefault(info.resource.group, set()).add(info.resource.version)
    return {g: sorted(v, key=version_priority) for g, v in sorted(out.items())}


def wants_aggregated(accept: str) -> bool:
    return asks_for(accept, "APIGroupDiscoveryList", "apidiscovery.k8s.io", ("v2",))


# -- legacy ---------------------------------------------------------------------------------
def api_versions(address: str) -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}],
    }


def _group(name: str, versions: list[str]) -> dict[str, Any]:
    entries = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": entries, "preferredVersion": entries[0]}


def api_group_list(catalog: Iterable[ApiResource]) -> dict[str, Any]:
    found = groups(catalog)
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [_group(g, v) for g, v in found.items() if g],
    }


def api_group(catalog: Iterable[ApiResource], name: str) -> dict[str, Any] | None:
    versions = groups(catalog).get(name)
    if not name or not versions:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(name, versions)}


def _subresource_kind(info: ApiResource, sub: str) -> tuple[str, str, str]:
    if sub == "eviction":
        return ("policy", "v1", "Eviction")
    r = info.resource
    return (r.group, r.version, r.kind)


def api_resource_list(
    catalog: Iterable[ApiResource], group: str, version: str
) -> dict[str, Any] | None:
    entries = [i for i in catalog if (i.resource.group, i.resource.version) == (group, version)]
    if not entries:
        return None
    resources: list[dict[str, Any]] = []
    for info in sorted(entries, key=lambda i: i.resource.plural):
        r = info.resource
        resources.append(
            {
                "name": r.plural,
                "singularName": info.singular,
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": list(VERBS),
                **({"shortNames": list(info.short_names)} if info.short_names else {}),
                **({"categories": list(info.categories)} if info.categories else {}),
            }
        )
        for sub in info.subresources:
            g, v, kind = _subresource_kind(info, sub)
            resources.append(
                {
                    "name": f"{r.plural}/{sub}",
                    "singularName": "",
                    "namespaced": r.namespaced,
                    **({"group": g, "version": v} if (g, v) != (group, version) else {}),
                    "kind": kind,
                    "verbs": list(SUBRESOURCE_VERBS[sub]),
                }
            )
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": resources,
    }


# -- aggregated -----------------------------------------------------------------------------
def _kind(group: str, version: str, kind: str) -> dict[str, str]:
    return {"group": group, "version": version, "kind": kind}


def _discovered(info: ApiResource) -> dict[str, Any]:
    r = info.resource
    return {
        "resource": r.plural,
        "responseKind": _kind(r.group, r.version, r.kind),
        "scope": "Namespaced" if r.namespaced else "Cluster",
        "singularResource": info.singular,
        "verbs": list(VERBS),
        **({"shortNames": list(info.short_names)} if info.short_names else {}),
        **({"categories": list(info.categories)} if info.categories else {}),
        **(
            {
                "subresources": [
                    {
                        "subresource": sub,
                        "responseKind": _kind(*_subresource_kind(info, sub)),
                        "verbs": list(SUBRESOURCE_VERBS[sub]),
                    }
                    for sub in info.subresources
                ]
            }
            if info.subresources
            else {}
        ),
    }


def aggregated(catalog: Iterable[ApiResource], core: bool) -> dict[str, Any]:
    """The APIGroupDiscoveryList of ``/api`` (core) or ``/apis`` (every named group)."""
    entries = list(catalog)
    items = []
    for group, versions in groups(entries).items():
        if bool(group) == core:
            continue
        items.append(
            {
                "metadata": {"name": group} if group else {},
                "versions": [
                    {
                        "version": version,
                        "resources": [
                            _discovered(i)
                            for i in sorted(entries, key=lambda i: i.resource.plural)
                            if (i.resource.group, i.resource.version) == (group, version)
                        ],
                        "freshness": "Current",
                    }
                    for version in versions
                ],
            }
        )
    return {
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": items,
    }
