"""`waterline simulate --html REPORT.html`: a self-contained picture of a simulation.

One page, no network, no script: per node and metric an inline SVG chart of usage over
the ticks against each waterline type, every action marked on its tick with the reason
in a hover title; then tables of the cluster engines' decisions. Built from the JSON
report only, so what the page shows is exactly what `simulate` printed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from pathlib import Path
from typing import Any

from agent.model.registry import BY_NAME, METRICS

WIDTH, HEIGHT = 760, 220
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 70, 20, 20, 30
LINE_COLOURS = {"usage": "#1f77b4", "evict": "#d62728", "throttleDown": "#ff7f0e", "throttleUp": "#2ca02c"}
MARK_COLOURS = {"evict": "#d62728", "throttle": "#ff7f0e", "restore": "#2ca02c"}

STYLE = """
body{font-family:system-ui,sans-serif;margin:24px;color:#222}
h1{font-size:22px}h2{font-size:18px;margin-top:32px}h3{font-size:15px;margin:18px 0 4px}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px;text-align:left}
th{background:#f3f3f3}.legend span{display:inline-block;margin-right:14px;font-size:13px}
.legend i{display:inline-block;width:18px;height:3px;vertical-align:middle;margin-right:4px}
svg text{font-size:11px;fill:#444}
"""


def _fmt(value: float, unit: str) -> str:
    if unit == "bytes":
        return f"{value / 2**30:.2f}Gi"
    if unit == "percent":
        return f"{value:.1f}%"
    return f"{value:.2f}"


class _Scale:
    def __init__(self, xs: Sequence[float], ys: Sequence[float]) -> None:
        self.x0, self.x1 = min(xs), max(xs)
        if self.x1 == self.x0:
            self.x1 = self.x0 + 1
        self.x1 += (self.x1 - self.x0) * 0.04  # room for the last tick's waterline step
        low, high = min(ys), max(ys)
        pad = (high - low) * 0.1 or abs(high) * 0.1 or 1.0
        self.y0, self.y1 = max(0.0, low - pad), high + pad

    def x(self, value: float) -> float:
        span = WIDTH - MARGIN_LEFT - MARGIN_RIGHT
        return MARGIN_LEFT + (value - self.x0) / (self.x1 - self.x0) * span

    def y(self, value: float) -> float:
        span = HEIGHT - MARGIN_TOP - MARGIN_BOTTOM
        return HEIGHT - MARGIN_BOTTOM - (value - self.y0) / (self.y1 - self.y0) * span


def _action_title(action: Mapping[str, Any], unit: str) -> str:
    parts = [f"{action['action']} {action['pod']}"]
    if action.get("result"):
        parts.append(f"result {action['result']}")
    if action.get("cpuCap", "absent") != "absent" and action["action"] != "evict":
        cap = action.get("cpuCap")
        parts.append("cap restored to original" if cap is None else f"cap {cap:.3g} cores")
    if action.get("rule"):
        parts.append(f"rule {action['rule']}")
    if action.get("waterline") is not None:
        parts.append(f"waterline {_fmt(action['waterline'], unit)}")
    if action.get("gapBefore") is not None:
        parts.append(f"gap {_fmt(action['gapBefore'], unit)} -> {_fmt(action.get('gapAfter') or 0.0, unit)}")
    if action.get("preview"):
        parts.append("preview: nothing done")
    return "; ".join(parts)


def metric_chart(metric: str, ticks: Sequence[Mapping[str, Any]]) -> str | None:
    """An SVG chart of one metric over the ticks, or None if the metric never appears."""
    unit = BY_NAME[metric].unit if metric in BY_NAME else ""
    points = [(t["at"], t.get("usage", {}).get(metric)) for t in ticks]
    lines: dict[str, list[tuple[float, float]]] = {}
    for tick in ticks:
        for kind, table in tick.get("waterlines", {}).items():
            if metric in table:
                lines.setdefault(kind, []).append((tick["at"], table[metric]))
    known = [(x, y) for x, y in points if y is not None]
    if not known and not lines:
        return None
    xs = [t["at"] for t in ticks]
    ys = [y for _, y in known] + [y for series in lines.values() for _, y in series]
    scale = _Scale(xs, ys)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
           f'data-metric="{escape(metric)}" role="img">',
           f'<rect x="{MARGIN_LEFT}" y="{MARGIN_TOP}" width="{WIDTH - MARGIN_LEFT - MARGIN_RIGHT}" '
           f'height="{HEIGHT - MARGIN_TOP - MARGIN_BOTTOM}" fill="#fafafa" stroke="#ddd"/>']
    for frac in (0.0, 0.5, 1.0):
        value = scale.y0 + frac * (scale.y1 - scale.y0)
        out.append(f'<text x="4" y="{scale.y(value) + 4:.1f}">{escape(_fmt(value, unit))}</text>')
    for x in sorted(set(xs)):
        out.append(f'<text x="{scale.x(x) - 6:.1f}" y="{HEIGHT - 10}">{x}s</text>')
    ordered = sorted(set(xs))
    following = {x: (ordered[i + 1] if i + 1 < len(ordered) else None) for i, x in enumerate(ordered)}
    tail = (scale.x1 - scale.x0) * 0.03
    for kind, series in lines.items():
        # a waterline holds from its tick until the next one: draw it as steps
        steps = []
        for x, y in series:
            nxt = following[x]
            end: float = nxt if nxt is not None else x + tail
            steps.append(f"M{scale.x(x):.1f},{scale.y(y):.1f} H{scale.x(end):.1f}")
        out.append(f'<path class="waterline {kind}" d="{" ".join(steps)}" fill="none" '
                   f'stroke="{LINE_COLOURS[kind]}" stroke-dasharray="6 4" stroke-width="2">'
                   f"<title>{kind} waterline</title></path>")
    if known:
        coords = " ".join(f"{scale.x(x):.1f},{scale.y(y):.1f}" for x, y in known)
        out.append(f'<polyline class="usage" points="{coords}" fill="none" '
                   f'stroke="{LINE_COLOURS["usage"]}" stroke-width="2"><title>usage</title></polyline>')
        for x, y in known:
            out.append(f'<circle class="sample" cx="{scale.x(x):.1f}" cy="{scale.y(y):.1f}" r="3" '
                       f'fill="{LINE_COLOURS["usage"]}"><title>{x}s: {escape(_fmt(y, unit))}</title></circle>')
    for tick in ticks:
        acted = [a for a in tick.get("actions", []) if a.get("metric") == metric]
        for index, action in enumerate(acted):
            x = scale.x(tick["at"])
            y = MARGIN_TOP + 8 + index * 12
            colour = MARK_COLOURS.get(action["action"], "#555")
            shape = "rect" if action["action"] == "evict" else "circle"
            attrs = (f'x="{x - 5:.1f}" y="{y - 5:.1f}" width="10" height="10"' if shape == "rect"
                     else f'cx="{x:.1f}" cy="{y:.1f}" r="5"')
            out.append(f'<{shape} class="action {action["action"]}" {attrs} fill="{colour}" '
                       f'fill-opacity="{0.4 if action.get("preview") else 1}">'
                       f"<title>{escape(_action_title(action, unit))}</title></{shape}>")
    out.append("</svg>")
    return "\n".join(out)


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    if not rows:
        return "<p>none</p>"
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _node_section(name: str, node: Mapping[str, Any]) -> str:
    ticks = node.get("ticks", [])
    parts = [f"<h2>Node {escape(name)}</h2>"]
    legend = "".join(f'<span><i style="background:{c}"></i>{k}</span>' for k, c in LINE_COLOURS.items())
    parts.append(f'<div class="legend">{legend} (dashed: waterlines; marks: actions, hover for the reason)</div>')
    for spec in METRICS:
        chart = metric_chart(spec.name, ticks)
        if chart:
            parts.append(f"<h3>{escape(spec.name)} ({spec.unit})</h3>{chart}")
    capped = [(t["at"], pod, "-" if cap is None else cap)
              for t in ticks for pod, cap in t.get("capped", {}).items()]
    if capped:
        parts.append("<h3>Figures measured under a cap</h3><p>Recorded while the pod was "
                     "throttled: lower bounds of its demand, replayed as the demand.</p>"
                     + _table(["at", "pod", "cap when measured (cores)"], capped))
    rows = [(t["at"], a["action"], a["pod"], a.get("rule", ""), a.get("metric", ""),
             a.get("result", a.get("cpuCap", "")), "yes" if a.get("preview") else "")
            for t in ticks for a in t.get("actions", [])]
    parts.append("<h3>Actions</h3>" + _table(["at", "action", "pod", "rule", "metric", "result / cap", "preview"], rows))
    parts.append("<h3>Outcome</h3>" + _table(
        ["evicted", "throttled (cores)"],
        [(", ".join(node.get("evicted", [])) or "-",
          ", ".join(f"{k}={v}" for k, v in node.get("throttled", {}).items()) or "-")]))
    return "\n".join(parts)


def _cluster_sections(report: Mapping[str, Any]) -> list[str]:
    parts: list[str] = []
    rows: list[tuple[Any, ...]]
    if "arbitration" in report:
        arb = report["arbitration"]
        rows = [(j, "passed", i + 1) for i, j in enumerate(arb.get("passed", []))]
        rows += [(j, "waiting", r) for j, r in arb.get("waiting", {}).items()]
        rows += [(j, "failed", r) for j, r in arb.get("failed", {}).items()]
        parts.append("<h2>Arbitration</h2>" + _table(["job", "outcome", "order / reason"], rows))
    if "defrag" in report:
        plan = report["defrag"]
        parts.append("<h2>Defragmentation</h2>" + _table(
            ["pod", "source", "target"], [(m["pod"], m["source"], m["target"]) for m in plan.get("migrations", [])]))
        util = plan.get("utilization", {})
        before, after = util.get("before", {}), util.get("after", {})
        parts.append(_table(["node", "before %", "after %"],
                            [(n, before.get(n), after.get(n)) for n in sorted(before)]))
    if "queues" in report:
        queues = report["queues"]
        rows = [(q, v.get("deserved"), v.get("allocated"), v.get("request"))
                for q, v in queues.get("queues", {}).items()]
        parts.append("<h2>Queues</h2>" + _table(["queue", "deserved", "allocated", "request"], rows))
        parts.append(_table(["victims"], [(v,) for v in queues.get("victims", [])]))
    if "daemonset" in report:
        rows = [(p, v.get("node"), v.get("strategy"), ", ".join(v.get("victims", [])) or "-")
                for p, v in report["daemonset"].items()]
        parts.append("<h2>DaemonSet preemption</h2>" + _table(["pod", "node", "strategy", "victims"], rows))
    return parts


def render_html(report: Mapping[str, Any], title: str = "Waterline simulation") -> str:
    body = [f"<h1>{escape(title)}</h1>"]
    for name, node in report.get("nodes", {}).items():
        body.append(_node_section(name, node))
    body.extend(_cluster_sections(report))
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{escape(title)}</title>"
            f"<style>{STYLE}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


def write_html(report: Mapping[str, Any], scenario: Any, path: str | Path) -> None:
    name = getattr(scenario, "name", "scenario")
    Path(path).write_text(render_html(report, f"Waterline simulation: {name}"))
