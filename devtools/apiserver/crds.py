"""CustomResourceDefinitions: a CRD written to the store starts serving its resources at
once (every served version, with its schema, printer columns, short names, categories and
status subresource); updating it re-describes them; deleting it deletes its objects (watches
see DELETED) and stops serving them. ``admit`` refuses a CRD the real server would refuse
for the reasons that matter here and writes the status a real server would (names
accepted, Established), so ``kubectl wait --for condition=established`` works.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from agent.kube.resources import Resource
from devtools.apiserver import jsonpath
from devtools.apiserver.catalog import CRDS, ApiResource, PrinterColumn
from devtools.apiserver.errors import ApiStatus, invalid
from devtools.apiserver.store import Change, Store

GROUP = CRDS.group
COLUMN_TYPES = ("integer", "number", "string", "boolean", "date")


def served(crd: Mapping[str, Any]) -> list[ApiResource]:
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    out = []
    for version in spec.get("versions") or []:
        if not version.get("served", True):
            continue
        subresources = version.get("subresources") or {}
        resource = Resource(
            str(spec.get("group")),
            str(version.get("name")),
            str(names.get("plural")),
            str(names.get("kind")),
            spec.get("scope") == "Namespaced",
            "status" in subresources,
        )
        out.append(
            ApiResource(
                resource,
                singular=str(names.get("singular") or str(names.get("kind", "")).lower()),
                short_names=tuple(names.get("shortNames") or ()),
                categories=tuple(names.get("categories") or ()),
                subresources=("status",) if "status" in subresources else (),
                schema=(version.get("schema") or {}).get("openAPIV3Schema"),
                columns=tuple(
                    PrinterColumn(
                        str(c.get("name")),
                        str(c.get("type")),
                        str(c.get("jsonPath")),
                        int(c.get("priority") or 0),
                        str(c.get("description") or ""),
                        str(c.get("format") or ""),
                    )
                    for c in version.get("additionalPrinterColumns") or []
                ),
                crd=str((crd.get("metadata") or {}).get("name")),
                strategic=False,
            )
        )
    return out


def _problems(crd: Mapping[str, Any]) -> list[tuple[str, str]]:
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    group, plural = spec.get("group"), names.get("plural")
    out: list[tuple[str, str]] = []
    for path, value in (
        ("spec.group", group),
        ("spec.names.plural", plural),
        ("spec.names.kind", names.get("kind")),
    ):
        if not value or not isinstance(value, str):
            out.append((path, "Required value"))
    name = (crd.get("metadata") or {}).get("name")
    if group and plural and name != f"{plural}.{group}":
        out.append(
            ("metadata.name", f'Invalid value: "{name}": must be spec.names.plural+"."+spec.group')
        )
    if spec.get("scope") not in ("Namespaced", "Cluster"):
        out.append(
            (
                "spec.scope",
                f'Unsupported value: "{spec.get("scope")}": supported values: "Cluster", "Namespaced"',
            )
        )
    versions = spec.get("versions") or []
    if not versions:
        out.append(("spec.versions", "Required value"))
    if len([v for v in versions if v.get("storage")]) != 1:
        out.append(
            (
                "spec.versions",
                "Invalid value: must have exactly one version marked as storage version",
            )
        )
    for i, version in enumerate(versions):
        out += _version_problems(f"spec.versions[{i}]", version)
    return out


def _version_problems(path: str, version: Mapping[str, Any]) -> list[tuple[str, str]]:
    out = []
    if not version.get("name"):
        out.append((f"{path}.name", "Required value"))
    root = (version.get("schema") or {}).get("openAPIV3Schema")
    if not isinstance(root, dict):
        out.append((f"{path}.schema.openAPIV3Schema", "Required value: schemas are required"))
    elif root.get("type") != "object":
        out.append(
            (
                f"{path}.schema.openAPIV3Schema.type",
                'Unsupported value: must be "object" at the root',
            )
        )
    for j, column in enumerate(version.get("additionalPrinterColumns") or []):
        where = f"{path}.additionalPrinterColumns[{j}]"
        if column.get("type") not in COLUMN_TYPES:
            out.append(
                (
                    f"{where}.type",
                    f'Unsupported value: "{column.get("type")}": supported values: {", ".join(COLUMN_TYPES)}',
                )
            )
        try:
            jsonpath.compile_path(str(column.get("jsonPath", "")))
        except ValueError as err:
            out.append((f"{where}.jsonPath", f"Invalid value: {err}"))
    return out


def admit(info: ApiResource, crd: dict[str, Any]) -> dict[str, Any]:
    """The CRD with the status a real server writes; 422 naming each bad field."""
    problems = _problems(crd)
    if problems:
        raise invalid(info, str((crd.get("metadata") or {}).get("name", "")), problems)
    spec = crd["spec"]
    names = dict(spec["names"])
    names.setdefault("singular", str(names["kind"]).lower())
    names.setdefault("listKind", f"{names['kind']}List")
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    old = {c.get("type"): c for c in (crd.get("status") or {}).get("conditions") or []}

    def condition(kind: str, reason: str, message: str) -> dict[str, Any]:
        since = (old.get(kind) or {}).get("lastTransitionTime") or now
        return {
            "type": kind,
            "status": "True",
            "reason": reason,
            "message": message,
            "lastTransitionTime": since,
        }

    crd = copy.deepcopy(crd)
    crd["status"] = {
        "acceptedNames": names,
        "conditions": [
            condition("NamesAccepted", "NoConflicts", "no conflicts found"),
            condition(
                "Established", "InitialNamesAccepted", "the initial names have been accepted"
            ),
        ],
        "storedVersions": [v["name"] for v in spec["versions"] if v.get("storage")],
    }
    return crd


def _keys(crd: Mapping[str, Any] | None) -> dict[tuple[str, str, str], ApiResource]:
    return {r.key: r for r in served(crd)} if crd else {}


def follow(store: Store) -> None:
    """Keep the store's served resources in step with the CRDs written to it."""

    def on_change(change: Change) -> None:
        if change.resource != CRDS:
            return
        before = _keys(change.old)
        after = {} if change.type == "DELETED" else _keys(change.new)
        for info in after.values():
            store.register(info)
        for key in before.keys() - after.keys():
            _drop(store, key)

    store.listeners.append(on_change)


def _drop(store: Store, key: tuple[str, str, str]) -> None:
    resource = store.resources.get(key)
    if resource is None:
        return
    for ns, name in list(store.objects.get(resource, {})):
        try:
            store.delete(resource, ns, name)
        except ApiStatus:
            continue
    store.unregister(key)
