"""The soak's RSS slope: least squares with its 95% interval (bench/soak.py)."""

from __future__ import annotations

import math

from bench.soak import slope


def test_a_straight_line_has_its_slope_and_no_width() -> None:
    xs = [0.0, 0.25, 0.5, 0.75, 1.0]
    b, half = slope(xs, [50 + 2 * x for x in xs])
    assert math.isclose(b, 2.0) and half < 1e-9


def test_flat_noise_has_an_interval_holding_zero() -> None:
    xs = [i / 60 for i in range(60)]
    ys = [50 + (0.3 if i % 2 else -0.3) for i in range(60)]
    b, half = slope(xs, ys)
    assert b - half <= 0 <= b + half


def test_growth_beyond_the_noise_is_an_interval_above_zero() -> None:
    xs = [i / 60 for i in range(60)]
    ys = [50 + 5 * x + (0.3 if i % 2 else -0.3) for i, x in enumerate(xs)]
    b, half = slope(xs, ys)
    assert b - half > 0


def test_too_few_samples_give_no_slope() -> None:
    assert all(math.isnan(v) for v in slope([0.0, 1.0], [1.0, 2.0]))
