"""QueueArgs: the ``queues`` config section (bounds of the victim search), its defaults and
validation."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent.model.fields import Fields, config_values

KEY = "queues"
_CONFIG = Fields("config", KEY)
#: camelCase config key -> field.
CONFIG_KEYS = {"exactSearchClasses": "exact_search_classes", "searchSteps": "search_steps"}


@dataclass(frozen=True, slots=True)
class QueueArgs:
    """Bounds of the victim search on one node, for one pending pod (``reclaim``)."""

    #: The exact search looks at the first this-many candidates of the node, in victim
    #: order (the name is older than the per-node search: it counted classes of
    #: interchangeable pods cluster-wide).
    exact_search_classes: int = 16
    #: Sets the exact searches of one plan try in all; past them, the greedy walk's
    #: answers are kept (and the plan says it is not exact).
    search_steps: int = 200_000

    @classmethod
    def from_config(cls, raw: Mapping[str, Any] | None) -> QueueArgs:
        return cls(**config_values(KEY, raw, CONFIG_KEYS)).validate()

    def validate(self) -> QueueArgs:
        _CONFIG.integer(self.exact_search_classes, "exactSearchClasses", minimum=0)
        _CONFIG.integer(self.search_steps, "searchSteps", minimum=0)
        return self
