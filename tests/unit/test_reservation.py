"""Reservation records: parsing, owner matching, phases over time, and held capacity."""

from __future__ import annotations

from typing import Any

import pytest

from agent.cluster.placement import holds_by_node
from agent.errors import InvalidObject
from agent.model.objects import Pod, parse_pod
from agent.model.reservation import (
    AVAILABLE,
    DEFAULT_TTL_SECONDS,
    EXPIRED,
    FAILED,
    PENDING,
    SUCCEEDED,
    parse_reservation,
)
from agent.model.timeutil import parse_time
from tests import builders

NOW = parse_time("2026-01-01T00:00:00Z") or 0.0


def raw(name: str = "r1", **spec: Any) -> dict[str, Any]:
    status = spec.pop("status", {})
    meta = spec.pop("metadata", {})
    body: dict[str, Any] = {
        "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {
                "containers": [
                    {"name": "m", "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}}
                ]
            },
        },
        "owners": [{"labelSelector": {"matchLabels": {"app": "web"}}}],
    }
    body.update(spec)
    return {
        "apiVersion": "qos.waterline.io/v1alpha1",
        "kind": "Reservation",
        "metadata": {"name": name, "creationTimestamp": "2025-12-31T23:00:00Z", **meta},
        "spec": body,
        "status": status,
    }


def pod(
    name: str = "web-0", ns: str = "default", labels: dict[str, str] | None = None, **owner: str
) -> Pod:
    return parse_pod(builders.pod(
        name, namespace=ns, node_name="", started=None, ready=None, labels=labels,
        owner_kind=owner.get("kind", "ReplicaSet"), owner_name=owner.get("ctl", "web-rs"),
        owner_uid=owner.get("ctl_uid", "rs-uid"), containers=[{"name": "m"}]))


def test_defaults() -> None:
    r = parse_reservation(raw())
    assert r.phase == PENDING
    assert r.allocate_once is True
    assert r.ttl == DEFAULT_TTL_SECONDS
    assert r.template is not None and r.template.requests == {"cpu": 2.0, "memory": 2.0**30}
    assert r.reserved() == {"cpu": 2.0, "memory": 2.0**30}


def test_full_status_is_read() -> None:
    r = parse_reservation(
        raw(
            status={
                "phase": "Available",
                "nodeName": "n1",
                "allocatable": {"cpu": "4"},
                "allocated": {"cpu": "1500m"},
                "currentOwners": [{"namespace": "default", "name": "web-0", "uid": "u0"}],
                "conditions": [{"type": "Ready", "status": "True", "reason": "Available"}],
            },
            allocateOnce=False,
        )
    )
    assert (r.phase, r.node_name) == (AVAILABLE, "n1")
    assert r.reserved() == {"cpu": 2.5}
    assert r.current_owners[0].uid == "u0"
    assert r.conditions[0].reason == "Available"


# -- owners ----------------------------------------------------------------------------------


def test_owner_by_object_uid_or_namespace_and_name() -> None:
    by_uid = parse_reservation(raw(owners=[{"object": {"uid": "uid-web-0"}}]))
    by_name = parse_reservation(raw(owners=[{"object": {"namespace": "default", "name": "web-0"}}]))
    assert by_uid.owns(pod("web-0")) and not by_uid.owns(pod("web-1"))
    assert by_name.owns(pod("web-0"))
    assert not by_name.owns(pod("web-0", ns="other"))


def test_owner_by_controller() -> None:
    by_uid = parse_reservation(raw(owners=[{"controller": {"uid": "rs-uid"}}]))
    by_name = parse_reservation(
        raw(
            owners=[
                {"controller": {"kind": "ReplicaSet", "name": "web-rs", "namespace": "default"}}
            ]
        )
    )
    assert by_uid.owns(pod()) and not by_uid.owns(pod(ctl_uid="other"))
    assert by_name.owns(pod())
    assert not by_name.owns(pod(kind="StatefulSet"))
    assert not by_name.owns(pod(ns="other"))


def test_owner_by_label_selector() -> None:
    r = parse_reservation(raw())
    assert r.owns(pod(labels={"app": "web"}))
    assert not r.owns(pod(labels={"app": "db"}))


def test_parts_of_one_owner_entry_are_anded_entries_are_ored() -> None:
    both = parse_reservation(
        raw(
            owners=[
                {"controller": {"uid": "rs-uid"}, "labelSelector": {"matchLabels": {"tier": "a"}}}
            ]
        )
    )
    assert both.owns(pod(labels={"tier": "a"}))
    assert not both.owns(pod(labels={"tier": "b"}))
    either = parse_reservation(
        raw(
            owners=[
                {"object": {"uid": "nobody"}},
                {"labelSelector": {"matchLabels": {"tier": "b"}}},
            ]
        )
    )
    assert either.owns(pod(labels={"tier": "b"}))


# -- phases over time --------------------------------------------------------------------------


def test_ttl_expiry() -> None:
    r = parse_reservation(raw(ttl="30m", status={"phase": "Available", "nodeName": "n1"}))
    created = parse_time("2025-12-31T23:00:00Z") or 0.0
    assert r.effective_phase(created + 29 * 60) == AVAILABLE
    assert r.effective_phase(created + 30 * 60) == EXPIRED
    assert not r.holds_capacity(created + 30 * 60)


def test_explicit_expires_and_ttl_zero() -> None:
    r = parse_reservation(
        raw(expires="2026-01-01T00:00:00Z", status={"phase": "Available", "nodeName": "n1"})
    )
    assert r.effective_phase(NOW - 1) == AVAILABLE and r.effective_phase(NOW) == EXPIRED
    never = parse_reservation(raw(ttl="0", status={"phase": "Available", "nodeName": "n1"}))
    assert never.effective_phase(NOW + 10 * 365 * 86400) == AVAILABLE


def test_default_ttl_is_a_day() -> None:
    r = parse_reservation(raw(status={"phase": "Available", "nodeName": "n1"}))
    created = parse_time("2025-12-31T23:00:00Z") or 0.0
    assert r.effective_phase(created + 86399) == AVAILABLE
    assert r.effective_phase(created + 86400) == EXPIRED


def test_allocate_once_with_an_owner_is_succeeded() -> None:
    used = {"phase": "Available", "nodeName": "n1", "currentOwners": [{"uid": "u0"}]}
    assert parse_reservation(raw(status=used)).effective_phase(NOW) == SUCCEEDED
    assert parse_reservation(raw(status=used, allocateOnce=False)).effective_phase(NOW) == AVAILABLE


def test_final_phases_stay() -> None:
    r = parse_reservation(raw(status={"phase": "Failed"}))
    assert r.effective_phase(NOW) == FAILED


def test_holds_by_node_only_from_available_bound_reservations() -> None:
    reservations = [
        parse_reservation(raw("avail", status={"phase": "Available", "nodeName": "n1"})),
        parse_reservation(raw("pending", status={"phase": "Pending"})),
        parse_reservation(raw("failed", status={"phase": "Failed", "nodeName": "n1"})),
        parse_reservation(
            raw("expired", ttl="1s", status={"phase": "Available", "nodeName": "n2"})
        ),
        parse_reservation(
            raw(
                "used",
                status={
                    "phase": "Available",
                    "nodeName": "n2",
                    "allocatable": {"cpu": "2"},
                    "allocated": {"cpu": "2"},
                },
                allocateOnce=False,
            )
        ),
    ]
    holds = holds_by_node(reservations, NOW)
    assert list(holds) == ["n1"]
    assert [h.reservation.name for h in holds["n1"]] == ["avail"]
    assert holds["n1"][0].remaining == {"cpu": 2.0, "memory": 2.0**30}


# -- validation ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"owners": []}, "spec.owners"),
        ({"owners": [{}]}, "spec.owners[0]"),
        ({"owners": [{"labelSelector": {}}]}, "spec.owners[0].labelSelector"),
        ({"owners": [{"object": {"namespace": "x"}}]}, "spec.owners[0].object"),
        ({"owners": [{"podSelector": {}}]}, "spec.owners[0].podSelector"),
        ({"ttl": "soon"}, "spec.ttl"),
        ({"ttl": "1h", "expires": "2026-01-01T00:00:00Z"}, "spec.ttl"),
        ({"allocateOnce": "yes"}, "spec.allocateOnce"),
        ({"template": None}, "spec.template"),
        ({"status": {"phase": "Running"}}, "status.phase"),
        ({"status": {"allocatable": {"cpu": "lots"}}}, "status.allocatable.cpu"),
    ],
)
def test_invalid_reservations_name_the_field(change: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidObject) as err:
        parse_reservation(raw("bad", **change))
    assert err.value.kind == "Reservation" and err.value.name == "bad"
    assert err.value.field == field


def test_bad_template_quantity_is_named() -> None:
    bad = raw(
        template={"spec": {"containers": [{"name": "m", "resources": {"requests": {"cpu": "x"}}}]}}
    )
    with pytest.raises(InvalidObject, match=r"spec\.template.*cpu"):
        parse_reservation(bad)
