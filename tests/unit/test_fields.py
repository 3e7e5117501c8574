"""The one field reader: the error format, and the one duration parser with its one
reading (PodMigrationJob and Reservation spec.ttl, defrag coolDownTime)."""

from __future__ import annotations

import pytest

from agent.errors import InvalidObject
from agent.model.fields import Fields, config_values, parse_duration


def test_every_refusal_names_kind_name_field_and_value() -> None:
    f = Fields("PodMigrationJob", "j-1").child("spec")
    with pytest.raises(InvalidObject) as err:
        f.integer("high", "priority")
    assert str(err.value) == "PodMigrationJob j-1: spec.priority must be an integer, got 'high'"
    assert (err.value.kind, err.value.name, err.value.field) == ("PodMigrationJob", "j-1", "spec.priority")


def test_config_values_map_keys_refuse_unknown_ones_and_read_null_as_the_default() -> None:
    keys = {"maxVictims": "max_victims", "limit": "limit"}
    assert config_values("s", {"maxVictims": 3, "limit": None}, keys) == {"max_victims": 3}
    assert config_values("s", {"limit": None}, keys, nullable=("limit",)) == {"limit": None}
    with pytest.raises(InvalidObject) as err:
        config_values("s", {"maxVictim": 3}, keys)
    assert str(err.value) == (
        "config s: maxVictim is not a known field (known: maxVictims, limit), got 3"
    )


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("300s", 300),
        ("5m", 300),
        ("1h30m", 5400),
        ("1.5h", 5400),
        ("250ms", 0.25),
        (90, 90),
        ("90", 90),
        ("0", 0),
        (0, 0),
        ("1.5", 1.5),
    ],
)
def test_one_reading_for_every_duration(text: object, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "text",
    ["", " ", "-1", "1d", "h", "1h 30m", "-5m", "inf", "nan", True, None, -5, float("nan"), float("inf")],
)
def test_durations_refused(text: object) -> None:
    with pytest.raises(ValueError, match=", got "):
        parse_duration(text)


@pytest.mark.parametrize("kind", ["PodMigrationJob", "Reservation"])
def test_ttl_zero_reads_the_same_for_every_kind(kind: str) -> None:
    """Issue 11: a PodMigrationJob's ``ttl: "0"`` was refused while a Reservation's was
    accepted; both now mean "never expires"."""
    from agent.model.migration import parse_pod_migration_job
    from agent.model.reservation import parse_reservation

    if kind == "PodMigrationJob":
        job = parse_pod_migration_job(
            {"metadata": {"name": "j"}, "spec": {"podRef": {"namespace": "d", "name": "p"}, "ttl": "0"}}
        )
        assert job.ttl_seconds == 0.0
    else:
        res = parse_reservation(
            {
                "metadata": {"name": "r"},
                "spec": {
                    "template": {"spec": {"containers": []}},
                    "owners": [{"object": {"namespace": "d", "name": "p"}}],
                    "ttl": "0",
                },
            }
        )
        assert res.ttl is None and res.expiry() is None


def test_a_time_reads_rfc_3339_reads_null_as_unset_and_refuses_anything_else() -> None:
    f = Fields("Reservation", "r-1")
    assert f.time("2026-01-01T00:00:10Z", "spec.expires") == 1_767_225_610.0
    assert f.time(None, "spec.expires") is None
    with pytest.raises(InvalidObject) as err:
        f.time("tomorrow", "spec.expires")
    assert str(err.value) == "Reservation r-1: spec.expires must be an RFC 3339 time, got 'tomorrow'"
