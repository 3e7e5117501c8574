"""The one shape of a cluster engine (arbitration, defrag, queue and DaemonSet preemption).

As the descheduler's plugins do, every engine has:

* ``XArgs``: a frozen dataclass of snake_case fields with their defaults;
  ``XArgs.from_config(raw)`` reads the camelCase config section (unknown keys refused,
  naming them; null means the default) and ``validate()`` names the bad field, both through
  ``agent.model.fields`` so every refusal reads ``config <section>: <field> <problem>, got
  <value>``;
* ``plan(snapshot, args, now) -> XPlan``: pure, over the parsed ``ObjectStore``, always a
  plan object (empty when there is nothing to do);
* ``ENGINE``: an ``Engine`` naming the config section and whether the controller carries
  the plan out only when the section says ``enabled: true``.

The registry of engines is ``agent.cluster.registry.ENGINES``. Engines never import the
simulator or the scenario loader: ``waterline simulate`` renders their plans itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, Self, TypeVar

from agent.model.numbers import EPSILON as NUMBERS_EPSILON
from agent.model.store import ObjectStore

#: Slack for float comparisons of resource amounts in every engine (7.5 + 1.5 against 9.0;
#: 3 x 60 x 1.2 rounding up to 216, not 217): the model's one tolerance, relative to the
#: scale where amounts are large (``slack``).
EPSILON = NUMBERS_EPSILON


def slack(scale: float) -> float:
    """EPSILON relative to ``scale`` (never below EPSILON itself)."""
    return max(EPSILON, abs(scale) * EPSILON)


class EngineArgs(Protocol):
    @classmethod
    def from_config(cls, raw: Mapping[str, Any] | None) -> Self: ...

    def validate(self) -> Self: ...


ArgsT = TypeVar("ArgsT", bound=EngineArgs)
PlanT = TypeVar("PlanT")
PlanT_co = TypeVar("PlanT_co", covariant=True)


class ClusterEngine(Protocol[ArgsT, PlanT_co]):
    """What the controller and ``waterline simulate`` know of an engine."""

    @property
    def key(self) -> str:
        """The config section, the report key and the metrics label."""
        ...

    @property
    def switchable(self) -> bool:
        """True when the controller acts on the plan only with ``enabled: true``."""
        ...

    def parse_args(self, raw: Mapping[str, Any] | None) -> ArgsT: ...

    def plan(self, snapshot: ObjectStore, args: ArgsT, now: float) -> PlanT_co: ...


@dataclass(frozen=True, slots=True)
class Engine(Generic[ArgsT, PlanT]):
    """A ``ClusterEngine`` from its parts."""

    key: str
    args_type: type[ArgsT]
    planner: Callable[[ObjectStore, ArgsT, float], PlanT]
    switchable: bool = True

    def parse_args(self, raw: Mapping[str, Any] | None) -> ArgsT:
        return self.args_type.from_config(raw)

    def plan(self, snapshot: ObjectStore, args: ArgsT, now: float) -> PlanT:
        return self.planner(snapshot, args, now)


__all__ = ["EPSILON", "ClusterEngine", "Engine", "EngineArgs", "slack"]
