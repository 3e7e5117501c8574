"""DaemonSetArgs: the ``daemonset`` config section, its defaults and validation."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent.model.fields import Fields, config_values

KEY = "daemonset"
_CONFIG = Fields("config", KEY)
#: camelCase config key -> field.
CONFIG_KEYS = {
    "preemptionStartDelay": "preemption_start_delay",
    "strategy": "strategy",
    "deviationPercent": "deviation_percent",
    "maxVictims": "max_victims",
}
SINGLE = "single"
MULTIPLE = "multiple"
STRATEGIES = (SINGLE, MULTIPLE)


@dataclass(frozen=True, slots=True)
class DaemonSetArgs:
    """Durations in seconds."""

    preemption_start_delay: float = 30.0
    #: Strategies tried in order; the first that finds victims wins.
    strategy: tuple[str, ...] = (SINGLE, MULTIPLE)
    deviation_percent: float = 10.0
    max_victims: int = 3

    @classmethod
    def from_config(cls, raw: Mapping[str, Any] | None) -> DaemonSetArgs:
        """A single strategy name reads as a list of one."""
        values = config_values(KEY, raw, CONFIG_KEYS)
        if "strategy" in values:
            strategy = values["strategy"]
            if isinstance(strategy, str):
                strategy = [strategy]
            if not isinstance(strategy, (list, tuple)):
                raise _CONFIG.bad("strategy", f"must be a list of {', '.join(STRATEGIES)}", strategy)
            values["strategy"] = tuple(strategy)
        return cls(**values).validate()

    def validate(self) -> DaemonSetArgs:
        _CONFIG.number(self.preemption_start_delay, "preemptionStartDelay", minimum=0)
        _check_strategy(self.strategy)
        _CONFIG.number(self.deviation_percent, "deviationPercent", minimum=0)
        _CONFIG.integer(self.max_victims, "maxVictims", minimum=1)
        return self


def _check_strategy(strategy: object) -> None:
    if not isinstance(strategy, tuple) or not strategy:
        raise _CONFIG.bad("strategy", f"must list at least one of {', '.join(STRATEGIES)}", strategy)
    for i, name in enumerate(strategy):
        _CONFIG.choice(name, f"strategy[{i}]", STRATEGIES)
        if name in strategy[:i]:
            raise _CONFIG.bad(f"strategy[{i}]", "must not repeat a strategy", name)
