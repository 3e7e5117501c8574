"""OpenAPI v3 documents: ``/openapi/v3`` lists one document per group/version, each
describing the paths and schemas of that group/version's resources.

kubectl reads them for two things: whether the server validates fields itself (the
``fieldValidation`` query parameter on the PATCH operation of a kind, found by its
``x-kubernetes-group-version-kind``; when present kubectl skips client-side validation,
which needs the protobuf OpenAPI v2 this server does not serve), and ``kubectl explain``.
Schemas: a custom resource's from its CRD; a built-in kind's from the official client's
model classes (field names, types and descriptions). PATCH operations list JSON patch and
merge patch only: kubectl then computes strategic merge patches of built-in kinds from its
own compiled-in types, whose merge keys are the ones ``patches.py`` applies.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

import kubernetes.client as models

from devtools.apiserver.catalog import ApiResource
from devtools.apiserver.patches import JSON_PATCH, MERGE_PATCH

_PRIMITIVES: dict[str, dict[str, Any]] = {
    "str": {"type": "string"},
    "int": {"type": "integer", "format": "int64"},
    "bool": {"type": "boolean"},
    "float": {"type": "number", "format": "double"},
    "datetime": {"type": "string", "format": "date-time"},
    "date": {"type": "string", "format": "date"},
    "object": {"x-kubernetes-preserve-unknown-fields": True},
}
REF = "#/components/schemas/"


def gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


# -- schemas from the client's models -------------------------------------------------------
def _description(cls: type, attr: str) -> str:
    doc = getattr(getattr(cls, attr, None), "__doc__", None) or ""
    paragraphs = [p.strip() for p in doc.replace("# noqa: E501", "").split("\n\n")]
    middle = [p for p in paragraphs[1:] if p and not p.startswith(":")]
    return " ".join(" ".join(middle).split())


def _type_schema(kind: str, out: dict[str, Any]) -> dict[str, Any]:
    if kind in _PRIMITIVES:
        return dict(_PRIMITIVES[kind])
    if m := re.fullmatch(r"list\[(.+)\]", kind):
        return {"type": "array", "items": _type_schema(m[1], out)}
    if m := re.fullmatch(r"dict\[str, (.+)\]", kind):
        return {"type": "object", "additionalProperties": _type_schema(m[1], out)}
    model_schema(kind, out)
    return {"$ref": REF + kind}


def model_schema(model: str, out: dict[str, Any]) -> None:
    """Put the schema of model class ``model`` and of every model it uses into ``out``."""
    if model in out:
        return
    cls = getattr(models, model, None)
    if cls is None or not hasattr(cls, "openapi_types"):
        out[model] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        return
    out[model] = {}  # placeholder: a model may refer to itself (JSONSchemaProps)
    props = {}
    for attr, kind in cls.openapi_types.items():
        prop = _type_schema(kind, out)
        description = _description(cls, attr)
        if description:
            prop = (
                {**prop, "description": description}
                if "$ref" not in prop
                else {"allOf": [prop], "description": description}
            )
        props[cls.attribute_map[attr]] = prop
    out[model] = {"type": "object", "properties": props}


# -- paths ----------------------------------------------------------------------------------
def _param(name: str, where: str = "query", description: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": name,
        "in": where,
        "schema": {"type": "string", "uniqueItems": True},
    }
    if where == "path":
        out["required"] = True
    if description:
        out["description"] = description
    return out


FIELD_VALIDATION = _param(
    "fieldValidation",
    description="How to treat unknown and duplicate fields: Ignore, Warn (default) or Strict.",
)


def _op(
    info: ApiResource, action: str, verb: str, schema_ref: str, body: tuple[str, ...] = ()
) -> dict[str, Any]:
    r = info.resource
    op: dict[str, Any] = {
        "operationId": f"{verb}{r.kind}",
        "responses": {
            "200": {
                "description": "OK",
                "content": {"application/json": {"schema": {"$ref": schema_ref}}},
            }
        },
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {"group": r.group, "version": r.version, "kind": r.kind},
    }
    if body:
        op["parameters"] = [FIELD_VALIDATION, _param("fieldManager"), _param("dryRun")]
        op["requestBody"] = {"content": {t: {"schema": {"type": "object"}} for t in body}}
    return op


def _paths(info: ApiResource, schema_ref: str) -> dict[str, Any]:
    r = info.resource
    base = "/" + gv_path(r.group, r.version) + ("/namespaces/{namespace}" if r.namespaced else "")
    common = [_param("namespace", "path")] if r.namespaced else []
    named = [*common, _param("name", "path")]
    patch_types = (JSON_PATCH, MERGE_PATCH)
    paths = {
        f"{base}/{r.plural}": {
            "parameters": common,
            "get": _op(info, "list", "list", schema_ref),
            "post": _op(info, "post", "create", schema_ref, ("application/json",)),
        },
        f"{base}/{r.plural}/{{name}}": {
            "parameters": named,
            "get": _op(info, "get", "read", schema_ref),
            "put": _op(info, "put", "replace", schema_ref, ("application/json",)),
            "patch": _op(info, "patch", "patch", schema_ref, patch_types),
            "delete": _op(info, "delete", "delete", schema_ref),
        },
    }
    if "status" in info.subresources:
        paths[f"{base}/{r.plural}/{{name}}/status"] = {
            "parameters": named,
            "get": _op(info, "get", "readStatus", schema_ref),
            "put": _op(info, "put", "replaceStatus", schema_ref, ("application/json",)),
            "patch": _op(info, "patch", "patchStatus", schema_ref, patch_types),
        }
    return paths


def schema_name(info: ApiResource) -> str:
    r = info.resource
    if info.crd or not info.model:
        reversed_group = ".".join(reversed(r.group.split("."))) if r.group else "core"
        return f"{reversed_group}.{r.version}.{r.kind}"
    return info.model


def document(catalog: Iterable[ApiResource], group: str, version: str) -> dict[str, Any] | None:
    entries = [i for i in catalog if (i.resource.group, i.resource.version) == (group, version)]
    if not entries:
        return None
    schemas: dict[str, Any] = {}
    paths: dict[str, Any] = {}
    for info in entries:
        r = info.resource
        name = schema_name(info)
        if info.crd or not info.model:
            schemas[name] = dict(
                info.schema or {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
            )
        else:
            model_schema(info.model, schemas)
        gvk = {"group": r.group, "version": r.version, "kind": r.kind}
        schemas[name] = {**schemas[name], "x-kubernetes-group-version-kind": [gvk]}
        paths.update(_paths(info, REF + name))
    return {
        "openapi": "3.0.0",
        "info": {"title": "waterline dev-apiserver", "version": "v1"},
        "paths": paths,
        "components": {"schemas": schemas},
    }


@functools.lru_cache(maxsize=64)
def _hash(text: str) -> str:
    return hashlib.sha512(text.encode()).hexdigest()[:32].upper()


def encoded(doc: dict[str, Any]) -> tuple[bytes, str]:
    """The document's bytes and their hash (the ``?hash=`` of its URL, and its ETag)."""
    text = json.dumps(doc, sort_keys=True, allow_nan=False)
    return text.encode(), _hash(text)


# -- OpenAPI v2 -----------------------------------------------------------------------------
#: What kubectl asks /openapi/v2 for (Accept ``...spec.v2@v1.0+protobuf``): the gnostic
#: ``openapi_v2.Document`` protobuf; the answer's media type has a dot where the "@" was,
#: as the real server's (Go's mime parser refuses the "@").
V2_PROTOBUF = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
V2_INFO = {"title": "waterline dev-apiserver", "version": "v1"}


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (wire type 2); payloads here are < 128 bytes."""
    assert len(payload) < 128
    return bytes([number << 3 | 2, len(payload)]) + payload


def v2_document() -> dict[str, Any]:
    """The OpenAPI v2 document: no paths and no definitions. kubectl reads it only when
    it validates on its side (a kind whose CRD it has not seen yet, or ``kind: List``); a
    kind without a definition is left to the server, which validates with
    ``fieldValidation=Strict`` as kubectl asks."""
    return {"swagger": "2.0", "info": V2_INFO, "paths": {}, "definitions": {}}


def v2_protobuf() -> bytes:
    """``v2_document`` as gnostic's ``Document`` message: swagger = 1, info = 2 (title =
    1, version = 2); empty paths and definitions are absent fields."""
    info = _field(1, V2_INFO["title"].encode()) + _field(2, V2_INFO["version"].encode())
    return _field(1, b"2.0") + _field(2, info)


def root(hashes: Mapping[tuple[str, str], str]) -> dict[str, Any]:
    """The index of documents: {"paths": {"apis/<group>/<version>": {"serverRelativeURL":
    ".../?hash=<hash of that document>"}}}; clients refetch a document when its hash changes."""
    paths = {}
    for (group, version), digest in sorted(hashes.items()):
        path = gv_path(group, version)
        paths[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash={digest}"}
    return {"paths": paths}
