"""Reading manifests for ``--objects``: a file or a directory of files (``*.yaml``,
``*.yml``, ``*.json``, sorted by name, not recursive), each with one or more documents:
single objects, ``kind: List`` or ``{objects: [...]}``. A file that cannot be read or
parsed, or a document that is not an object with apiVersion, kind and metadata.name,
raises ``ManifestError`` naming the file (and the document)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import yaml

SUFFIXES = (".yaml", ".yml", ".json")


class ManifestError(ValueError):
    pass


def finite(value: Any, where: str) -> None:
    """No NaN or infinity anywhere (JSON has none; YAML's .nan would make invalid JSON)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ManifestError(f"{where}: {value} is not a JSON number")
    items = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else ()
    )
    for key, item in items:
        finite(item, f"{where}.{key}")


def _documents(path: Path) -> list[Any]:
    try:
        return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]
    except OSError as err:
        raise ManifestError(f"{path}: cannot read: {err.strerror or err}") from None
    except UnicodeDecodeError as err:
        raise ManifestError(
            f"{path}: not UTF-8 text: byte {err.start}, got {err.object[err.start : err.start + 1]!r}"
        ) from None
    except yaml.YAMLError as err:
        raise ManifestError(f"{path}: not valid YAML/JSON: {err}") from None


def _objects(doc: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(doc, dict):
        raise ManifestError(f"{where}: expected an object, got {type(doc).__name__}")
    if isinstance(doc.get("items"), list) and str(doc.get("kind", "")).endswith("List"):
        items = doc["items"]
    elif isinstance(doc.get("objects"), list) and "kind" not in doc:
        items = doc["objects"]
    else:
        items = [doc]
    for i, item in enumerate(items):
        at = where if item is doc else f"{where} item {i}"
        if not isinstance(item, dict):
            raise ManifestError(f"{at}: expected an object, got {type(item).__name__}")
        name = (
            (item.get("metadata") or {}).get("name")
            if isinstance(item.get("metadata"), dict)
            else None
        )
        for field, value in (
            ("apiVersion", item.get("apiVersion")),
            ("kind", item.get("kind")),
            ("metadata.name", name),
        ):
            if not value or not isinstance(value, str):
                raise ManifestError(f"{at}: {field} is required, got {value!r}")
        finite(item, f"{at} ({item['kind']} {name})")
    return items


def files(path: str | Path) -> list[Path]:
    root = Path(path)
    if root.is_dir():
        found = sorted(p for p in root.iterdir() if p.is_file() and p.suffix in SUFFIXES)
        if not found:
            raise ManifestError(f"{root}: no {', '.join(SUFFIXES)} files in this directory")
        return found
    if not root.exists():
        raise ManifestError(f"{root}: no such file or directory")
    return [root]


def read_manifests(path: str | Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for file in files(path):
        for i, doc in enumerate(_documents(file)):
            out.extend(_objects(doc, f"{file} document {i + 1}"))
    return out
