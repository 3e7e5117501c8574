"""Which pods a section of a policy applies to: a scope (QoS classes, a priority ceiling,
namespace and pod selectors), and the field readers its parsers share.

One shape for every place that picks pods: an AvoidanceAction's candidates, the idle
class and the pods given CPU burst (``agent.model.isolation``). Each place has its own
defaults (an action: BestEffort and Burstable; the idle class: BestEffort only; burst:
the pods labelled latency-critical), and a field a written scope leaves out takes that
place's default, so the CRD's schema defaults and the parser agree field by field.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

from agent.errors import InvalidObject
from agent.model.fields import Fields, is_number
from agent.model.objects import BEST_EFFORT, BURSTABLE, QOS_CLASSES, Pod
from agent.model.selectors import EVERYTHING, LabelSelector, parse_label_selector

DEFAULT_MAX_PRIORITY = 999_999
#: The highest user priority (DESIGN "Validation"; the CRD's maximum): above it lie only
#: the system-critical classes, which are never candidates.
MAX_PRIORITY = 1_000_000_000


@dataclass(frozen=True, slots=True)
class Scope:
    qos_classes: frozenset[str] = frozenset({BEST_EFFORT, BURSTABLE})
    max_priority: int = DEFAULT_MAX_PRIORITY
    namespace_selector: LabelSelector = EVERYTHING
    pod_selector: LabelSelector = EVERYTHING

    def admits(self, pod: Pod, namespace_labels: Mapping[str, str]) -> bool:
        return (
            pod.qos_class in self.qos_classes
            and pod.priority <= self.max_priority
            and self.pod_selector.matches(pod.labels)
            and self.namespace_selector.matches(namespace_labels)
        )


def whole(fields: Fields, value: object, key: str, default: int, minimum: int,
          maximum: int | None = None) -> int:
    """An integer field (a whole float such as 2.0 reads as 2); None is the default."""
    if value is None:
        return default
    if not is_number(value) or not math.isfinite(value) or value != int(value):
        raise fields.bad(key, "must be an integer", value)
    return fields.integer(int(value), key, minimum=minimum, maximum=maximum)


def selector(value: object, kind: str, name: str, path: str) -> LabelSelector:
    """A LabelSelector field; its errors name the object and the field inside it."""
    try:
        return parse_label_selector(value, path)
    except ValueError as err:
        text = str(err)
        field_path, _, message = text.partition(": ")
        raise InvalidObject(kind, name, field_path, message or text) from None


def parse_scope(raw: object, fields: Fields, default: Scope = Scope()) -> Scope:  # noqa: B008
    """A scope; every field left out (or the whole scope) takes ``default``'s value."""
    scope = fields.mapping(raw)
    out = default
    qos_raw = scope.get("qosClasses")
    if qos_raw is not None:
        if not isinstance(qos_raw, list):
            raise fields.bad("qosClasses", f"must be a list of {', '.join(QOS_CLASSES)}", qos_raw)
        for i, q in enumerate(qos_raw):
            fields.choice(q, f"qosClasses[{i}]", QOS_CLASSES)
        out = replace(out, qos_classes=frozenset(qos_raw))
    out = replace(out, max_priority=whole(fields, scope.get("maxPriority"), "maxPriority",
                                          default.max_priority, -(2**31), MAX_PRIORITY))
    if scope.get("namespaceSelector") is not None:
        out = replace(out, namespace_selector=_selector(scope, "namespaceSelector", fields))
    if scope.get("podSelector") is not None:
        out = replace(out, pod_selector=_selector(scope, "podSelector", fields))
    return out


def _selector(scope: Mapping[str, object], key: str, fields: Fields) -> LabelSelector:
    return selector(scope[key], fields.kind, fields.name, fields.at(key))
