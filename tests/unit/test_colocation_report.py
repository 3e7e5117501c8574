"""The co-location benchmark's report is made from its records only: verdicts follow the
intervals (meets, fails, undecided with the reason), a throttled or ill-sized baseline
gets no verdict, and ``--replot`` writes the same report and the pictures again."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

import pytest

from bench.colocation_plot import cdf_points
from bench.colocation_report import render, summarize, window_figures
from bench.colocation_stats import FAILS, MEETS, UNDECIDED

WINDOWS = [
    {"key": "alone", "label": "web alone", "baseline": None, "batch_cores": 0.0},
    {"key": "alone-burst", "label": "web alone, burst", "baseline": None, "batch_cores": 0.0},
    {"key": "none", "label": "no agent", "baseline": "alone", "batch_cores": 1.5},
    {"key": "idle", "label": "batch idle", "baseline": "alone", "batch_cores": 1.5},
    {"key": "idle-burst", "label": "batch idle + burst", "baseline": "alone-burst", "batch_cores": 1.5},
]
#: Per window kind: (latency scale, batch cores, web throttled periods of 10 a second)
#: Bootstrap resamples in these tests: the verdicts here are far from their goals.
FEW = 200
SHAPES = {"alone": (1.0, 0.0, 0), "alone-burst": (1.0, 0.0, 0), "none": (3.0, 0.7, 0),
          "idle": (1.0, 0.69, 0), "idle-burst": (1.02, 0.5, 0)}  # fmt: skip


def run_doc(rounds: int, window: int = 60, sizing_s: float = 30.0) -> dict[str, Any]:
    return {
        "mode": "tree", "args": {"rounds": rounds, "window": window, "warmup": 2}, "cpu": 1,
        "rate": 180.0, "rate_sized": True, "web_limit": 0.6,
        "sizing": {"seconds": sizing_s, "requests": 6000, "cpu_s": 9.0},  # 45% of 0.6 at 180/s
        "cases": [{"key": "burstable", "label": "Burstable web", "request": 0.2, "limit": 0.6,
                   "qos": "Burstable", "near_limit": False}],
        "windows": WINDOWS, "batch": ["batch-1"], "minutes": 1.0, "machine": {},
    }  # fmt: skip


def windows_doc(rounds: int, requests: int, shapes: dict[str, tuple[float, float, int]] = SHAPES,
                seed: int = 1) -> list[dict[str, Any]]:  # fmt: skip
    rng = random.Random(seed)
    out = []
    for r in range(rounds):
        for slot, (key, (scale, batch, throttled)) in enumerate(shapes.items()):
            lat = [round(1000 * scale * (1 + rng.expovariate(1.0))) for _ in range(requests)]
            ticks = [{"t": float(i + 1), "dt": 1.0, "in_window": i >= 2, "web": 0.27,
                      "batch": {"batch-1": batch}, "busy": 0.27 + batch + 0.01, "steal": 0.0,
                      "other_busy": 0.5, "wait": 1.0, "web_periods": 10, "web_throttled": throttled,
                      "batch_periods": 0, "batch_throttled": 0, "batch_throttled_s": 0.0,
                      "agent_batch": batch, "agent_wait": 1.0, "agent_node": 0.27 + batch,
                      "actions": 0, "caps": {}} for i in range(12)]  # fmt: skip
            out.append({"case": "burstable", "window": key, "round": r, "slot": slot, "start": 2.0,
                        "seconds": 10.0, "drained": True, "iterations": {"batch-1": int(batch * 1000)},
                        "latency_us": lat, "ticks": ticks})  # fmt: skip
    return out


def verdicts(summary: Any) -> dict[str, Any]:
    return {r.key: r.verdict for r in summary.rows if r.verdict is not None}


def test_a_sound_run_says_meets_and_fails_from_the_intervals() -> None:
    (case,) = summarize(run_doc(10), windows_doc(10, 10_000), FEW)
    assert case.refused == [] and case.unsure == []
    got = verdicts(case)
    assert got["none"].word == FAILS  # 3x the latency of web alone
    assert got["idle"].word == MEETS  # the latency of web alone, 99% of the batch CPU
    assert got["idle-burst"].word == FAILS  # batch keeps 71%: the latency alone cannot save it
    idle = next(r for r in case.rows if r.key == "idle")
    assert idle.ratio["p99"].low <= 1.0 <= idle.ratio["p99"].high
    assert idle.kept.value == pytest.approx(69 / 70 * 100)
    # the batch pods' share of the spare core: batch / (1 - web - others)
    assert idle.spare.value == pytest.approx(0.69 / (1 - 0.27 - 0.01) * 100)
    assert window_figures(windows_doc(1, 10)[0])["web_cpu_per_request_ms"] == pytest.approx(0.27 / 10 * 1e3 * 10)


def test_too_few_rounds_or_too_thin_a_tail_is_undecided_and_says_why() -> None:
    (few,) = summarize(run_doc(3), windows_doc(3, 40_000), FEW)
    assert {v.word for v in verdicts(few).values()} == {UNDECIDED}
    assert verdicts(few)["idle"].why == "3 rounds < 10"
    (thin,) = summarize(run_doc(10), windows_doc(10, 2_000), FEW)  # 20,000 requests: p99.9 not measured
    assert verdicts(thin)["idle"].word == UNDECIDED
    assert "beyond the p99" in verdicts(thin)["idle"].why
    (short,) = summarize(run_doc(10, window=5), windows_doc(10, 10_000), FEW)
    assert verdicts(short)["idle"].why.startswith("measured windows of 5 s < 60 s")


def test_a_throttled_or_ill_sized_baseline_gets_no_verdict() -> None:
    throttled = {**SHAPES, "alone": (1.0, 0.0, 1)}  # 1 of 10 periods: 10% > 1%
    (case,) = summarize(run_doc(10), windows_doc(10, 10_000, throttled), FEW)
    assert case.refused and "throttled by its own quota in 10.0%" in case.refused[0]
    (unsized,) = summarize(run_doc(10, sizing_s=5.0), windows_doc(10, 10_000), FEW)
    assert unsized.refused == ["web's CPU per request measured over 5 s < 30 s"]


def test_a_strategy_throttled_less_than_its_throttled_baseline_is_undecided_and_says_why() -> None:
    """The near-limit case (exempt from the throttled-baseline refusal): a window whose
    web is throttled less than web alone is undecided, however good its ratio; a window
    judged against an unthrottled baseline keeps its verdict."""
    run = run_doc(rounds=10)
    run["cases"][0]["near_limit"] = True
    shapes = {**SHAPES, "alone": (3.0, 0.0, 1), "idle": (1.0, 0.69, 0)}  # alone 10% throttled and slow
    (case,) = summarize(run, windows_doc(10, 10_000, shapes), FEW)
    assert case.refused == []
    got = verdicts(case)
    assert got["idle"].word == UNDECIDED and "throttled by web's own quota in 10.0%" in got["idle"].why
    assert got["idle-burst"].word == FAILS  # against alone-burst, unthrottled: batch keeps 71%


def test_a_throttled_baseline_leaves_a_failing_ratio_or_batch_share_failing() -> None:
    """The throttled baseline deflates the latency ratio: beyond the goal even so, the
    window fails; batch CPU kept does not depend on the baseline: short of 95%, it fails."""
    run = run_doc(rounds=10)
    run["cases"][0]["near_limit"] = True
    shapes = {**SHAPES, "alone": (3.0, 0.0, 1), "none": (12.0, 0.7, 0), "idle": (1.0, 0.3, 0)}
    (case,) = summarize(run, windows_doc(10, 10_000, shapes), FEW)
    got = verdicts(case)
    assert got["none"].word == FAILS  # p99 about 4x of a baseline throttled in 10% of its periods
    assert got["idle"].word == FAILS  # p99 0.33x, undecided alone, but batch keeps 43%
    shapes["idle"] = (1.0, 0.69, 0)
    (case,) = summarize(run, windows_doc(10, 10_000, shapes), FEW)
    assert verdicts(case)["idle"].word == UNDECIDED  # batch keeps 99%: only the ratio could tell


def test_web_alone_off_its_sizing_in_the_windows_leaves_the_verdicts_undecided() -> None:
    """The sizing's own check holds by construction; what web alone used in its windows,
    and for the near-limit case whether its quota throttled it, can fail."""
    windows = windows_doc(10, 10_000)
    for w in windows:
        if w["window"] == "alone":
            for t in w["ticks"]:
                t["web"] = 0.4  # 67% of its 0.6 core limit
    (busy,) = summarize(run_doc(10), windows, FEW)
    assert busy.refused == [] and busy.unsure == ["web alone used 67% of its limit in the windows, not 40%-50%"]
    assert verdicts(busy)["idle"].word == UNDECIDED
    run = run_doc(10)
    run["cases"][0]["near_limit"] = True
    (loose,) = summarize(run, windows_doc(10, 10_000), FEW)  # alone never throttled
    assert loose.unsure and loose.unsure[0].endswith("not near its limit")


def test_the_report_is_made_again_from_the_records_with_a_self_contained_page(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    (tmp_path / "run.json").write_text(json.dumps(run_doc(2)))
    with (tmp_path / "windows.jsonl").open("w") as f:
        for w in windows_doc(2, 500):
            f.write(json.dumps(w) + "\n")
    render(str(tmp_path), png=False)  # `--replot DIR`, without the headless browser
    printed = capsys.readouterr().out
    report = (tmp_path / "report.txt").read_text()
    assert report in printed and "batch idle" in report and "2 rounds < 10" in report
    page = (tmp_path / "colocation.html").read_text()
    assert page.count("<svg") == 2 and "<script" not in page and "http" not in page.replace(
        'xmlns="http://www.w3.org/2000/svg"', "")


def test_cdf_points_climb_in_nines_as_far_as_the_sample_reaches() -> None:
    pts = cdf_points([float(v) for v in range(1, 1001)])
    assert pts[0] == (1.0, 0.0) and pts[-1][1] == pytest.approx(3.0) and pts[-1][0] == 999.0
    assert all(a[0] <= b[0] for a, b in zip(pts, pts[1:], strict=False))
    assert cdf_points([]) == []


def test_a_batch_capacity_window_is_judged_and_says_what_the_node_published_and_squeezed() -> None:
    run = run_doc(rounds=10)
    run["windows"] = [*WINDOWS, {"key": "batch-capacity", "label": "batch pods on batch capacity",
                                 "baseline": "alone", "batch_cores": 1.5}]  # fmt: skip
    windows = windows_doc(10, 10_000, {**SHAPES, "batch-capacity": (1.0, 0.69, 0)})
    for i, w in enumerate(windows):
        w["took_s"], w["released_s"], w["released"] = 20.0 + i % 3, 1.0, True
        for t in w["ticks"]:
            t["isolated"], t["published"] = {}, None
            if w["window"] == "batch-capacity":
                t["isolated"], t["published"] = {"idle": 3}, 1.5 + (t["t"] % 2) / 10
                t["caps"] = {"cap-2": 0.3} if w["round"] == 4 and t["in_window"] else {}
    (summary,) = summarize(run, windows, resamples=FEW)
    assert verdicts(summary)["batch-capacity"].word == MEETS  # judged against web alone, like idle
    (line,) = summary.capacity
    assert "1.500-1.600 cores" in line and "squeeze caps: cap-2" in line and "idle: up to 3" in line
    assert "10/10 windows" in line
    assert summary.took and max(summary.took) == 22.0
    for w in windows:
        w["released"] = w["round"] != 0
        for t in w["ticks"]:
            t["caps"] = {}
    (again,) = summarize(run, windows, resamples=FEW)
    assert "squeeze caps: none" in again.capacity[0] and "9/10 windows" in again.capacity[0]
    without = [w for w in windows if w["window"] != "batch-capacity"]
    run["windows"] = WINDOWS
    assert summarize(run, without, resamples=FEW)[0].capacity == []


def test_records_kept_gzipped_are_read_and_cut_ones_are_refused_naming_the_file_and_line(
    tmp_path: Path,
) -> None:
    """docs/colocation.md keeps a run's records as windows.jsonl.gz: they are read as they
    are; a file cut inside a record is refused with its name and line (not a traceback),
    and one cut at a line boundary is reported for what it lacks, not as a shorter run."""
    import gzip

    from bench.colocation_report import RecordsError, load, missing_rounds

    run = run_doc(2)
    docs = windows_doc(2, 50)
    (tmp_path / "run.json").write_text(json.dumps(run))
    lines = "".join(json.dumps(w) + "\n" for w in docs)
    with gzip.open(tmp_path / "windows.jsonl.gz", "wt") as f:
        f.write(lines)
    assert load(str(tmp_path))[1] == docs
    assert missing_rounds(run, docs) is None
    assert missing_rounds(run, docs[:-1]) is not None

    (tmp_path / "windows.jsonl").write_text(lines[: len(lines) // 2])  # cut mid-record
    with pytest.raises(RecordsError, match=r"windows\.jsonl: line \d+ is not a whole record"):
        load(str(tmp_path))
    (tmp_path / "windows.jsonl").unlink()
    (tmp_path / "windows.jsonl.gz").unlink()
    with pytest.raises(RecordsError, match="no windows.jsonl"):
        load(str(tmp_path))


@pytest.mark.parametrize(("damage", "where", "says"), [
    (lambda run, docs: run.pop("sizing"), "run.json", "the run has no 'sizing'"),
    (lambda run, docs: run["args"].pop("window"), "run.json", "args has no 'window'"),
    (lambda run, docs: run["cases"][0].pop("near_limit"), "run.json", "cases[0] has no 'near_limit'"),
    (lambda run, docs: run["windows"][2].pop("baseline"), "run.json", "windows[2] has no 'baseline'"),
    (lambda run, docs: run["windows"][2].update(baseline="alon"), "run.json",
     "windows[2] has baseline 'alon', not a window of this run"),
    (lambda run, docs: docs[3].pop("latency_us"), "windows.jsonl", "record 4 has no 'latency_us'"),
    (lambda run, docs: docs[1]["ticks"][5].pop("dt"), "windows.jsonl", "record 2: tick 5 has no 'dt'"),
    (lambda run, docs: docs.clear(), "windows.jsonl", "no window records"),
])  # fmt: skip
def test_records_lacking_a_field_the_report_reads_are_refused_naming_the_file_and_field(
    tmp_path: Path, damage: Any, where: str, says: str
) -> None:
    """`--replot` of damaged records: an error naming the file and the field, not a
    traceback from inside the report, nor an empty report for no records at all."""
    from bench.colocation_report import RecordsError, load

    run, docs = run_doc(2), windows_doc(2, 50)
    run["windows"] = [dict(k) for k in run["windows"]]
    damage(run, docs)
    (tmp_path / "run.json").write_text(json.dumps(run))
    (tmp_path / "windows.jsonl").write_text("".join(json.dumps(w) + "\n" for w in docs))
    with pytest.raises(RecordsError) as err:
        load(str(tmp_path))
    assert str(err.value) == f"{tmp_path / where}: {says}"


def test_the_breathing_window_is_judged_against_web_alone_breathing_and_says_webs_own_gain() -> None:
    """``batch-capacity-breathe`` is judged against ``alone-breathe`` (web's own setting
    alike), whose gain over plain ``alone`` is printed as web's own, not as protection; the
    capacity line counts the ticks web's quota was raised."""
    run = run_doc(rounds=10)
    run["windows"] = [*WINDOWS,
                      {"key": "alone-breathe", "label": "web alone, quota breathing", "baseline": None, "batch_cores": 0.0},
                      {"key": "batch-capacity-breathe", "label": "batch capacity + web's quota breathing",
                       "baseline": "alone-breathe", "batch_cores": 1.5}]  # fmt: skip
    shapes = {**SHAPES, "alone-breathe": (0.5, 0.0, 0), "batch-capacity-breathe": (0.5, 0.69, 0)}
    windows = windows_doc(10, 10_000, shapes)
    for w in windows:
        for t in w["ticks"]:
            t["isolated"], t["published"] = {}, None
            if w["window"] == "batch-capacity-breathe":
                t["isolated"], t["published"] = {"idle": 3, "quotaBurst": int(t["t"] > 6)}, 1.5
    (summary,) = summarize(run, windows, resamples=FEW)
    rows = {r.key: r for r in summary.rows}
    assert rows["batch-capacity-breathe"].baseline == "alone-breathe"
    assert verdicts(summary)["batch-capacity-breathe"].word == MEETS  # alike its baseline
    assert rows["alone-breathe"].ratio["p99"].value == pytest.approx(0.5, abs=0.05)  # against plain alone
    (line,) = summary.capacity
    assert line.startswith("batch capacity + breathing:") and "raised above its limit in 60/100 ticks" in line


def test_the_bench_cpus_busy_share_is_the_kernels_apart_from_the_pods_share() -> None:
    """The pods' share (web + batch) once read as the CPU's busy share: a node whose other
    processes took 1% looked 1% less busy than it was."""
    idle = window_figures(windows_doc(1, 10)[3])  # web 0.27 + batch 0.69 + others 0.01 each tick
    assert idle["busy_pct"] == pytest.approx(97.0)
    assert idle["pods_pct"] == pytest.approx(96.0)
    assert idle["foreign_pct"] == pytest.approx(1.0)


def test_a_stopped_runs_report_says_how_far_it_got(tmp_path: Path) -> None:
    """A run stopped in round 3 of 5 keeps its 2 whole rounds (``RunStopped``): its
    report opens with why it stopped and what it covers, and its verdicts come from those
    rounds only."""
    from bench.colocation_report import missing_rounds

    run = {**run_doc(5), "stopped": {"why": "interrupted in round 3 of 5", "rounds": 2}}
    docs = windows_doc(2, 50)
    assert missing_rounds(run, docs) == (
        "the run stopped, interrupted in round 3 of 5: the report covers its 2 whole rounds")
    assert "of the 25 windows run.json says were run" in (missing_rounds(run, docs[:-1]) or "")
    (tmp_path / "run.json").write_text(json.dumps(run))
    (tmp_path / "windows.jsonl").write_text("".join(json.dumps(w) + "\n" for w in docs))
    render(str(tmp_path), png=False)
    assert (tmp_path / "report.txt").read_text().startswith("the run stopped, interrupted in round 3 of 5")


def test_where_the_busy_alone_control_ran_the_strategies_judged_against_alone_are_also_shown_against_it(
    tmp_path: Path,
) -> None:
    """A busy CPU spares web the wake-ups an idle one pays, so beside the verdict (against
    web alone) the report shows what the batch pods cost beyond a busy CPU's: the ratio
    to the control, for the windows judged against alone only (idle-burst's baseline is
    web alone with burst: against the control it would mix burst's gain in), not judged."""
    control = {"key": "busy-alone", "label": "web beside an idle spinner", "baseline": "alone", "batch_cores": 1.0}
    run = {**run_doc(10), "windows": [*WINDOWS, control]}
    shapes = {**SHAPES, "busy-alone": (0.5, 0.69, 0)}  # half web alone's latency: the idle one doubles it
    (case,) = summarize(run, windows_doc(10, 10_000, shapes), FEW)
    shown = {r.key: r.vs_control for r in case.rows if r.vs_control}
    assert sorted(shown) == ["idle", "none"]
    assert shown["idle"]["p99"].low > 1.5 and shown["none"]["p99"].low > 4.5
    assert verdicts(case)["idle"].word == MEETS  # the goal stays against web alone
    (tmp_path / "run.json").write_text(json.dumps(run))
    (tmp_path / "windows.jsonl").write_text("".join(json.dumps(w) + "\n" for w in windows_doc(10, 2_000, shapes)))
    render(str(tmp_path), png=False)
    report = (tmp_path / "report.txt").read_text()
    assert "against the control (not judged): batch idle: p99 " in report
    (case,) = summarize(run_doc(10), windows_doc(10, 10_000), FEW)  # no control ran: nothing shown
    assert not any(r.vs_control for r in case.rows)


@pytest.mark.parametrize(("stopped", "why"), [
    (5, "stopped is not an object"),
    ({"rounds": 2}, "stopped has no 'why'"),
    ({"why": 7, "rounds": 2}, "stopped has no 'why'"),
    ({"why": "interrupted", "rounds": "x"}, "stopped's rounds is 'x', not a count of whole rounds from 1 to 4"),
    ({"why": "interrupted", "rounds": 0}, "stopped's rounds is 0"),
    ({"why": "interrupted", "rounds": 5}, "stopped's rounds is 5"),
    ({"why": "interrupted", "rounds": True}, "stopped's rounds is True"),
])  # fmt: skip
def test_a_damaged_stopped_is_refused_naming_the_field(tmp_path: Path, stopped: Any, why: str) -> None:
    from bench.colocation_report import RecordsError, load

    (tmp_path / "run.json").write_text(json.dumps({**run_doc(5), "stopped": stopped}))
    (tmp_path / "windows.jsonl").write_text("".join(json.dumps(w) + "\n" for w in windows_doc(2, 50)))
    with pytest.raises(RecordsError, match=f"run.json: {re.escape(why)}"):
        load(str(tmp_path))
