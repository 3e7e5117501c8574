"""The controller's ``--config``: one section per engine of ``agent.cluster.registry``, in
the shape of a scenario's ``config`` (SIMULATE.md), plus ``enabled`` in the sections of the
switchable engines (defrag, queues, daemonset): off by default, so a new install only
reports what it would do; ``clusterEvictionBudget`` (``perMinute``, default 100;
``nodesPercent``, default 10), the cluster brake's budget (``agent/cluster/brake.py``); and
``migration`` (``agent.cluster.migrator.args``: the placeholder image).

Every refusal reads ``config <section>: <field> <problem>, got <value>`` (the section's own
fields are refused by its engine's ``XArgs``, in the same format).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from agent.cluster.brake import SECTION as BRAKE_SECTION
from agent.cluster.brake import BrakeBudget
from agent.cluster.engine import ClusterEngine, EngineArgs
from agent.cluster.migrator.args import KEY as MIGRATION_KEY
from agent.cluster.migrator.args import MigrationArgs
from agent.cluster.registry import ENGINES
from agent.model.fields import Fields

A = TypeVar("A", bound=EngineArgs)


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    #: Engine key -> its validated args; engines not given have their defaults.
    engine_args: Mapping[str, Any] = field(default_factory=dict)
    #: Keys of the switchable engines whose plans the controller carries out.
    enabled: frozenset[str] = frozenset()
    #: The cluster brake's budget.
    brake: BrakeBudget = field(default_factory=BrakeBudget)
    #: The ``migration`` section: how reservations are made real.
    migration: MigrationArgs = field(default_factory=MigrationArgs)

    def args(self, engine: ClusterEngine[A, Any]) -> A:
        if engine.key in self.engine_args:
            args: A = self.engine_args[engine.key]
            return args
        return engine.parse_args(None)

    def with_args(self, engine: ClusterEngine[A, Any], args: A) -> ControllerConfig:
        return replace(self, engine_args={**self.engine_args, engine.key: args})

    def acts_on(self, engine: ClusterEngine[Any, Any]) -> bool:
        """Whether the controller carries the engine's plan out (not only logs it)."""
        return not engine.switchable or engine.key in self.enabled


def parse_config(raw: object) -> ControllerConfig:
    """Parse the config mapping (None: every default); InvalidObject names the field."""
    top = Fields("config")
    sections = top.mapping(raw)
    top.only(sections, [*(e.key for e in ENGINES), BRAKE_SECTION, MIGRATION_KEY])
    engine_args: dict[str, Any] = {}
    enabled: set[str] = set()
    for engine in ENGINES:
        section = dict(top.mapping(sections.get(engine.key), engine.key))
        if engine.switchable:
            flag = section.pop("enabled", None)
            if flag is not None and Fields("config", engine.key).boolean(flag, "enabled"):
                enabled.add(engine.key)
        engine_args[engine.key] = engine.parse_args(section)
    budget = BrakeBudget.from_config(top.mapping(sections.get(BRAKE_SECTION), BRAKE_SECTION))
    migration_args = MigrationArgs.from_config(sections.get(MIGRATION_KEY))
    return ControllerConfig(engine_args, frozenset(enabled), budget, migration_args)
