"""The generator's arguments, validated before a byte is written."""

from __future__ import annotations

from dataclasses import dataclass

from agent.errors import InvalidObject
from agent.model.timeutil import parse_time


@dataclass(frozen=True, slots=True)
class GenerateArgs:
    nodes: int = 5000
    pods: int = 150_000
    jobs: int = 10_000
    queues: int = 100
    seed: int = 1
    now: str = "2026-01-01T00:00:00Z"

    def validate(self) -> GenerateArgs:
        for name in ("nodes", "pods", "jobs", "queues", "seed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise InvalidObject("generate", "", name, f"must be an integer, got {value!r}")
            if value < (1 if name == "nodes" else 0):
                raise InvalidObject(
                    "generate", "", name, f"must be >= {1 if name == 'nodes' else 0}, got {value}"
                )
        try:
            parse_time(self.now)
        except ValueError as err:
            raise InvalidObject("generate", "", "now", str(err)) from None
        return self
