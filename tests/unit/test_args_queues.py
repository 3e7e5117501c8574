"""QueueArgs (the ``queues`` config section), in the order every engine's args test
follows: defaults; accepted values; each field's bad values; unknown keys; null; the error
format."""

from __future__ import annotations

from typing import Any

import pytest

from agent.cluster.queues import QueueArgs
from agent.errors import InvalidObject


def test_defaults() -> None:
    args = QueueArgs.from_config(None)
    assert args == QueueArgs() == QueueArgs.from_config({})
    assert (args.exact_search_classes, args.search_steps) == (16, 200_000)


def test_accepted_values() -> None:
    assert QueueArgs.from_config({"searchSteps": 10}).search_steps == 10
    assert QueueArgs.from_config({"exactSearchClasses": 0}).exact_search_classes == 0  # greedy only


@pytest.mark.parametrize(
    ("raw", "field", "got"),
    [
        ({"exactSearchClasses": 1.5}, "exactSearchClasses", "got 1.5"),
        ({"exactSearchClasses": -1}, "exactSearchClasses", "got -1"),
        ({"exactSearchClasses": True}, "exactSearchClasses", "got true"),
        ({"searchSteps": -1}, "searchSteps", "got -1"),
        ({"searchSteps": "many"}, "searchSteps", "got 'many'"),
    ],
)
def test_bad_values_name_the_field(raw: dict[str, Any], field: str, got: str) -> None:
    """The value as the YAML it was written in: ``true``, ``.inf``, ``'60s'``."""
    with pytest.raises(InvalidObject) as err:
        QueueArgs.from_config(raw)
    assert (err.value.kind, err.value.name, err.value.field) == ("config", "queues", field)
    assert str(err.value).endswith(got)


def test_validate_names_the_field_of_args_built_in_code() -> None:
    with pytest.raises(InvalidObject) as err:
        QueueArgs(search_steps=-5).validate()
    assert err.value.field == "searchSteps"


def test_unknown_keys_and_a_section_that_is_no_mapping_are_refused() -> None:
    with pytest.raises(InvalidObject, match="searchStep is not a known field") as err:
        QueueArgs.from_config({"searchStep": 10})
    assert err.value.field == "searchStep"
    with pytest.raises(InvalidObject, match="must be a mapping"):
        QueueArgs.from_config(10)  # type: ignore[arg-type]


def test_null_means_the_default() -> None:
    assert QueueArgs.from_config({"exactSearchClasses": None, "searchSteps": None}) == QueueArgs()


def test_error_format() -> None:
    with pytest.raises(InvalidObject) as err:
        QueueArgs.from_config({"exactSearchClasses": 1.5})
    assert str(err.value) == "config queues: exactSearchClasses must be an integer, got 1.5"
