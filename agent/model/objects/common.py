"""What every object parser shares: metadata access and the error wrapper."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from agent.errors import InvalidObject
from agent.model.fields import shown
from agent.model.quantity import parse_resource_list

Resources = Mapping[str, float]
EMPTY: Resources = {}

T = TypeVar("T")


def metadata(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = raw.get("metadata")
    return meta if isinstance(meta, dict) else {}


def listed(value: object, path: str) -> list[Any]:
    """A list field of an object (None reads as empty); anything else is refused with its
    path, so a hand-written ``containers: 5`` names the field instead of failing in
    Python's words ("'int' object is not iterable")."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"{path}: must be a list, got {shown(value)}")
    return value


def mapping(value: object, path: str) -> Mapping[str, Any]:
    """A mapping field of an object (None reads as empty); anything else is refused."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"{path}: must be a mapping, got {shown(value)}")
    return value


def resource_list(value: object, path: str) -> dict[str, float]:
    """A ResourceList field of an object; a bad quantity is refused with its path
    (``status.capacity.cpu: ...``)."""
    if value is not None and not isinstance(value, dict):
        raise ValueError(f"{path}: must be a mapping of resources, got {shown(value)}")
    try:
        return parse_resource_list(value)
    except ValueError as err:
        raise ValueError(f"{path}.{err}") from None


def str_map(value: object) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    return {str(k): "" if v is None else str(v) for k, v in value.items()}


def guarded(kind: str, name: str, fieldpath: str, fn: Callable[[], T]) -> T:
    """Run a parse step and turn a ValueError/TypeError into InvalidObject for kind/name.
    A ``"<field path>: <problem>"`` message of the helpers becomes the field and the
    problem, so the error reads ``Pod ns/p: spec.containers[0].name must be ...``."""
    try:
        return fn()
    except InvalidObject:
        raise
    except (ValueError, TypeError) as err:
        text = str(err)
        path, sep, message = text.partition(": ")
        if sep and not fieldpath and path and " " not in path:
            raise InvalidObject(kind, name, path, message) from None
        raise InvalidObject(kind, name, fieldpath, text) from None
