"""Pod disruption budgets, and how many disruptions one allows now."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent.model.fields import shown
from agent.model.objects.common import guarded, metadata
from agent.model.objects.pods import Pod
from agent.model.selectors import EVERYTHING, LabelSelector, parse_label_selector


@dataclass(frozen=True, slots=True)
class PodDisruptionBudget:
    namespace: str
    name: str
    selector: LabelSelector
    min_available: int | str | None = None  # an int or a percentage like "50%"
    max_unavailable: int | str | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def selects(self, pod: Pod) -> bool:
        # A PDB with an empty selector selects every pod of its namespace (policy/v1).
        return pod.namespace == self.namespace and self.selector.matches(pod.labels)


def _int_or_percent(value: object, fieldpath: str) -> int | str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(f"{fieldpath}: must be an integer or a percentage, got {shown(value)}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"{fieldpath}: must be >= 0, got {value}")
        return value
    if isinstance(value, str) and value.endswith("%"):
        try:
            int(value[:-1])
        except ValueError:
            raise ValueError(f"{fieldpath}: must be an integer or a percentage, got {shown(value)}") from None
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    raise ValueError(f"{fieldpath}: must be an integer or a percentage, got {shown(value)}")


def parse_pdb(raw: Mapping[str, Any]) -> PodDisruptionBudget:
    meta = metadata(raw)
    name = str(meta.get("name") or "")
    namespace = str(meta.get("namespace") or "default")
    label = f"{namespace}/{name}"
    spec = raw.get("spec") or {}

    def body() -> PodDisruptionBudget:
        min_av = _int_or_percent(spec.get("minAvailable"), "spec.minAvailable")
        max_un = _int_or_percent(spec.get("maxUnavailable"), "spec.maxUnavailable")
        if min_av is not None and max_un is not None:
            raise ValueError(
                f"spec.maxUnavailable: must not be set with minAvailable (they are mutually exclusive), got {shown(max_un)}"
            )
        selector = spec.get("selector")
        return PodDisruptionBudget(
            namespace,
            name,
            parse_label_selector(selector, "spec.selector") if selector is not None else EVERYTHING,
            min_av,
            max_un,
        )

    return guarded("PodDisruptionBudget", label, "", body)


def _scaled(value: int | str, total: int, round_up: bool) -> int:
    if isinstance(value, int):
        return value
    percent = int(value[:-1])
    exact = percent * total
    return -(-exact // 100) if round_up else exact // 100


@dataclass(frozen=True, slots=True)
class BudgetStatus:
    """A disruption budget as the disruption controller computes it."""

    healthy: int  # ready, not terminating
    desired: int  # healthy pods the budget asks for
    allowed: int  # disruptionsAllowed: max(0, healthy - desired)


def budget_status(pdb: PodDisruptionBudget, pods: list[Pod]) -> BudgetStatus:
    """``pods`` are the pods the budget selects."""
    live = [p for p in pods if not p.is_terminating and p.phase not in ("Succeeded", "Failed")]
    expected = len(live)
    healthy = sum(1 for p in live if p.ready)
    if pdb.max_unavailable is not None:
        desired = expected - _scaled(pdb.max_unavailable, expected, round_up=True)
    elif pdb.min_available is not None:
        desired = _scaled(pdb.min_available, expected, round_up=True)
    else:
        desired = 0  # neither set: the disruption controller asks for no healthy pods
    desired = max(desired, 0)
    return BudgetStatus(healthy, desired, max(0, healthy - desired))


def disruptions_allowed(pdb: PodDisruptionBudget, pods: list[Pod]) -> int:
    """How many of the budget's pods may be evicted now (``pods``: the ones it selects)."""
    return budget_status(pdb, pods).allowed
