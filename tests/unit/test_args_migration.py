"""MigrationArgs (the ``migration`` config section: the placeholder image), in the order
every engine's args test follows: defaults; accepted values; each field's bad values;
unknown keys; null; the error format."""

from __future__ import annotations

from typing import Any

import pytest

from agent.cluster.config import parse_config
from agent.cluster.migrator.args import MigrationArgs
from agent.errors import InvalidObject


def test_defaults() -> None:
    args = MigrationArgs.from_config(None)
    assert args == MigrationArgs() == MigrationArgs.from_config({})
    assert args.placeholder_image == "registry.k8s.io/pause:3.10"
    assert parse_config({}).migration == args


def test_accepted_values() -> None:
    mirror = "registry.internal:5000/mirror/pause:3.10"
    assert MigrationArgs.from_config({"placeholderImage": mirror}).placeholder_image == mirror
    pinned = "registry.k8s.io/pause@sha256:" + "a" * 64
    assert MigrationArgs.from_config({"placeholderImage": pinned}).placeholder_image == pinned
    assert parse_config({"migration": {"placeholderImage": mirror}}).migration.placeholder_image == mirror


@pytest.mark.parametrize(
    "image", ["", "pause 3.10", "https://registry.k8s.io/pause:3.10", 3, ["pause"]]
)
def test_bad_values_name_the_field(image: Any) -> None:
    with pytest.raises(InvalidObject) as err:
        MigrationArgs.from_config({"placeholderImage": image})
    assert (err.value.kind, err.value.name, err.value.field) == ("config", "migration", "placeholderImage")
    assert ", got " in str(err.value)


def test_validate_names_the_field_of_args_built_in_code() -> None:
    with pytest.raises(InvalidObject) as err:
        MigrationArgs(placeholder_image="not an image").validate()
    assert err.value.field == "placeholderImage"


def test_unknown_keys_and_a_section_that_is_no_mapping_are_refused() -> None:
    with pytest.raises(InvalidObject, match="image is not a known field") as err:
        MigrationArgs.from_config({"image": "pause"})
    assert err.value.field == "image"
    with pytest.raises(InvalidObject, match="must be a mapping"):
        parse_config({"migration": 5})


def test_null_means_the_default() -> None:
    assert MigrationArgs.from_config({"placeholderImage": None}) == MigrationArgs()


def test_error_format() -> None:
    with pytest.raises(InvalidObject) as err:
        MigrationArgs.from_config({"placeholderImage": ""})
    assert str(err.value) == (
        "config migration: placeholderImage must be an image reference like "
        "registry.k8s.io/pause:3.10, got ''"
    )
