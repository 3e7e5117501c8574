"""The dev API server's pure parts: patches, printer-column JSONPath, CRD schemas (prune,
default, validate, CEL subset), ages, version order, manifests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from devtools.apiserver import cel, jsonpath, schema
from devtools.apiserver.discovery import version_priority
from devtools.apiserver.errors import ApiStatus
from devtools.apiserver.manifests import ManifestError, read_manifests
from devtools.apiserver.patches import json_patch, merge_patch, strategic_merge_patch
from devtools.apiserver.tables import human_duration

POD: dict[str, Any] = {
    "metadata": {"name": "p", "finalizers": ["a"], "labels": {"x": "1"}},
    "spec": {
        "containers": [
            {"name": "main", "image": "v1", "env": [{"name": "A", "value": "1"}]},
            {"name": "side", "image": "s"},
        ],
        "tolerations": [{"key": "k1"}, {"key": "k2"}],
    },
}


# -- patches --------------------------------------------------------------------------------
def test_merge_patch_removes_with_null_and_replaces_lists() -> None:
    patched = merge_patch(
        POD, {"metadata": {"labels": {"x": None, "y": "2"}}, "spec": {"tolerations": []}}
    )
    assert patched["metadata"]["labels"] == {"y": "2"}
    assert patched["spec"]["tolerations"] == []
    assert POD["metadata"]["labels"] == {"x": "1"}  # the input is untouched


def test_strategic_merge_merges_keyed_lists_and_replaces_atomic_ones() -> None:
    patch = {
        "metadata": {"finalizers": ["b"]},
        "spec": {
            "containers": [{"name": "main", "image": "v2", "env": [{"name": "B", "value": "2"}]}],
            "tolerations": [{"key": "k3"}],
        },
    }
    out = strategic_merge_patch(POD, patch)
    assert out["metadata"]["finalizers"] == ["a", "b"]
    assert [(c["name"], c["image"]) for c in out["spec"]["containers"]] == [
        ("main", "v2"),
        ("side", "s"),
    ]
    assert out["spec"]["containers"][0]["env"] == [
        {"name": "A", "value": "1"},
        {"name": "B", "value": "2"},
    ]
    assert out["spec"]["tolerations"] == [{"key": "k3"}]


def test_strategic_merge_directives_of_kubectl_apply() -> None:
    patch = {
        "metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]},
        "spec": {
            "$setElementOrder/containers": [{"name": "side"}, {"name": "main"}],
            "containers": [
                {
                    "name": "main",
                    "$setElementOrder/env": [{"name": "A"}],
                    "env": [{"name": "A", "value": "9"}],
                },
                {"name": "gone", "$patch": "delete"},
            ],
            "strategy": {"$retainKeys": ["type"], "type": "Recreate"},
        },
    }
    base = {
        **POD,
        "spec": {
            **POD["spec"],
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}},
        },
    }
    out = strategic_merge_patch(base, patch)
    assert out["metadata"]["finalizers"] == []
    assert [c["name"] for c in out["spec"]["containers"]] == ["side", "main"]
    assert out["spec"]["containers"][1]["env"] == [{"name": "A", "value": "9"}]
    assert out["spec"]["strategy"] == {"type": "Recreate"}
    replaced = strategic_merge_patch(POD, {"spec": {"$patch": "replace", "containers": []}})
    assert replaced["spec"] == {"containers": []}
    assert "$setElementOrder/containers" not in out["spec"]


def test_strategic_merge_refuses_a_keyed_item_without_its_key() -> None:
    with pytest.raises(ApiStatus) as err:
        strategic_merge_patch(POD, {"spec": {"containers": [{"image": "x"}]}})
    assert err.value.code == 422 and "'name'" in err.value.message


def test_json_patch_operations() -> None:
    ops = [
        {"op": "add", "path": "/metadata/labels/y", "value": "2"},
        {"op": "replace", "path": "/spec/containers/0/image", "value": "v3"},
        {"op": "remove", "path": "/spec/tolerations/0"},
        {"op": "copy", "from": "/metadata/name", "path": "/metadata/labels/name"},
        {"op": "move", "from": "/metadata/labels/x", "path": "/metadata/labels/z"},
        {"op": "add", "path": "/metadata/finalizers/-", "value": "b"},
        {"op": "test", "path": "/spec/containers/0/image", "value": "v3"},
    ]
    out = json_patch(POD, ops)
    assert out["metadata"]["labels"] == {"y": "2", "name": "p", "z": "1"}
    assert out["spec"]["containers"][0]["image"] == "v3"
    assert out["spec"]["tolerations"] == [{"key": "k2"}]
    assert out["metadata"]["finalizers"] == ["a", "b"]
    with pytest.raises(ApiStatus, match="test failed"):
        json_patch(POD, [{"op": "test", "path": "/metadata/name", "value": "q"}])
    with pytest.raises(ApiStatus, match="does not exist"):
        json_patch(POD, [{"op": "remove", "path": "/spec/nope"}])


# -- JSONPath -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("path", "found"),
    [
        (".metadata.name", ["p"]),
        (".spec.containers[*].name", ["main", "side"]),
        (".spec.containers[-1].image", ["s"]),
        ('.spec.containers[?(@.name=="side")].image', ["s"]),
        (".spec.containers[?(@.name!='side')].env[0].value", ["1"]),
        (".metadata.labels['x']", ["1"]),
        ("{.metadata.labels.x}", ["1"]),
        (".status.phase", []),
    ],
)
def test_jsonpath_finds(path: str, found: list[Any]) -> None:
    assert jsonpath.find(POD, path) == found


def test_jsonpath_names_what_it_cannot_read() -> None:
    with pytest.raises(ValueError, match=r"cannot read '\.\.name'"):
        jsonpath.compile_path(".spec..name")


# -- CRD schemas ----------------------------------------------------------------------------
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "required": ["rules"],
            "x-kubernetes-validations": [
                {
                    "rule": "!(has(self.ttl) && has(self.expires))",
                    "message": "ttl and expires are mutually exclusive",
                }
            ],
            "properties": {
                "ttl": {"type": "string"},
                "expires": {"type": "string", "format": "date-time"},
                "mode": {"type": "string", "enum": ["A", "B"], "default": "A"},
                "value": {
                    "x-kubernetes-int-or-string": True,
                    "anyOf": [{"type": "integer"}, {"type": "string"}],
                    "pattern": "^[0-9]+m?$",
                },
                "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "rules": {
                    "type": "array",
                    "minItems": 1,
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["name"],
                    "items": {
                        "type": "object",
                        "properties": {
                            "name": {"type": "string", "minLength": 1},
                            "threshold": {
                                "type": "integer",
                                "minimum": 1,
                                "default": 3,
                                "format": "int32",
                            },
                        },
                    },
                },
            },
        },
    },
}


def test_schema_prunes_unknown_fields_and_nulls_then_defaults() -> None:
    obj = {
        "apiVersion": "x/v1",
        "kind": "X",
        "metadata": {"name": "a", "labels": {"k": "v"}},
        "spec": {
            "rules": [{"name": "r", "colour": "red"}],
            "extra": {"any": {"thing": 1}},
            "ttl": None,
        },
    }
    out, report = schema.check(obj, SCHEMA)
    assert report.unknown == ["spec.rules[0].colour"] and not report.errors
    assert out["metadata"] == {"name": "a", "labels": {"k": "v"}}  # never pruned
    assert out["spec"] == {
        "rules": [{"name": "r", "threshold": 3}],
        "extra": {"any": {"thing": 1}},
        "mode": "A",
    }


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        ({}, ("spec.rules", "Required value")),
        ({"rules": []}, ("spec.rules", "should have at least 1 items")),
        (
            {"rules": [{"name": "r", "threshold": 0}]},
            (
                "spec.rules[0].threshold",
                "Invalid value: 0: spec.rules[0].threshold in body should be greater than or equal to 1",
            ),
        ),
        (
            {"rules": [{"name": "r", "threshold": "3"}]},
            (
                "spec.rules[0].threshold",
                'Invalid value: "3": spec.rules[0].threshold in body must be of type integer',
            ),
        ),
        (
            {"rules": [{"name": "r", "threshold": 2**31}]},
            ("spec.rules[0].threshold", "out of range for int32"),
        ),
        (
            {"rules": [{"name": "r"}, {"name": "r"}]},
            ("spec.rules[1]", 'Duplicate value: {"name": "r"}'),
        ),
        (
            {"rules": [{"name": "r"}], "mode": "C"},
            ("spec.mode", 'Unsupported value: "C": supported values: "A", "B"'),
        ),
        ({"rules": [{"name": "r"}], "value": "5x"}, ("spec.value", "should match '^[0-9]+m?$'")),
        (
            {"rules": [{"name": "r"}], "value": True},
            ("spec.value", "must be an integer or a string"),
        ),
        (
            {"rules": [{"name": "r"}], "expires": "tomorrow"},
            ("spec.expires", "must be a date-time"),
        ),
        (
            {"rules": [{"name": "r"}], "ttl": "1h", "expires": "2030-01-01T00:00:00Z"},
            ("spec", "ttl and expires are mutually exclusive"),
        ),
    ],
)
def test_schema_validation_names_the_field(spec: dict[str, Any], error: tuple[str, str]) -> None:
    _, report = schema.check({"metadata": {"name": "a"}, "spec": spec}, SCHEMA)
    assert any(path == error[0] and error[1] in message for path, message in report.errors), (
        report.errors
    )


def test_schema_accepts_a_valid_object() -> None:
    spec = {"rules": [{"name": "r"}], "value": "500m", "ttl": "1h"}
    _, report = schema.check({"metadata": {"name": "a"}, "spec": spec}, SCHEMA)
    assert report.errors == [] and report.skipped_rules == []


SELECTOR_RULE = (
    "self.operator in ['In', 'NotIn'] ? has(self.values) && size(self.values) > 0"
    " : !has(self.values) || size(self.values) == 0"
)


@pytest.mark.parametrize(
    ("rule", "value", "result"),
    [
        ("has(self.a) || has(self.b)", {"b": 1}, True),
        ("has(self.a) || has(self.b)", {}, False),
        ("!(has(self.a) && has(self.b))", {"a": 1, "b": 2}, False),
        ("has(self.a.b)", {"a": {"b": 1}}, True),
        ("has(self.a.b)", {}, False),
        ("true && !false", {}, True),
        ("type(self) != int || self >= 0", "90", True),
        ("type(self) != int || self >= 0", -1, False),
        (SELECTOR_RULE, {"operator": "In", "values": ["a"]}, True),
        (SELECTOR_RULE, {"operator": "In", "values": []}, False),
        (SELECTOR_RULE, {"operator": "Exists"}, True),
        (SELECTOR_RULE, {"operator": "Exists", "values": ["a"]}, False),
        (
            "self.items.all(i, i.size() <= 3) && self.items.exists(i, i.startsWith('b'))",
            {"items": ["ab", "bc"]},
            True,
        ),
        ("self.m['k'] * 2 + 1 == 7 && self.x[1] / 2 == 1.5", {"m": {"k": 3}, "x": [0, 3.0]}, True),
        ("size(self.name) < 5 ? self.name.matches('^[a-z]+$') : false", {"name": "abc"}, True),
    ],
)
def test_cel_rules(rule: str, value: Any, result: bool) -> None:
    assert cel.evaluate(rule, value) is result


def test_cel_transition_rules_see_the_old_value_on_updates_only() -> None:
    immutable = {
        "type": "object",
        "properties": {
            "ref": {
                "type": "string",
                "x-kubernetes-validations": [
                    {"rule": "self == oldSelf", "message": "ref is immutable"}
                ],
            }
        },
    }
    assert schema.check({"ref": "a"}, immutable)[1].errors == []  # a create
    assert schema.check({"ref": "a"}, immutable, {"ref": "a"})[1].errors == []
    _, report = schema.check({"ref": "b"}, immutable, {"ref": "a"})
    assert report.errors == [("ref", 'Invalid value: "b": ref is immutable')]


def test_cel_evaluation_errors_fail_the_rule_and_unknown_cel_is_skipped() -> None:
    with pytest.raises(cel.EvalError, match="no such key: a"):
        cel.evaluate("self.a > 1", {})
    with pytest.raises(cel.Unsupported):
        cel.evaluate("self.a.lowerAscii() == 'x'", {"a": "X"})
    rules = {
        "type": "object",
        "x-kubernetes-validations": [
            {"rule": "self.a.lowerAscii() == 'x'"},
            {"rule": "self.b > 1"},
        ],
    }
    _, report = schema.check({"a": "X"}, rules)
    assert report.skipped_rules == ["<root>: self.a.lowerAscii() == 'x'"]
    assert report.errors == [
        ("<root>", "Invalid value: object: no such key: b evaluating rule: self.b > 1")
    ]


# -- small things ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (-5, "<invalid>"),
        (-1, "0s"),
        (59, "59s"),
        (119, "119s"),
        (130, "2m10s"),
        (600, "10m"),
        (3 * 3600 + 60, "3h1m"),
        (30 * 3600, "30h"),
        (3 * 86400 + 3600, "3d1h"),
        (400 * 86400, "400d"),
        (3 * 365 * 86400, "3y"),
    ],
)
def test_human_duration_as_kubectl_prints_ages(seconds: float, text: str) -> None:
    assert human_duration(seconds) == text


def test_versions_in_kubernetes_priority_order() -> None:
    found = sorted(["v1alpha1", "v2", "v1beta2", "v1", "v1beta1", "foo"], key=version_priority)
    assert found == ["v2", "v1", "v1beta2", "v1beta1", "v1alpha1", "foo"]


def test_manifests_from_a_directory_name_the_bad_file(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(
        yaml.safe_dump_all([{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}}] * 2)
    )
    (tmp_path / "b.yml").write_text(
        "kind: List\napiVersion: v1\nitems:\n- {apiVersion: v1, kind: Pod, metadata: {name: p}}\n"
    )
    (tmp_path / "README.md").write_text("# not a manifest")
    assert [o["kind"] for o in read_manifests(tmp_path)] == ["Node", "Node", "Pod"]
    (tmp_path / "c.json").write_text('{"apiVersion": "v1", "kind": "Pod", "metadata": {}}')
    with pytest.raises(
        ManifestError, match=r"c\.json document 1: metadata\.name is required, got None"
    ):
        read_manifests(tmp_path)
    with pytest.raises(ManifestError, match="no such file or directory"):
        read_manifests(tmp_path / "missing")
    (tmp_path / "c.json").write_bytes(b'{"kind": "Pod", "metadata": {"name": "\xff"}}')
    with pytest.raises(ManifestError, match=r"c\.json: not UTF-8 text: byte 38, got b'\\xff'"):
        read_manifests(tmp_path)
