"""A smoke run of the co-location benchmark (``python -m bench colocation --quick``, cut
shorter still) on this host's real cgroup v1 hierarchies: it keeps its records, makes its
intervals and its pictures from them, and ``--replot`` says the same again. No latency is
asserted (a benchmark holds goals, a test never asserts timings): only that what it
produces is there and consistent.

Needs root and cgroup v1 with ``cpu.idle``: skipped elsewhere, failed in CI.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.defaults import CGROUP_ROOT, PROC_ROOT
from bench.colocation_plot import chromium
from devtools.demo.cgroups import v1_roots
from devtools.harness.cluster import ROOT
from tests.need import need

pytestmark = pytest.mark.integration
ROUNDS, WINDOW, WARMUP = 2, 2, 1
KINDS = ("alone", "alone-burst", "busy-alone", "none", "idle-burst")


def test_a_quick_run_keeps_its_records_and_makes_intervals_and_pictures_from_them(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        need("the co-location benchmark needs root to create cgroups")
    try:
        v1_roots(CGROUP_ROOT, PROC_ROOT)
    except ValueError as err:
        need(f"the co-location benchmark needs cgroup v1: {err}")
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "bench", "colocation", "--quick", "--cases", "burstable",
            "--strategies", "idle-burst", "--rounds", str(ROUNDS), "--window", str(WINDOW),
            "--warmup", str(WARMUP), "--settle", "0.2", "--sizing", "2", "--out", str(out)]  # fmt: skip
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)  # noqa: S603
    assert done.returncode == 0, done.stderr[-3000:]
    assert "skipped" not in done.stdout, done.stdout

    run = json.loads((out / "run.json").read_text())
    windows = [json.loads(line) for line in (out / "windows.jsonl").read_text().splitlines()]
    assert [w["key"] for w in run["windows"]] == list(KINDS)
    assert sorted((w["window"], w["round"]) for w in windows) == sorted((k, r) for k in KINDS for r in range(ROUNDS))
    for w in windows:
        assert len([t for t in w["ticks"] if t["in_window"]]) == WINDOW
        assert len(w["ticks"]) == WARMUP + WINDOW
        assert w["latency_us"] and all(v > 0 for v in w["latency_us"])
    # the order is rotated: no window kind runs in the same slot in both rounds
    slots = {(w["window"], w["round"]): w["slot"] for w in windows}
    assert all(slots[(k, 0)] != slots[(k, 1)] for k in KINDS)
    # batch work ran where the window asks for it, and only there
    for w in windows:
        batch = sum(sum(t["batch"].values()) for t in w["ticks"] if t["in_window"])
        assert (batch > 0) == (w["window"] not in ("alone", "alone-burst")), w["window"]
        assert bool(w["iterations"]) == (w["window"] not in ("alone", "alone-burst"))

    report = (out / "report.txt").read_text()
    assert report in done.stdout
    for w in run["windows"]:  # every kind with its pooled request count and an interval
        count = sum(len(x["latency_us"]) for x in windows if x["window"] == w["key"])
        line = next(ln for ln in report.splitlines() if ln.startswith(w["label"] + " "))
        assert str(count) in line.split() and "[" in line
    assert "no verdict for this case" in report  # sized over 2 s < 30 s: it says so

    page = (out / "colocation.html").read_text()
    assert page.count("<svg") == 2 and all(w["label"] in page for w in run["windows"])
    assert (out / "colocation.png").exists() == (chromium() is not None)

    again = subprocess.run([sys.executable, "-m", "bench", "colocation", "--replot", str(out)], cwd=ROOT,  # noqa: S603
                           capture_output=True, text=True, timeout=120, check=True)  # fmt: skip
    assert (out / "report.txt").read_text() == report and report in again.stdout


def test_a_run_stopped_after_a_whole_round_keeps_that_rounds_records_and_reports_them(tmp_path: Path) -> None:
    """SIGTERM in round 2 of 3: the run still ends (130, every process and cgroup gone),
    but round 1's records, run.json saying how far it got, and the report from them are
    kept (a two-hour run is not lost to its last minutes)."""
    import signal

    if os.geteuid() != 0:
        need("the co-location benchmark needs root to create cgroups")
    try:
        roots = v1_roots(CGROUP_ROOT, PROC_ROOT)
    except ValueError as err:
        need(f"the co-location benchmark needs cgroup v1: {err}")
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "bench", "colocation", "--quick", "--cases", "burstable",
            "--strategies", "idle-burst", "--rounds", "3", "--window", str(WINDOW),
            "--warmup", str(WARMUP), "--settle", "0.2", "--sizing", "2", "--out", str(out)]  # fmt: skip
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # noqa: S603
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if line.startswith("round 2/3"):
            proc.send_signal(signal.SIGTERM)
            break
    stdout, rest = proc.communicate(timeout=120)
    assert proc.returncode == 130, "".join(seen) + rest[-3000:]

    run = json.loads((out / "run.json").read_text())
    assert run["stopped"] == {"why": "interrupted in round 2 of 3", "rounds": 1}
    windows = [json.loads(line) for line in (out / "windows.jsonl").read_text().splitlines()]
    assert sorted((w["window"], w["round"]) for w in windows) == sorted((k, 0) for k in KINDS)
    report = (out / "report.txt").read_text()
    assert report.startswith("the run stopped, interrupted in round 2 of 3: the report covers its whole round\n")
    assert report in stdout and str(out) in rest
    assert "cgroups left behind" not in rest
    assert not [r for r in roots if r and os.path.exists(os.path.join(r, f"waterline-bench-{proc.pid}"))]
