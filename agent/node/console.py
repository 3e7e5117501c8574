"""The local mode's console view: every tick, node usage against each waterline, and the
actions, as a few plain lines (no curses: it must read the same in a terminal, a pipe and
a CI log).

    tick 7  12:00:07  node demo  pods 3  throttled 2  4.1 ms
      cpu_total_usage        1.96 cores  throttleDown 1.00 (gap +0.96)  evict -  throttleUp -
      rules  cpu-guard/cpu-high triggered
      throttle  demo/batch-a  cap 0.20 cores  by cpu-guard/cpu-high on cpu_total_usage 1.96 > 1.00, gap 0.96 -> 0.41
      pods  demo/batch-a 0.75/0.20  demo/batch-b 0.74/0.30  demo/web 0.50

With a CPU isolation class in force, a pod joining or leaving it has a line
(``idle  demo/batch-a  marked by cpu-guard (scope)  [applied]``) and the pods line marks
the members (``demo/batch-a 0.75 idle``, ``demo/web 0.50 burst``).

A throttle or restore whose quota write failed shows ``[failed: ...]``, never
``[applied]``; pods whose cgroup is not on this host say so (they are never acted on).
"""

from __future__ import annotations

import math
import time
from typing import TextIO

from agent.model.analysis import ACTION_TYPES
from agent.model.registry import BY_NAME
from agent.node.loop import TickOutcome, action_result
from agent.node.tick import TickReport
from engine.records import FAILED, ActionRecord, IsolationChange


def _unit(metric: str) -> str:
    return str(getattr(BY_NAME.get(metric), "unit", ""))


def _value(metric: str, value: float | None) -> str:
    if value is None:
        return "-"
    unit = _unit(metric)
    if unit == "bytes":
        return f"{value / 2**30:.2f} GiB"
    suffix = {"cores": " cores", "percent": "%"}.get(unit, "")
    return f"{value:.2f}{suffix}"


def _gap(metric: str, gap: float, sign: str = "") -> str:
    """A gap in the unit its metric is shown in (GiB for bytes), without the suffix."""
    return gap_text(gap / 2**30 if _unit(metric) == "bytes" else gap, sign)


def gap_text(gap: float, sign: str = "") -> str:
    """A gap to two decimals, except one that is open but under 0.005: it keeps its first
    significant digit (``0.003``), so an action on a small gap never reads ``gap 0.00 ->
    0.00`` as if it acted on nothing."""
    if abs(gap) >= 0.005 or abs(gap) < 1e-6:
        return f"{gap:{sign}.2f}"
    return f"{gap:{sign}.{-math.floor(math.log10(abs(gap)))}f}"


def render(outcome: TickOutcome) -> str:
    lines = [_head(outcome), *_problems(outcome)]
    report = outcome.report
    if report is None:
        return "\n".join(lines)
    lines.extend(_metrics(outcome, report))
    if report.rules:
        lines.append("  rules  " + "  ".join(f"{k} {v}" for k, v in sorted(report.rules.items())))
    lines.extend(_action_line(record, outcome) for record in report.actions)
    lines.extend(_change_line(change, outcome) for change in report.isolation)
    if report.limited is not None:
        lines.append(f"  limited  evictions stopped by {report.limited}: the gap stays open")
    if report.eviction_backoff is not None:
        lines.append(f"  backoff  eviction API failed: next round in {report.eviction_backoff:.0f} s")
    lines.extend(_pods(outcome))
    return "\n".join(lines)


def _head(outcome: TickOutcome) -> str:
    clock = time.strftime("%H:%M:%S", time.localtime(outcome.at))
    head = (
        f"tick {outcome.seq}  {clock}  node {outcome.node}  pods {len(outcome.pods)}  "
        f"throttled {len(outcome.caps)}  {outcome.duration * 1000:.1f} ms"
    )
    if outcome.mode == "dry-run":
        head += "  [dry run: nothing written]"
    return head


def _problems(outcome: TickOutcome) -> list[str]:
    lines = []
    if outcome.error is not None:
        lines.append(f"  ! {outcome.error}")
    errors = {k: v for k, v in outcome.errors.items() if v}
    if errors:
        lines.append("  ! errors " + ", ".join(f"{k} {v}" for k, v in sorted(errors.items())))
    invalid = {k: v for k, v in outcome.invalid.items() if v}
    if invalid:
        counts = ", ".join(f"{k} {v}" for k, v in sorted(invalid.items()))
        lines.append(f"  ! skipped as invalid: {counts} (the log names each, with the reason)")
    lines.extend(f"  ! invalid: {err}" for err in outcome.policy_errors)
    return lines


def _metrics(outcome: TickOutcome, report: TickReport) -> list[str]:
    lines = []
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
                shown += f" (gap {_gap(metric, gap, '+')})"
            parts.append(shown)
        lines.append("  ".join(parts))
    if report.missing:
        why = " (a rate needs two samples)" if outcome.seq == 1 else ""
        lines.append(f"  no figure this tick{why}: " + ", ".join(report.missing))
    return lines


def result_of(record: ActionRecord, outcome: TickOutcome) -> str:
    """The result shown: a throttle or restore whose write failed is ``failed``, never
    ``applied`` (the engine marks it; nothing was written, no cap is in force)."""
    if record.action != "evict" and record.result == FAILED and not record.preview:
        return "failed"
    return action_result(record, outcome)


def _action_line(record: ActionRecord, outcome: TickOutcome) -> str:
    what = f"  {record.action:<8} {record.pod}"
    if record.action != "evict":
        limit = (
            "unlimited (original quota)" if record.cpu_cap is None else f"{record.cpu_cap:.2f} cores"
        )
        what += f"  cap {limit}"
    if record.metric:
        before = "-" if record.gap_before is None else _gap(record.metric, record.gap_before)
        after = "-" if record.gap_after is None else _gap(record.metric, record.gap_after)
        what += (
            f"  by {record.rule} on {record.metric} {_value(record.metric, record.value)}"
            f" vs {_value(record.metric, record.waterline)}, gap {before} -> {after}"
        )
    else:
        what += f"  ({record.reason})"
    result = result_of(record, outcome)
    if result == "failed" and record.action != "evict":
        return f"{what}  [failed: nothing written, see the log]"
    return f"{what}  [{result}]"


def _change_line(change: IsolationChange, outcome: TickOutcome) -> str:
    result = "dry-run" if outcome.mode == "dry-run" else change.result or "applied"
    return (f"  {change.kind:<8} {change.pod}  {change.change} by {change.policy or '-'} "
            f"({change.reason})  [{result}]")


def _pods(outcome: TickOutcome) -> list[str]:
    missing = set(outcome.missing)
    member = {key: cls for cls, keys in outcome.isolated.items() for key in keys}
    pods = []
    for pod in sorted(outcome.pods, key=lambda p: p.key):
        if pod.key in missing:
            pods.append(f"{pod.key} (no cgroup)")
            continue
        usage = outcome.usage.get(pod.key)
        cpu = "-" if usage is None or usage.cpu is None else f"{usage.cpu:.2f}"
        pod_cap = outcome.caps.get(pod.key)
        pods.append(f"{pod.key} {cpu}" + (f"/{pod_cap:.2f}" if pod_cap is not None else "")
                    + (f" {member[pod.key]}" if pod.key in member else ""))
    lines = ["  pods (cpu/cap)  " + "  ".join(pods)] if pods else []
    if missing:
        lines.append(
            f"  {len(missing)} of {len(outcome.pods)} pods have no cgroup on this host (not running "
            "here, or not started yet): not measured, never acted on"
        )
        if len(missing) == len(outcome.pods) and outcome.seq == 1:
            lines.append(
                "  (to watch the pods running on this machine: waterline local-objects DIR, "
                "then --objects DIR)"
            )
    return lines


class ConsoleView:
    """Prints :func:`render` of each tick to a stream (stdout by default)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def __call__(self, outcome: TickOutcome) -> None:
        self.stream.write(render(outcome) + "\n")
        self.stream.flush()
