"""Policies tell their state: the ``status`` the controller writes on every
NodeQOSEnsurancePolicy and AvoidanceAction (issue 11). Pure: objects in, statuses out.

The controller is the one owner of this report (5,000 agents each sending an Event per
invalid policy was 5,000 Events per bad policy). The objects are validated with the node
agent's own parsers (``agent.model.policy.load_policies``), so the status says exactly
what the agents will do with the object::

    status:
      observedGeneration: 3
      matchedNodes: 12
      conditions:
      - type: Valid
        status: "False"
        reason: Invalid
        message: "NodeQOSEnsurancePolicy p: spec.objectiveEnsurances[0].metricRule.value
          must be >= 0, got -1.0"
        observedGeneration: 3
        lastTransitionTime: "2026-01-01T00:00:00Z"

``matchedNodes``: for a policy, the nodes its nodeSelector selects (valid or not: what it
would act on once fixed); for an action, the nodes selected by the valid policies whose
rules name it. A status is written only when it changed (``lastTransitionTime`` moves only
when the condition's status does), and a change of validity is an Event (``validity_event``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.errors import InvalidObject
from agent.model.objects import Node
from agent.model.policy import ACTION_KIND, POLICY_KIND, Policy, load_policies
from agent.model.selectors import LabelSelector, parse_label_selector
from agent.model.timeutil import format_time

VALID = "Valid"
REASON_VALID = "Valid"
REASON_INVALID = "Invalid"


@dataclass(frozen=True, slots=True)
class StatusUpdate:
    """The status one object should have, and whether its validity changed."""

    kind: str
    name: str
    resource_version: str
    status: Mapping[str, Any]
    valid: bool
    message: str
    #: None: first seen (no earlier condition); else the earlier Valid status.
    was_valid: bool | None

    @property
    def validity_changed(self) -> bool:
        if self.was_valid is None:
            return not self.valid  # first seen: only an invalid object is news
        return self.was_valid != self.valid


def _valid_condition(raw: Mapping[str, Any]) -> Mapping[str, Any] | None:
    status = raw.get("status") if isinstance(raw.get("status"), dict) else {}
    for cond in (status or {}).get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == VALID:
            return cond
    return None


def _selector(raw: Mapping[str, Any]) -> LabelSelector | None:
    """A policy's node selector when it parses (an invalid policy still reports what it
    would select once fixed), else None."""
    spec = raw.get("spec") if isinstance(raw.get("spec"), dict) else {}
    try:
        return parse_label_selector((spec or {}).get("nodeSelector"), "spec.nodeSelector")
    except (ValueError, InvalidObject):
        return None


def _count(selector: LabelSelector | None, nodes: Sequence[Node]) -> int:
    if selector is None:
        return 0
    return sum(1 for n in nodes if selector.matches(n.labels))


def _update(
    kind: str, raw: Mapping[str, Any], error: InvalidObject | None, matched: int, now: float
) -> StatusUpdate | None:
    meta = raw.get("metadata") or {}
    generation = meta.get("generation")
    old = _valid_condition(raw)
    valid = error is None
    cond_status = "True" if valid else "False"
    message = "" if valid else str(error)
    transition = (
        old.get("lastTransitionTime")
        if old is not None and old.get("status") == cond_status and old.get("lastTransitionTime")
        else format_time(now)
    )
    condition: dict[str, Any] = {
        "type": VALID,
        "status": cond_status,
        "reason": REASON_VALID if valid else REASON_INVALID,
        "message": message or f"{kind} is valid",
        "lastTransitionTime": transition,
    }
    status: dict[str, Any] = {"conditions": [condition], "matchedNodes": matched}
    if isinstance(generation, int):
        status["observedGeneration"] = generation
        condition["observedGeneration"] = generation
    if raw.get("status") == status:
        return None  # nothing to write
    was = None if old is None else old.get("status") == "True"
    return StatusUpdate(
        kind, str(meta.get("name") or ""), str(meta.get("resourceVersion") or ""),
        status, valid, message, was,
    )  # fmt: skip


def statuses(
    policies: Iterable[Mapping[str, Any]],
    actions: Iterable[Mapping[str, Any]],
    nodes: Sequence[Node],
    now: float,
) -> list[StatusUpdate]:
    """The status writes this round: one per object whose status differs, actions first."""
    policies, actions = list(policies), list(actions)
    loaded = load_policies(policies, actions)
    errors = {(e.kind, e.name): e for e in loaded.errors}
    by_action: dict[str, set[str]] = {}
    for policy in loaded.policies:
        selected = _selected(policy, nodes)
        for rule in policy.rules:
            by_action.setdefault(rule.action_name, set()).update(selected)
    out: list[StatusUpdate] = []
    for raw in sorted(actions, key=_name):
        error = errors.get((ACTION_KIND, _name(raw)))
        update = _update(ACTION_KIND, raw, error, len(by_action.get(_name(raw), ())), now)
        if update is not None:
            out.append(update)
    for raw in sorted(policies, key=_name):
        error = errors.get((POLICY_KIND, _name(raw)))
        update = _update(POLICY_KIND, raw, error, _count(_selector(raw), nodes), now)
        if update is not None:
            out.append(update)
    return out


def _selected(policy: Policy, nodes: Sequence[Node]) -> set[str]:
    return {n.name for n in nodes if policy.selects(n.labels)}


def _name(raw: Mapping[str, Any]) -> str:
    return str((raw.get("metadata") or {}).get("name") or "")


__all__ = ["StatusUpdate", "statuses"]
