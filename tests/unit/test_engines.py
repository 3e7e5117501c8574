"""Every cluster engine has the one shape, and both the controller and `waterline simulate`
know what to do with each plan (a new engine without either fails here)."""

from __future__ import annotations

import dataclasses
from unittest import mock

import pytest

from agent.cluster.acting import PlanActs
from agent.cluster.engine import ClusterEngine
from agent.cluster.registry import ENGINES, engine
from agent.model.store import ObjectStore
from agent.simulate.sections import REPORTS, SECTIONS


def test_keys_are_unique_and_in_report_order() -> None:
    keys = [e.key for e in ENGINES]
    assert keys == ["arbitration", "defrag", "queues", "daemonset"]
    assert [s.key for s in SECTIONS] == ["nodes", *keys]
    assert engine("queues") is ENGINES[2]
    with pytest.raises(KeyError):
        engine("nope")


@pytest.mark.parametrize("eng", ENGINES, ids=lambda e: e.key)
def test_args_have_defaults_and_read_an_absent_section_as_them(eng: ClusterEngine) -> None:
    args = eng.parse_args(None)
    assert dataclasses.is_dataclass(args) and type(args).__dataclass_params__.frozen  # type: ignore[attr-defined]
    assert args == type(args)() == args.validate()
    assert all(f.name == f.name.lower() for f in dataclasses.fields(args))  # snake_case


@pytest.mark.parametrize("eng", ENGINES, ids=lambda e: e.key)
def test_plan_of_an_empty_cluster_is_an_empty_plan(eng: ClusterEngine) -> None:
    plan = eng.plan(ObjectStore(), eng.parse_args(None), 0.0)
    assert plan is not None and dataclasses.is_dataclass(plan)
    assert type(plan).__dataclass_params__.frozen  # type: ignore[attr-defined]


def test_every_engine_has_a_report_section_and_a_controller_act() -> None:
    keys = {e.key for e in ENGINES}
    assert set(REPORTS) == keys
    acts = PlanActs(mock.Mock(), mock.Mock(), mock.Mock(), lambda passed: 0).table()
    assert set(acts) == keys


def test_only_switchable_engines_wait_for_enabled() -> None:
    assert {e.key for e in ENGINES if not e.switchable} == {"arbitration"}
