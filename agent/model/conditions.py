"""Status conditions of custom resources (metav1.Condition, the fields we read)."""

from __future__ import annotations

from dataclasses import dataclass

from agent.errors import InvalidObject


@dataclass(frozen=True, slots=True)
class Condition:
    type: str
    status: str
    reason: str = ""
    message: str = ""


def parse_conditions(raw: object, kind: str, name: str, path: str = "status.conditions") -> tuple[Condition, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise InvalidObject(kind, name, path, "must be a list")
    out = []
    for i, cond in enumerate(raw):
        if not isinstance(cond, dict) or not isinstance(cond.get("type"), str) or not cond["type"]:
            raise InvalidObject(kind, name, f"{path}[{i}].type", "must be set")
        out.append(Condition(
            cond["type"],
            str(cond.get("status") or ""),
            str(cond.get("reason") or ""),
            str(cond.get("message") or ""),
        ))
    return tuple(out)
