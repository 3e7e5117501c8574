"""DaemonSetArgs (the ``daemonset`` config section), in the order every engine's args test
follows: defaults; accepted values; each field's bad values; unknown keys; null; the error
format."""

from __future__ import annotations

from typing import Any

import pytest

from agent.cluster.daemonset import DaemonSetArgs
from agent.errors import InvalidObject


def test_defaults() -> None:
    args = DaemonSetArgs.from_config(None)
    assert args == DaemonSetArgs() == DaemonSetArgs.from_config({})
    assert args == DaemonSetArgs(30.0, ("single", "multiple"), 10.0, 3)  # as SIMULATE.md


def test_accepted_values() -> None:
    assert DaemonSetArgs.from_config({"strategy": "multiple"}).strategy == ("multiple",)
    assert DaemonSetArgs.from_config({"strategy": ["multiple", "single"]}).strategy == (
        "multiple",
        "single",
    )
    assert DaemonSetArgs.from_config({"preemptionStartDelay": 0}).preemption_start_delay == 0


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"preemptionStartDelay": -5}, "preemptionStartDelay"),
        ({"preemptionStartDelay": "30s"}, "preemptionStartDelay"),
        ({"strategy": []}, "strategy"),
        ({"strategy": {"single": 1}}, "strategy"),
        ({"strategy": ["single", "smart"]}, "strategy[1]"),
        ({"strategy": ["single", "single"]}, "strategy[1]"),
        ({"deviationPercent": -1}, "deviationPercent"),
        ({"deviationPercent": "10%"}, "deviationPercent"),
        ({"maxVictims": 0}, "maxVictims"),
        ({"maxVictims": 2.5}, "maxVictims"),
        ({"maxVictims": True}, "maxVictims"),
    ],
)
def test_bad_values_name_the_field(raw: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidObject) as err:
        DaemonSetArgs.from_config(raw)
    assert (err.value.kind, err.value.name, err.value.field) == ("config", "daemonset", field)
    assert ", got " in str(err.value)


def test_validate_names_the_field_of_args_built_in_code() -> None:
    with pytest.raises(InvalidObject) as err:
        DaemonSetArgs(strategy=("single", "greedy")).validate()
    assert err.value.field == "strategy[1]"


def test_unknown_keys_and_a_section_that_is_no_mapping_are_refused() -> None:
    with pytest.raises(InvalidObject, match="maxVictim is not a known field") as err:
        DaemonSetArgs.from_config({"maxVictim": 3})
    assert err.value.field == "maxVictim"
    with pytest.raises(InvalidObject, match="must be a mapping"):
        DaemonSetArgs.from_config(["single"])  # type: ignore[arg-type]


def test_null_means_the_default() -> None:
    keys = ("preemptionStartDelay", "strategy", "deviationPercent", "maxVictims")
    assert DaemonSetArgs.from_config(dict.fromkeys(keys)) == DaemonSetArgs()


def test_error_format() -> None:
    with pytest.raises(InvalidObject) as err:
        DaemonSetArgs.from_config({"maxVictims": 0})
    assert str(err.value) == "config daemonset: maxVictims must be >= 1, got 0"
