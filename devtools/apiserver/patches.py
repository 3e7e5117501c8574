"""The three patch formats of PATCH, as pure functions of (current object, patch).

* JSON merge patch (RFC 7386): what the agent sends, and what ``kubectl apply`` sends for
  custom resources.
* Strategic merge patch: what ``kubectl apply`` sends for built-in kinds. Lists of the
  fields in ``MERGE_KEYS`` merge item by item on their key, lists in ``PRIMITIVE_MERGE``
  merge as sets, every other list is replaced (as for the fields the real types mark
  atomic). The directives kubectl's three-way patch uses are honoured: ``$patch``
  (replace / delete / merge), ``$retainKeys``, ``$deleteFromPrimitiveList/<field>`` and
  ``$setElementOrder/<field>``.
* JSON patch (RFC 6902): add, remove, replace, move, copy, test.

The merge keys are those of the Kubernetes types (``patchMergeKey`` in types.go) for the
kinds this server serves, looked up by field name: in those kinds a field name never
carries two different keys.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

from devtools.apiserver.errors import ApiStatus

MERGE_KEYS: Mapping[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "imagePullSecrets": "name",
    "resourceClaims": "name",
    "schedulingGates": "name",
    "resourceClaimStatuses": "name",
    "hostAliases": "ip",
    "podIPs": "ip",
    "hostIPs": "ip",
    "topologySpreadConstraints": "topologyKey",
    "ports": "containerPort",
    "env": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "conditions": "type",
    "addresses": "type",
    "ownerReferences": "uid",
}
PRIMITIVE_MERGE = frozenset({"finalizers", "podCIDRs"})

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


# -- strategic merge patch ------------------------------------------------------------------
def strategic_merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    out = dict(target) if isinstance(target, dict) else {}
    orders: dict[str, list[Any]] = {}
    for key, value in patch.items():
        if key in ("$patch", "$retainKeys"):
            continue
        if key.startswith("$setElementOrder/"):
            orders[key.split("/", 1)[1]] = value
        elif key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            drop = value if isinstance(value, list) else []
            out[field] = [v for v in out.get(field) or [] if v not in drop]
        elif value is None:
            out.pop(key, None)
        elif isinstance(value, list):
            out[key] = _merge_list(key, out.get(key), value)
        else:
            merged = strategic_merge_patch(out.get(key), value)
            if merged is None:
                out.pop(key, None)
            else:
                out[key] = merged
    for field, order in orders.items():
        if isinstance(out.get(field), list) and isinstance(order, list):
            out[field] = _ordered(field, out[field], order)
    if isinstance(patch.get("$retainKeys"), list):
        keep = set(patch["$retainKeys"])
        out = {k: v for k, v in out.items() if k in keep}
    return out


def _merge_list(field: str, current: Any, patch: list[Any]) -> list[Any]:
    if field in PRIMITIVE_MERGE:
        merged = list(current) if isinstance(current, list) else []
        return merged + [v for v in patch if v not in merged]
    key = MERGE_KEYS.get(field)
    if key is None or not isinstance(current, list):
        return [strategic_merge_patch(None, v) if isinstance(v, dict) else v for v in patch]
    if any(isinstance(v, dict) and v.get("$patch") == "replace" for v in patch):
        return [copy.deepcopy(v) for v in patch if not (isinstance(v, dict) and "$patch" in v)]
    merged = [copy.deepcopy(v) for v in current]
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise ApiStatus(
                422,
                "Invalid",
                f"{field}: every item of a strategic merge list needs {key!r}, got {item!r}",
            )
        at = next(
            (i for i, v in enumerate(merged) if isinstance(v, dict) and v.get(key) == item[key]),
            None,
        )
        if item.get("$patch") == "delete":
            if at is not None:
                del merged[at]
        elif at is None:
            merged.append(strategic_merge_patch(None, item))
        else:
            merged[at] = strategic_merge_patch(merged[at], item)
    return merged


def _ordered(field: str, items: list[Any], order: list[Any]) -> list[Any]:
    """Items in the order ``$setElementOrder`` gives; items it does not name keep their
    relative order after the named ones."""
    key = MERGE_KEYS.get(field)

    def ident(v: Any) -> Any:
        return v.get(key) if key and isinstance(v, dict) else v

    rank = {repr(ident(v)): i for i, v in enumerate(order)}
    return sorted(items, key=lambda v: rank.get(repr(ident(v)), len(rank)))


# -- JSON patch -----------------------------------------------------------------------------
def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise ApiStatus(422, "Invalid", f"json patch: path must start with '/', got {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _get(doc: Any, parts: list[str], path: str) -> Any:
    node = doc
    for part in parts:
        node = _child(node, part, path)
    return node


def _parent(doc: Any, parts: list[str], path: str) -> Any:
    return _get(doc, parts[:-1], path)


def _child(node: Any, part: str, path: str) -> Any:
    if isinstance(node, dict) and part in node:
        return node[part]
    if isinstance(node, list) and part.isdigit() and int(part) < len(node):
        return node[int(part)]
    raise ApiStatus(422, "Invalid", f"json patch: path {path!r} does not exist")


def _add(doc: Any, parts: list[str], value: Any, path: str) -> Any:
    if not parts:
        return value
    parent, last = _parent(doc, parts, path), parts[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list) and (
        last == "-" or (last.isdigit() and int(last) <= len(parent))
    ):
        parent.insert(len(parent) if last == "-" else int(last), value)
    else:
        raise ApiStatus(422, "Invalid", f"json patch: cannot add at {path!r}")
    return doc


def _remove(doc: Any, parts: list[str], path: str) -> Any:
    if not parts:
        raise ApiStatus(422, "Invalid", "json patch: cannot remove the whole object")
    parent, last = _parent(doc, parts, path), parts[-1]
    _child(parent, last, path)  # raises when missing
    if isinstance(parent, dict):
        del parent[last]
    else:
        del parent[int(last)]
    return doc


def json_patch(target: Any, ops: Any) -> Any:
    if not isinstance(ops, list):
        raise ApiStatus(400, "BadRequest", "a json patch is a list of operations")
    doc = copy.deepcopy(target)
    for op in ops:
        if not isinstance(op, dict) or not isinstance(op.get("path"), str):
            raise ApiStatus(422, "Invalid", f"json patch: malformed operation {op!r}")
        path, kind = op["path"], op.get("op")
        parts = _pointer(path)
        if kind == "add":
            doc = _add(doc, parts, copy.deepcopy(op.get("value")), path)
        elif kind == "remove":
            doc = _remove(doc, parts, path)
        elif kind == "replace":
            doc = _add(_remove(doc, parts, path), parts, copy.deepcopy(op.get("value")), path)
        elif kind in ("move", "copy"):
            source = _pointer(str(op.get("from", "")))
            value = copy.deepcopy(_get(doc, source, path))
            if kind == "move":
                doc = _remove(doc, source, path)
            doc = _add(doc, parts, value, path)
        elif kind == "test":
            if _get(doc, parts, path) != op.get("value"):
                raise ApiStatus(422, "Invalid", f"json patch: test failed at {path!r}")
        else:
            raise ApiStatus(422, "Invalid", f"json patch: unknown op {kind!r}")
    return doc


#: Patch functions by Content-Type.
PATCHERS: Mapping[str, Callable[[Any, Any], Any]] = {
    MERGE_PATCH: merge_patch,
    STRATEGIC_MERGE_PATCH: strategic_merge_patch,
    JSON_PATCH: json_patch,
}
