"""The one field reader: the error format, and the one duration parser with its two
readings (PodMigrationJob spec.ttl; Reservation spec.ttl and defrag coolDownTime)."""

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
    [("300s", 300), ("5m", 300), ("1h30m", 5400), ("1.5h", 5400), ("250ms", 0.25), (90, 90)],
)
def test_durations_read_alike_either_way(text: object, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)
    assert parse_duration(text, bare_numbers=True) == pytest.approx(seconds)


@pytest.mark.parametrize(("text", "seconds"), [("0", 0.0), ("90", 90.0), ("", 0.0)])
def test_bare_numbers_are_seconds_in_the_reservation_reading(text: str, seconds: float) -> None:
    assert parse_duration(text, bare_numbers=True) == seconds
    with pytest.raises(ValueError):  # a PodMigrationJob's ttl needs units (issue 11)
        parse_duration(text)


@pytest.mark.parametrize("text", ["-1", "1d", "h", "1h 30m", "-5m", True, None, -5, float("nan")])
def test_durations_refused_either_way(text: object) -> None:
    with pytest.raises(ValueError, match=", got "):
        parse_duration(text)
    with pytest.raises(ValueError, match=", got "):
        parse_duration(text, bare_numbers=True)


def test_infinity_only_in_the_reservation_reading() -> None:
    assert parse_duration(float("inf"), bare_numbers=True) == float("inf")
    with pytest.raises(ValueError):
        parse_duration(float("inf"))
