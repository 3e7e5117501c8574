"""The co-location benchmark's report, made from its records only (``run.json`` and
``windows.jsonl``, see ``bench.colocation``), so that ``--replot DIR`` says exactly what
the run said.

Per case, for every window kind: web's pooled p50 / p99 / p99.9 (nearest rank over every
request of every round), the ratio of its p99 and p99.9 to its own baseline's (web alone;
web alone with burst for a window that gives web burst) with a 95% interval from a block
bootstrap over rounds, the batch pods' kernel CPU as a share of the spare capacity (the
node's core minus web's use minus other processes) and of the no-agent window, the batch
iterations done against the no-agent window, and the window's conditions (steal, the
other CPU's busy share, web's CPU per request, its throttled periods, the queue drained).
Then the kernel's figures beside the agent's, and the verdicts on the goal (p99 <= 1.2x,
p99.9 <= 1.5x, batch CPU kept >= 95%): meets, fails or undecided with the reason; no
verdict at all where the protocol's checks say the baseline cannot carry one.
"""

from __future__ import annotations

import gzip
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.colocation_protocol import (
    FULL_ROUNDS,
    MIN_BATCH_CORES,
    Sizing,
    alone_throttled,
    alone_use,
    baseline_throttled_more,
    not_near_limit,
    sizing_problems,
    window_problems,
)
from bench.colocation_stats import (
    FAILS,
    RESAMPLES,
    UNDECIDED,
    Interval,
    Pool,
    Verdict,
    combine,
    judge,
    nearest_rank,
    quantile,
    quantile_ratio,
    share,
    thin_tail,
)

#: The issue's goal: (p99 x alone, p99.9 x alone, batch CPU kept % of no agent).
GOAL = (1.2, 1.5, 95.0)
QUANTILES = (("p50", 0.50), ("p99", 0.99), ("p999", 0.999))
STRATEGY_KEYS = ("none", "waterline-cpu", "waterline-lc", "floor-all", "one-per-tick", "idle", "idle-burst",
                 "batch-capacity", "batch-capacity-breathe")
#: The windows whose batch demand is carried by batch-capacity pods (cap-1..3), and
#: their names in the report; the second also lets web's quota breathe.
CAPACITY = {"batch-capacity": "batch capacity", "batch-capacity-breathe": "batch capacity + breathing"}
BREATHING = "batch-capacity-breathe"
#: The baselines that change web's own settings, and what that setting is: each is
#: compared with web alone too, printed as web's own gain (what the setting does for web
#: with nothing beside it is not protection, so it is never credited to a strategy).
OWN_SETTINGS = {"alone-burst": "burst", "alone-breathe": "its quota breathing"}
#: The busy-alone control's window: web beside one idle-class spinner.
CONTROL = "busy-alone"


class RecordsError(ValueError):
    """A run's records that cannot be read: the message names the file and the line."""


#: What the report reads from run.json (top level, ``args``, ``sizing``, each case and
#: window kind) and from each window record and its ticks: ``load`` refuses records
#: that lack one, naming the file and the field, rather than fail inside the report.
RUN_FIELDS = ("mode", "args", "cpu", "rate", "rate_sized", "web_limit", "sizing", "cases", "windows", "minutes")
RUN_NESTED: dict[str, tuple[str, ...]] = {"args": ("rounds", "warmup", "window"), "sizing": ("seconds", "requests", "cpu_s")}
CASE_FIELDS: tuple[str, ...] = ("key", "label", "limit", "near_limit")
KIND_FIELDS: tuple[str, ...] = ("key", "label", "baseline", "batch_cores")
RECORD_FIELDS = ("case", "window", "round", "drained", "iterations", "latency_us", "ticks")
TICK_FIELDS = ("t", "dt", "in_window", "web", "batch", "busy", "steal", "other_busy", "wait", "agent_wait",
               "web_periods", "web_throttled", "batch_periods", "batch_throttled", "agent_batch", "actions",
               "caps")  # fmt: skip


def load(directory: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``run.json`` and the window records (``windows.jsonl``, or ``windows.jsonl.gz`` as
    docs/colocation.md keeps them); raises RecordsError naming the file and line of a
    record that is cut or damaged, rather than report on part of a run unsaid, and the
    file and field where either lacks what the report reads, or the records are none."""
    path = os.path.join(directory, "run.json")
    try:
        with open(path, encoding="utf-8") as f:
            run = json.load(f)
    except (OSError, json.JSONDecodeError) as err:
        raise RecordsError(f"{path}: {err}") from err
    plain = os.path.join(directory, "windows.jsonl")
    path = plain if os.path.isfile(plain) else plain + ".gz"
    if not os.path.isfile(path):
        raise RecordsError(f"{directory}: no windows.jsonl (nor windows.jsonl.gz) beside run.json")
    windows: list[dict[str, Any]] = []
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    windows.append(json.loads(line))
                except json.JSONDecodeError as err:
                    raise RecordsError(f"{path}: line {number} is not a whole record ({err.msg}): "
                                       "the file is cut or damaged") from err  # fmt: skip
    except (OSError, EOFError) as err:  # a cut .gz
        raise RecordsError(f"{path}: {err}") from err
    why = run_lacks(run)
    if why:
        raise RecordsError(f"{os.path.join(directory, 'run.json')}: {why}")
    why = next((w for n, r in enumerate(windows, 1) if (w := record_lacks(r, n))), None) if windows else (
        "no window records")  # fmt: skip
    if why:
        raise RecordsError(f"{path}: {why}")
    return run, windows


def _lacks(obj: Any, where: str, fields: Sequence[str]) -> str | None:
    if not isinstance(obj, dict):
        return f"{where} is not an object"
    missing = [f for f in fields if f not in obj]
    return f"{where} has no {', '.join(repr(f) for f in missing)}" if missing else None


def run_lacks(run: Any) -> str | None:
    """What run.json lacks of what the report reads (the first thing), or None."""
    why = _lacks(run, "the run", RUN_FIELDS)
    if why:
        return why
    for name, fields in RUN_NESTED.items():
        why = _lacks(run[name], name, fields)
        if why:
            return why
    for name, fields in (("cases", CASE_FIELDS), ("windows", KIND_FIELDS)):
        if not isinstance(run[name], list) or not run[name]:
            return f"{name} is not a list of at least one"
        why = next((w for i, o in enumerate(run[name]) if (w := _lacks(o, f"{name}[{i}]", fields))), None)
        if why:
            return why
    why = stopped_lacks(run)
    if why:
        return why
    keys = {k["key"] for k in run["windows"]}
    return next((f"windows[{i}] has baseline {k['baseline']!r}, not a window of this run"
                 for i, k in enumerate(run["windows"]) if k["baseline"] is not None and k["baseline"] not in keys),
                None)  # fmt: skip


def stopped_lacks(run: Mapping[str, Any]) -> str | None:
    """What is wrong with a stopped run's ``stopped`` (``bench.colocation.RunStopped``:
    why, a text, and the whole rounds kept, 1 to one less than asked), or None."""
    if "stopped" not in run:
        return None
    stopped, asked = run["stopped"], run["args"].get("rounds")
    if not isinstance(stopped, dict):
        return "stopped is not an object"
    if not isinstance(stopped.get("why"), str):
        return "stopped has no 'why' (a text)"
    rounds = stopped.get("rounds")
    top = asked - 1 if type(asked) is int else None
    if type(rounds) is not int or rounds < 1 or (top is not None and rounds > top):
        return f"stopped's rounds is {rounds!r}, not a count of whole rounds from 1 to {top or 'the rounds asked - 1'}"
    return None


def record_lacks(record: Any, n: int) -> str | None:
    """What window record ``n`` (1-based, of windows.jsonl) lacks of what the report reads, or None."""
    why = _lacks(record, f"record {n}", RECORD_FIELDS)
    if why or not isinstance(record["ticks"], list):
        return why or f"record {n}: its ticks are not a list"
    return next((f"record {n}: {w}" for i, t in enumerate(record["ticks"])
                 if (w := _lacks(t, f"tick {i}", TICK_FIELDS))), None)  # fmt: skip


def missing_rounds(run: Mapping[str, Any], windows: Sequence[Mapping[str, Any]]) -> str | None:
    """What the records lack against what run.json says was run (a file cut at a line
    boundary reads well and would be reported as a shorter run), or how far a stopped run
    got (``stopped`` in run.json, ``bench.colocation.RunStopped``); None when whole."""
    wanted = (run.get("args") or {}).get("rounds")
    cases = len(run.get("cases") or []) or 1
    kinds = len(run.get("windows") or []) or 1
    stopped = run.get("stopped")  # its shape checked by load (stopped_lacks)
    if stopped and stopped["rounds"] * cases * kinds == len(windows):
        return f"the run stopped, {stopped['why']}: the report covers {whole_rounds(stopped['rounds'])}"
    if not isinstance(wanted, int) or len(windows) >= wanted * cases * kinds:
        return None
    return (f"records: {len(windows)} of the {wanted * cases * kinds} windows run.json says were run "
            f"({wanted} rounds x {cases} cases x {kinds} windows): the report covers only these")  # fmt: skip


def whole_rounds(n: int) -> str:
    return "its whole round" if n == 1 else f"its {n} whole rounds"


def in_window(w: dict[str, Any]) -> list[dict[str, Any]]:
    return [t for t in w["ticks"] if t["in_window"]]


def window_figures(w: dict[str, Any]) -> dict[str, float]:
    """One window's figures from its ticks (rates weighed by each tick's length)."""
    ticks = in_window(w)
    seconds = sum(t["dt"] for t in ticks)
    web = sum(t["web"] * t["dt"] for t in ticks)
    batch = sum(sum(t["batch"].values()) * t["dt"] for t in ticks)
    foreign = sum(max(0.0, t["busy"] - t["web"] - sum(t["batch"].values())) * t["dt"] for t in ticks)
    periods = sum(t["web_periods"] for t in ticks)
    requests = len(w["latency_us"])
    waits = [(t["wait"], t["dt"]) for t in ticks if t["wait"] is not None]
    agent_waits = [t["agent_wait"] for t in ticks if t["agent_wait"] is not None]
    mean = (lambda xs: sum(xs) / len(xs) if xs else math.nan)  # noqa: E731
    return {
        "seconds": seconds, "requests": requests, "web_cpu_s": web, "batch_cpu_s": batch,
        "foreign_s": foreign, "spare_s": max(0.0, seconds - web - foreign),
        "web_cpu_per_request_ms": web / requests * 1e3 if requests else math.nan,
        "web_periods": periods, "web_throttled": sum(t["web_throttled"] for t in ticks),
        "web_throttled_pct": sum(t["web_throttled"] for t in ticks) / periods * 100 if periods else 0.0,
        "steal_pct": sum(t["steal"] * t["dt"] for t in ticks) / seconds * 100 if seconds else math.nan,
        "other_busy_pct": sum(t["other_busy"] * t["dt"] for t in ticks) / seconds * 100 if seconds else math.nan,
        "foreign_pct": foreign / seconds * 100 if seconds else math.nan,
        "pods_pct": (web + batch) / seconds * 100 if seconds else math.nan,
        "busy_pct": sum(t["busy"] * t["dt"] for t in ticks) / seconds * 100 if seconds else math.nan,
        "iterations": float(sum(w["iterations"].values())),
        "batch_agent_s": sum(t["agent_batch"] * t["dt"] for t in ticks),
        "batch_thr_pct": sum(t["batch_throttled"] for t in ticks) / max(1, sum(t["batch_periods"] for t in ticks)) * 100,
        "wait_kernel": mean([v for v, _ in waits]), "wait_agent": mean(agent_waits),
        "actions": float(sum(t["actions"] for t in ticks)),
    }  # fmt: skip


@dataclass
class Row:
    key: str
    label: str
    baseline: str | None
    ms: dict[str, Interval]
    ratio: dict[str, Interval]
    requests: int
    kept: Interval  # batch kernel CPU, % of the no-agent window's
    spare: Interval  # batch kernel CPU, % of the spare capacity
    iterations: Interval  # batch iterations, % of the no-agent window's
    figures: dict[str, float]  # medians over the rounds of window_figures
    undrained: int
    verdict: Verdict | None = None
    #: p99, p99.9 against the busy-alone control (web beside an idle-class spinner), for
    #: the windows judged against web alone, where the control ran: what the batch pods
    #: cost web beyond a busy CPU's (a busy CPU spares web the wake-ups an idle one pays,
    #: so "alone" can flatter a strategy). Printed, not judged: the goal is against alone.
    vs_control: dict[str, Interval] = field(default_factory=dict)


@dataclass
class CaseSummary:
    key: str
    label: str
    near_limit: bool
    rounds: int
    rows: list[Row]
    #: Why no verdict is printed for the case (empty: verdicts are printed).
    refused: list[str] = field(default_factory=list)
    #: Why every verdict of the case is undecided, whatever the intervals say.
    unsure: list[str] = field(default_factory=list)
    #: What the batch-capacity windows saw of the agent (capacity published, squeezes).
    capacity: list[str] = field(default_factory=list)
    #: Each window's seconds end to end, and its release wait (None where not recorded).
    took: list[float] = field(default_factory=list)
    released_s: list[float] = field(default_factory=list)


def took_line(s: CaseSummary) -> list[str]:
    """How long a window took end to end (policy, warm-up, window, release wait,
    settle): what a full run's length is sized from."""
    if not s.took:
        return []
    wait = f"; release wait median {_median(s.released_s):.1f} s, longest {max(s.released_s):.1f} s" if s.released_s else ""
    return [f"a window took {_median(s.took):.1f} s end to end (median of {len(s.took)}; longest "
            f"{max(s.took):.1f} s){wait}"]  # fmt: skip


def capacity_lines(windows: Sequence[dict[str, Any]]) -> list[str]:
    """What the node published (``waterline.io/batch-cpu``, cores) in the batch-capacity
    windows' measured ticks, whether the squeeze capped a cap pod, and whether every
    value came back after them; empty when there were none."""
    return [line for key in CAPACITY for line in _capacity_lines(key, [w for w in windows if w["window"] == key])]


def _capacity_lines(key: str, mine: Sequence[dict[str, Any]]) -> list[str]:
    if not mine:
        return []
    ticks = [t for w in mine for t in in_window(w)]
    published = [t["published"] for t in ticks if t.get("published") is not None]
    squeezed = sorted({p for t in ticks for p in t["caps"] if p.startswith("cap-")})
    idle = max((t["isolated"].get("idle", 0) for t in ticks), default=0)
    back = [w.get("released") for w in mine]
    shown = f"{min(published):.3f}-{max(published):.3f} cores" if published else "nothing"
    raised = sum(1 for t in ticks if t["isolated"].get("quotaBurst", 0) > 0)
    breathing = f"; web's quota raised above its limit in {raised}/{len(ticks)} ticks" if key == BREATHING else ""
    return [f"{CAPACITY[key]}: the node published {shown} of batch-cpu in {len(published)}/{len(ticks)} ticks; "
            f"squeeze caps: {', '.join(squeezed) or 'none'}; pods held idle: up to {idle}; "
            f"everything handed back after {sum(1 for b in back if b)}/{len(back)} windows{breathing}"]  # fmt: skip


def _median(values: Sequence[float]) -> float:
    known = sorted(v for v in values if not math.isnan(v))
    return nearest_rank(known, 0.5) if known else math.nan


def summarize(run: dict[str, Any], windows: Sequence[dict[str, Any]],
              resamples: int = RESAMPLES) -> list[CaseSummary]:  # fmt: skip
    """The report's figures and verdicts, per case, from the records (``resamples``: of
    each bootstrap; fewer only where the intervals do not matter)."""
    kw = {"resamples": resamples}
    kinds = {w["key"]: w for w in run["windows"]}
    sizing = Sizing(**run["sizing"])
    out = []
    for case in run["cases"]:
        mine = [w for w in windows if w["case"] == case["key"]]
        rounds = sorted({w["round"] for w in mine})
        by = {(w["window"], w["round"]): w for w in mine}
        complete = [r for r in rounds if all((k, r) in by for k in kinds)]
        lat = {k: Pool([by[(k, r)]["latency_us"] for r in complete]) for k in kinds}
        figs = {k: [window_figures(by[(k, r)]) for r in complete] for k in kinds}
        rows = []
        for key, kind in kinds.items():
            base = kind["baseline"]
            against = base or ("alone" if key in OWN_SETTINGS and "alone" in kinds else None)
            ms = {q: _scaled(quantile(lat[key], p, **kw), 1e-3) for q, p in QUANTILES}
            ratio = {q: quantile_ratio(lat[key], lat[against], p, **kw) for q, p in QUANTILES} if against else {}
            col = lambda name, k=key, figs=figs: [f[name] for f in figs[k]]  # noqa: E731
            rows.append(Row(
                key, kind["label"], base, ms, ratio, len(lat[key].union),
                share(col("batch_cpu_s"), col("batch_cpu_s", "none"), **kw) if "none" in kinds else _nan(),
                share(col("batch_cpu_s"), col("spare_s"), **kw),
                share(col("iterations"), col("iterations", "none"), **kw) if "none" in kinds else _nan(),
                {name: _median(col(name)) for name in (figs[key][0] if figs[key] else {})},
                sum(1 for r in complete if not by[(key, r)]["drained"]),
            ))  # fmt: skip
        summary = CaseSummary(case["key"], case["label"], case["near_limit"], len(complete), rows,
                              capacity=capacity_lines(mine),
                              took=[w["took_s"] for w in mine if w.get("took_s")],
                              released_s=[w["released_s"] for w in mine if w.get("released_s") is not None])
        _checks(summary, run, sizing, case, figs)
        for row in rows:
            if row.key in STRATEGY_KEYS and row.baseline == "alone" and CONTROL in kinds:
                row.vs_control = {q: quantile_ratio(lat[row.key], lat[CONTROL], p, **kw) for q, p in QUANTILES}
            if row.key in STRATEGY_KEYS and row.baseline:
                own = baseline_throttled_more(_throttled(figs[row.baseline]), _throttled(figs[row.key]))
                row.verdict = _verdict(row, summary, {k: len(lat[k].union) for k in kinds}, own)
        out.append(summary)
    return out


def _nan() -> Interval:
    return Interval(math.nan, math.nan, math.nan, 0)


def _scaled(i: Interval, k: float) -> Interval:
    return Interval(i.value * k, i.low * k, i.high * k, i.rounds)


def _checks(summary: CaseSummary, run: dict[str, Any], sizing: Sizing, case: dict[str, Any],
            figs: dict[str, list[dict[str, float]]]) -> None:  # fmt: skip
    """The protocol's checks: a throttled or ill-sized baseline refuses the case's
    verdicts; short windows, thin batch demand, too few rounds or an undrained queue leave
    them undecided."""
    alone = figs.get("alone", [])
    periods, throttled = _throttled(alone)
    if not case["near_limit"]:
        summary.refused += sizing_problems(sizing, run["rate"], case["limit"])
        why = alone_throttled(periods, throttled)
        if why:
            summary.refused.append(why)
        why = alone_use(sum(f["web_cpu_s"] for f in alone), sum(f["seconds"] for f in alone), float(case["limit"]))
    else:
        why = not_near_limit(periods, throttled)
    if why and alone:
        summary.unsure.append(why)
    args = run["args"]
    demand = max((w["batch_cores"] for w in run["windows"] if w["key"] in STRATEGY_KEYS), default=0.0)
    summary.unsure += window_problems(float(args["window"]), demand if demand else MIN_BATCH_CORES)
    if summary.rounds < FULL_ROUNDS:
        summary.unsure.append(f"{summary.rounds} rounds < {FULL_ROUNDS}")
    undrained = sum(r.undrained for r in summary.rows)
    if undrained:
        summary.unsure.append(f"web's queue had not drained before {undrained} windows")


def _throttled(figs: Sequence[dict[str, float]]) -> tuple[int, int]:
    """Web's CFS periods and throttled periods over the rounds of a window kind."""
    return sum(int(f["web_periods"]) for f in figs), sum(int(f["web_throttled"]) for f in figs)


def _verdict(row: Row, summary: CaseSummary, sizes: dict[str, int], own: str | None = None) -> Verdict:
    """The goal's verdict for a strategy's row; ``own``: why this row's latency ratios
    cannot say *meets* (see ``_deflated``)."""
    p99, p999, kept = GOAL
    unsure = "; ".join(summary.unsure) or None
    base = row.baseline or "alone"
    verdicts = [_deflated(judge(row.ratio[name], goal, unsure=unsure or thin_tail([sizes[row.key], sizes[base]], q)),
                          unsure, own)
                for name, goal, q in (("p99", p99, 0.99), ("p999", p999, 0.999))]  # fmt: skip
    if row.key != "none":
        verdicts.append(judge(row.kept, kept, at_most=False, unsure=unsure))
    return combine(verdicts)


def _deflated(verdict: Verdict, unsure: str | None, own: str | None) -> Verdict:
    """A latency ratio's verdict against a baseline that web's own quota throttled more
    than the window (``own``, why): that baseline's tail is longer, so the ratio is
    smaller than the strategy earned. *fails* stands (beyond the goal even so); *meets*
    and the rest are undecided with the reason. Batch CPU kept does not depend on the
    baseline and is judged as it is."""
    if own is None or verdict.word == FAILS:
        return verdict
    return Verdict(UNDECIDED, f"{unsure}; {own}" if unsure else own)


# -- the text ----------------------------------------------------------------------------


def text(run: dict[str, Any], summaries: Sequence[CaseSummary]) -> str:
    lines = _header(run)
    for s in summaries:
        lines += ["", f"=== {s.label}{' (judged apart: near its own limit)' if s.near_limit else ''}; "
                  f"{s.rounds} {'round' if s.rounds == 1 else 'rounds'} ==="]  # fmt: skip
        lines.append(f"{'window':<30}{'req':>8}{'p50 ms':>22}{'p99 ms':>22}{'p99.9 ms':>22}"
                     f"{'p99 x':>20}{'p99.9 x':>20}")  # fmt: skip
        for r in s.rows:
            ratio = (lambda q, r=r: r.ratio[q].text() if q in r.ratio else "(baseline)")  # noqa: E731

            lines.append(f"{r.label:<30}{r.requests:>8} {r.ms['p50'].text('{:.2f}'):>21} "
                         f"{r.ms['p99'].text('{:.1f}'):>21} {r.ms['p999'].text('{:.1f}'):>21}"
                         f"{ratio('p99'):>20}{ratio('p999'):>20}")  # fmt: skip
        lines += ["", f"{'window':<30}{'BE kept % (kernel)':>22}{'BE % of spare':>22}{'BE iter %':>22}"
                  f"{'busy %':>8}{'pods %':>8}{'web ms/req':>11}{'web thr %':>10}{'steal %':>8}{'other CPU %':>12}"
                  f"{'others %':>9}{'undrained':>10}"]  # fmt: skip
        for r in s.rows:
            f = r.figures
            lines.append(f"{r.label:<30}{r.kept.text('{:.0f}'):>22}{r.spare.text('{:.0f}'):>22}"
                         f"{r.iterations.text('{:.0f}'):>22}{f.get('busy_pct', math.nan):>8.0f}"
                         f"{f.get('pods_pct', math.nan):>8.0f}"
                         f"{f.get('web_cpu_per_request_ms', math.nan):>11.2f}"
                         f"{f.get('web_throttled_pct', math.nan):>10.1f}{f.get('steal_pct', math.nan):>8.1f}"
                         f"{f.get('other_busy_pct', math.nan):>12.0f}{f.get('foreign_pct', math.nan):>9.1f}"
                         f"{r.undrained:>10}")  # fmt: skip
        lines += ["", "the kernel's figures beside the agent's (medians over the rounds):",
                  f"{'window':<30}{'BE core-s kernel':>18}{'agent':>8}{'web wait % kernel':>19}"
                  f"{'agent':>8}{'BE periods thr %':>18}{'actions':>9}"]  # fmt: skip
        for r in s.rows:
            f = r.figures
            lines.append(f"{r.label:<30}{f.get('batch_cpu_s', math.nan):>18.1f}"
                         f"{f.get('batch_agent_s', math.nan):>8.1f}{f.get('wait_kernel', math.nan):>19.1f}"
                         f"{f.get('wait_agent', math.nan):>8.1f}{f.get('batch_thr_pct', math.nan):>18.1f}"
                         f"{f.get('actions', math.nan):>9.0f}")  # fmt: skip
        lines += [""] + s.capacity + took_line(s) + _verdict_lines(s)
    lines += ["", "x = ratio of pooled nearest-rank percentiles to the window's own baseline; "
              "[low-high] = 95% interval, block bootstrap over rounds; BE kept % = batch kernel "
              "CPU (cpuacct) of the no-agent window's; BE % of spare = of the node's core minus "
              "web's CPU minus other processes'; BE iter % = batch iterations of the no-agent "
              "window's; others % = the bench CPU used by processes outside the bench; busy % = "
              "the bench CPU's busy share (the kernel's); pods % = its share web and batch used; web thr % = web's CFS periods throttled; steal % = time "
              "the hypervisor took; other CPU % = the busy share of the machine's other CPU(s); "
              "undrained = windows whose pause did not empty web's queue first"]  # fmt: skip
    if run["mode"] == "quick" or run["args"].get("quick"):
        lines.append("--quick: a smoke run; its verdicts are undecided by design, its figures are not a measurement")
    return "\n".join(lines) + "\n"


def _loadavg(machine: dict[str, Any]) -> str:
    """The 1-minute load average at the start, as uptime prints it (two decimals)."""
    first = machine.get("loadavg", ["?"])[0]
    return f"{first:.2f}" if isinstance(first, int | float) else str(first)


def _kept_off(real: dict[str, Any]) -> str:
    """How the bench CPU was shared: nothing said for runs from before it was recorded."""
    cpu = real.get("bench_cpu")
    if not cpu:
        return ""
    if cpu.get("shared"):
        return "; the node's other processes free to run on it (--share-cpu)"
    return f"; {cpu['moved']} processes outside kubepods kept off it ({cpu['moved_at_start']} at the start)"


def _header(run: dict[str, Any]) -> list[str]:
    a, sz = run["args"], run["sizing"]
    cpr = sz["cpu_s"] / sz["requests"] * 1e3 if sz["requests"] else math.nan
    m = run.get("machine", {})
    real = run.get("real")
    where = (f"on the real node {real['node']} (kubelet {real['kubelet']}; the pods pinned to CPU {run['cpu']}, "
             f"the load from the host's other CPUs{_kept_off(real)})" if real
             else f"on real cgroup v1, CPU {run['cpu']} as a one-core node")  # fmt: skip
    return [
        f"co-location ({run['mode']}) {where}: "
        f"{a['rounds']} rounds x {len(run['cases'])} cases x {len(run['windows'])} windows "
        f"({a['warmup']} s warm-up + {a['window']} s measured each, order rotated each round); "
        f"{run['minutes']:.1f} min; {m.get('date', '')}, load average {_loadavg(m)}",
        f"sizing: web alone, no limit, {sz['seconds']:.0f} s: {cpr:.3f} ms of CPU a request; "
        f"rate {run['rate']:.0f} req/s ({'sized' if run['rate_sized'] else 'given'}: "
        f"{cpr * run['rate'] / 1e3 / run['web_limit']:.0%} of a {run['web_limit']:g} core limit)",
        "batch: 2 Burstable (0.15 core requested) + 1 BestEffort, steady demand 1.5 cores in the "
        "contended windows; busy alone: one BestEffort idle-class spinner at 1 core",
        *(["batch-capacity window: the demand carried by 3 batch-capacity pods instead (BestEffort, "
           "batch-cpu 600m/500m/400m, their quota the agent's from it; read from kubepods/besteffort)"]
          if any(w["key"] in CAPACITY for w in run["windows"]) else []),
    ]  # fmt: skip


def _verdict_lines(s: CaseSummary) -> list[str]:
    """The LC pod's own gain from burst and the busy-alone control (figures, printed in
    every case), then the verdicts or why there are none."""
    p99, p999, kept = GOAL
    out = []
    busy = next((r for r in s.rows if r.key == CONTROL and r.ratio), None)
    for own in (r for r in s.rows if r.key in OWN_SETTINGS and r.ratio):
        setting = OWN_SETTINGS[own.key]
        out.append(f"web's own gain from {setting}, alone (not protection): p99 {own.ratio['p99'].text()}x, "
                   f"p99.9 {own.ratio['p999'].text()}x of web alone without {setting}")  # fmt: skip
    if busy is not None:
        out.append(f"control, web beside an idle spinner: p99 {busy.ratio['p99'].text()}x, "
                   f"p99.9 {busy.ratio['p999'].text()}x of web alone")  # fmt: skip
        out += [f"against the control (not judged): {r.label}: p99 {r.vs_control['p99'].text()}x, "
                f"p99.9 {r.vs_control['p999'].text()}x of web beside an idle spinner"
                for r in s.rows if r.vs_control]  # fmt: skip
    goal = f"goal (p99 <= {p99}x, p99.9 <= {p999}x of its baseline, batch >= {kept:.0f}% of no agent)"
    if s.refused:
        return [*out, f"{goal}: no verdict for this case: " + "; ".join(s.refused)]
    return [*out, *(f"{goal}: {r.label}: {r.verdict.text()}" for r in s.rows if r.verdict is not None)]


def render(directory: str, png: bool = True) -> list[CaseSummary]:
    """The report printed and written beside the records (``report.txt``), and the
    pictures (``colocation.html``, and with ``png`` ``colocation.png`` where chromium
    runs)."""
    from bench.colocation_plot import write_pictures

    run, windows = load(directory)
    summaries = summarize(run, windows)
    report = text(run, summaries)
    lacking = missing_rounds(run, windows)
    if lacking:
        report = f"{lacking}\n{report}"
    with open(os.path.join(directory, "report.txt"), "w", encoding="utf-8") as f:
        f.write(report)
    print(report, end="")
    for line in write_pictures(directory, run, windows, report, png):
        print(line)
    return summaries
