"""bench.verdicts: a goal judged on a few runs' range (decision, collectors, cluster,
soak --rss): a missing figure is never a pass."""

from __future__ import annotations

import math

from bench.verdicts import every_run


def test_every_run_within_meets_every_run_beyond_fails_both_undecided() -> None:
    assert every_run([2.9, 3.0], 5.0) == "meets"
    assert every_run([5.1, 6.0], 5.0) == "fails"
    assert every_run([4.9, 5.1], 5.0) == "undecided"


def test_a_goal_under_a_line_is_not_met_on_the_line() -> None:
    assert every_run([80.0], 80.0) == "meets"
    assert every_run([80.0], 80.0, below=True) == "fails"  # "peak RSS < 80 MiB"


def test_a_run_that_measured_nothing_leaves_it_undecided() -> None:
    assert every_run([62.9, math.nan, 63.1], 80.0, below=True) == "undecided"  # an agent with no stop line
    assert every_run([], 80.0) == "undecided"
