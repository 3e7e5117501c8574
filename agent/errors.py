"""The project's error types.

Every error about input names the object and the field, so an operator can find the
offending line: ``NodeQOSEnsurancePolicy cpu-guard: objectiveEnsurances[0].avoidanceThreshold
must be >= 1, got 0``.
"""

from __future__ import annotations


class WaterlineError(Exception):
    """Base of every error Waterline raises on purpose."""


class InvalidObject(WaterlineError, ValueError):
    """An object (policy, action, config, scenario, manifest) failed validation."""

    def __init__(self, kind: str, name: str, field: str, message: str) -> None:
        self.kind = kind
        self.name = name
        self.field = field
        self.message = message
        where = f"{kind} {name}" if name else kind
        super().__init__(f"{where}: {field} {message}" if field else f"{where}: {message}")
