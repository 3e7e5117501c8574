"""The string forms of label and field selectors, as in ``?labelSelector=a=b,c in (x)``."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from agent.model.selectors import Requirement

Predicate = Callable[[Mapping[str, Any]], bool]

_SET = re.compile(r"^\s*(\S+?)\s+(in|notin)\s*\(([^)]*)\)\s*$")


def _split(text: str) -> list[str]:
    """Split on commas outside parentheses."""
    parts, depth, current = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    parts.append(current)
    return [p.strip() for p in parts if p.strip()]


def parse_label_selector(text: str) -> tuple[Requirement, ...]:
    """``a=b``, ``a==b``, ``a!=b``, ``a in (x,y)``, ``a notin (x)``, ``a``, ``!a``."""
    out = []
    for part in _split(text):
        if m := _SET.match(part):
            values = tuple(v.strip() for v in m.group(3).split(",") if v.strip())
            out.append(Requirement(m.group(1), "In" if m.group(2) == "in" else "NotIn", values))
        elif "!=" in part:
            key, value = part.split("!=", 1)
            out.append(Requirement(key.strip(), "NotIn", (value.strip(),)))
        elif "=" in part:
            key, value = part.replace("==", "=", 1).split("=", 1)
            out.append(Requirement(key.strip(), "In", (value.strip(),)))
        elif part.startswith("!"):
            out.append(Requirement(part[1:].strip(), "DoesNotExist"))
        elif re.fullmatch(r"[A-Za-z0-9_./-]+", part):
            out.append(Requirement(part, "Exists"))
        else:
            raise ValueError(f"unable to parse requirement: {part!r}")
    return tuple(out)


def label_predicate(text: str) -> Predicate:
    requirements = parse_label_selector(text)

    def matches(obj: Mapping[str, Any]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(r.matches(labels) for r in requirements)

    return matches


def field_value(obj: Mapping[str, Any], path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def field_predicate(text: str) -> Predicate:
    """``path=value``, ``path==value``, ``path!=value`` joined by commas; any dotted path
    (the real server allows a per-kind list; pods: metadata.name, metadata.namespace,
    spec.nodeName, status.phase, ...)."""
    terms: list[tuple[str, bool, str]] = []
    for part in _split(text):
        if "!=" in part:
            path, value = part.split("!=", 1)
            terms.append((path.strip(), False, value.strip()))
        elif "=" in part:
            path, value = part.replace("==", "=", 1).split("=", 1)
            terms.append((path.strip(), True, value.strip()))
        else:
            raise ValueError(f"invalid field selector: {part!r}")

    def matches(obj: Mapping[str, Any]) -> bool:
        return all((field_value(obj, p) == v) == eq for p, eq, v in terms)

    return matches
