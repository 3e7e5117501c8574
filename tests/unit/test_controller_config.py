"""The controller's --config: one section per engine, ``enabled`` in the switchable ones,
every refusal in the one error format."""

from __future__ import annotations

import pytest

from agent.cluster import arbitration, daemonset, defrag, queues
from agent.cluster.config import ControllerConfig, parse_config
from agent.errors import InvalidObject


def test_absent_config_is_every_default_and_acts_only_on_arbitration() -> None:
    config = parse_config(None)
    assert config.args(arbitration.ENGINE) == arbitration.ArbitrationArgs()
    assert config.args(defrag.ENGINE) == defrag.DefragArgs()
    assert config.enabled == frozenset()
    assert config.acts_on(arbitration.ENGINE)
    assert not any(config.acts_on(e) for e in (defrag.ENGINE, queues.ENGINE, daemonset.ENGINE))
    assert parse_config({}) == config
    assert ControllerConfig().args(queues.ENGINE) == queues.QueueArgs()


def test_sections_reach_their_engine_and_enabled_is_taken_out() -> None:
    config = parse_config(
        {
            "arbitration": {"interval": 30},
            "defrag": {"enabled": True, "numberOfNodes": 2},
            "queues": {"enabled": False},
            "daemonset": {"enabled": None, "maxVictims": 5},
        }
    )
    assert config.args(arbitration.ENGINE).interval == 30
    assert config.args(defrag.ENGINE).number_of_nodes == 2
    assert config.args(daemonset.ENGINE).max_victims == 5
    assert config.enabled == frozenset({"defrag"})  # null: the default, off


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ([], "config: must be a mapping, got []"),
        (
            {"reservations": {}},
            "config: reservations is not a known field "
            "(known: arbitration, defrag, queues, daemonset, clusterEvictionBudget, migration), "
            "got {}",
        ),
        ({"queues": 3}, "config: queues must be a mapping, got 3"),
        (
            {"defrag": {"enabled": "yes-please"}},
            "config defrag: enabled must be true or false, got 'yes-please'",
        ),
        ({"arbitration": {"enabled": True}}, "config arbitration: enabled is not a known field"),
        ({"daemonset": {"maxVictims": 0}}, "config daemonset: maxVictims must be >= 1, got 0"),
    ],
)
def test_refusals_name_the_section_and_field(raw: object, message: str) -> None:
    with pytest.raises(InvalidObject) as err:
        parse_config(raw)
    assert str(err.value).startswith(message)
