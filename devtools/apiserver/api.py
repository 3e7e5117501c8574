"""Resource requests: a URL path to a (resource, namespace, name, subresource) route, and
the verbs on it (list, get, create, replace, patch, delete, deletecollection, eviction),
as pure calls on the store. The HTTP plumbing (bodies, watches, headers) is in
``handler.py``.

Checks a real server makes and this one makes too: a body's apiVersion and kind must be
the URL's resource's, its metadata.namespace the URL's namespace, its name the URL's name
(400 otherwise); patches by Content-Type (``patches.PATCHERS``: strategic merge patch only
for built-in kinds, 415 for server-side apply and anything else).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agent.kube.resources import Resource
from devtools.apiserver import eviction, tables
from devtools.apiserver.admission import Admission
from devtools.apiserver.catalog import ApiResource
from devtools.apiserver.errors import NOT_FOUND, ApiStatus
from devtools.apiserver.media import asks_for
from devtools.apiserver.patches import PATCHERS, STRATEGIC_MERGE_PATCH
from devtools.apiserver.selectors import field_predicate, label_predicate
from devtools.apiserver.store import Store

TRUE = ("1", "t", "T", "true", "TRUE", "True")  # Go's strconv.ParseBool


@dataclass(frozen=True, slots=True)
class Route:
    resource: Resource
    namespace: str
    name: str
    subresource: str


@dataclass
class Call:
    method: str
    route: Route
    query: Mapping[str, str]
    body: Any
    content_type: str = "application/json"
    accept: str = "application/json"
    admission: Admission | None = None

    def flag(self, name: str) -> bool:
        return self.query.get(name) in TRUE


def route(store: Store, path: str) -> Route:
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 3 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 4 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        raise ApiStatus(404, "NotFound", NOT_FOUND)
    namespace = ""
    if len(rest) >= 3 and rest[0] == "namespaces" and (group, version, rest[2]) in store.resources:
        namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3:
        raise ApiStatus(404, "NotFound", NOT_FOUND)
    resource = store.resource(group, version, rest[0])
    name = rest[1] if len(rest) > 1 else ""
    sub = rest[2] if len(rest) > 2 else ""
    if sub and sub not in store.info(resource).subresources:
        raise ApiStatus(404, "NotFound", f"{NOT_FOUND} ({resource.plural}/{sub})")
    if resource.namespaced and name and not namespace:
        raise ApiStatus(404, "NotFound", NOT_FOUND)
    return Route(resource, namespace, name, sub)


def matcher(query: Mapping[str, str]) -> Callable[[Mapping[str, Any]], bool]:
    labels = label_predicate(query.get("labelSelector", ""))
    fields = field_predicate(query.get("fieldSelector", ""))
    return lambda obj: labels(obj) and fields(obj)


def wants_table(accept: str) -> bool:
    return asks_for(accept, "Table", "meta.k8s.io", ("v1", "v1beta1"))


def _bad(message: str) -> ApiStatus:
    return ApiStatus(400, "BadRequest", message)


def check_body(call: Call, info: ApiResource) -> dict[str, Any]:
    """The body of a create or replace, refused (400) when it contradicts the URL."""
    body, r = call.body, info.resource
    if not isinstance(body, dict):
        raise _bad(f"the body of a {call.method} to {r.plural} must be a JSON object")
    if body.get("apiVersion") not in (None, r.api_version):
        raise _bad(
            f"the API version in the data ({body['apiVersion']}) does not match the expected API version ({r.api_version})"
        )
    if body.get("kind") not in (None, r.kind):
        raise _bad(
            f"the kind in the data ({body['kind']}) does not match the expected kind ({r.kind})"
        )
    meta = body.get("metadata")
    if meta is not None and not isinstance(meta, dict):
        raise _bad("metadata: expected an object")
    meta = meta or {}
    if (
        r.namespaced
        and call.route.namespace
        and meta.get("namespace") not in (None, "", call.route.namespace)
    ):
        raise _bad(
            "the namespace of the provided object does not match the namespace sent on the request"
        )
    if not r.namespaced and meta.get("namespace"):
        raise _bad(
            f"{r.kind} is not namespaced: metadata.namespace must be empty, got {meta['namespace']!r}"
        )
    if call.route.name and meta.get("name") not in (None, call.route.name):
        raise _bad("the name of the object does not match the name on the URL")
    return body


def _list(store: Store, call: Call, info: ApiResource, now: float) -> dict[str, Any]:
    offset = int(call.query.get("continue") or 0)
    limit = int(call.query.get("limit") or 0)
    page, version, more = store.list(
        info.resource, call.route.namespace or None, matcher(call.query), offset, limit
    )
    meta: dict[str, Any] = {"resourceVersion": str(version)}
    if more:
        meta["continue"] = str(offset + limit)
    if wants_table(call.accept):
        include = call.query.get("includeObject") or "Metadata"
        return tables.table(info, page, now, include_object=include, metadata=meta)
    return {
        "kind": info.list_kind,
        "apiVersion": info.resource.api_version,
        "metadata": meta,
        "items": page,
    }


def _patch(store: Store, call: Call, info: ApiResource) -> dict[str, Any]:
    kind = call.content_type
    patcher = PATCHERS.get(kind)
    if patcher is None or (kind == STRATEGIC_MERGE_PATCH and not info.strategic):
        supported = [t for t in PATCHERS if t != STRATEGIC_MERGE_PATCH or info.strategic]
        raise ApiStatus(
            415,
            "UnsupportedMediaType",
            f"the dev server does not support {kind!r} patches on {info.resource.plural}; supported: {', '.join(supported)}",
        )
    if isinstance(call.body, list) != (kind == "application/json-patch+json"):
        raise _bad(
            f"a {kind} body must be a JSON {'list' if isinstance(call.body, list) else 'object'}"
        )
    body, r = call.body, call.route
    return store.patch(
        r.resource, r.namespace, r.name, lambda old: patcher(old, body), r.subresource, _admit(call)
    )


def _admit(call: Call) -> Admission:
    return call.admission or Admission()


def _delete(store: Store, call: Call) -> dict[str, Any]:
    r, body = call.route, call.body if isinstance(call.body, dict) else {}
    uid = str((body.get("preconditions") or {}).get("uid") or "")
    if r.resource.kind == "Pod" and not r.resource.group:
        grace = body.get("gracePeriodSeconds", call.query.get("gracePeriodSeconds"))
        return store.delete_pod(r.namespace, r.name, None if grace is None else int(grace), uid)
    gone = store.delete(r.resource, r.namespace, r.name, uid)
    if r.resource.kind == "Namespace" and not r.resource.group:
        store.delete_namespaced(r.name)
    return gone


def _delete_collection(store: Store, call: Call, info: ApiResource) -> dict[str, Any]:
    r = call.route
    items, _, _ = store.list(r.resource, r.namespace or None, matcher(call.query))
    for item in items:
        meta = item["metadata"]
        sub = Call(
            "DELETE", Route(r.resource, meta.get("namespace", ""), meta["name"], ""), call.query, {}
        )
        try:
            _delete(store, sub)
        except ApiStatus as status:
            if status.code != 404:
                raise
    return {
        "kind": info.list_kind,
        "apiVersion": r.resource.api_version,
        "metadata": {},
        "items": items,
    }


def dispatch(store: Store, call: Call, now: float) -> tuple[int, Any]:
    """(HTTP code, answer) of a request on a resource; raises ApiStatus."""
    r = call.route
    info = store.info(r.resource)
    if call.query.get("dryRun"):
        raise _bad("dryRun: the dev server does not support dry runs")
    if r.subresource == "eviction":
        if call.method != "POST":
            raise ApiStatus(405, "MethodNotAllowed", "eviction takes POST on pods")
        body = call.body if isinstance(call.body, dict) else {}
        if body.get("kind") not in (None, "Eviction") or (body.get("metadata") or {}).get(
            "name"
        ) not in (None, r.name):
            raise _bad("the body of pods/eviction must be an Eviction of the pod named in the URL")
        return 201, eviction.evict(store, r.namespace, r.name, body)
    if not r.name:
        if call.method == "GET":
            return 200, _list(store, call, info, now)
        if call.method == "POST":
            return 201, store.create(r.resource, r.namespace, check_body(call, info), _admit(call))
        if call.method == "DELETE":
            return 200, _delete_collection(store, call, info)
        raise ApiStatus(405, "MethodNotAllowed", f"{call.method} is not allowed on a collection")
    if call.method == "GET":
        obj = store.get(r.resource, r.namespace, r.name)
        if wants_table(call.accept):
            include = call.query.get("includeObject") or "Metadata"
            return 200, tables.table(info, [obj], now, include_object=include)
        return 200, obj
    if call.method == "PUT":
        return 200, store.replace(
            r.resource, r.namespace, r.name, check_body(call, info), r.subresource, _admit(call)
        )
    if call.method == "PATCH":
        return 200, _patch(store, call, info)
    if call.method == "DELETE" and not r.subresource:
        return 200, _delete(store, call)
    raise ApiStatus(
        405,
        "MethodNotAllowed",
        f"{call.method} is not allowed on {r.resource.plural}{'/' + r.subresource if r.subresource else ''}",
    )
