"""Label selectors (metav1.LabelSelector) and node selector terms (core/v1 NodeSelector).

Parsed once into frozen records with a ``matches`` method. Parse errors raise ValueError
with the path inside the selector; callers prefix the object and field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from agent.model.fields import shown

_LABEL_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})
_NODE_OPERATORS = _LABEL_OPERATORS | {"Gt", "Lt"}


@dataclass(frozen=True, slots=True)
class Requirement:
    """One ``key operator values`` expression."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        op = self.operator
        if op == "In":
            return present and labels[self.key] in self.values
        if op == "NotIn":
            return not present or labels[self.key] not in self.values
        if op == "Exists":
            return present
        if op == "DoesNotExist":
            return not present
        if not present:
            return False
        try:  # Gt / Lt compare integers, as the scheduler does
            value = int(labels[self.key])
            bound = int(self.values[0])
        except (ValueError, IndexError):
            return False
        return value > bound if op == "Gt" else value < bound


def _parse_requirement(raw: object, path: str, operators: frozenset[str]) -> Requirement:
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: must be a mapping, got {shown(raw)}")
    key = raw.get("key")
    if not isinstance(key, str) or not key:
        raise ValueError(f"{path}.key: must be a non-empty string, got {shown(key)}")
    op = raw.get("operator")
    if op not in operators:
        raise ValueError(f"{path}.operator: must be one of {sorted(operators)}, got {shown(op)}")
    values = raw.get("values") or []
    if not isinstance(values, list):
        raise ValueError(f"{path}.values: must be a list, got {shown(values)}")
    values = [str(v) for v in values]
    if op in ("In", "NotIn") and not values:
        raise ValueError(f"{path}.values: must be non-empty for {op}, got {shown(values)}")
    if op in ("Exists", "DoesNotExist") and values:
        raise ValueError(f"{path}.values: must be empty for {op}, got {shown(values)}")
    if op in ("Gt", "Lt"):
        if len(values) != 1:
            raise ValueError(f"{path}.values: must hold exactly one integer for {op}, got {shown(values)}")
        try:
            int(values[0])
        except ValueError:
            raise ValueError(f"{path}.values[0]: must be an integer for {op}, got {shown(values[0])}") from None
    return Requirement(key, op, tuple(values))


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """metav1.LabelSelector. The empty selector matches everything."""

    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        for key, value in self.match_labels:
            if labels.get(key) != value:
                return False
        return all(req.matches(labels) for req in self.match_expressions)

    @property
    def is_empty(self) -> bool:
        return not self.match_labels and not self.match_expressions


EVERYTHING = LabelSelector()


def parse_label_selector(raw: object, path: str = "selector") -> LabelSelector:
    """Parse a LabelSelector; None or {} selects everything."""
    if raw is None:
        return EVERYTHING
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: must be a mapping, got {shown(raw)}")
    unknown = sorted(str(k) for k in raw if k not in ("matchLabels", "matchExpressions"))
    if unknown:
        raise ValueError(
            f"{path}.{unknown[0]}: is not a known field (known: matchLabels, matchExpressions), "
            f"got {shown(raw[unknown[0]])}"
        )
    labels = raw.get("matchLabels") or {}
    if not isinstance(labels, dict):
        raise ValueError(f"{path}.matchLabels: must be a mapping, got {shown(labels)}")
    exprs = raw.get("matchExpressions") or []
    if not isinstance(exprs, list):
        raise ValueError(f"{path}.matchExpressions: must be a list, got {shown(exprs)}")
    return LabelSelector(
        tuple(sorted((str(k), str(v)) for k, v in labels.items())),
        tuple(
            _parse_requirement(e, f"{path}.matchExpressions[{i}]", _LABEL_OPERATORS)
            for i, e in enumerate(exprs)
        ),
    )


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    """core/v1 NodeSelectorTerm: label expressions and field expressions (metadata.name)."""

    match_expressions: tuple[Requirement, ...] = ()
    match_fields: tuple[Requirement, ...] = ()

    def matches(self, node_name: str, labels: Mapping[str, str]) -> bool:
        if not self.match_expressions and not self.match_fields:
            return False  # an empty term matches no objects (core/v1 semantics)
        if not all(r.matches(labels) for r in self.match_expressions):
            return False
        fields = {"metadata.name": node_name}
        return all(r.matches(fields) for r in self.match_fields)


@dataclass(frozen=True, slots=True)
class NodeSelector:
    """Terms are ORed; requirements inside a term are ANDed."""

    terms: tuple[NodeSelectorTerm, ...] = ()

    def matches(self, node_name: str, labels: Mapping[str, str]) -> bool:
        return any(t.matches(node_name, labels) for t in self.terms)

    def required_node_names(self) -> frozenset[str] | None:
        """The node names this selector pins to through ``metadata.name In``, if every term
        does so (how DaemonSet pods are bound to their node); else None."""
        names: set[str] = set()
        for term in self.terms:
            pinned = [r for r in term.match_fields if r.key == "metadata.name" and r.operator == "In"]
            if not pinned:
                return None
            names.update(pinned[0].values)
        return frozenset(names) if self.terms else None


def parse_node_selector(raw: object, path: str) -> NodeSelector:
    if raw is None:
        return NodeSelector()
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: must be a mapping, got {shown(raw)}")
    terms_raw = raw.get("nodeSelectorTerms") or []
    if not isinstance(terms_raw, list):
        raise ValueError(f"{path}.nodeSelectorTerms: must be a list, got {shown(terms_raw)}")
    terms = []
    for i, term in enumerate(terms_raw):
        tpath = f"{path}.nodeSelectorTerms[{i}]"
        if not isinstance(term, dict):
            raise ValueError(f"{tpath}: must be a mapping, got {shown(term)}")
        exprs = term.get("matchExpressions") or []
        fields = term.get("matchFields") or []
        terms.append(
            NodeSelectorTerm(
                tuple(
                    _parse_requirement(e, f"{tpath}.matchExpressions[{j}]", _NODE_OPERATORS)
                    for j, e in enumerate(exprs)
                ),
                tuple(
                    _parse_requirement(e, f"{tpath}.matchFields[{j}]", _NODE_OPERATORS)
                    for j, e in enumerate(fields)
                ),
            )
        )
    return NodeSelector(tuple(terms))
