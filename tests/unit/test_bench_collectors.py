"""The collectors bench's verdict on the ratio to a bare read (bench/collectors.py)."""

from __future__ import annotations

from bench.collectors import verdict


def test_every_round_within_the_goal_meets() -> None:
    assert verdict([1.21, 1.3, 1.18]) == "meets"


def test_every_round_above_the_goal_fails() -> None:
    assert verdict([1.31, 1.5, 1.45]) == "fails"


def test_rounds_on_both_sides_are_undecided() -> None:
    assert verdict([1.25, 1.35]) == "undecided"
