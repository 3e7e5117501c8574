"""`python -m bench` refuses what it cannot run with one line and exit 2, before any
benchmark starts (and, for the co-location benchmark, before any cgroup is made)."""

from __future__ import annotations

import pytest

from bench.__main__ import main as bench_main
from bench.colocation import parse_args


def test_an_unknown_benchmark_is_refused_not_silently_skipped(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_main(["defrag-e3"]) == 2
    err = capsys.readouterr().err
    assert "unknown benchmark 'defrag_e3'" in err and "defrag-e2e" in err


def test_flags_to_a_benchmark_that_takes_none_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_main(["faults", "--nodes", "100"]) == 2
    captured = capsys.readouterr()
    assert "faults takes no flags, got --nodes 100" in captured.err
    assert "== bench" not in captured.out  # nothing ran


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--bogus"], "defrag-e2e: unrecognized arguments: --bogus"),
        (["--nodes", "0"], "defrag-e2e: --nodes must be >= 1, got 0"),
        (["--real", "--nodes", "1"], "defrag-e2e: --nodes must be >= 2, got 1"),
        (["--nodes", "many"], "defrag-e2e: argument --nodes: invalid int value: 'many'"),
    ],
)
def test_defrag_e2e_refuses_bad_flags_with_one_line_before_any_cluster_starts(
    flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        bench_main(["defrag-e2e", *flags])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert err.strip() == message  # one line, nothing started


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--rounds", "0"], "--rounds must be >= 1, got 0"),
        (["--window", "0"], "--window must be >= 1 second, got 0"),
        (["--replot", "/nonexistent"], "--replot: no run.json in /nonexistent"),
        (["--rate", "0"], "--rate must be > 0 requests a second, got 0.0"),
        (["--line", "-1"], "--line must be > 0 cores, got -1.0"),
        (["--line", "2"], "--line 2 is more than the bench node's 1 core"),
        (["--wait-line", "150"], "--wait-line must be in (0, 100] %, got 150.0"),
        (["--cases", "guaranteed,bogus"], "--cases: unknown bogus"),
        (["--cpu", "4096"], "--cpu must be one this process may run on"),
        (["--strategies", "waterline-cpu,bogus"], "--strategies: unknown bogus"),
        (["--strategies", ""], "--strategies: empty"),  # once began a run of every strategy
        (["--cases", ","], "--cases: empty"),
    ],
)
def test_colocation_refuses_bad_flags_with_one_line(
    flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        parse_args(flags)
    assert stopped.value.code == 2
    assert message in capsys.readouterr().err


def test_colocation_takes_its_documented_short_settings() -> None:
    args = parse_args(["--rounds", "1", "--window", "8", "--strategies", "idle,idle-burst", "--cases", "burstable"])
    assert (args.rounds, args.window, args.strategies, args.cases) == (1, 8, "idle,idle-burst", "burstable")
    assert (args.warmup, args.settle, args.sizing, args.rate) == (5, 2.0, 30.0, None)  # the full run's


def test_colocation_takes_a_line_up_to_the_bench_nodes_one_core() -> None:
    assert parse_args(["--line", "1"]).line == 1.0


def test_colocation_full_run_follows_the_protocol_and_quick_is_short() -> None:
    full = parse_args([])
    assert (full.rounds, full.window, full.sizing) == (10, 60, 30.0)  # >= 10 rounds, >= 60 s, >= 30 s
    assert (full.cases, full.strategies) == ("guaranteed,burstable", "none,idle,idle-burst")
    quick = parse_args(["--quick", "--rounds", "3"])
    assert (quick.rounds, quick.window, quick.warmup, quick.settle, quick.sizing) == (3, 5, 2, 0.5, 5.0)
    # every case, and every strategy the in-process tree can run (batch-capacity needs --real)
    assert (quick.cases, quick.strategies) == (
        None, "none,waterline-cpu,waterline-lc,floor-all,one-per-tick,idle,idle-burst")  # fmt: skip
