"""The dev server's protobuf reader: kubectl create namespace's body, and refusals."""

from __future__ import annotations

import pytest

from devtools.apiserver import protobuf


def _field(number: int, payload: bytes) -> bytes:
    assert len(payload) < 128
    return bytes([number << 3 | 2, len(payload)]) + payload


def _namespace_body(name: bytes, labels: dict[bytes, bytes], kind: bytes = b"Namespace") -> bytes:
    meta = _field(1, name) + b"".join(_field(11, _field(1, k) + _field(2, v)) for k, v in labels.items())
    raw = _field(1, meta) + _field(2, b"") + _field(3, b"")
    return protobuf.MAGIC + _field(1, _field(1, b"v1") + _field(2, kind)) + _field(2, raw)


def test_kubectls_own_namespace_body_is_read() -> None:
    # The bytes kubectl 1.32 sent for `kubectl create namespace foo` (seen with -v=9).
    sent = bytes.fromhex(
        "6b3873000a0f0a0276311209 4e616d657370616365121b0a 130a03666f6f12001a002200"
        "2a00320038004200 12001a02 0a001a002200".replace(" ", "")
    )
    assert protobuf.decode(sent) == {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "foo"}}


def test_labels_come_through() -> None:
    body = _namespace_body(b"team-a", {b"team": b"a", b"env": b"dev"})
    assert protobuf.decode(body)["metadata"] == {"name": "team-a", "labels": {"team": "a", "env": "dev"}}


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (_namespace_body(b"x", {}, kind=b"ConfigMap"), "ConfigMap are not read here"),
        (b"{}", "not a Kubernetes protobuf envelope"),
        (protobuf.MAGIC + b"\x0a\x40", "truncated"),
    ],
)
def test_anything_else_is_refused_with_why(body: bytes, why: str) -> None:
    with pytest.raises(protobuf.Unsupported, match=why):
        protobuf.decode(body)
