"""ArbitrationArgs (the ``arbitration`` config section), in the order every engine's args
test follows: defaults; accepted values; each field's bad values; unknown keys; null; the
error format."""

from __future__ import annotations

from typing import Any

import pytest

from agent.cluster.arbitration import (
    ArbitrationArgs,
    default_workload_limit,
    resolve_workload_limit,
)
from agent.errors import InvalidObject


def test_defaults() -> None:
    args = ArbitrationArgs.from_config(None)
    assert args == ArbitrationArgs() == ArbitrationArgs.from_config({})
    assert (args.interval, args.process_queue_qps, args.job_select_ratio) == (60.0, 3.0, 1.2)
    assert args.max_migrating_per_node == 2
    assert args.max_migrating_per_namespace is None
    assert args.max_migrating_per_workload is None and args.max_unavailable_per_workload is None
    assert args.select_count == 216  # ceil(3 x 60 x 1.2), not 217 from float noise


@pytest.mark.parametrize(
    ("replicas", "limit"),
    [(0, 1), (1, 1), (3, 1), (4, 2), (10, 2), (11, 1), (19, 1), (20, 2), (25, 2), (100, 10)],
)
def test_default_workload_limit(replicas: int, limit: int) -> None:
    assert default_workload_limit(replicas) == limit


def test_accepted_values() -> None:
    def select_count(raw: dict[str, Any]) -> int:
        return ArbitrationArgs.from_config(raw).select_count

    assert select_count({"interval": 10, "processQueueQPS": 1, "jobSelectRatio": 1}) == 10
    assert select_count({"interval": 1, "processQueueQPS": 0.5, "jobSelectRatio": 1.5}) == 1
    args = ArbitrationArgs.from_config(
        {"maxMigratingPerWorkload": "20%", "maxUnavailablePerWorkload": 3}
    )
    assert resolve_workload_limit(args.max_migrating_per_workload, 12) == 2  # 20%, rounded down
    assert resolve_workload_limit(args.max_migrating_per_workload, 3) == 1  # never below 1
    assert resolve_workload_limit(args.max_unavailable_per_workload, 100) == 3


@pytest.mark.parametrize(
    ("raw", "field", "got"),
    [
        ({"interval": 0}, "interval", "got 0"),
        ({"interval": "60s"}, "interval", "got '60s'"),
        ({"interval": float("inf")}, "interval", "got .inf"),
        ({"processQueueQPS": -1}, "processQueueQPS", "got -1"),
        ({"jobSelectRatio": True}, "jobSelectRatio", "got true"),
        ({"maxMigratingPerNode": 0}, "maxMigratingPerNode", "got 0"),
        ({"maxMigratingPerNode": 1.5}, "maxMigratingPerNode", "got 1.5"),
        ({"maxMigratingPerNamespace": -3}, "maxMigratingPerNamespace", "got -3"),
        ({"maxMigratingPerWorkload": "150%"}, "maxMigratingPerWorkload", "got '150%'"),
        ({"maxUnavailablePerWorkload": "x%"}, "maxUnavailablePerWorkload", "got 'x%'"),
        ({"maxUnavailablePerWorkload": 0}, "maxUnavailablePerWorkload", "got 0"),
    ],
)
def test_bad_values_name_the_field(raw: dict[str, Any], field: str, got: str) -> None:
    """The value as the YAML it was written in: ``true``, ``.inf``, ``'60s'``."""
    with pytest.raises(InvalidObject) as err:
        ArbitrationArgs.from_config(raw)
    assert (err.value.kind, err.value.name, err.value.field) == ("config", "arbitration", field)
    assert str(err.value).endswith(got)


def test_validate_names_the_field_of_args_built_in_code() -> None:
    with pytest.raises(InvalidObject) as err:
        ArbitrationArgs(max_migrating_per_namespace=0).validate()
    assert err.value.field == "maxMigratingPerNamespace"


def test_unknown_keys_and_a_section_that_is_no_mapping_are_refused() -> None:
    with pytest.raises(InvalidObject, match="maxMigratingPerNod is not a known field") as err:
        ArbitrationArgs.from_config({"maxMigratingPerNod": 3})
    assert err.value.field == "maxMigratingPerNod"
    with pytest.raises(InvalidObject, match="must be a mapping"):
        ArbitrationArgs.from_config([3])  # type: ignore[arg-type]


def test_null_means_the_default_and_no_limit_for_limits() -> None:
    args = ArbitrationArgs.from_config(
        {"interval": None, "processQueueQPS": None, "jobSelectRatio": None}
    )
    assert args == ArbitrationArgs()
    limits = ArbitrationArgs.from_config(
        {"maxMigratingPerNode": None, "maxMigratingPerNamespace": None}
    )
    assert limits.max_migrating_per_node is None  # null is a value here: no limit
    assert limits.max_migrating_per_namespace is None


def test_error_format() -> None:
    with pytest.raises(InvalidObject) as err:
        ArbitrationArgs.from_config({"maxMigratingPerNode": 0})
    assert str(err.value) == "config arbitration: maxMigratingPerNode must be >= 1, got 0"
