"""Reservations: capacity held on a node for its owners until used, expired or deleted.

The CRD (``qos.waterline.io/v1alpha1``, kind ``Reservation``, cluster-scoped) follows the
shape operators know from Koordinator::

    spec:
      template: {spec: {containers: [{resources: {requests: {cpu: "2"}}}]}}  # what to hold
      owners:                       # who may use it; any entry matches (fields inside ANDed)
      - object: {namespace: default, name: web-0, uid: ...}
      - controller: {kind: ReplicaSet, name: web-7d9, namespace: default, uid: ...}
      - labelSelector: {matchLabels: {app: web}}
      ttl: 1h                       # or `expires: <time>`; default 24h; "0" = never expires
      allocateOnce: true            # default: the first owner to use it ends it (Succeeded)
    status:
      phase: Pending | Available | Succeeded | Failed | Expired
      nodeName: n1
      allocatable: {cpu: "2"}       # held; defaults to the template's pod request
      allocated: {cpu: "1"}         # already used by current owners
      currentOwners: [{namespace: default, name: web-0, uid: ...}]
      conditions: [{type: Ready, status: "True", reason: Available}]
      placeholder: {namespace: waterline-system, name: ..., uid: ...}  # see below

Only an Available, unexpired reservation bound to a node holds capacity, and what it holds
is ``allocatable - allocated``: the owners' pods already count on the node by their own
requests, so counting the whole reservation again would charge them twice.

A reservation the migrator makes real with a *placeholder pod* (a pause container with the
reserved requests, bound to the node: ``status.placeholder``) holds nothing by itself:
the placeholder is a pod on the node and counts there like any pod, for the stock
scheduler and kubelet as for our planners.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agent.errors import InvalidObject
from agent.model.conditions import Condition, parse_conditions
from agent.model.fields import Fields, shown
from agent.model.objects import Pod, Resources, parse_pod, resource_list
from agent.model.selectors import LabelSelector, parse_label_selector

KIND = "Reservation"

PENDING = "Pending"
AVAILABLE = "Available"
SUCCEEDED = "Succeeded"
FAILED = "Failed"
EXPIRED = "Expired"
PHASES = (PENDING, AVAILABLE, SUCCEEDED, FAILED, EXPIRED)
#: Phases a reservation never leaves.
FINAL_PHASES = frozenset({SUCCEEDED, FAILED, EXPIRED})

DEFAULT_TTL_SECONDS = 24 * 3600.0

@dataclass(frozen=True, slots=True)
class ObjectRef:
    """A pod named by uid, or else by namespace and name."""

    namespace: str = ""
    name: str = ""
    uid: str = ""

    def matches(self, pod: Pod) -> bool:
        if self.uid:
            return pod.uid == self.uid
        if self.namespace and pod.namespace != self.namespace:
            return False
        return pod.name == self.name


@dataclass(frozen=True, slots=True)
class ControllerRef:
    """A pod's controller owner, by uid, or else by kind and name (and namespace if given)."""

    kind: str = ""
    name: str = ""
    uid: str = ""
    namespace: str = ""

    def matches(self, pod: Pod) -> bool:
        ctl = pod.controller
        if ctl is None:
            return False
        if self.namespace and pod.namespace != self.namespace:
            return False
        if self.uid:
            return ctl.uid == self.uid
        return ctl.name == self.name and (not self.kind or ctl.kind == self.kind)


@dataclass(frozen=True, slots=True)
class Owner:
    """One owners[] entry: every part that is set must match."""

    object: ObjectRef | None = None
    controller: ControllerRef | None = None
    selector: LabelSelector | None = None

    def matches(self, pod: Pod) -> bool:
        if self.object is not None and not self.object.matches(pod):
            return False
        if self.controller is not None and not self.controller.matches(pod):
            return False
        return self.selector is None or self.selector.matches(pod.labels)


@dataclass(frozen=True, slots=True)
class Reservation:
    name: str
    uid: str = ""
    creation_time: float | None = None
    template: Pod | None = None
    owners: tuple[Owner, ...] = ()
    #: Seconds after creation at which it expires; None = never.
    ttl: float | None = DEFAULT_TTL_SECONDS
    expires: float | None = None
    allocate_once: bool = True
    phase: str = PENDING
    node_name: str = ""
    allocatable: Resources = field(default_factory=dict)
    allocated: Resources = field(default_factory=dict)
    current_owners: tuple[ObjectRef, ...] = ()
    conditions: tuple[Condition, ...] = ()
    #: status.placeholder as ``namespace/name`` ("" when no placeholder pod backs it).
    placeholder: str = ""

    def owns(self, pod: Pod) -> bool:
        """May this pod use the reservation's capacity?"""
        return any(owner.matches(pod) for owner in self.owners)

    def expiry(self) -> float | None:
        if self.expires is not None:
            return self.expires
        if self.ttl is None or self.creation_time is None:
            return None
        return self.creation_time + self.ttl

    def effective_phase(self, now: float) -> str:
        """The phase at ``now``: a live reservation past its expiry is Expired, and an
        allocateOnce reservation that already has an owner is Succeeded (its leftover is
        released), whatever the last status write said."""
        if self.phase in FINAL_PHASES:
            return self.phase
        expiry = self.expiry()
        if expiry is not None and now >= expiry:
            return EXPIRED
        if self.phase == AVAILABLE and self.allocate_once and self.current_owners:
            return SUCCEEDED
        return self.phase

    def holds_capacity(self, now: float) -> bool:
        """Bound, Available at ``now`` and not backed by a placeholder pod (which counts
        on the node itself)."""
        return (
            bool(self.node_name)
            and not self.placeholder
            and self.effective_phase(now) == AVAILABLE
        )

    def reserved(self) -> Resources:
        """What it holds for its owners: allocatable (else the template's request) minus
        what is already allocated, never negative."""
        base = self.allocatable or (self.template.requests if self.template else {})
        return {r: max(0.0, q - self.allocated.get(r, 0.0)) for r, q in base.items()}


# -- parsing ---------------------------------------------------------------------------


def _str(value: object) -> str:
    return "" if value is None else str(value)


def _ref(raw: object, path: str) -> ObjectRef:
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: must be a mapping, got {shown(raw)}")
    ref = ObjectRef(_str(raw.get("namespace")), _str(raw.get("name")), _str(raw.get("uid")))
    if not ref.uid and not ref.name:
        raise ValueError(f"{path}: must give uid or name, got {shown(raw)}")
    return ref


def _owner(raw: object, path: str) -> Owner:
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: must be a mapping, got {shown(raw)}")
    unknown = sorted(str(k) for k in raw if k not in ("object", "controller", "labelSelector"))
    if unknown:
        raise ValueError(
            f"{path}.{unknown[0]}: is not a known field (known: object, controller, "
            f"labelSelector), got {shown(raw[unknown[0]])}"
        )
    obj = _ref(raw["object"], f"{path}.object") if raw.get("object") is not None else None
    ctl = None
    if raw.get("controller") is not None:
        c = raw["controller"]
        if not isinstance(c, dict):
            raise ValueError(f"{path}.controller: must be a mapping, got {shown(c)}")
        ctl = ControllerRef(
            _str(c.get("kind")), _str(c.get("name")), _str(c.get("uid")), _str(c.get("namespace"))
        )
        if not ctl.uid and not ctl.name:
            raise ValueError(f"{path}.controller: must give uid or name, got {shown(c)}")
    sel = None
    if raw.get("labelSelector") is not None:
        sel = parse_label_selector(raw["labelSelector"], f"{path}.labelSelector")
        if sel.is_empty:
            raise ValueError(
                f"{path}.labelSelector: must select something (an empty selector would let "
                f"every pod use the reservation), got {shown(raw['labelSelector'])}"
            )
    if obj is None and ctl is None and sel is None:
        raise ValueError(f"{path}: must set object, controller or labelSelector, got {shown(raw)}")
    return Owner(obj, ctl, sel)


def _split(err: ValueError) -> tuple[str, str]:
    """("path", "problem") from a ``"path: problem"`` ValueError of the helpers above."""
    path, _, message = str(err).partition(": ")
    return path, message


def _template(name: str, spec: Mapping[str, Any], f: Fields) -> Pod:
    template_raw = spec.get("template")
    if not isinstance(template_raw, dict) or not isinstance(template_raw.get("spec"), dict):
        raise f.bad("spec.template", "must be a pod template with a spec", template_raw)
    tmeta = template_raw.get("metadata") if isinstance(template_raw.get("metadata"), dict) else {}
    try:
        return parse_pod(
            {
                "metadata": {**(tmeta or {}), "name": f"reservation-{name}"},
                "spec": template_raw["spec"],
                "status": {"phase": "Pending"},
            }
        )
    except InvalidObject as err:
        raise InvalidObject(KIND, name, f"spec.template.{err.field}".rstrip("."), err.message) from None


def _owners(spec: Mapping[str, Any], f: Fields) -> tuple[Owner, ...]:
    owners_raw = spec.get("owners")
    if not isinstance(owners_raw, list) or not owners_raw:
        raise f.bad("spec.owners", "must list at least one owner", owners_raw)
    try:
        return tuple(_owner(o, f"spec.owners[{i}]") for i, o in enumerate(owners_raw))
    except ValueError as err:
        raise InvalidObject(f.kind, f.name, *_split(err)) from None


def _expiry(spec: Mapping[str, Any], f: Fields) -> tuple[float | None, float | None]:
    """(ttl, expires): ttl 0 disables expiry; expires replaces the ttl."""
    ttl_raw, expires_raw = spec.get("ttl"), spec.get("expires")
    if ttl_raw is not None and expires_raw is not None:
        raise f.bad("spec.ttl", "must not be set together with spec.expires", ttl_raw)
    if expires_raw is not None:
        return None, f.time(expires_raw, "spec.expires")
    if ttl_raw is None:
        return DEFAULT_TTL_SECONDS, None
    ttl = f.duration(ttl_raw, "spec.ttl")
    return (ttl or None), None


def _status_fields(status: Mapping[str, Any], f: Fields) -> dict[str, Any]:
    phase = _str(status.get("phase")) or PENDING
    f.choice(phase, "status.phase", PHASES)
    current = status.get("currentOwners") or []
    if not isinstance(current, list):
        raise f.bad("status.currentOwners", "must be a list", current)
    placeholder = status.get("placeholder")
    if placeholder is not None and not isinstance(placeholder, dict):
        raise f.bad("status.placeholder", "must be a mapping with namespace and name", placeholder)
    try:
        return {
            "phase": phase,
            "node_name": _str(status.get("nodeName")),
            "allocatable": resource_list(status.get("allocatable"), "status.allocatable"),
            "allocated": resource_list(status.get("allocated"), "status.allocated"),
            "current_owners": tuple(
                _ref(o, f"status.currentOwners[{i}]") for i, o in enumerate(current)
            ),
            "conditions": parse_conditions(status.get("conditions"), KIND, f.name),
            "placeholder": _placeholder(placeholder),
        }
    except InvalidObject:
        raise
    except ValueError as err:
        raise InvalidObject(f.kind, f.name, *_split(err)) from None


def _placeholder(raw: Mapping[str, Any] | None) -> str:
    if not raw or not raw.get("name"):
        return ""
    return f"{_str(raw.get('namespace')) or 'default'}/{_str(raw['name'])}"


def parse_reservation(raw: Mapping[str, Any]) -> Reservation:
    """Parse a Reservation dict; raises InvalidObject naming the field."""
    meta = raw.get("metadata") if isinstance(raw.get("metadata"), dict) else {}
    assert isinstance(meta, dict)
    name = _str(meta.get("name"))
    if not name:
        raise InvalidObject(KIND, "", "metadata.name", f"must be set, got {shown(meta.get('name'))}")
    f = Fields(KIND, name)
    spec = raw.get("spec")
    status = raw.get("status") or {}
    if not isinstance(spec, dict):
        raise f.bad("spec", "must be a mapping", spec)
    if not isinstance(status, dict):
        raise f.bad("status", "must be a mapping", status)
    template = _template(name, spec, f)
    owners = _owners(spec, f)
    ttl, expires = _expiry(spec, f)
    allocate_once = spec.get("allocateOnce", True)
    f.boolean(allocate_once, "spec.allocateOnce")
    observed = _status_fields(status, f)
    created = f.time(meta.get("creationTimestamp"), "metadata.creationTimestamp")
    return Reservation(
        name=name,
        uid=_str(meta.get("uid")) or name,
        creation_time=created,
        template=template,
        owners=owners,
        ttl=ttl,
        expires=expires,
        allocate_once=allocate_once,
        **observed,
    )
