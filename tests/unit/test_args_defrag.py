"""DefragArgs (the ``defrag`` config section), in the order every engine's args test
follows: defaults; accepted values; each field's bad values; unknown keys; null; the error
format."""

from __future__ import annotations

from typing import Any

import pytest

from agent.cluster.defrag import DefragArgs
from agent.errors import InvalidObject


def test_defaults() -> None:
    args = DefragArgs.from_config(None)
    assert args == DefragArgs() == DefragArgs.from_config({})
    assert (
        args.resource_type,
        args.low_threshold,
        args.defragment_threshold,
        args.protection_threshold,
    ) == ("cpu", 30, 70, 90)  # as SIMULATE.md
    assert args.number_of_nodes == 0 and args.cool_down_seconds == 0
    assert not args.namespace_allowed("kube-system") and args.namespace_allowed("default")


def test_accepted_values() -> None:
    assert DefragArgs.from_config({"resourceType": "nvidia.com/gpu"}).resource_type == "nvidia.com/gpu"
    assert DefragArgs.from_config({"resourceType": "memory"}).resource_type == "memory"
    assert DefragArgs.from_config({"coolDownTime": "10m"}).cool_down_seconds == 600
    assert DefragArgs.from_config({"coolDownTime": "90"}).cool_down_seconds == 90  # seconds
    inc = DefragArgs.from_config({"evictableNamespaces": {"include": ["batch"]}})
    assert inc.namespace_allowed("batch") and not inc.namespace_allowed("default")
    exc = DefragArgs.from_config({"evictableNamespaces": {"exclude": ["prod"]}})
    assert not exc.namespace_allowed("prod") and exc.namespace_allowed("kube-system")
    everything = DefragArgs.from_config({"evictableNamespaces": {}})
    assert everything.namespace_allowed("kube-system")


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"resourceType": "gpu"}, "resourceType"),
        ({"resourceType": "pods"}, "resourceType"),
        ({"resourceType": 3}, "resourceType"),
        ({"lowThresholds": -1}, "lowThresholds"),
        ({"lowThresholds": "30"}, "lowThresholds"),
        ({"lowThresholds": 80}, "lowThresholds"),  # above defragmentThresholds
        ({"defragmentThresholds": 95}, "defragmentThresholds"),  # not below protection
        ({"protectionThresholds": 101}, "protectionThresholds"),
        ({"numberOfNodes": -1}, "numberOfNodes"),
        ({"numberOfNodes": 1.5}, "numberOfNodes"),
        ({"coolDownTime": -5}, "coolDownTime"),
        ({"coolDownTime": "later"}, "coolDownTime"),
        ({"evictableNamespaces": {"include": ["a"], "exclude": ["b"]}}, "evictableNamespaces"),
        ({"evictableNamespaces": ["a"]}, "evictableNamespaces"),
        ({"evictableNamespaces": {"include": "a"}}, "evictableNamespaces.include"),
        ({"evictableNamespaces": {"exclude": [""]}}, "evictableNamespaces.exclude"),
    ],
)
def test_bad_values_name_the_field(raw: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidObject) as err:
        DefragArgs.from_config(raw)
    assert (err.value.kind, err.value.name, err.value.field) == ("config", "defrag", field)
    assert ", got " in str(err.value)


def test_validate_names_the_field_of_args_built_in_code() -> None:
    with pytest.raises(InvalidObject) as err:
        DefragArgs(protection_threshold=150).validate()
    assert err.value.field == "protectionThresholds"


def test_unknown_keys_and_a_section_that_is_no_mapping_are_refused() -> None:
    with pytest.raises(InvalidObject, match="lowThreshold is not a known field") as err:
        DefragArgs.from_config({"lowThreshold": 30})
    assert err.value.field == "lowThreshold"
    with pytest.raises(InvalidObject) as err:
        DefragArgs.from_config({"evictableNamespaces": {"only": ["a"]}})
    assert err.value.field == "evictableNamespaces.only"
    with pytest.raises(InvalidObject, match="must be a mapping"):
        DefragArgs.from_config("cpu")  # type: ignore[arg-type]


def test_null_means_the_default() -> None:
    keys = ("resourceType", "lowThresholds", "defragmentThresholds", "protectionThresholds")
    keys += ("numberOfNodes", "coolDownTime", "evictableNamespaces")
    assert DefragArgs.from_config(dict.fromkeys(keys)) == DefragArgs()
    with pytest.raises(InvalidObject) as err:  # inside evictableNamespaces, null is no list
        DefragArgs.from_config({"evictableNamespaces": {"include": None}})
    assert err.value.field == "evictableNamespaces.include"


def test_error_format() -> None:
    with pytest.raises(InvalidObject) as err:
        DefragArgs.from_config({"numberOfNodes": -1})
    assert str(err.value) == "config defrag: numberOfNodes must be >= 0, got -1"
