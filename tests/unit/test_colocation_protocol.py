"""The co-location benchmark's protocol: sizing from a measure and its checks, the
throttled-baseline refusal, the window rules, the rotated order and the drained queue."""

from __future__ import annotations

import pytest

from bench.colocation_protocol import (
    Sizing,
    alone_throttled,
    alone_use,
    baseline_throttled_more,
    drained,
    near_limit,
    not_near_limit,
    rate_for,
    rotated,
    sizing_problems,
    window_problems,
)


def test_the_rate_puts_web_at_45_percent_of_its_limit_and_the_near_limit_case_at_85() -> None:
    assert rate_for(0.0015, 0.6) == pytest.approx(180.0)
    assert near_limit(0.0015, 180.0) == pytest.approx(0.318)  # 0.27 core used / 0.85, ceiled
    with pytest.raises(ValueError, match="must be > 0"):
        rate_for(0.0, 0.6)


def test_sizing_must_be_measured_long_enough_and_land_in_range() -> None:
    good = Sizing(seconds=30.0, requests=6000, cpu_s=9.0)  # 1.5 ms a request
    assert good.cpu_per_request == pytest.approx(0.0015)
    assert sizing_problems(good, 180.0, 0.6) == []
    short = Sizing(seconds=5.0, requests=1000, cpu_s=1.5)
    assert sizing_problems(short, 180.0, 0.6) == ["web's CPU per request measured over 5 s < 30 s"]
    assert sizing_problems(good, 300.0, 0.6) == ["web sized to use 75% of its limit, not 40%-50%"]


def test_a_throttled_alone_run_is_refused_with_its_share() -> None:
    assert alone_throttled(1000, 10) is None
    why = alone_throttled(1000, 30)
    assert why is not None and why.startswith("web alone was throttled by its own quota in 3.0%")
    assert alone_throttled(0, 0) == "web alone ran no CFS period (no quota?)"


def test_a_window_throttled_less_than_its_baseline_by_webs_own_quota_is_not_judged_against_it() -> None:
    """Near its limit, web alone is throttled by its own quota; beside busy batch pods its
    CPU per request falls and so does its throttling: a ratio would credit the strategy."""
    assert baseline_throttled_more((1000, 127), (1000, 17)) is not None  # the near-limit run's 12.7% vs 1.7%
    assert baseline_throttled_more((1000, 127), (1000, 0)) is not None
    assert baseline_throttled_more((1000, 127), (1000, 200)) is None  # the window worse: the ratio is conservative
    assert baseline_throttled_more((1000, 10), (1000, 0)) is None  # 1%: within the protocol's allowance
    assert baseline_throttled_more((0, 0), (1000, 0)) is None  # no quota, no throttling
    assert baseline_throttled_more((1000, 127), (0, 0)) is not None  # a window with no quota is not throttled


def test_web_alone_must_use_in_its_windows_what_it_was_sized_for() -> None:
    assert alone_use(0.27 * 600, 600.0, 0.6) is None  # 45%
    assert alone_use(0.6 * 0.74 * 600, 600.0, 0.6) == "web alone used 74% of its limit in the windows, not 40%-50%"
    assert alone_use(0.0, 0.0, 0.6) == "web alone was not measured"


def test_the_near_limit_case_must_have_been_near_its_limit() -> None:
    assert not_near_limit(1000, 127) is None
    assert not_near_limit(1000, 10) == ("web alone was throttled by its own quota in 1.0% of its periods "
                                        "(<= 1%): not near its limit")  # fmt: skip
    assert not_near_limit(0, 0) is not None  # no quota: no limit to be near


def test_windows_must_be_a_minute_at_a_core_of_batch_demand() -> None:
    assert window_problems(60.0, 1.5) == []
    assert window_problems(5.0, 0.5) == [
        "measured windows of 5 s < 60 s",
        "batch demand 0.5 core < 1",
    ]


def test_the_order_is_a_latin_square() -> None:
    keys = ["a", "b", "c"]
    square = [rotated(keys, r) for r in range(3)]
    assert square == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"]]
    for slot in range(3):
        assert sorted(row[slot] for row in square) == keys
    assert rotated(keys, 3) == keys and rotated([], 2) == []


def test_the_queue_drained_when_a_request_found_the_server_idle_in_the_pause() -> None:
    backlog = [(1.0, 0.5), (1.1, 0.45), (1.2, 0.4)]  # each waits for the one before
    assert not drained(backlog, 1.05, 1.3)
    assert drained([*backlog, (1.6, 0.001)], 1.05, 1.7)  # the one of t=1.2 done at 1.6
    assert drained([(1.0, 0.002), (1.5, 0.002)], 1.2, 1.4)  # none arrived, the last answered
    assert not drained([(1.0, 0.5)], 1.2, 1.4)  # none arrived, the last still in service
    assert drained([], 0.0, 1.0)
