"""`python -m bench` refuses what it cannot run with one line and exit 2, before any
benchmark starts (and, for the co-location benchmark, before any cgroup is made)."""

from __future__ import annotations

from pathlib import Path

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


def test_help_of_a_benchmark_that_takes_no_flags_says_what_it_measures(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_main(["agent-memory", "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m bench agent-memory  (no flags)") and "== bench" not in out


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--bogus"], "defrag-e2e: unrecognized arguments: --bogus (python -m bench defrag-e2e --help lists the flags)"),
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


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as stopped:
        bench_main(argv)
    assert stopped.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err  # one line
    return err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["soak", "--minutes", "0"], "soak: --minutes must be > 0, got 0"),
        (["soak", "--minutes", "-1"], "soak: --minutes must be > 0, got -1"),
        (["soak", "--pods", "-5"], "soak: --pods must be >= 1, got -5"),
        (["soak", "--churn", "-1"], "soak: --churn must be >= 0 pods a minute, got -1"),  # pods[:-1] a minute
        (["soak", "--sample", "0"], "soak: --sample must be > 0 seconds, got 0"),
        (["soak", "--real", "--real-pods", "0"], "soak: --real-pods must be >= 1, got 0"),
        (["churn-memory", "--segments", "0"], "churn-memory: --segments must be >= 2 (an interval needs two), got 0"),
        (["churn-memory", "--churn-every", "0"], "churn-memory: --churn-every must be >= 1 tick, got 0"),
        (["churn-memory", "--segment-pods", "0"], "churn-memory: --segment-pods must be >= 1, got 0"),
        (["churn-memory", "--churning-pods", "0"], "churn-memory: --churning-pods must be >= 1, got 0"),
        (["churn-memory", "--warmup", "-1"], "churn-memory: --warmup must be >= 0 ticks, got -1"),
        (["churn-memory", "--frames", "0"], "churn-memory: --frames must be 1..65535, got 0"),
        (["decision", "--pods", "-5"], "decision: argument --pods: every pod count must be >= 1, got '-5'"),
        (["decision", "--pods", "250,,"], "decision: argument --pods: must be comma-separated pod counts, got '250,,'"),
        (["collectors", "--pods", "0"], "collectors: argument --pods: every pod count must be >= 1, got '0'"),
        (["collectors", "--rounds", "0"], "collectors: --rounds must be >= 1, got 0"),
        (["collectors", "--max-open-files", "-1"], "collectors: --max-open-files must be >= 0 (0: none held), got -1"),
        (["collectors", "--tree", "/nonexistent"], "collectors: --tree /nonexistent: no collectors/pod_stats.py there"),
    ],
)
def test_issue_32_benchmarks_refuse_bad_flags_before_anything_starts(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import bench.churn_memory
    import bench.soak

    def started(*_: object) -> None:
        raise AssertionError("started before the flags were checked")

    monkeypatch.setattr(bench.soak, "start_cluster", started)
    monkeypatch.setattr(bench.churn_memory, "run", started)
    assert _refused(argv, capsys) == message


def _run_folder(tmp_path: Path, lines: list[str]) -> Path:
    (tmp_path / "samples.jsonl").write_text("".join(line + "\n" for line in lines))
    return tmp_path


SAMPLE = '{"t_min": %s, "rss_mib": 50.0, "fds": 12, "threads": 10, "watch_faults": 0, "watch_recovered": 0}'


@pytest.mark.parametrize(
    ("lines", "flags", "message"),
    [
        (None, [], "no samples.jsonl in"),
        ([], [], "samples.jsonl: no samples"),
        ([SAMPLE % 1, SAMPLE[:40]], [], "samples.jsonl: line 2 is not a JSON record (cut?)"),
        ([SAMPLE % 1, '{"t_min": 2, "rss_mib": 50.0}'], [], "samples.jsonl: line 2 has no fds, threads, watch_faults"),
        ([SAMPLE % t for t in range(1, 63)], ["--minutes", "60"], "the samples run to 62.0 min, past --minutes 60"),
        ([SAMPLE % 1, SAMPLE % 2], ["--real"], "a kwok run's samples: leave out --real"),
        ([(SAMPLE % 1)[:-1] + ', "restarts": 0}'], [], "a real-node run's samples: add --real"),
    ],
)
def test_soak_report_refuses_a_folder_it_cannot_summarize_naming_the_file(
    lines: list[str] | None, flags: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path if lines is None else _run_folder(tmp_path, lines)
    err = _refused(["soak", "--report", str(folder), *flags], capsys)
    assert err.startswith("soak: ") and message in err
    assert not (tmp_path / "soak.html").exists()  # nothing written


def test_soak_report_redoes_a_stored_runs_summary_and_plots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stored = Path(__file__).resolve().parents[2] / "docs" / "soak" / "kwok-1h"
    (tmp_path / "samples.jsonl").write_bytes((stored / "samples.jsonl").read_bytes())
    assert bench_main(["soak", "--report", str(tmp_path), "--minutes", "60"]) == 0
    printed = capsys.readouterr().out.splitlines()[1:]
    assert printed == (stored / "summary.txt").read_text().splitlines()[: len(printed)]
    assert {p.name for p in tmp_path.glob("soak-*.svg")} >= {"soak-rss_mib.svg", "soak-cpu_per_tick_ms.svg"}


def test_a_benchmark_that_measured_nothing_exits_3_after_the_others_ran(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A script or CI job must not take "no control plane built here" for a run (exit 0)."""
    import devtools.harness.cluster

    monkeypatch.setattr(devtools.harness.cluster, "BIN", tmp_path)  # a machine where make cluster never ran
    assert bench_main(["faults", "watch-recovery"]) == 3
    captured = capsys.readouterr()
    assert "== bench.faults" in captured.out and "== bench.watch_recovery" in captured.out  # both tried
    assert f"faults: nothing measured: no {tmp_path / 'kube-apiserver'}" in captured.err
    assert f"watch-recovery: nothing measured: no {tmp_path / 'kube-apiserver'}" in captured.err
