"""Exponential backoff with jitter, so that 5,000 agents do not retry in step."""

from __future__ import annotations

import random
from dataclasses import dataclass

from agent.errors import InvalidObject


@dataclass(frozen=True, slots=True)
class BackoffArgs:
    initial: float = 1.0
    maximum: float = 60.0
    factor: float = 2.0
    #: Each delay is drawn uniformly from [d * (1 - jitter), d * (1 + jitter)], capped at maximum.
    jitter: float = 0.5

    def validate(self) -> BackoffArgs:
        if self.initial <= 0:
            raise InvalidObject("BackoffArgs", "", "initial", f"must be > 0, got {self.initial}")
        if self.maximum < self.initial:
            raise InvalidObject(
                "BackoffArgs", "", "maximum", f"must be >= initial, got {self.maximum}"
            )
        if self.factor < 1:
            raise InvalidObject("BackoffArgs", "", "factor", f"must be >= 1, got {self.factor}")
        if not 0 <= self.jitter < 1:
            raise InvalidObject(
                "BackoffArgs", "", "jitter", f"must be in [0, 1), got {self.jitter}"
            )
        return self


class Backoff:
    def __init__(self, args: BackoffArgs | None = None, rng: random.Random | None = None) -> None:
        self.args = (args or BackoffArgs()).validate()
        self.rng = rng or random.Random()
        self.attempts = 0

    def next(self) -> float:
        """The delay before the next retry; grows until ``reset``."""
        a = self.args
        base = min(a.maximum, a.initial * a.factor**self.attempts)
        self.attempts += 1
        return min(a.maximum, base * (1 + self.rng.uniform(-a.jitter, a.jitter)))

    def reset(self) -> None:
        self.attempts = 0
