"""The co-location benchmark's statistics: nearest-rank percentiles on pooled rounds, the
tail they need, the block bootstrap's intervals and the three verdicts."""

from __future__ import annotations

import math

import pytest

from bench.colocation_stats import (
    FAILS,
    MEETS,
    MIN_ROUNDS,
    UNDECIDED,
    Interval,
    Verdict,
    beyond,
    bootstrap,
    combine,
    judge,
    nearest_rank,
    quantile,
    quantile_ratio,
    share,
    thin_tail,
)


def test_nearest_rank_returns_a_sample_at_rank_ceil_q_n() -> None:
    values = [float(v) for v in range(1, 101)]  # 1..100
    assert nearest_rank(values, 0.5) == 50.0
    assert nearest_rank(values, 0.99) == 99.0
    assert nearest_rank(values, 0.999) == 100.0
    assert nearest_rank(values, 1.0) == 100.0
    assert nearest_rank([7.0], 0.5) == 7.0
    assert math.isnan(nearest_rank([], 0.5))
    with pytest.raises(ValueError, match="in \\(0, 1\\]"):
        nearest_rank(values, 0.0)


def test_beyond_counts_the_requests_past_the_percentile() -> None:
    assert beyond(100_000, 0.999) == 100
    assert beyond(99_999, 0.999) == 99
    assert beyond(10_000, 0.99) == 100
    assert beyond(0, 0.99) == 0
    assert thin_tail([100_000, 120_000], 0.999) is None
    assert thin_tail([100_000, 50_000], 0.999) == "50 requests beyond the p99.9 < 100"


def test_the_bootstrap_of_identical_rounds_is_a_point_and_is_seeded() -> None:
    rounds = [[1.0, 2.0, 3.0, 4.0]] * 12
    got = quantile(rounds, 0.5)
    assert (got.value, got.low, got.high, got.rounds) == (2.0, 2.0, 2.0, 12)
    spread = [[float(r)] for r in range(12)]
    a, b = quantile(spread, 0.5), quantile(spread, 0.5)
    assert a == b and a.low < a.value < a.high


def test_the_ratio_keeps_each_round_with_its_own_baseline() -> None:
    """Each round's window is twice its baseline, while the baselines differ tenfold
    between rounds: paired resampling keeps the ratio at exactly 2."""
    base = [[float(10 ** (r % 2)) * (1 + i / 1000) for i in range(1000)] for r in range(10)]
    window = [[2 * v for v in b] for b in base]
    got = quantile_ratio(window, base, 0.99)
    assert got.low == pytest.approx(2.0) and got.high == pytest.approx(2.0)
    with pytest.raises(ValueError, match="paired rounds"):
        quantile_ratio(window, base[:3], 0.99)


def test_share_is_a_ratio_of_sums_in_percent() -> None:
    got = share([1.0, 3.0], [2.0, 2.0])
    assert got.value == pytest.approx(100.0)
    assert 50.0 <= got.low <= got.high <= 150.0
    assert math.isnan(bootstrap(0, lambda idx: 1.0).value)


def test_verdicts_follow_the_interval_ends_and_say_why_they_cannot() -> None:
    n = MIN_ROUNDS
    assert judge(Interval(1.1, 1.0, 1.19, n), 1.2).word == MEETS
    assert judge(Interval(1.4, 1.25, 1.6, n), 1.2).word == FAILS
    assert judge(Interval(1.2, 1.1, 1.3, n), 1.2) == Verdict(
        UNDECIDED, "the interval straddles the goal"
    )
    assert judge(Interval(1.1, 1.0, 1.1, 3), 1.2) == Verdict(UNDECIDED, f"3 rounds < {n}")
    assert judge(Interval(1.1, 1.0, 1.1, 1), 1.2) == Verdict(UNDECIDED, f"1 round < {n}")
    assert judge(Interval(1.1, 1.0, 1.1, n), 1.2, unsure="thin") == Verdict(UNDECIDED, "thin")
    # at least: batch CPU kept must stay at or above its goal
    assert judge(Interval(97.0, 96.0, 99.0, n), 95.0, at_most=False).word == MEETS
    assert judge(Interval(90.0, 88.0, 94.0, n), 95.0, at_most=False).word == FAILS
    assert judge(Interval(math.nan, math.nan, math.nan, 0), 1.2).word == UNDECIDED


def test_a_goal_of_several_figures_fails_on_any_and_meets_on_all() -> None:
    meets, fails, unsure = Verdict(MEETS), Verdict(FAILS), Verdict(UNDECIDED, "why")
    assert combine([meets, meets]) == meets
    assert combine([meets, unsure, fails]) == fails
    assert combine([meets, unsure]) == unsure
    assert combine([]).word == UNDECIDED


def test_the_pool_of_a_resample_is_the_sorted_pool_of_its_rounds_with_repeats() -> None:
    from random import Random

    from bench.colocation_stats import Pool, pooled

    rng = Random(3)
    rounds = [[rng.choice([1.0, 2.0, 2.0, 3.5, 7.0, rng.random()]) for _ in range(n)] for n in (5, 40, 1, 17)]
    pool = Pool(rounds)
    for idx in ([0, 1, 2, 3], [1, 1, 3], [2], [0, 0, 0, 2]):
        flat = pooled([rounds[i] for i in idx])
        for q in (0.01, 0.5, 0.9, 0.99, 0.999, 1.0):
            assert pool.at(q, idx) == nearest_rank(flat, q)
