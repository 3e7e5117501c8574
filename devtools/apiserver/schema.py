"""A custom resource against its CRD's structural schema, as the real API server treats it:
``prune`` drops fields the schema does not declare (and nulls it does not allow),
``default`` fills ``default:`` values, ``validate`` returns every violation.

Validation covers the keywords CRDs use: type (with ``x-kubernetes-int-or-string`` and
``nullable``), required, enum, minimum / maximum (and exclusive), minLength / maxLength,
pattern, minItems / maxItems, minProperties / maxProperties, format int32 / int64 /
date-time, anyOf / oneOf / allOf / not, ``x-kubernetes-list-type`` set and map (unique
items and keys), and ``x-kubernetes-validations`` rules in the CEL ``cel.py`` evaluates
(transition rules with ``oldSelf`` on updates only; a rule outside it is skipped and
reported as a warning). Messages
follow the API server's: ``spec.weight: Invalid value: 0: should be greater than or equal
to 1``.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from devtools.apiserver import cel

Schema = Mapping[str, Any]
KEEP_AT_ROOT = ("apiVersion", "kind", "metadata")


@dataclass
class Report:
    unknown: list[str] = field(default_factory=list)  # paths of pruned fields
    errors: list[tuple[str, str]] = field(default_factory=list)  # (path, message)
    skipped_rules: list[str] = field(default_factory=list)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _preserves(schema: Schema) -> bool:
    return bool(schema.get("x-kubernetes-preserve-unknown-fields"))


# -- pruning --------------------------------------------------------------------------------
def prune(value: Any, schema: Schema, report: Report, path: str = "", root: bool = True) -> Any:
    """``value`` without the fields ``schema`` does not declare; their paths go to
    ``report.unknown``."""
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        out = {}
        for key, item in value.items():
            sub = props.get(key)
            if sub is None and isinstance(extra, dict):
                sub = extra
            if (
                item is None
                and not (sub or {}).get("nullable")
                and not (root and key in KEEP_AT_ROOT)
            ):
                continue  # the API server drops nulls a field does not allow
            if (root or schema.get("x-kubernetes-embedded-resource")) and key in KEEP_AT_ROOT:
                out[key] = item  # ObjectMeta is the server's, never a CRD schema's to prune
            elif sub is not None:
                out[key] = prune(item, sub, report, _join(path, key), root=False)
            elif (
                extra is True or _preserves(schema) or schema.get("x-kubernetes-embedded-resource")
            ):
                out[key] = item
            else:
                report.unknown.append(_join(path, key))
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [
            prune(v, schema["items"], report, f"{path}[{i}]", False) for i, v in enumerate(value)
        ]
    return value


# -- defaulting -----------------------------------------------------------------------------
def default(value: Any, schema: Schema) -> Any:
    if isinstance(value, dict):
        out = dict(value)
        for key, sub in (schema.get("properties") or {}).items():
            if key not in out and "default" in sub:
                out[key] = copy.deepcopy(sub["default"])
            if key in out:
                out[key] = default(out[key], sub)
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            props = schema.get("properties") or {}
            out = {k: v if k in props else default(v, extra) for k, v in out.items()}
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [default(v, schema["items"]) for v in value]
    return value


# -- validation -----------------------------------------------------------------------------
_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
}
_INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}


def _show(value: Any) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, dict | list):
        return "object" if isinstance(value, dict) else "array"
    return str(value)


def _type_error(value: Any, schema: Schema) -> str | None:
    if value is None:
        return None if schema.get("nullable") else "must not be null"
    if schema.get("x-kubernetes-int-or-string"):
        ok = isinstance(value, str) or _TYPES["integer"](value)
        return None if ok else "must be an integer or a string"
    kind = schema.get("type")
    if kind and kind in _TYPES and not _TYPES[kind](value):
        return f"must be of type {kind}"
    return None


def _bounds(value: Any, schema: Schema) -> list[str]:
    out = []
    if _TYPES["number"](value):
        low, high = schema.get("minimum"), schema.get("maximum")
        if low is not None and (value < low or (schema.get("exclusiveMinimum") and value == low)):
            out.append(
                f"should be greater than {'' if schema.get('exclusiveMinimum') else 'or equal to '}{low}"
            )
        if high is not None and (
            value > high or (schema.get("exclusiveMaximum") and value == high)
        ):
            out.append(
                f"should be less than {'' if schema.get('exclusiveMaximum') else 'or equal to '}{high}"
            )
        span = _INT_RANGES.get(str(schema.get("format")))
        if span and not span[0] <= value <= span[1]:
            out.append(f"out of range for {schema['format']}")
    if isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            out.append(f"should be at least {schema['minLength']} chars long")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            out.append(f"may not be longer than {schema['maxLength']}")
        if "pattern" in schema and not re.search(schema["pattern"], value):
            out.append(f"should match '{schema['pattern']}'")
        if schema.get("format") == "date-time" and not _is_datetime(value):
            out.append("must be a date-time (RFC 3339)")
    sized = {"Items": list, "Properties": dict}
    for word, kind in sized.items():
        if isinstance(value, kind):
            if f"min{word}" in schema and len(value) < schema[f"min{word}"]:
                out.append(f"should have at least {schema[f'min{word}']} {word.lower()}")
            if f"max{word}" in schema and len(value) > schema[f"max{word}"]:
                out.append(f"should have at most {schema[f'max{word}']} {word.lower()}")
    return out


def _is_datetime(text: str) -> bool:
    try:
        datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return False
    return "T" in text or " " in text


def _list_duplicates(value: list[Any], schema: Schema, path: str) -> list[tuple[str, str]]:
    """Items of a ``set`` list equal to an earlier one, of a ``map`` list with an earlier
    one's keys (``x-kubernetes-list-map-keys``)."""
    kind = schema.get("x-kubernetes-list-type")
    if kind not in ("map", "set"):
        return []
    keys = schema.get("x-kubernetes-list-map-keys") or []
    seen: list[Any] = []
    out = []
    for i, item in enumerate(value):
        ident = {k: item.get(k) for k in keys} if kind == "map" and isinstance(item, dict) else item
        if ident in seen:
            out.append((f"{path}[{i}]", f"Duplicate value: {json.dumps(ident)}"))
        seen.append(ident)
    return out


def _branches_ok(value: Any, schema: Schema) -> list[str]:
    def ok(sub: Schema) -> bool:
        report = Report()
        validate(value, sub, report)
        return not report.errors

    out = []
    if "anyOf" in schema and not any(ok(s) for s in schema["anyOf"]):
        out.append("must validate at least one schema (anyOf)")
    if "oneOf" in schema and sum(ok(s) for s in schema["oneOf"]) != 1:
        out.append("must validate one and only one schema (oneOf)")
    if "allOf" in schema and not all(ok(s) for s in schema["allOf"]):
        out.append("must validate all the schemas (allOf)")
    if "not" in schema and ok(schema["not"]):
        out.append("must not validate the schema (not)")
    return out


class _Absent:
    """No old value: a create, or a field the old object did not have."""


ABSENT: Any = _Absent()


def _old_child(old: Any, key: str) -> Any:
    return old[key] if isinstance(old, dict) and key in old else ABSENT


def _old_items(value: list[Any], old: Any, schema: Schema) -> list[Any]:
    """The old item of each item: by the map keys of a map list, else none (CEL
    transition rules on list items need the keys to correlate them)."""
    keys = schema.get("x-kubernetes-list-map-keys") or []
    if schema.get("x-kubernetes-list-type") != "map" or not isinstance(old, list) or not keys:
        return [ABSENT] * len(value)

    def ident(item: Any) -> Any:
        return [item.get(k) for k in keys] if isinstance(item, dict) else None

    olds = {repr(ident(o)): o for o in old}
    return [olds.get(repr(ident(v)), ABSENT) for v in value]


def validate(value: Any, schema: Schema, report: Report, path: str = "", old: Any = ABSENT) -> None:
    """Every violation of ``schema`` by ``value`` into ``report.errors``; ``old`` is the
    stored value on an update (for ``oldSelf`` rules)."""
    where = path or "<root>"
    problem = _type_error(value, schema)
    if problem:
        report.errors.append((where, f"Invalid value: {_show(value)}: {where} in body {problem}"))
        return
    if value is None:
        return
    if "enum" in schema and value not in schema["enum"]:
        allowed = ", ".join(_show(v) for v in schema["enum"])
        report.errors.append(
            (where, f"Unsupported value: {_show(value)}: supported values: {allowed}")
        )
    for message in _bounds(value, schema) + _branches_ok(value, schema):
        report.errors.append((where, f"Invalid value: {_show(value)}: {where} in body {message}"))
    _rules(value, schema, report, where, old)
    if isinstance(value, dict):
        for key in schema.get("required") or []:
            if key not in value:
                report.errors.append((_join(path, key), "Required value"))
        props, extra = schema.get("properties") or {}, schema.get("additionalProperties")
        for key, item in value.items():
            sub = props.get(key, extra if isinstance(extra, dict) else None)
            if sub is not None:
                validate(item, sub, report, _join(path, key), _old_child(old, key))
    elif isinstance(value, list):
        report.errors.extend(_list_duplicates(value, schema, where))
        if isinstance(schema.get("items"), dict):
            olds = _old_items(value, old, schema)
            for i, item in enumerate(value):
                validate(item, schema["items"], report, f"{path}[{i}]", olds[i])


def _rules(value: Any, schema: Schema, report: Report, where: str, old: Any) -> None:
    for rule in schema.get("x-kubernetes-validations") or []:
        text = str(rule.get("rule", ""))
        try:
            if cel.uses_old_self(text) and old is ABSENT:
                continue  # a transition rule: only on updates of an existing value
            passed = cel.evaluate(text, value, None if old is ABSENT else old)
        except cel.Unsupported:
            report.skipped_rules.append(f"{where}: {text}")
            continue
        except cel.EvalError as err:
            report.errors.append(
                (where, f"Invalid value: {_show(value)}: {err} evaluating rule: {text}")
            )
            continue
        if not passed:
            message = rule.get("message") or f"failed rule: {text}"
            report.errors.append((where, f"Invalid value: {_show(value)}: {message}"))


def check(
    obj: Mapping[str, Any], schema: Schema, old: Mapping[str, Any] | None = None
) -> tuple[dict[str, Any], Report]:
    """Pruned and defaulted ``obj`` and what was wrong with it (the real server's order:
    prune, default, validate); ``old`` is the stored object on an update."""
    report = Report()
    pruned = prune(dict(obj), schema, report)
    defaulted = default(pruned, schema)
    validate(defaulted, schema, report, old=ABSENT if old is None else old)
    return defaulted, report
