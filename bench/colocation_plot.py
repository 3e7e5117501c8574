"""The co-location benchmark's pictures, drawn from its records: per case, web's latency
CDF for every window kind (the y axis in "nines", so that p99 and p99.9 get as much room
as the median) and the batch pods' kernel CPU over the warm-up and the measured window
(the mean over the rounds, tick by tick).

Self-contained HTML with inline SVG, like the project's HTML report: no plotting library.
A PNG of the same page is taken by a headless chromium where one is installed
(``chromium --headless --screenshot``, the window sized to the whole page as chromium lays
it out: ``page_size``); where none is, the HTML is all, and it says so.
"""

from __future__ import annotations

import html
import math
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from typing import Any

from bench.colocation_stats import nearest_rank

W, H, PAD = 560, 300, 48
#: The page's widest: a report line longer than this wraps (in the HTML and the PNG alike)
#: rather than widening the picture to its one longest line.
PAGE_WIDTH = 1100
COLOURS = ("#222222", "#999999", "#66aadd", "#d62728", "#ff7f0e", "#2ca02c", "#9467bd",
           "#8c564b", "#e377c2", "#17becf")  # fmt: skip
MAX_NINES = 4.0


def cdf_points(ordered: Sequence[float], steps: int = 160) -> list[tuple[float, float]]:
    """(latency, nines) points of a sorted sample: nines = -log10(1 - p), up to what its
    size can show (a sample of n shows at most log10(n) nines)."""
    if not ordered:
        return []
    top = min(MAX_NINES, math.log10(len(ordered)))
    out = []
    for i in range(steps + 1):
        nines = top * i / steps
        p = max(1.0 / len(ordered), 1.0 - 10 ** (-nines))
        out.append((nearest_rank(ordered, min(1.0, p)), nines))
    return out


def _svg(series: list[tuple[str, list[tuple[float, float]]]], xlabel: str, ylabel: str, *,
         logx: bool, yticks: list[tuple[float, str]], mark_x: float | None = None,
         colours: dict[str, str] | None = None) -> str:  # fmt: skip
    colours = colours or {}
    xs = [x for _, pts in series for x, _ in pts if not logx or x > 0]
    ys = [y for _, pts in series for _, y in pts]
    if not xs or not ys:
        return "<p>(no data)</p>"
    fx = (lambda v: math.log10(v)) if logx else (lambda v: v)  # noqa: E731
    x0, x1 = fx(min(xs)), fx(max(xs))
    y0, y1 = min(0.0, min(ys)), max(max(ys), max((t for t, _ in yticks), default=0.0))
    x1, y1 = (x1 if x1 > x0 else x0 + 1), (y1 if y1 > y0 else y0 + 1)
    sx = lambda v: PAD + (fx(v) - x0) / (x1 - x0) * (W - 2 * PAD)  # noqa: E731
    sy = lambda v: H - PAD + (y0 - v) / (y1 - y0) * (H - 2 * PAD)  # noqa: E731
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W + 180}" height="{H}" '
             'font-family="sans-serif" font-size="11">',
             f'<rect x="{PAD}" y="{PAD}" width="{W - 2 * PAD}" height="{H - 2 * PAD}" fill="none" stroke="#ccc"/>']  # fmt: skip
    for v, label in yticks:
        parts.append(f'<line x1="{PAD}" x2="{W - PAD}" y1="{sy(v):.1f}" y2="{sy(v):.1f}" stroke="#eee"/>'
                     f'<text x="{PAD - 4}" y="{sy(v) + 4:.1f}" text-anchor="end">{label}</text>')  # fmt: skip
    for v in _xticks(min(xs), max(xs), logx):
        parts.append(f'<text x="{sx(v):.1f}" y="{H - PAD + 14}" text-anchor="middle">{v:g}</text>')
    if mark_x is not None:
        parts.append(f'<line x1="{sx(mark_x):.1f}" x2="{sx(mark_x):.1f}" y1="{PAD}" y2="{H - PAD}" '
                     'stroke="#aaa" stroke-dasharray="4 3"/>')  # fmt: skip
    for i, (name, pts) in enumerate(series):
        colour = colours.get(name, COLOURS[i % len(COLOURS)])
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts if not logx or x > 0)
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{path}"/>')
        parts.append(f'<text x="{W + 4}" y="{PAD + 14 * i}" fill="{colour}">{html.escape(name)}</text>')
    parts.append(f'<text x="{W / 2}" y="{H - 8}" text-anchor="middle">{html.escape(xlabel)}</text>')
    parts.append(f'<text x="12" y="{H / 2}" transform="rotate(-90 12 {H / 2})" text-anchor="middle">'
                 f"{html.escape(ylabel)}</text></svg>")  # fmt: skip
    return "".join(parts)


def _xticks(lo: float, hi: float, logx: bool) -> list[float]:
    if logx:
        return [10.0**e * m for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
                for m in (1, 3) if lo <= 10.0**e * m <= hi]  # fmt: skip
    step = max(1.0, round((hi - lo) / 8))
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step) + 1)]


def case_html(case: dict[str, Any], run: dict[str, Any], windows: Sequence[dict[str, Any]]) -> str:
    mine = [w for w in windows if w["case"] == case["key"]]
    series, cpu = [], []
    for kind in run["windows"]:
        rounds = [w for w in mine if w["window"] == kind["key"]]
        lat = sorted(v / 1e3 for w in rounds for v in w["latency_us"])
        series.append((kind["label"], cdf_points(lat)))
        if kind["batch_cores"] > 0 and rounds:
            n = min(len(w["ticks"]) for w in rounds)
            cpu.append((kind["label"], [
                (rounds[0]["ticks"][i]["t"], sum(sum(w["ticks"][i]["batch"].values()) for w in rounds) / len(rounds))
                for i in range(n)]))  # fmt: skip
    colours = {k["label"]: COLOURS[i % len(COLOURS)] for i, k in enumerate(run["windows"])}
    nines = [(0.0, "p0"), (1.0, "p90"), (2.0, "p99"), (3.0, "p99.9"), (4.0, "p99.99")]
    warm = float(run["args"]["warmup"])
    return (f"<h2>{html.escape(case['label'])}</h2>"
            + _svg(series, "web's response time, ms (log)", "percentile", logx=True, yticks=nines, colours=colours)
            + _svg(cpu, "seconds from the warm-up's start (dashed: the measured window starts)",
                   "batch CPU, cores (kernel)", logx=False,
                   yticks=[(v / 4, f"{v / 4:g}") for v in range(7)], mark_x=warm, colours=colours))  # fmt: skip


def page(run: dict[str, Any], windows: Sequence[dict[str, Any]], report: str) -> str:
    body = "".join(case_html(c, run, windows) for c in run["cases"])
    return ("<!doctype html><meta charset='utf-8'><title>co-location benchmark</title>"
            f"<body style='font-family:sans-serif;max-width:{PAGE_WIDTH}px'>"
            f"<h1>co-location benchmark ({html.escape(run['mode'])})</h1>{body}"
            f"<h2>report</h2><pre style='font-size:10px;white-space:pre-wrap'>{html.escape(report)}</pre></body>")  # fmt: skip


def chromium() -> str | None:
    return next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")) if p), None)


def write_pictures(directory: str, run: dict[str, Any], windows: Sequence[dict[str, Any]],
                   report: str, png: bool = True) -> list[str]:  # fmt: skip
    """``colocation.html`` and, where a chromium runs, ``colocation.png``; what was written."""
    path = os.path.join(directory, "colocation.html")
    with open(path, "w", encoding="utf-8") as f:
        f.write(page(run, windows, report))
    lines = [f"pictures: {path}"]
    browser = chromium()
    if not png:
        return lines
    if browser is None:
        return [*lines, "no PNG: no chromium here (the HTML is self-contained)"]
    shot = os.path.join(directory, "colocation.png")
    try:
        width, height = page_size(browser, path, PAGE_WIDTH + 16)  # the body's margins
        _chromium(browser, f"--screenshot={shot}", f"--window-size={width},{height}", path)
    except (OSError, ValueError, subprocess.SubprocessError) as err:
        return [*lines, f"no PNG: chromium failed ({err})"]
    return [*lines, f"picture: {shot}"]


#: Written into a copy of the page, after its body: the page's whole size, on the root.
_MEASURE = ("<script>document.documentElement.setAttribute('data-size', "
            "document.documentElement.scrollWidth + 'x' + document.documentElement.scrollHeight)</script>")  # fmt: skip
_SIZE = re.compile(r'data-size="(\d+)x(\d+)"')


def page_size(browser: str, path: str, width: int) -> tuple[int, int]:
    """The whole page's size in CSS pixels, laid out ``width`` wide (wider where a line of
    the report does not fit). ``--screenshot`` takes the window, not the page: a window
    sized by guess cut the report off. The same chromium lays out a copy of the page that
    writes its scroll size into the DOM (``--dump-dom``); raises ValueError when it does
    not say."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    probe = f"{path}.measure.html"
    with open(probe, "w", encoding="utf-8") as f:
        f.write(text + _MEASURE)
    try:
        dom = _chromium(browser, "--dump-dom", f"--window-size={width},{H}", probe)
    finally:
        os.remove(probe)
    found = _SIZE.search(dom)
    if found is None:
        raise ValueError("chromium did not lay the page out (no size in its DOM)")
    return max(width, int(found[1])), int(found[2])


def _chromium(browser: str, *args: str) -> str:
    """Run headless chromium on a local page (the last argument); its standard output."""
    *flags, page = args
    done = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",  # noqa: S603
                           *flags, f"file://{os.path.abspath(page)}"],
                          capture_output=True, text=True, timeout=120, check=True)  # fmt: skip
    return done.stdout
