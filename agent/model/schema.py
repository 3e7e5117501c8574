"""Unknown fields in Waterline's own objects, found by the CRDs' schemas as the API server
finds them.

The API server refuses a NodeQOSEnsurancePolicy with ``spec.objectiveEnsurances[0].stratgy``
(``kubectl apply`` asks for strict field validation), but our parsers read the fields they
know and never look at the others: without this check ``waterline simulate`` and the
agent's local mode would approve, silently, a policy the cluster refuses. So the files a
person hands to those commands are checked against the same schemas the cluster enforces:
``agent/crds/`` holds copies of ``deploy/crds/`` (``make chart`` writes them, a unit test
proves them equal), shipped in the package.

Only file input is checked (``load_policies(..., strict=True)``, the scenario loader).
Objects from the API server are not: the server has already pruned what its CRD does not
know, and an agent older than the CRDs (a rollout in progress) must keep acting on the
fields it knows rather than refuse a policy for a field added after it was built.

Like the server, ``metadata`` is left alone (ObjectMeta is not in a CRD's schema),
``x-kubernetes-preserve-unknown-fields`` keeps anything below it, and
``additionalProperties`` reads every key as known (label maps). Types and values are the
parsers' business: this finds names only.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from importlib import resources
from typing import Any

import yaml

from agent.errors import InvalidObject
from agent.model.fields import problem

#: Keys of every object that the schema walk does not look into.
_ENVELOPE = ("apiVersion", "kind", "metadata")


@cache
def crd_schemas() -> Mapping[str, Mapping[str, Any]]:
    """kind -> the openAPIV3Schema of its served version, from the packaged CRDs."""
    out: dict[str, Mapping[str, Any]] = {}
    for item in sorted(resources.files("agent").joinpath("crds").iterdir(), key=lambda p: p.name):
        if not item.name.endswith(".yaml"):
            continue
        crd = yaml.safe_load(item.read_text(encoding="utf-8"))
        version = next(v for v in crd["spec"]["versions"] if v.get("served", True))
        out[crd["spec"]["names"]["kind"]] = version["schema"]["openAPIV3Schema"]
    return out


def unknown_field(value: object, schema: Mapping[str, Any], path: str = "") -> tuple[str, object, tuple[str, ...]] | None:
    """The first field of ``value`` (sorted keys, depth first) that ``schema`` does not
    name: (its path like ``spec.rules[0].stratgy``, its value, the names known there);
    None when every field is known."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return None
    if isinstance(value, Mapping):
        properties = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key in sorted(value, key=str):
            at = f"{path}.{key}" if path else str(key)
            if properties is not None and key in properties:
                found = unknown_field(value[key], properties[key], at)
            elif isinstance(extra, Mapping):
                found = unknown_field(value[key], extra, at)
            elif properties is not None and not extra:
                return at, value[key], tuple(properties)
            else:
                found = None
            if found:
                return found
        return None
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for i, item in enumerate(value):
            found = unknown_field(item, schema["items"], f"{path}[{i}]")
            if found:
                return found
    return None


def check_known_fields(raw: Mapping[str, Any]) -> None:
    """Raise InvalidObject naming the first field of ``raw`` its kind's CRD does not know;
    objects of other kinds (or not mappings) pass."""
    kind = raw.get("kind")
    schema = crd_schemas().get(kind) if isinstance(kind, str) else None
    if schema is None:
        return
    body = {k: v for k, v in raw.items() if k not in _ENVELOPE}
    found = unknown_field(body, schema)
    if found is None:
        return
    path, value, known = found
    meta = raw.get("metadata")
    name = str(meta.get("name", "")) if isinstance(meta, Mapping) else ""
    raise InvalidObject(
        str(kind), name, path, problem(f"is not a known field (known: {', '.join(known)})", value)
    )
