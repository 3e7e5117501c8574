"""The co-location benchmark's figures and its printed tables (see ``bench.colocation``).

Per phase, from the kernel's per-tick reads (cpuacct.usage, cpu.stat, schedstat,
/proc/stat) and the agent's ticks; per strategy, the median over the rounds and the
spread (min-max). Ratios are to the same round's baseline (the web pod alone) and to the
same round's no-agent run, so slow drift of the shared machine cancels out. The baseline
is the median over the rounds of the web pod's figures alone: on a shared machine one
baseline can catch a burst of someone else's work, and would then skew its whole round.

"Beyond the need": while a cap was in force, the room under the node CPU line that the
capped pods wanted and did not get (their demand, from the timeline, minus what the kernel
counted), in core-seconds. An agent that takes exactly the gap leaves the node at the line
and this at 0; one that takes more leaves the node under the line with batch work waiting.
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections.abc import Sequence
from typing import Any

NAMESPACE = "bench"


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def latencies(records: list[tuple[float, float]], start: float, end: float) -> list[float]:
    return [r for a, r in records if start <= a < end]


def phase_figures(phase: Any, records: list[tuple[float, float]], args: argparse.Namespace,
                  batch: list[str]) -> dict[str, float]:  # fmt: skip
    lat = latencies(records, phase.start, phase.end)
    ticks = list(zip(phase.kernel, phase.agent, phase.demand, strict=True))
    dt = 1.0
    node = [sum(k.cpu.values()) for k, _, _ in ticks]
    beyond = 0.0
    caps_before: dict[str, float] = {}
    for (k, outcome, demand), used in zip(ticks, node, strict=True):
        if caps_before:
            unmet = sum(max(0.0, demand[b] - k.cpu[b]) for b in batch if f"{NAMESPACE}/{b}" in caps_before)
            beyond += min(max(0.0, args.line - used), unmet) * dt
        caps_before = dict(outcome.caps)
    agent_node = [o.report.usage.get("cpu_total_usage") for _, o, _ in ticks if o.report is not None]
    agent_wait = [o.report.usage.get("lc_cpu_wait_ratio") for _, o, _ in ticks if o.report is not None]
    periods = sum(k.periods[b] for k, _, _ in ticks for b in batch)
    throttled = sum(k.throttled[b] for k, _, _ in ticks for b in batch)
    waits = [k.wait for k, _, _ in ticks if k.wait is not None]
    return {
        "requests": len(lat),
        "p50": percentile(lat, 0.50), "p99": percentile(lat, 0.99), "p999": percentile(lat, 0.999),
        "over_line": sum(1 for u in node if u > args.line) * dt,
        "over_line_agent": sum(1 for u in agent_node if u is not None and u > args.line) * dt,
        "over_wait": sum(1 for w in waits if w > args.wait_line) * dt,
        "be_kernel": sum(k.cpu[b] for k, _, _ in ticks for b in batch) * dt,
        "be_agent": sum((o.usage[f"{NAMESPACE}/{b}"].cpu or 0.0) for _, o, _ in ticks for b in batch
                        if f"{NAMESPACE}/{b}" in o.usage) * dt,
        "beyond": beyond,
        "util": statistics.fmean(node) * 100.0 if node else float("nan"),
        "be_throttled_pct": throttled / periods * 100.0 if periods else 0.0,
        "be_throttled_s": sum(k.throttled_s[b] for k, _, _ in ticks for b in batch),
        "wait_kernel": statistics.fmean(waits) if waits else float("nan"),
        "wait_agent": statistics.fmean([w for w in agent_wait if w is not None]) if any(
            w is not None for w in agent_wait) else float("nan"),
        "actions": sum(len(o.report.actions) for _, o, _ in ticks if o.report is not None),
        "foreign": statistics.fmean([max(0.0, k.cpu_busy - sum(k.cpu.values())) for k, _, _ in ticks])
        * 100.0 if ticks else float("nan"),
    }  # fmt: skip


def latency_figures(lat: list[float]) -> dict[str, float]:
    return {"p50": percentile(lat, 0.50), "p99": percentile(lat, 0.99), "p999": percentile(lat, 0.999)}


def spread(values: Sequence[float], fmt: str = "{:.2f}") -> str:
    known = [v for v in values if not math.isnan(v)]
    if not known:
        return "-"
    mid = fmt.format(statistics.median(known))
    if len(known) == 1:
        return mid
    return f"{mid} ({fmt.format(min(known))}-{fmt.format(max(known))})"


def median(values: Sequence[float]) -> float:
    known = [v for v in values if not math.isnan(v)]
    return statistics.median(known) if known else float("nan")


def _ms(value: float) -> str:
    return f"{value * 1000:.1f}"


def report(args: argparse.Namespace, cpu: int, baselines: Sequence[Any], phases: Sequence[Any],
           records: list[tuple[float, float]], batch: list[str], seconds: float) -> None:  # fmt: skip
    from bench.colocation import chosen

    strategies = chosen(args)
    rounds_base = [latency_figures(latencies(records, b.start, b.end)) for b in baselines]
    baseline = {q: median([f[q] for f in rounds_base]) for q in ("p50", "p99", "p999")}
    figures = {(p.strategy, p.round): phase_figures(p, records, args, batch) for p in phases}
    rounds = range(args.rounds)
    print(f"co-location on real cgroup v1, CPU {cpu} as a one-core node: {args.rounds} rounds x "
          f"{len(strategies)} strategies x {args.phase:g} s, interleaved ({seconds / 60:.1f} min)")
    from bench.colocation import WEB_LIMIT, web_request

    request = web_request(args)
    kind = "Guaranteed" if request >= WEB_LIMIT else f"Burstable, {request:g} core requested,"
    print(f"web ({kind} {WEB_LIMIT:g} core limit, latency-critical): {args.rate:g} req/s Poisson, "
          f"{args.work_ms:g} ms of CPU each; batch: 2 Burstable (0.15 core requested) + 1 "
          f"BestEffort, demand 0.3 -> 1.5 -> 0.75 -> 0.3 cores")
    print(f"lines: node CPU {args.line:g} cores; lc_cpu_wait_ratio {args.wait_line:g}%; "
          f"ticks of 1 s; throttle step 10% of the node, floor 5% (or the request); the bench's "
          f"cgroup weighs {args.weight} against each process outside it")
    waits = [b.kernel[0].wait for b in baselines if b.kernel and b.kernel[0].wait is not None]
    foreign = [b.kernel[0].cpu_busy * 100 - sum(b.kernel[0].cpu.values()) * 100
               for b in baselines if b.kernel]  # fmt: skip
    print("\nnoise of the machine (the web pod alone, per round):")
    print(f"  latency p50 {spread([f['p50'] * 1e3 for f in rounds_base], '{:.2f}')} ms, "
          f"p99 {spread([f['p99'] * 1e3 for f in rounds_base], '{:.1f}')} ms, "
          f"p99.9 {spread([f['p999'] * 1e3 for f in rounds_base], '{:.1f}')} ms; "
          f"run-queue wait {spread(waits, '{:.1f}')}%; "
          f"web used {spread([b.kernel[0].cpu['web'] for b in baselines if b.kernel], '{:.2f}')} "
          f"cores; other processes on the bench CPU {spread(foreign, '{:.0f}')}%")
    print("\nprotection and cost, median (min-max) over the rounds:")
    head = (f"{'strategy':<30}{'p50 x':>17}{'p99 x':>19}{'p99.9 x':>19}{'s>CPU':>14}"
            f"{'s>wait':>14}{'BE core-s':>18}{'BE kept %':>16}{'beyond need':>18}{'util %':>9}")
    print(head)
    for strategy in strategies:
        rows = [figures[(strategy.key, r)] for r in rounds]
        ratio = {q: [rows[r][q] / baseline[q] for r in rounds] for q in ("p50", "p99", "p999")}
        kept = [rows[r]["be_kernel"] / figures[("none", r)]["be_kernel"] * 100 for r in rounds]
        print(f"{strategy.label:<30}{spread(ratio['p50']):>17}{spread(ratio['p99'], '{:.1f}'):>19}"
              f"{spread(ratio['p999'], '{:.1f}'):>19}"
              f"{spread([f['over_line'] for f in rows], '{:.0f}'):>14}"
              f"{spread([f['over_wait'] for f in rows], '{:.0f}'):>14}"
              f"{spread([f['be_kernel'] for f in rows], '{:.1f}'):>18}"
              f"{spread(kept, '{:.0f}'):>16}"
              f"{spread([f['beyond'] for f in rows], '{:.2f}'):>18}"
              f"{median([f['util'] for f in rows]):>9.0f}")
    print("\nthe kernel's figures beside the agent's (medians):")
    print(f"{'strategy':<30}{'BE core-s kernel':>18}{'agent':>8}{'s>CPU kernel':>14}{'agent':>8}"
          f"{'BE periods thr %':>18}{'BE thr s':>10}{'web wait % kernel':>19}{'agent':>8}"
          f"{'actions':>9}{'others %':>10}")
    for strategy in strategies:
        rows = [figures[(strategy.key, r)] for r in rounds]

        def m(key: str, rows: list[dict[str, float]] = rows) -> float:
            return median([f[key] for f in rows])

        print(f"{strategy.label:<30}{m('be_kernel'):>18.1f}{m('be_agent'):>8.1f}"
              f"{m('over_line'):>14.0f}{m('over_line_agent'):>8.0f}{m('be_throttled_pct'):>18.1f}"
              f"{m('be_throttled_s'):>10.1f}{m('wait_kernel'):>19.1f}{m('wait_agent'):>8.1f}"
              f"{m('actions'):>9.0f}{m('foreign'):>10.0f}")
    print("\nthe web pod's response times, ms (median over the rounds):")
    print(f"{'strategy':<30}{'p50':>8}{'p99':>8}{'p99.9':>8}")
    print(f"{'alone (baseline)':<30}{_ms(baseline['p50']):>8}{_ms(baseline['p99']):>8}"
          f"{_ms(baseline['p999']):>8}")
    for strategy in strategies:
        rows = [figures[(strategy.key, r)] for r in rounds]
        print(f"{strategy.label:<30}" + "".join(
            f"{_ms(median([f[q] for f in rows])):>8}" for q in ("p50", "p99", "p999")))
    print(f"\nrequests per phase: {median([f['requests'] for f in figures.values()]):.0f}; "
          "x = ratio to the baseline; BE kept % = of the round's no-agent run; "
          "beyond need and BE in core-seconds; others % = the bench CPU used by other processes")
    print("anchor: Heracles (ISCA 2015) kept latency SLOs at 90% average server utilization")
    if args.trace:
        for phase in phases:
            trace(phase, records, batch)


def trace(phase: Any, records: list[tuple[float, float]], batch: list[str]) -> None:
    """Every tick of a phase: demand, the kernel's figures, the web pod's latency, caps."""
    print(f"\n{phase.strategy}, round {phase.round + 1}: t demand node BE web-wait% "
          "p50ms p99ms caps")
    last = phase.start
    for k, outcome, demand in zip(phase.kernel, phase.agent, phase.demand, strict=True):
        lat = latencies(records, last, k.at)
        last = k.at
        caps = " ".join(f"{key.split('/')[1]}={cap:.2f}" for key, cap in sorted(outcome.caps.items()))
        wait = "-" if k.wait is None else f"{k.wait:.0f}"
        print(f"  {k.at - phase.start:5.1f} {sum(demand.values()):4.2f} {sum(k.cpu.values()):4.2f} "
              f"{sum(k.cpu[b] for b in batch):4.2f} {wait:>4} {_ms(percentile(lat, 0.5)):>6} "
              f"{_ms(percentile(lat, 0.99)):>6} {caps}")
