"""The one protobuf body the dev server reads: ``kubectl create namespace``'s.

``kubectl create <kind>`` sends ``application/vnd.kubernetes.protobuf`` and does not fall
back to JSON when refused. A workstation session starts with ``kubectl create namespace``,
so a Namespace (metadata only: name, generateName, labels, annotations) is decoded here;
every other kind is refused with 415 and a message that names the way out
(``kubectl apply -f``). The envelope is ``k8s\\x00`` + ``runtime.Unknown`` (typeMeta,
raw); the raw bytes are the object's message, whose field 1 is its ``ObjectMeta``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

MAGIC = b"k8s\x00"


class Unsupported(ValueError):
    """A protobuf body of a kind this server does not decode."""


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data) or shift > 63:
            raise Unsupported("truncated protobuf varint")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at


def _fields(data: bytes) -> Iterator[tuple[int, bytes | int]]:
    """(field number, bytes or integer) of one message; other wire types are refused."""
    at = 0
    while at < len(data):
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = _varint(data, at)
            yield number, value
        elif wire == 2:
            size, at = _varint(data, at)
            if at + size > len(data):
                raise Unsupported("truncated protobuf field")
            yield number, data[at : at + size]
            at += size
        else:
            raise Unsupported(f"protobuf wire type {wire} is not read here")


def _text(value: bytes | int) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _entry(value: bytes | int) -> tuple[str, str]:
    parts = dict(_fields(value)) if isinstance(value, bytes) else {}
    return _text(parts.get(1, b"")), _text(parts.get(2, b""))


#: ObjectMeta's fields this server keeps: number -> name (11 and 12 are maps).
_META_STRINGS = {1: "name", 2: "generateName", 3: "namespace"}
_META_MAPS = {11: "labels", 12: "annotations"}


def _object_meta(data: bytes) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    for number, value in _fields(data):
        if number in _META_STRINGS and _text(value):
            meta[_META_STRINGS[number]] = _text(value)
        elif number in _META_MAPS:
            key, text = _entry(value)
            meta.setdefault(_META_MAPS[number], {})[key] = text
    return meta


def decode(body: bytes) -> dict[str, Any]:
    """The JSON form of a protobuf Namespace; Unsupported for anything else."""
    if not body.startswith(MAGIC):
        raise Unsupported("not a Kubernetes protobuf envelope")
    envelope = dict(_fields(body[len(MAGIC) :]))
    type_meta = envelope.get(1, b"")
    raw = envelope.get(2, b"")
    if not isinstance(type_meta, bytes) or not isinstance(raw, bytes):
        raise Unsupported("malformed protobuf envelope")
    types = {n: _text(v) for n, v in _fields(type_meta)}
    api_version, kind = types.get(1, ""), types.get(2, "")
    if (api_version, kind) != ("v1", "Namespace"):
        raise Unsupported(f"protobuf bodies of {kind or 'this kind'} are not read here")
    meta = next((v for n, v in _fields(raw) if n == 1 and isinstance(v, bytes)), b"")
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": _object_meta(meta)}
