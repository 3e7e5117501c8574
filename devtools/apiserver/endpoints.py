"""The GET endpoints that are not resources: health, version, discovery, OpenAPI. One
table, ``ENDPOINTS``, of (does this path match, answer it); ``answer`` returns None for a
path none of them serves (a resource path, for ``api.py``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from devtools.apiserver import discovery, openapi
from devtools.apiserver.errors import NOT_FOUND, ApiStatus

if TYPE_CHECKING:
    from devtools.apiserver.server import DevServer

JSON = "application/json"
VERSION = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.0-waterline-dev",
    "gitCommit": "",
    "gitTreeState": "clean",
    "buildDate": "1970-01-01T00:00:00Z",
    "goVersion": "",
    "compiler": "",
    "platform": "linux/amd64",
}


@dataclass(frozen=True)
class Answer:
    code: int
    body: Any  # JSON-able, or bytes sent as they are
    content_type: str = JSON
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Request:
    dev: DevServer
    parts: list[str]  # the path's segments
    query: str
    accept: str

    @property
    def catalog(self) -> list[Any]:
        return list(self.dev.store.catalog.values())


def _found(doc: dict[str, Any] | None) -> Answer:
    return (
        Answer(200, doc)
        if doc is not None
        else Answer(404, ApiStatus(404, "NotFound", NOT_FOUND).body())
    )


def _aggregated(r: Request) -> Answer:
    doc = discovery.aggregated(r.catalog, core=r.parts == ["api"])
    return Answer(200, doc, discovery.AGGREGATED, {"Vary": "Accept"})


def _openapi_v3(r: Request) -> Answer:
    rest = r.parts[2:]
    if not rest:
        return Answer(200, r.dev.openapi_root())
    gv = rest[1:] if rest[0] == "apis" else ["", *rest[1:]] if rest[0] == "api" else []
    doc = r.dev.openapi_document(gv[0], gv[1]) if len(gv) == 2 else None
    if doc is None:
        return _found(None)
    data, digest = doc
    cache = "public, immutable" if "hash=" in r.query else "no-cache, private"
    return Answer(200, data, JSON, {"Etag": f'"{digest}"', "Cache-Control": cache})


def _openapi_v2(r: Request) -> Answer:
    if "protobuf" in r.accept:
        return Answer(200, openapi.v2_protobuf(), openapi.V2_PROTOBUF)
    return Answer(200, openapi.v2_document())


Match = Callable[[list[str], str], bool]
ENDPOINTS: tuple[tuple[Match, Callable[[Request], Answer]], ...] = (
    (
        lambda p, _a: p in (["healthz"], ["readyz"], ["livez"]),
        lambda r: Answer(200, b"ok", "text/plain; charset=utf-8"),
    ),
    (lambda p, _a: p == ["version"], lambda r: Answer(200, VERSION)),
    (lambda p, a: p in (["api"], ["apis"]) and discovery.wants_aggregated(a), _aggregated),
    (
        lambda p, _a: p == ["api"],
        lambda r: Answer(200, discovery.api_versions(r.dev.url.removeprefix("http://"))),
    ),
    (lambda p, _a: p == ["apis"], lambda r: Answer(200, discovery.api_group_list(r.catalog))),
    (
        lambda p, _a: p[:1] == ["api"] and len(p) == 2,
        lambda r: _found(discovery.api_resource_list(r.catalog, "", r.parts[1])),
    ),
    (
        lambda p, _a: p[:1] == ["apis"] and len(p) == 2,
        lambda r: _found(discovery.api_group(r.catalog, r.parts[1])),
    ),
    (
        lambda p, _a: p[:1] == ["apis"] and len(p) == 3,
        lambda r: _found(discovery.api_resource_list(r.catalog, r.parts[1], r.parts[2])),
    ),
    (lambda p, _a: p[:2] == ["openapi", "v3"], _openapi_v3),
    (lambda p, _a: p == ["openapi", "v2"], _openapi_v2),
)


def answer(dev: DevServer, path: str, query: str, accept: str) -> Answer | None:
    parts = [p for p in path.split("/") if p]
    for matches, respond in ENDPOINTS:
        if matches(parts, accept):
            return respond(Request(dev, parts, query, accept))
    return None
