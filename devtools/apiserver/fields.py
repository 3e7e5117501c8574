"""Unknown fields of built-in kinds, from the official client's models.

The kubernetes package ships a model class per API type whose ``openapi_types`` and
``attribute_map`` name every field and its type: that is the field list the real server
decodes into. ``unknown_fields`` walks an object along them and returns the paths of the
fields no model declares (what ``fieldValidation=Strict`` refuses and ``Warn`` reports).
Types are not checked here: the models type quantities as strings where JSON also allows
numbers, which would refuse valid objects.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any

import kubernetes.client as models

_LIST = re.compile(r"^list\[(.+)\]$")
_DICT = re.compile(r"^dict\[str, (.+)\]$")


@functools.cache
def _fields(model: str) -> Mapping[str, str] | None:
    """{json name: type string} of a model class, None when there is no such class."""
    cls = getattr(models, model, None)
    types = getattr(cls, "openapi_types", None)
    names = getattr(cls, "attribute_map", None)
    if not isinstance(types, dict) or not isinstance(names, dict):
        return None
    return {names[attr]: kind for attr, kind in types.items()}


def known_model(model: str) -> bool:
    return _fields(model) is not None


def unknown_fields(value: Any, kind: str, path: str = "") -> list[str]:
    """Paths (``spec.containers[0].imag``) of the fields in ``value`` that type ``kind``
    (a model name, ``list[...]``, ``dict[str, ...]`` or a primitive) does not declare."""
    if m := _LIST.match(kind):
        if not isinstance(value, list):
            return []
        return [p for i, v in enumerate(value) for p in unknown_fields(v, m[1], f"{path}[{i}]")]
    if m := _DICT.match(kind):
        if not isinstance(value, dict):
            return []
        return [p for k, v in value.items() for p in unknown_fields(v, m[1], f"{path}[{k}]")]
    fields = _fields(kind)
    if fields is None or not isinstance(value, dict):
        return []
    out = []
    for key, item in value.items():
        where = f"{path}.{key}" if path else key
        if key not in fields:
            out.append(where)
        else:
            out.extend(unknown_fields(item, fields[key], where))
    return out
