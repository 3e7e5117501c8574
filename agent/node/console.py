"""The local mode's console view: every tick, node usage against each waterline, and the
actions, as a few plain lines (no curses: it must read the same in a terminal, a pipe and
a CI log).

    tick 7  12:00:07  node demo  pods 3  throttled 2  4.1 ms
      cpu_total_usage        1.96 cores  throttleDown 1.00 (gap +0.96)  evict -  throttleUp -
      rules  cpu-guard/cpu-high triggered
      throttle  demo/batch-a  cap 0.20 cores  by cpu-guard/cpu-high on cpu_total_usage 1.96 > 1.00, gap 0.96 -> 0.41
      pods  demo/batch-a 0.75/0.20  demo/batch-b 0.74/0.30  demo/web 0.50
"""

from __future__ import annotations

import time
from typing import TextIO

from agent.model.analysis import ACTION_TYPES
from agent.model.registry import BY_NAME
from agent.node.loop import TickOutcome, action_result


def _value(metric: str, value: float | None) -> str:
    if value is None:
        return "-"
    unit = getattr(BY_NAME.get(metric), "unit", "")
    if unit == "bytes":
        return f"{value / 2**30:.2f} GiB"
    suffix = {"cores": " cores", "percent": "%"}.get(unit, "")
    return f"{value:.2f}{suffix}"


def render(outcome: TickOutcome) -> str:
    clock = time.strftime("%H:%M:%S", time.localtime(outcome.at))
    head = (
        f"tick {outcome.seq}  {clock}  node {outcome.node}  pods {len(outcome.pods)}  "
        f"throttled {len(outcome.caps)}  {outcome.duration * 1000:.1f} ms"
    )
    if outcome.mode == "dry-run":
        head += "  [dry run: nothing written]"
    lines = [head]
    if outcome.error is not None:
        lines.append(f"  ! {outcome.error}")
    errors = {k: v for k, v in outcome.errors.items() if v}
    if errors:
        lines.append("  ! errors " + ", ".join(f"{k} {v}" for k, v in sorted(errors.items())))
    for err in outcome.policy_errors:
        lines.append(f"  ! invalid: {err}")
    report = outcome.report
    if report is None:
        return "\n".join(lines)
    watched = sorted(
        set(outcome.watched) | {m for t in ACTION_TYPES for m in report.waterlines.get(t, {})}
    )
    for metric in watched:
        parts = [f"  {metric:<24} {_value(metric, report.usage.get(metric)):>12}"]
        for action_type in ACTION_TYPES:
            line = report.waterlines.get(action_type, {}).get(metric)
            if line is None:
                parts.append(f"{action_type} -")
                continue
            gap = report.gaps.get(action_type, {}).get(metric)
            shown = f"{action_type} {_value(metric, line)}"
            if gap is not None:
                shown += f" (gap {gap:+.2f})"
            parts.append(shown)
        lines.append("  ".join(parts))
    if report.missing:
        lines.append("  no figure: " + ", ".join(report.missing))
    if outcome.missing:
        lines.append("  no cgroup found for: " + ", ".join(outcome.missing))
    if report.rules:
        lines.append("  rules  " + "  ".join(f"{k} {v}" for k, v in sorted(report.rules.items())))
    for record in report.actions:
        what = f"  {record.action:<8} {record.pod}"
        if record.action != "evict":
            limit = (
                "unlimited (original quota)"
                if record.cpu_cap is None
                else f"{record.cpu_cap:.2f} cores"
            )
            what += f"  cap {limit}"
        result = action_result(record, outcome)
        if record.metric:
            before = "-" if record.gap_before is None else f"{record.gap_before:.2f}"
            after = "-" if record.gap_after is None else f"{record.gap_after:.2f}"
            what += (
                f"  by {record.rule} on {record.metric} {_value(record.metric, record.value)}"
                f" vs {_value(record.metric, record.waterline)}, gap {before} -> {after}"
            )
        else:
            what += f"  ({record.reason})"
        lines.append(f"{what}  [{result}]")
    pods = []
    for pod in sorted(outcome.pods, key=lambda p: p.key):
        usage = outcome.usage.get(pod.key)
        cpu = "-" if usage is None or usage.cpu is None else f"{usage.cpu:.2f}"
        pod_cap = outcome.caps.get(pod.key)
        pods.append(f"{pod.key} {cpu}" + (f"/{pod_cap:.2f}" if pod_cap is not None else ""))
    if pods:
        lines.append("  pods (cpu/cap)  " + "  ".join(pods))
    return "\n".join(lines)


class ConsoleView:
    """Prints :func:`render` of each tick to a stream (stdout by default)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def __call__(self, outcome: TickOutcome) -> None:
        self.stream.write(render(outcome) + "\n")
        self.stream.flush()
