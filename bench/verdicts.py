"""The verdict of a goal measured in a few independent runs, when there are too few runs
for a bootstrap interval (the co-location benchmark's intervals: bench.colocation_stats).

The runs' range is the interval: every run within the goal **meets**, every run beyond it
**fails**, runs on both sides leave it **undecided**. A run that measured nothing (NaN)
leaves it undecided too: a missing figure is not a pass."""

from __future__ import annotations

import math
from collections.abc import Sequence

MEETS, FAILS, UNDECIDED = "meets", "fails", "undecided"


def every_run(values: Sequence[float], goal: float, *, below: bool = False) -> str:
    """``values`` at most ``goal`` (``below``: strictly under it, for a "< goal" goal)."""
    if not values or any(math.isnan(v) for v in values):
        return UNDECIDED
    within = (lambda v: v < goal) if below else (lambda v: v <= goal)
    if all(within(v) for v in values):
        return MEETS
    return FAILS if not any(within(v) for v in values) else UNDECIDED
